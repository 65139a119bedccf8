"""A custom PromQL analysis check decides a rollout, through the whole loop, against a
real Prometheus scraping fixture exporters.

The backend here is a test double for the replicas and routes only (replicas are ready
as soon as they are applied); everything else is the product: the metrics source queries
Prometheus, ``controller.observe`` builds the cycle's ``Observed`` with the custom
check's values, and ``reconcile_once`` runs servectl's loop. The canary fails 10 % of
its requests; the check allows 5 %: the rollout must end Aborted, with the custom check
named in the verdict, and all traffic back on the stable revision.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from servectl.api import models
from servectl.backends.sim.bench import FixedReplicas
from servectl.controller.backend import Event
from servectl.controller.decide import Command, LoopState, ServectlDecider
from servectl.controller.observe import RevisionState, observe
from servectl.controller.reconcile import reconcile_once
from servectl.controller.spec import ServiceSpec
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import PrometheusServer
from servectl.metrics.source import PrometheusSource
from servectl.planning.types import Observed, Plan
from servectl.rollout.machine import Op
from servectl.testing.exporters import Pod, Scenario

CONFIG = MetricsConfig(rateWindow="10s", timeoutSeconds=5, staleAfterSeconds=30)
FAILURE_SHARE = (
    'sum(rate(:tensorflow:serving:request_count{revision="{{revision}}",status!="OK"}[10s])'
    ' or vector(0)) / sum(rate(:tensorflow:serving:request_count{revision="{{revision}}"}'
    "[10s]))"
)
SPEC = models.RolloutSpec.model_validate(
    {
        "strategy": "canary",
        "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 100}],
        "analysis": {
            "interval": "5s",
            "minSamples": 1,
            "checks": [{"metric": "failureShare", "query": FAILURE_SHARE, "max": 0.05}],
        },
        "drainSeconds": 0,
    }
)


class LiveBackend:
    """Replicas and routes in memory; metrics and custom checks from Prometheus."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source = source
        self.revisions = {"svc-v1": RevisionState("svc-v1", 1, 2, 2, weight=100, available=True)}
        self.pending = [Command(Op.START, 2)]
        self.state: Any = None
        self.status: models.ModelServiceStatus | None = None
        self.events: list[Event] = []
        self.custom_seen: list[dict[str, tuple[float | None, float | None]]] = []

    def observe(self, now: float) -> Observed:
        metrics = self.source.snapshot(
            expected=[("default", "svc", name) for name in self.revisions],
            analysis_services=["svc"],
        )
        custom: dict[str, tuple[float | None, float | None]] = {}
        if isinstance(self.state, LoopState) and self.state.rollout.canary is not None:
            rollout = self.state.rollout
            custom, problems = self.source.custom_checks(
                [c for c in SPEC.analysis.checks if c.query is not None],
                namespace="default",
                service="svc",
                revision=f"svc-v{rollout.canary}",
                stable=f"svc-v{rollout.stable}",
                at=metrics.time,
            )
            assert not problems, problems
            self.custom_seen.append(custom)
        return observe(
            now,
            metrics,
            list(self.revisions.values()),
            namespace="default",
            service="svc",
            min_replicas=1,
            max_replicas=10,
            custom=custom,
        )

    def commands(self, now: float) -> list[Command]:
        due, self.pending = self.pending, []
        return due

    def apply(self, plan: Plan, now: float) -> None:
        self.revisions = {
            r.name: RevisionState(
                r.name, r.version, r.replicas, r.replicas, weight=r.weight, available=r.replicas > 0
            )
            for r in plan.revisions
        }

    def load_state(self) -> Any:
        return self.state

    def save_state(self, state: Any) -> None:
        self.state = state

    def load_status(self) -> models.ModelServiceStatus | None:
        return self.status

    def write_status(self, status: models.ModelServiceStatus) -> None:
        self.status = status

    def emit(self, events: Sequence[Event]) -> None:
        self.events.extend(events)


def test_a_custom_promql_check_aborts_a_failing_canary(
    prometheus: PrometheusServer, scenario: Scenario
) -> None:
    scenario.add_pods(
        Pod("svc-v1-a", revision="svc-v1", cpu_cores=0.5, rps=20, latency_ms=25),
        Pod("svc-v1-b", revision="svc-v1", cpu_cores=0.5, rps=20, latency_ms=25),
        Pod("svc-v2-a", revision="svc-v2", cpu_cores=0.5, rps=20, error_share=0.1),
    )
    prometheus.set_targets(scenario.targets())
    prometheus.wait_for_targets(len(scenario.targets()), timeout_s=30)
    backend = LiveBackend(PrometheusSource(prometheus.url, CONFIG))
    decider = ServectlDecider(
        ServiceSpec(name="svc", rollout=SPEC, min_replicas=2, max_replicas=10),
        FixedReplicas(2, tick_s=1.0),  # the autoscaler is not under test here
    )
    deadline = time.monotonic() + 90
    phase = None
    while time.monotonic() < deadline:
        cycle = reconcile_once(backend, decider, time.time())
        phase = cycle.outcome.plan.phase
        if phase == "Aborted":
            break
        time.sleep(1.0)
    assert phase == "Aborted", (phase, backend.status)
    status = backend.status
    assert status is not None and status.rollout is not None
    failed = [v for v in status.rollout.verdicts if v.verdict is models.Verdict.FAILED]
    assert failed and "failureShare" in failed[-1].message, status.rollout.verdicts
    seen = [c["failureShare"] for c in backend.custom_seen if c.get("failureShare")]
    canary, stable = seen[-1]
    assert canary == pytest.approx(0.1, abs=0.03) and stable == pytest.approx(0.0, abs=1e-9)
    # An abort is a shift back like any other: traffic follows the stable's ready capacity,
    # so it may take a few more cycles to be all back on v1.
    while backend.revisions["svc-v1"].weight < 100 and time.monotonic() < deadline + 30:
        time.sleep(1.0)
        reconcile_once(backend, decider, time.time())
    assert backend.revisions["svc-v1"].weight == 100, backend.revisions
