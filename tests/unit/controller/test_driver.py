"""The per-tick driver both controllers run: one metrics round, the first revision as a
Plan, faults in each service's own status, the decider cache per spec generation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from servectl.api import models
from servectl.autoscaling import config
from servectl.controller import status as status_mod
from servectl.controller.backend import EventReason
from servectl.controller.decide import LoopState
from servectl.controller.driver import Driver, Listed, SnapshotRequest, first_plan
from servectl.metrics.assemble import MetricsSnapshot
from servectl.planning.planner import PlannerState
from servectl.rollout import machine
from tests.unit.controller.fakes import FakeBackend

C, S = models.ConditionType, models.ConditionStatus
CUSTOM = {"metric": "p95Ms", "query": "sum(rate(x{revision='{{revision}}'}[1m]))", "max": 5}


def spec(
    name: str, *, version: int = 1, min_replicas: int = 2, policy: str | None = None
) -> models.ModelService:
    autoscaling: dict[str, Any] = {
        "minReplicas": min_replicas,
        "maxReplicas": 8,
        "signals": [{"type": "cpu", "targetUtilization": 70}],
    }
    if policy is not None:
        autoscaling["policy"] = {"ref": policy}
    return models.ModelService.model_validate(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {
                "model": {"name": name, "basePath": f"/models/{name}", "version": version},
                "autoscaling": autoscaling,
                "rollout": {"steps": [{"setWeight": 50}], "analysis": {"checks": [CUSTOM]}},
            },
        }
    )


class Service:
    """A fleet's service: a :class:`FakeBackend` with what the driver asks around the loop."""

    def __init__(
        self,
        revisions: dict[str, tuple[int, int, int]],
        *,
        version: int | None = 1,
        fail_in: str | None = None,
    ) -> None:
        self.inner = FakeBackend(revisions)
        self.version = version
        self.fail_in = fail_in  # "observe": the cycle raises there
        self.metrics: MetricsSnapshot | None = None

    # what the driver asks
    def revisions(self) -> list[str]:
        return sorted(self.inner.revisions)

    def use_metrics(self, metrics: MetricsSnapshot) -> None:
        self.inner.calls.append("use_metrics")
        self.metrics = metrics

    def first_version(self) -> int:
        if self.version is None:
            raise ValueError("spec.model.basePath: no version under /models/x")
        return self.version

    # the Backend
    def observe(self, now: float) -> Any:
        if self.fail_in == "observe":
            raise RuntimeError("the router is on fire")
        return self.inner.observe(now)

    def commands(self, now: float) -> Any:
        return self.inner.commands(now)

    def apply(self, plan: Any, now: float) -> None:
        self.inner.apply(plan, now)

    def load_state(self) -> Any:
        return self.inner.load_state()

    def save_state(self, state: Any) -> None:
        self.inner.save_state(state)

    def load_status(self) -> Any:
        return self.inner.load_status()

    def write_status(self, status: Any) -> None:
        self.inner.write_status(status)

    def emit(self, events: Any) -> None:
        self.inner.emit(events)


@dataclass
class FakeFleet:
    listed: list[Listed]
    backends: dict[tuple[str, str], Service] = field(default_factory=dict)
    library: dict[str, models.ScalingPolicy] = field(default_factory=dict)
    requests: list[SnapshotRequest] = field(default_factory=list)
    refused: list[tuple[tuple[str, str], EventReason, str]] = field(default_factory=list)
    policy_reads: int = 0

    @property
    def routing(self) -> config.Routing:
        return config.Routing.LEAST_REQUEST

    def services(self) -> Sequence[Listed]:
        return self.listed

    def policies(self, namespace: str) -> Mapping[str, models.ScalingPolicy]:
        self.policy_reads += 1
        return self.library

    def open(self, listed: Listed) -> Service:
        return self.backends.setdefault(listed.key, Service({}))

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot:
        self.requests.append(request)
        return MetricsSnapshot(time=0.0, revisions={}, latency_bounds_us=())

    def refuse(self, listed: Listed, reason: EventReason, message: str, now: float) -> None:
        self.refused.append((listed.key, reason, message))


def listed(name: str, generation: int = 1, **kw: Any) -> Listed:
    return Listed("ml", name, generation, spec(name, **kw))


def test_a_new_service_starts_with_its_first_revision_as_a_plan_then_runs_the_loop() -> None:
    fleet = FakeFleet([listed("a", version=3, min_replicas=2)])
    fleet.backends[("ml", "a")] = Service({}, version=3)  # what the model path holds
    result = Driver(fleet).tick(100.0)
    backend = fleet.backends[("ml", "a")]
    first = backend.inner.applied[0]
    assert first == first_plan(spec("a", version=3, min_replicas=2), 3)
    assert [(r.name, r.version, r.replicas, r.weight) for r in first.revisions] == [
        ("a-v3", 3, 2, 100)
    ]
    assert backend.inner.calls[:3] == ["load_state", "use_metrics", "apply"]
    assert [str(e.reason) for e in backend.inner.events][:1] == ["Created"]
    assert "a-v3 at 2 replicas" in backend.inner.events[0].message
    # ... and the same tick's cycle ran on it: the loop state exists now.
    assert ("ml", "a") in result.cycles and isinstance(backend.inner.state, LoopState)
    assert result.errors == {}


