"""The rollout state machine on hand-built views: commands, steps, JSON."""

from __future__ import annotations

import json

import pytest

from servectl.api import models
from servectl.rollout import machine
from servectl.rollout.counters import Counters
from servectl.rollout.machine import Op, Phase

SPEC = models.RolloutSpec.model_validate(
    {
        "steps": [
            {"setWeight": 20},
            {"pause": {"seconds": 60}},
            {"analysis": {}},
            {"pause": {}},
            {"setWeight": 50},
        ],
        "analysis": {
            "interval": "30s",
            "minSamples": 100,
            "checks": [{"metric": "errorRate", "max": 0.01}],
        },
    }
)


def counters(time: float, requests: float, errors: float = 0.0) -> Counters:
    return Counters(time=time, requests=requests, errors=errors, cpu_seconds=0.0)


def view(
    now: float,
    canary_weight: int = 0,
    *,
    canary: int = 2,
    requests: float = 0.0,
    errors: float = 0.0,
    ready: int = 5,
) -> machine.View:
    return machine.View(
        now=now,
        weights={1: 100 - canary_weight, canary: canary_weight},
        header=None,
        ready={1: 10, canary: ready},
        needed={1: 10, canary: 5},
        available={1: True, canary: ready > 0},
        counters={1: counters(now, 10 * requests), canary: counters(now, requests, errors)},
    )


def started(now: float = 0.0) -> machine.RolloutState:
    return machine.command(machine.initial(1), Op.START, SPEC, now, version=2)


def test_refused_commands_name_the_fix_and_keep_the_state() -> None:
    idle = machine.initial(1)
    for op in (Op.ABORT, Op.PAUSE, Op.RESUME, Op.PROMOTE, Op.RETRY, Op.UNDO):
        with pytest.raises(machine.RolloutError) as caught:
            machine.command(idle, op, SPEC, 0.0)
        assert caught.value.fix
    assert idle == machine.initial(1)
    with pytest.raises(machine.RolloutError, match="no rollout is running"):
        machine.command(idle, Op.ABORT, SPEC, 0.0)
    with pytest.raises(machine.RolloutError, match="already the stable"):
        machine.command(idle, Op.START, SPEC, 0.0, version=1)
    with pytest.raises(machine.RolloutError, match="needs a version"):
        machine.command(idle, Op.START, SPEC, 0.0)
    with pytest.raises(machine.RolloutError, match="already rolling out"):
        machine.command(started(), Op.START, SPEC, 0.0, version=2)


def test_weight_step_completes_only_when_applied() -> None:
    state, intent = machine.advance(started(), SPEC, view(1.0, canary_weight=0))
    assert intent.weights == {1: 80, 2: 20}
    assert state.step == 0 and "moving to 20 %" in state.message
    state, _ = machine.advance(state, SPEC, view(5.0, canary_weight=20))
    assert state.step == 1  # now in the pause


def test_pause_then_analysis_passes_with_enough_samples() -> None:
    state, _ = machine.advance(started(), SPEC, view(1.0, canary_weight=20))
    state, _ = machine.advance(state, SPEC, view(30.0, canary_weight=20))
    assert state.step == 1
    state, _ = machine.advance(state, SPEC, view(62.0, canary_weight=20, requests=0))
    assert state.step == 2 and state.baseline  # analysis started: baseline taken
    state, _ = machine.advance(state, SPEC, view(70.0, canary_weight=20, requests=50))
    assert state.step == 2  # not due yet
    state, _ = machine.advance(state, SPEC, view(93.0, canary_weight=20, requests=40))
    assert state.step == 2 and state.verdicts[-1].verdict == "Inconclusive"
    state, _ = machine.advance(state, SPEC, view(124.0, canary_weight=20, requests=500))
    assert state.verdicts[-1].verdict == "Successful"
    assert state.step == 3 and state.phase is Phase.PAUSED  # the indefinite pause
    state = machine.command(state, Op.RESUME, SPEC, 130.0)
    assert state.step == 4 and state.phase is Phase.PROGRESSING


def test_failed_analysis_aborts_and_retry_restarts() -> None:
    state = machine.RolloutState(stable=1, phase=Phase.PROGRESSING, canary=2, step=2)
    state, _ = machine.advance(state, SPEC, view(0.0, canary_weight=20))
    state, intent = machine.advance(state, SPEC, view(31.0, 20, requests=1000, errors=100))
    assert state.phase is Phase.ABORTED and intent.abort and intent.weights == {1: 100}
    assert not intent.hard  # 10 % errors: not failing hard (threshold 50 %)
    retried = machine.command(state, Op.RETRY, SPEC, 40.0)
    assert (retried.phase, retried.step, retried.canary) == (Phase.PROGRESSING, 0, 2)


