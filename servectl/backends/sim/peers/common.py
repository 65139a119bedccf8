"""What the emulated peers share (the HPA, analysis helpers, the Decider face).

The peers, emulated: Argo Rollouts and Flagger as deciders in the simulator.

Both are :class:`servectl.controller.backend.Decider`s, so the simulator backend runs
them through the same ``reconcile_once`` as servectl's loop, on the same requests. Each
emulates what the real tool does with a canary behind a traffic router *and* what the
Kubernetes HPA does next to it, because the point of the comparison is how autoscaling
and rollouts interact:

- ``ArgoStyle`` (:mod:`.argo`): Argo Rollouts' canary strategy with ``trafficRouting``.
  One HPA targets the Rollout: it sees every pod (stable and canary) and decides the
  Rollout's ``spec.replicas`` T; the canary gets ``ceil(weight x T)`` replicas and the
  stable stays at T (``dynamicStableScale: false``, the default) or follows the traffic
  (``dynamic_stable_scale=True``).
- ``FlaggerStyle`` (:mod:`.flagger`): Flagger's canary analysis loop. Two HPAs, one on
  the primary Deployment and one on the canary Deployment, each seeing only its own pods;
  the weight moves by ``stepWeight`` after every passing analysis interval; promotion is
  a rolling update of the primary Deployment (maxSurge 25 %, maxUnavailable 25 %).

docs/peers.md lists every modelling choice with the source of the behaviour. The HPAs are
the repository's exact HPA baseline (:mod:`servectl.autoscaling.hpa`), built as the
benchmark builds its ``hpa`` baseline (:func:`peer_hpa_config`), and every analysis uses
:func:`servectl.rollout.analysis.judge` with the spec's checks and ``minSamples``, so the
comparison differs only in what the tools *do*.

``Plan.phase`` uses the simulator's vocabulary (``Idle``, ``Progressing``, ``Paused``,
``Completed``, ``Aborted``) so rollout windows are measured alike for every controller;
the tool's own phase (Argo's ``Healthy``/``Degraded``, Flagger's ``Promoting``,
``Finalising``, ``Succeeded``, ``Failed``) is in :attr:`native_phase` and the message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

from servectl.api import models
from servectl.autoscaling import config, hpa
from servectl.autoscaling.decision import Decision
from servectl.autoscaling.snapshot import Replicas, Signals, Snapshot
from servectl.backends.sim.tick import TickDecider
from servectl.planning.types import Observed, ObservedRevision
from servectl.rollout import analysis
from servectl.sim.scenario import RolloutScenario

CPU_TARGET = 70.0
"""The HPA's CPU target (percent of the request), as the benchmark's hpa baseline."""
SCALE_DOWN_DELAY_S = 30.0
"""Argo ``scaleDownDelaySeconds`` default: an old ReplicaSet stays up this long."""
ABORT_SCALE_DOWN_DELAY_S = 30.0
"""Argo ``abortScaleDownDelaySeconds`` default (v1.1+): the canary stays up after an abort."""
CONSECUTIVE_ERROR_LIMIT = 4
"""Argo AnalysisRun ``consecutiveErrorLimit`` default: one more Error fails the run."""
FLAGGER_THRESHOLD = 5
"""Flagger ``analysis.threshold``: failed checks before a rollback (the docs' value)."""
FLAGGER_METRIC_INTERVAL_S = 60.0
"""Flagger's default metric ``interval`` (``1m``): the range of every metric query."""
FLAGGER_PROGRESS_DEADLINE_S = 600.0
"""Flagger ``progressDeadlineSeconds`` default."""
MAX_SURGE = 0.25
MAX_UNAVAILABLE = 0.25
"""Kubernetes Deployment rolling-update defaults (Flagger's primary Deployment)."""

EPS = 1e-9
NO_HARD_FAILURE = math.inf  # neither tool has servectl's hard-failure rule


# ----------------------------------------------------------------------------- shared parts


def peer_hpa_config(
    min_replicas: int, max_replicas: int, cpu_target: float = CPU_TARGET
) -> hpa.HPAConfig:
    """The HPA every peer runs: the benchmark's ``hpa`` baseline (``servectl.sim.suite``):
    CPU utilization ``cpu_target`` %, Kubernetes' defaults for everything else."""
    cfg = config.AutoscalingConfig(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        signals=(config.SignalTarget(config.SignalType.CPU, cpu_target),),
    )
    return hpa.from_config(cfg).config


def merge_signals(snaps: Sequence[Snapshot]) -> Signals:
    """Service-level signals of several revisions seen as one workload (only what an HPA
    on CPU reads: utilization weighted by ready replicas, usage summed, the oldest age)."""
    if len(snaps) == 1:
        return snaps[0].signals
    weighted = [
        (s.signals.cpu_utilization, s.replicas.ready)
        for s in snaps
        if s.signals.cpu_utilization is not None
    ]
    ready = sum(r for _, r in weighted)
    utilization = sum(u * r for u, r in weighted) / ready if ready > 0 else None
    usage = [s.signals.cpu_usage_cores for s in snaps if s.signals.cpu_usage_cores is not None]
    rps = [s.signals.rps for s in snaps if s.signals.rps is not None]
    return Signals(
        cpu_utilization=utilization,
        cpu_usage_cores=sum(usage) if usage else None,
        rps=sum(rps) if rps else None,
        age_s=max(s.signals.age_s for s in snaps),
    )


class HPA:
    """One HorizontalPodAutoscaler object: the exact baseline, synced every sync period
    (aligned on multiples of it, like the controller-manager's loop) whatever the
    controller's own period."""

    def __init__(self, cfg: hpa.HPAConfig) -> None:
        self.policy = hpa.HPAPolicy(cfg)
        self.state = self.policy.initial_state()
        self.due = -math.inf
        self.last: Decision | None = None

    def sync(self, now: float, snaps: Sequence[Snapshot | None], current: int, ready: int) -> int:
        """The scale target's new ``spec.replicas`` (``current`` when no sync is due)."""
        if now + EPS < self.due:
            return current
        period = self.policy.config.sync_period_s
        self.due = (math.floor(now / period + EPS) + 1) * period
        cfg = self.policy.config
        present = [s for s in snaps if s is not None]
        snap = Snapshot(
            time=now,
            replicas=Replicas(
                current=current, ready=ready, min=cfg.min_replicas, max=cfg.max_replicas
            ),
            signals=merge_signals(present) if present else Signals(),
            pods=tuple(p for s in present for p in s.pods),
        )
        decision, self.state = self.policy.decide(snap, self.state)
        self.last = decision
        return decision.replicas


def ready_of(observed: Observed, name: str | None) -> int:
    rev = observed.revision(name) if name is not None else None
    return rev.ready if rev is not None else 0


def weight_of(observed: Observed, name: str | None) -> int:
    rev = observed.revision(name) if name is not None else None
    return rev.weight if rev is not None else 0


def snapshot_of(observed: Observed, name: str) -> Snapshot | None:
    rev = observed.revision(name)
    return rev.snapshot if rev is not None else None


def ceil_pct(weight: float, total: int) -> int:
    """Argo's ``trafficWeightToReplicas``: ceil(weight x total / 100)."""
    return math.ceil(weight * total / 100.0 - EPS)


def initial_stable(observed: Observed) -> ObservedRevision:
    if not observed.revisions:
        raise ValueError("the first observation lists no revision: nothing to serve")
    return max(observed.revisions, key=lambda r: (r.weight, r.desired, r.ready))


def analysis_config(
    spec: models.RolloutSpec, step: models.StepAnalysis | None
) -> tuple[float, int, tuple[models.AnalysisCheck, ...]]:
    """(interval s, min samples, checks) of an analysis step, defaults from the spec."""
    shared = spec.analysis or models.AnalysisSpec()
    interval = step.interval if step is not None and step.interval is not None else None
    min_samples = step.min_samples if step is not None else None
    checks = step.checks if step is not None else None
    return (
        models.parse_duration(interval or shared.interval),
        min_samples if min_samples is not None else shared.min_samples,
        tuple(checks if checks is not None else shared.checks),
    )


def metrics_error(message: str) -> analysis.AnalysisResult:
    return analysis.AnalysisResult(models.Verdict.ERROR, message, 0, (), False)


@dataclass
class Retiring:
    """An old ReplicaSet kept at its size, with no traffic, until ``until``."""

    name: str
    version: int
    replicas: int
    until: float


def phase_for(native: str) -> models.RolloutPhase:
    """The tool's own phase name in servectl's vocabulary (rollout windows are measured
    alike for every decider)."""
    return models.RolloutPhase(
        {
            "Healthy": "Idle",
            "Initialized": "Idle",
            "Succeeded": "Completed",
            "Failed": "Aborted",
            "Degraded": "Aborted",
            "Promoting": "Progressing",
            "Finalising": "Progressing",
        }.get(native, native)
    )


class Peer(TickDecider):
    """What both emulated peers share: the controller protocol's name and period, and a
    constructor from a scenario."""

    def __init__(
        self,
        spec: models.RolloutSpec,
        *,
        name: str,
        hpa_config: hpa.HPAConfig | None,
        min_replicas: int,
        max_replicas: int,
        service: str,
        period_s: float,
    ) -> None:
        """The parts every peer has: the spec, its HPA (the benchmark's hpa baseline at
        the scenario's bounds unless ``hpa_config``), the service name and the period."""
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        base = hpa_config or peer_hpa_config(min_replicas, max_replicas)
        self.spec = spec
        self.hpa_config = replace(base, min_replicas=min_replicas, max_replicas=max_replicas)
        self.service = service
        self._period_s = float(period_s)
        self._name = name

    @classmethod
    def for_scenario(
        cls, spec: models.RolloutSpec, scenario: RolloutScenario, **options: Any
    ) -> Self:
        """One with the scenario's service name and replica bounds."""
        return cls(
            spec,
            service=scenario.service_name,
            min_replicas=scenario.min_replicas,
            max_replicas=scenario.max_replicas,
            **options,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def period_s(self) -> float:
        return self._period_s
