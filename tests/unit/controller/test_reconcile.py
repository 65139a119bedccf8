"""reconcile_once: the order of a cycle, one status write, recommend mode, first starts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servectl.api import models
from servectl.autoscaling import config
from servectl.backends.sim.bench import FixedReplicas as FixedPolicy
from servectl.controller.backend import EventReason, EventType
from servectl.controller.decide import Command, LoopState, ServectlDecider
from servectl.controller.reconcile import reconcile_once
from servectl.controller.spec import ServiceSpec
from servectl.controller.status import ConditionReason
from servectl.rollout.machine import Op
from tests.unit.controller.fakes import FakeBackend

C, S = models.ConditionType, models.ConditionStatus


def loop(
    replicas: int, *, mode: config.Mode = config.Mode.ACTIVE, **spec: object
) -> ServectlDecider:
    return ServectlDecider(
        ServiceSpec(name="m", min_replicas=1, max_replicas=10, mode=mode, **spec),  # type: ignore[arg-type]
        FixedPolicy(replicas),
    )


def test_a_cycle_observes_decides_applies_and_writes_status_once_in_order() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    cycle = reconcile_once(backend, loop(5), 10.0)
    assert backend.calls == [
        "observe",
        "commands",
        "load_state",
        "apply",
        "save_state",
        "load_status",
        "write_status",
        "emit",
    ]
    assert cycle.applied and cycle.time == 10.0
    assert [(r.name, r.replicas, r.weight) for r in backend.applied[0].revisions] == [
        ("m-v1", 5, 100)
    ]
    assert isinstance(backend.state, LoopState) and backend.state.demand == 5
    status = backend.status
    assert status is not None and status.autoscaling is not None
    assert status.autoscaling.desired_replicas == 5
    assert status.autoscaling.reason == "POLICY"
    assert [r.desired_replicas for r in status.revisions] == [5]


def test_a_first_start_takes_the_revision_with_the_traffic_as_stable_at_its_size() -> None:
    backend = FakeBackend({"m-v1": (1, 0, 0), "m-v2": (2, 4, 100)})
    reconcile_once(backend, loop(4), 0.0)
    state = backend.state
    assert isinstance(state, LoopState)
    assert state.rollout.stable == 2


def test_recommend_mode_applies_nothing_and_records_what_it_would_do() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = loop(7, mode=config.Mode.RECOMMEND)
    for now in (0.0, 1.0, 2.0):
        cycle = reconcile_once(backend, decider, now)
        assert not cycle.applied
    assert backend.applied == [] and "apply" not in backend.calls
    assert backend.revisions == {"m-v1": (1, 3, 100)}
    status = backend.status
    assert status is not None and status.autoscaling is not None
    assert status.autoscaling.desired_replicas == 7  # what it would do
    assert status.autoscaling.message is not None
    assert status.autoscaling.message.startswith("recommend mode, not applied")
    assert [(r.desired_replicas, r.ready_replicas) for r in status.revisions] == [(7, 3)]
    recommended = [e for e in backend.events if e.reason is EventReason.RECOMMENDED]
    assert [e.message for e in recommended] == ["would set replicas m-v1 3 -> 7"]  # once
    limited = status.condition(C.SCALING_LIMITED)
    assert limited is not None and limited.status is S.TRUE
    assert limited.reason == ConditionReason.RECOMMEND_ONLY


def test_recommend_mode_asks_the_policy_with_the_replicas_that_really_run() -> None:
    seen: list[int] = []

    class Spy(FixedPolicy):
        def decide(self, snap, state):  # type: ignore[no-untyped-def]
            seen.append(snap.replicas.current)
            return super().decide(snap, state)

    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = ServectlDecider(
        ServiceSpec(name="m", max_replicas=10, mode=config.Mode.RECOMMEND), Spy(7)
    )
    for now in (0.0, 1.0):
        reconcile_once(backend, decider, now)
    assert seen == [3, 3]


def test_recommend_mode_keeps_a_rollout_from_moving_weights() -> None:
    spec = models.RolloutSpec.model_validate({"steps": [{"setWeight": 50}], "drainSeconds": 0})
    backend = FakeBackend({"m-v1": (1, 4, 100)})
    decider = loop(4, mode=config.Mode.RECOMMEND, rollout=spec)
    backend.pending.append(Command(Op.START, 2))
    for now in range(0, 30):
        reconcile_once(backend, decider, float(now))
    assert backend.revisions == {"m-v1": (1, 4, 100)}
    assert backend.applied == []
    assert any(e.reason is EventReason.RECOMMENDED for e in backend.events)


def test_scaling_emits_one_event_and_stamps_last_scale_time() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    reconcile_once(backend, loop(3), 0.0)
    reconcile_once(backend, loop(6), 5.0)
    scaled = [e for e in backend.events if e.reason is EventReason.SCALED]
    assert len(scaled) == 1 and "3 -> 6" in scaled[0].message
    assert backend.status is not None and backend.status.autoscaling is not None
    last = backend.status.autoscaling.last_scale_time
    assert last is not None and last.timestamp() == 5.0


def test_a_refused_command_is_a_warning_event() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    backend.pending.append(Command(Op.PROMOTE))  # nothing to promote
    reconcile_once(backend, loop(3), 0.0)
    refused = [e for e in backend.events if e.reason is EventReason.COMMAND_REFUSED]
    assert len(refused) == 1 and refused[0].type is EventType.WARNING


def test_metrics_stale_condition_and_events_when_they_go_and_come_back() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = loop(3)
    reconcile_once(backend, decider, 0.0)
    backend.metrics_ok = False
    reconcile_once(backend, decider, 1.0)
    status = backend.status
    assert status is not None
    cond = status.condition(C.METRICS_AVAILABLE)
    assert cond is not None and cond.status is S.FALSE
    assert cond.last_transition_time is not None and cond.last_transition_time.timestamp() == 1
    backend.metrics_ok = True
    reconcile_once(backend, decider, 2.0)
    reasons = [e.reason for e in backend.events]
    assert EventReason.METRICS_UNAVAILABLE in reasons and EventReason.METRICS_RESTORED in reasons


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = loop(3)
    for now in (0.0, 1.0, 2.0):
        reconcile_once(backend, decider, now)
    assert backend.status is not None
    ready = backend.status.condition(C.READY)
    assert ready is not None and ready.status is S.TRUE
    assert ready.last_transition_time is not None and ready.last_transition_time.timestamp() == 0


def test_at_max_is_a_scaling_limited_condition() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    reconcile_once(backend, loop(50), 0.0)
    assert backend.status is not None
    cond = backend.status.condition(C.SCALING_LIMITED)
    assert cond is not None and cond.status is S.TRUE and cond.reason == "AtMaxReplicas"
    assert backend.applied[-1].revisions[0].replicas == 10


def test_a_backend_observing_another_time_is_refused() -> None:
    class Late(FakeBackend):
        def observe(self, now: float):  # type: ignore[no-untyped-def]
            return super().observe(now - 1.0)

    with pytest.raises(ValueError, match=r"observed at 9\.0, the cycle is at 10\.0"):
        reconcile_once(Late({"m-v1": (1, 3, 100)}), loop(3), 10.0)


def test_servectls_loop_refuses_a_state_that_is_not_a_loop_state() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)}, state={"not": "a LoopState"})
    with pytest.raises(TypeError, match="LoopState"):
        reconcile_once(backend, loop(3), 0.0)


def test_a_revision_with_traffic_and_no_ready_replica_is_not_ready() -> None:
    class Cold(FakeBackend):
        def observe(self, now: float):  # type: ignore[no-untyped-def]
            observed = super().observe(now)
            return replace(
                observed, revisions=tuple(replace(r, ready=0) for r in observed.revisions)
            )

    backend = Cold({"m-v1": (1, 3, 100)})
    reconcile_once(backend, loop(3), 0.0)
    assert backend.status is not None
    ready = backend.status.condition(C.READY)
    assert ready is not None and ready.status is S.FALSE
    assert ready.reason == "NoReadyReplica" and "m-v1" in ready.message


SECURITY = (
    'pods "m-v1-5d8f-x2" is forbidden: violates PodSecurity "restricted:latest": '
    'runAsNonRoot != true (pod or container "tfserving" must set '
    "securityContext.runAsNonRoot=true)"
)


class Refused(FakeBackend):
    """The cluster refuses m-v1's pods (what a Deployment's ReplicaFailure says)."""

    refusal = SECURITY

    def observe(self, now: float):  # type: ignore[no-untyped-def]
        observed = super().observe(now)
        revisions = tuple(replace(r, ready=0, refused=self.refusal) for r in observed.revisions)
        return replace(observed, revisions=revisions)


def test_pods_the_cluster_refuses_are_named_in_ready_with_its_words_and_one_event() -> None:
    backend = Refused({"m-v1": (1, 3, 100)})
    for now in (0.0, 1.0, 2.0):
        reconcile_once(backend, loop(3), now)
    assert backend.status is not None
    ready = backend.status.condition(C.READY)
    assert ready is not None and ready.status is S.FALSE
    assert ready.reason == ConditionReason.PODS_REFUSED == "PodsRefused"
    assert "no ready replica: m-v1" in ready.message
    assert f"pods refused: m-v1: {SECURITY}" in ready.message  # the policy and the field
    refused = [e for e in backend.events if e.reason is EventReason.PODS_REFUSED]
    assert [(e.type, e.message) for e in refused] == [
        (EventType.WARNING, f"pods refused: m-v1: {SECURITY}")
    ]  # once, not every cycle it lasts
    backend.refusal = 'pods "m-v1-5d8f-x3" is forbidden: exceeded quota: pods'
    reconcile_once(backend, loop(3), 3.0)
    refused = [e for e in backend.events if e.reason is EventReason.PODS_REFUSED]
    assert len(refused) == 2 and "exceeded quota" in refused[-1].message


def test_a_refusal_beside_ready_replicas_is_said_and_ready_stays_true() -> None:
    class Partly(Refused):
        def observe(self, now: float):  # type: ignore[no-untyped-def]
            observed = super().observe(now)
            revisions = tuple(replace(r, ready=1) for r in observed.revisions)
            return replace(observed, revisions=revisions)

    backend = Partly({"m-v1": (1, 3, 100)})
    reconcile_once(backend, loop(3), 0.0)
    assert backend.status is not None
    ready = backend.status.condition(C.READY)
    assert ready is not None and ready.status is S.TRUE and ready.reason == "Serving"
    assert ready.message.endswith(f"pods refused: m-v1: {SECURITY}")


def test_an_aborted_rollout_says_why_in_its_warning_event() -> None:
    spec = models.RolloutSpec.model_validate(
        {"steps": [{"setWeight": 50}, {"pause": {}}], "drainSeconds": 0}
    )
    backend = FakeBackend({"m-v1": (1, 4, 100)})
    decider = loop(4, rollout=spec)
    backend.pending.append(Command(Op.START, 2))
    for now in range(0, 5):
        reconcile_once(backend, decider, float(now))
    backend.pending.append(Command(Op.ABORT))
    reconcile_once(backend, decider, 5.0)
    phases = [e for e in backend.events if e.reason is EventReason.ROLLOUT_PHASE]
    aborted = [e for e in phases if "-> Aborted" in e.message]
    assert len(aborted) == 1 and aborted[0].type is EventType.WARNING
    assert backend.status is not None and backend.status.rollout is not None
    reason = backend.status.rollout.message
    assert reason and aborted[0].message.endswith(f": {reason}"), aborted[0].message
    # A phase that is not a fault names no reason: the event stays one short line.
    assert all(":" not in e.message for e in phases if e.type is EventType.NORMAL), phases


def test_on_stale_metrics_the_rollout_says_what_waits_and_a_full_promotion_goes_on() -> None:
    """Issue 27, item 8: rule 8 holds the steps' traffic while metrics are stale, and the
    rollout's status says so; the user's promote --full is carried out all the same."""
    spec = models.RolloutSpec.model_validate(
        {"steps": [{"setWeight": 50}, {"pause": {}}], "drainSeconds": 0}
    )
    backend = FakeBackend({"m-v1": (1, 4, 100)})
    decider = loop(4, rollout=spec)
    backend.metrics_ok = False
    backend.pending.append(Command(Op.START, 2))
    for now in range(0, 20):
        reconcile_once(backend, decider, float(now))
    assert backend.status is not None and backend.status.rollout is not None
    assert backend.revisions["m-v1"][2] == 100  # the 50 % step waits for metrics
    message = backend.status.rollout.message
    assert "metrics stale: traffic held where it is until they return" in message, message
    backend.pending.append(Command(Op.PROMOTE_FULL))
    for now in range(20, 60):
        reconcile_once(backend, decider, float(now))
    assert backend.revisions.get("m-v2", (2, 0, 0))[2] == 100, backend.revisions
    assert backend.status.rollout.phase is models.RolloutPhase.COMPLETED
