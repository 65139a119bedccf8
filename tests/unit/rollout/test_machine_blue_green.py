"""The blue/green state machine on hand-built views (no planner, no simulator)."""

from __future__ import annotations

from servectl.api import models
from servectl.rollout import machine
from servectl.rollout.counters import Counters

SPEC = models.RolloutSpec.model_validate(
    {
        "strategy": "blueGreen",
        "blueGreen": {"scaleDownDelaySeconds": 120},
        "steps": [{"pause": {"seconds": 30}}],
    }
)


def view(now: float, *, preview_ready: int, needed: int = 8) -> machine.View:
    empty = Counters(time=now, requests=0.0, errors=0.0, cpu_seconds=0.0)
    return machine.View(
        now=now,
        weights={1: 100, 2: 0},
        header=None,
        ready={1: 8, 2: preview_ready},
        needed={1: 8, 2: needed},
        available={1: True, 2: preview_ready > 0},
        counters={1: empty, 2: empty},
    )


def test_the_pause_runs_against_a_ready_preview() -> None:
    state = machine.command(machine.initial(1), machine.Op.START, SPEC, 0.0, version=2)
    # The preview takes 40 s to come up: the 30 s pause must not elapse meanwhile.
    for now in (0.0, 20.0, 38.0):
        state, intent = machine.advance(state, SPEC, view(now, preview_ready=0))
        assert intent.weights == {1: 100} and intent.canary_scale == ("weight", 100)
        assert state.message.startswith("preview v2")
    state, intent = machine.advance(state, SPEC, view(40.0, preview_ready=8))
    assert intent.weights == {1: 100}
    assert state.step_started == 40.0 and "paused 0 of 30 s" in state.message
    state, intent = machine.advance(state, SPEC, view(68.0, preview_ready=8))
    assert intent.weights == {1: 100} and not state.promoting
    state, intent = machine.advance(state, SPEC, view(70.0, preview_ready=8))
    assert state.promoting and intent.weights == {2: 100}


def test_a_preview_that_was_ready_at_once_keeps_its_step_clock() -> None:
    state = machine.command(machine.initial(1), machine.Op.START, SPEC, 0.0, version=2)
    state, _ = machine.advance(state, SPEC, view(0.0, preview_ready=8))
    assert state.step_started == 0.0
    state, intent = machine.advance(state, SPEC, view(30.0, preview_ready=8))
    assert state.promoting and intent.weights == {2: 100}


def test_the_preview_header_reaches_the_preview_until_the_switch() -> None:
    spec = models.RolloutSpec.model_validate(
        {
            "strategy": "blueGreen",
            "blueGreen": {
                "autoPromote": False,
                "previewHeader": {"name": "x-preview", "value": "true"},
            },
        }
    )
    state = machine.command(machine.initial(1), machine.Op.START, spec, 0.0, version=2)
    state, intent = machine.advance(state, spec, view(0.0, preview_ready=0))
    assert intent.header == 2 and intent.weights == {1: 100}  # even while it comes up
    state, intent = machine.advance(state, spec, view(10.0, preview_ready=8))
    assert intent.header == 2 and not state.promoting
    # Without a previewHeader, no request sees the preview before the switch.
    state = machine.command(machine.initial(1), machine.Op.START, SPEC, 0.0, version=2)
    _, intent = machine.advance(state, SPEC, view(0.0, preview_ready=8))
    assert intent.header is None