def test_hard_failure_aborts_hard() -> None:
    state = machine.RolloutState(stable=1, phase=Phase.PROGRESSING, canary=2, step=2)
    state, _ = machine.advance(state, SPEC, view(0.0, canary_weight=20))
    state, intent = machine.advance(state, SPEC, view(31.0, 20, requests=1000, errors=700))
    assert intent.abort and intent.hard


def test_new_version_mid_rollout_restarts_against_stable() -> None:
    state, _ = machine.advance(started(), SPEC, view(1.0, canary_weight=20))
    state = machine.command(state, Op.START, SPEC, 10.0, version=3)
    assert (state.canary, state.step, state.stable) == (3, 0, 1)
    assert "replaces v2" in state.message


def test_promote_full_then_complete_then_undo() -> None:
    state = machine.command(started(), Op.PROMOTE_FULL, SPEC, 1.0)
    state, intent = machine.advance(state, SPEC, view(2.0, canary_weight=20))
    assert intent.weights == {1: 0, 2: 100}
    state, intent = machine.advance(state, SPEC, view(3.0, canary_weight=100))
    assert state.phase is Phase.COMPLETED and state.stable == 2
    assert state.previous_stable == 1 and intent.weights == {2: 100}
    assert not intent.explicit  # settled: nothing of the user's is in flight
    undone = machine.command(state, Op.UNDO, SPEC, 4.0)
    assert undone.canary == 1 and undone.promoting and undone.skip_analysis
    _, intent = machine.advance(undone, SPEC, view(5.0, canary_weight=100))  # v2 serves
    assert intent.explicit and intent.weights == {2: 0, 1: 100}


def test_only_the_users_decisions_are_explicit_for_the_planner() -> None:
    """Issue 27, item 8: on stale metrics the planner moves traffic for a user's promote
    --full or undo (an abort moves it anyway), never for the steps' own progress."""
    state, intent = machine.advance(started(), SPEC, view(1.0))
    assert not intent.explicit
    full = machine.command(state, Op.PROMOTE_FULL, SPEC, 2.0)
    assert full.user_decided
    _, intent = machine.advance(full, SPEC, view(3.0, canary_weight=20))
    assert intent.explicit and intent.weights == {1: 0, 2: 100}
    restored = machine.from_dict(json.loads(json.dumps(machine.to_dict(full))))
    assert restored.user_decided  # a restarted controller carries it out too
    restarted = machine.command(full, Op.START, SPEC, 4.0, version=3)
    assert not restarted.user_decided


def test_progress_deadline_is_not_consumed_while_replicas_keep_arriving() -> None:
    spec = SPEC.model_copy(update={"progress_deadline_seconds": 100})
    state, _ = machine.advance(started(), spec, view(0.0, ready=0))
    for second, ready in ((90.0, 1), (180.0, 2), (270.0, 3)):
        state, _ = machine.advance(state, spec, view(second, ready=ready))
        assert state.phase is Phase.PROGRESSING
    state, _ = machine.advance(state, spec, view(400.0, ready=3))
    assert state.phase is Phase.DEGRADED and "3 of 5 replicas ready" in state.message
    state, _ = machine.advance(state, spec, view(410.0, ready=4))
    assert state.phase is Phase.PROGRESSING


def test_json_round_trip_resumes_identically() -> None:
    state, _ = machine.advance(started(), SPEC, view(1.0, canary_weight=20))
    state, _ = machine.advance(state, SPEC, view(62.0, canary_weight=20, requests=3))
    doc = json.loads(json.dumps(machine.to_dict(state)))
    assert machine.from_dict(doc) == state
    with pytest.raises(ValueError, match=r"status\.rollout\.state"):
        machine.from_dict({"phase": "Progressing"})
    with pytest.raises(ValueError, match=r"status\.rollout\.state"):
        machine.from_dict({"stable": 1, "stepStarted": "nan"})


def test_blue_green_previews_then_switches_at_once() -> None:
    spec = models.RolloutSpec.model_validate(
        {"strategy": "blueGreen", "blueGreen": {"scaleDownDelaySeconds": 120}}
    )
    state = machine.command(machine.initial(1), Op.START, spec, 0.0, version=2)
    state, intent = machine.advance(state, spec, view(1.0, ready=2))
    assert intent.weights == {1: 100} and intent.canary_scale == ("weight", 100)
    state, intent = machine.advance(state, spec, view(40.0, ready=5))
    assert intent.weights == {2: 100} and intent.hold_s == 120.0
    state, intent = machine.advance(state, spec, view(41.0, canary_weight=100))
    assert state.phase is Phase.COMPLETED and state.stable == 2