def test_one_metrics_round_covers_every_revision_and_the_checks_deciders_ask_for() -> None:
    fleet = FakeFleet([listed("a"), listed("b")])
    fleet.backends[("ml", "a")] = Service({"a-v1": (1, 2, 100)})
    rolling = Service({"b-v1": (1, 2, 50), "b-v2": (2, 2, 50)})
    rolling.inner.state = LoopState(
        rollout=replace(machine.initial(1), canary=2, phase=machine.Phase.PROGRESSING),
        planner=PlannerState(),
        policy={},
        demand=4,
    )
    fleet.backends[("ml", "b")] = rolling
    Driver(fleet).tick(10.0)
    assert len(fleet.requests) == 1
    request = fleet.requests[0]
    assert set(request.expected) == {("ml", "a", "a-v1"), ("ml", "b", "b-v1"), ("ml", "b", "b-v2")}
    assert request.analysis_services == ("b",)
    assert [(c.service, c.revision, c.stable) for c in request.custom] == [("b", "b-v2", "b-v1")]
    assert [c.metric for c in request.custom[0].checks] == ["p95Ms"]


def test_a_failing_service_is_reported_in_its_own_status_and_the_others_go_on() -> None:
    fleet = FakeFleet([listed("bad"), listed("good")])
    fleet.backends[("ml", "bad")] = Service({"bad-v1": (1, 2, 100)}, fail_in="observe")
    fleet.backends[("ml", "good")] = Service({"good-v1": (1, 2, 100)})
    result = Driver(fleet).tick(5.0)
    assert set(result.cycles) == {("ml", "good")}
    assert result.errors == {("ml", "bad"): "RuntimeError: the router is on fire"}
    assert fleet.refused == [
        (("ml", "bad"), EventReason.RECONCILE_FAILED, "RuntimeError: the router is on fire")
    ]


def test_a_refused_spec_and_a_missing_model_are_reported_and_nothing_is_created() -> None:
    fleet = FakeFleet(
        [
            Listed("ml", "broken", 1, None, "spec.model.version: required on Kubernetes"),
            listed("nomodel"),
            listed("unknownpolicy", policy="no-such-policy"),
        ]
    )
    fleet.backends[("ml", "nomodel")] = Service({}, version=None)
    result = Driver(fleet).tick(5.0)
    reasons = {key: reason for key, reason, _ in fleet.refused}
    assert reasons == {
        ("ml", "broken"): EventReason.INVALID_SPEC,
        ("ml", "nomodel"): EventReason.MODEL_NOT_FOUND,
        ("ml", "unknownpolicy"): EventReason.INVALID_SPEC,
    }
    assert "spec.autoscaling.policy.ref" in result.errors[("ml", "unknownpolicy")]
    assert fleet.backends[("ml", "nomodel")].inner.applied == []
    assert result.cycles == {}
    # Not opened, not measured: the refused services are in no metrics request.
    assert fleet.requests[0].expected == ()


def test_deciders_are_kept_per_spec_generation_and_forgotten_with_the_service() -> None:
    fleet = FakeFleet([listed("a", generation=1)])
    driver = Driver(fleet)
    driver.tick(0.0)
    first = driver.cached(("ml", "a"))
    driver.tick(2.0)
    assert driver.cached(("ml", "a")) is first and fleet.policy_reads == 1
    fleet.listed = [listed("a", generation=2)]
    driver.tick(4.0)
    assert driver.cached(("ml", "a")) is not first and fleet.policy_reads == 2
    fleet.listed = []
    driver.tick(6.0)
    assert driver.cached(("ml", "a")) is None


def test_the_mapper_runs_every_service_once() -> None:
    fleet = FakeFleet([listed("a"), listed("b"), listed("c")])
    seen: list[str] = []

    def mapper(fn: Any, items: Any) -> Any:
        for item in items:
            seen.append(item.listed.name)
            yield fn(item)

    result = Driver(fleet).tick(0.0, mapper=mapper)
    assert sorted(seen) == ["a", "b", "c"] and len(result.cycles) == 3


@pytest.mark.parametrize("same_message", [True, False])
def test_refused_sets_ready_false_and_says_whether_it_changed(same_message: bool) -> None:
    first, changed = status_mod.refused(None, "ReconcileFailed", "boom", now=100.0)
    assert changed
    ready = first.condition(C.READY)
    assert ready is not None and ready.status is S.FALSE and ready.reason == "ReconcileFailed"
    message = "boom" if same_message else "boom again"
    again, changed = status_mod.refused(first, "ReconcileFailed", message, now=200.0)
    assert changed is not same_message
    since = again.condition(C.READY)
    assert since is not None and since.last_transition_time == ready.last_transition_time


def test_refused_keeps_the_rest_of_the_status() -> None:
    before = models.ModelServiceStatus(
        conditions=[
            models.Condition(type=C.READY, status=S.TRUE, reason="Serving"),
            models.Condition(type=C.METRICS_AVAILABLE, status=S.TRUE, reason="MetricsFresh"),
        ],
        revisions=[models.RevisionStatus(name="a-v1", version=1, weight=100)],
    )
    after, changed = status_mod.refused(before, "InvalidSpec", "spec.x: fix it", now=1.0)
    assert changed and after.revisions == before.revisions
    assert [c.type for c in after.conditions] == [C.READY, C.METRICS_AVAILABLE]
    ready = after.condition(C.READY)
    assert ready is not None and (ready.status, ready.reason) == (S.FALSE, "InvalidSpec")
