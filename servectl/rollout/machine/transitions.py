"""State transitions shared by the user's commands and by ``advance``: aborting, and
moving the step cursor (each step starts with no analysis baseline and no progress wait)."""

from __future__ import annotations

from dataclasses import replace

from servectl.api import models
from servectl.rollout.machine.state import Phase, RolloutState


def abort(state: RolloutState, now: float, message: str, *, hard: bool) -> RolloutState:
    return replace(
        state,
        phase=Phase.ABORTED,
        user_paused=False,
        promoting=False,
        hard_abort=hard,
        message=message,
        step_started=now,
        next_check=None,
        wait_since=None,
    )


def clear_step(state: RolloutState, now: float) -> RolloutState:
    return replace(
        state,
        step_started=now,
        baseline={},
        next_check=None,
        extensions=0,
        wait_since=None,
    )


def next_step(
    state: RolloutState,
    now: float,
    message: str,
    *,
    spec: models.RolloutSpec | None = None,
    skip_wait: bool = False,
) -> RolloutState:
    del spec, skip_wait
    return replace(clear_step(state, now), step=state.step + 1, message=message)


def step_at(spec: models.RolloutSpec, index: int) -> models.RolloutStep | None:
    return spec.steps[index] if 0 <= index < len(spec.steps) else None
