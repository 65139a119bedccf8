"""One cycle of a running rollout: :func:`advance` and the per-strategy steps (canary,
A/B test, blue/green), the progress deadline while a revision waits for capacity, and the
:class:`Intent` each returns to the planner."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servectl.api import models
from servectl.rollout import analysis
from servectl.rollout.machine.analysis_step import (
    analysis_spec,
    apply_verdict,
    hold_step,
    record_verdict,
    run_analysis,
    window,
)
from servectl.rollout.machine.state import Intent, Phase, RolloutState, View
from servectl.rollout.machine.transitions import clear_step, next_step


def _weight_reached(spec: models.RolloutSpec, index: int) -> int:
    """The canary weight the steps before ``index`` (inclusive) have set."""
    weight = 0
    for step in spec.steps[: index + 1]:
        if step.set_weight is not None:
            weight = step.set_weight
    return weight


def _canary_scale(spec: models.RolloutSpec, index: int) -> tuple[str, int] | None:
    scale: tuple[str, int] | None = None
    for step in spec.steps[: index + 1]:
        s = step.set_canary_scale
        if s is None:
            continue
        if s.replicas is not None:
            scale = ("replicas", s.replicas)
        elif s.weight is not None:
            scale = ("weight", s.weight)
        else:
            scale = None
    return scale


def advance(
    state: RolloutState, spec: models.RolloutSpec, view: View
) -> tuple[RolloutState, Intent]:
    """One cycle: move the rollout on from ``view``; return the new state and the intent."""
    hold = float(spec.drain_seconds)
    if state.phase is Phase.IDLE or state.canary is None:
        return state, _settled(state, hold)
    if state.phase is Phase.COMPLETED:
        return state, _settled(state, hold)
    if state.phase is Phase.ABORTED:
        if view.weights.get(state.canary, 0) == 0 and view.header != state.canary:
            # The abort is done: every request is back on stable. What is left is a
            # service with one revision (the canary drains and goes); the autoscaler
            # sizes stable again, and rule 4's floor has nothing left to protect.
            return state, _settled(state, hold)
        return state, _abort_intent(state, hold)
    strategy = spec.strategy
    if strategy is models.RolloutStrategy.AB_TEST:
        return _advance_ab(state, spec, view, hold)
    if strategy is models.RolloutStrategy.BLUE_GREEN:
        return _advance_blue_green(state, spec, view, hold)
    return _advance_canary(state, spec, view, hold)


def _abort_intent(state: RolloutState, hold: float) -> Intent:
    """All traffic back to stable; the planner restores stable capacity first (rule 4),
    or moves traffic at once when the canary is failing hard."""
    return Intent(
        stable=state.stable,
        canary=state.canary,
        weights={state.stable: 100},
        abort=True,
        hard=state.hard_abort,
        hold_s=hold,
        phase=state.phase,
        message=state.message,
    )


def _switch_intent(state: RolloutState, hold: float) -> Intent:
    """Blue/green: all traffic to the (full-size) preview in one step."""
    assert state.canary is not None
    return Intent(
        stable=state.stable,
        canary=state.canary,
        weights={state.canary: 100},
        canary_scale=("weight", 100),
        explicit=state.user_decided,
        hold_s=hold,
        phase=state.phase,
        message=state.message,
    )


def _settled(state: RolloutState, hold: float) -> Intent:
    return Intent(
        stable=state.stable,
        canary=None,
        weights={state.stable: 100},
        hold_s=hold,
        phase=state.phase,
        message=state.message,
    )


def _intent(state: RolloutState, weight: int, hold: float, **extra: Any) -> Intent:
    canary = state.canary
    assert canary is not None
    weights = {state.stable: 100 - weight, canary: weight}
    extra.setdefault("explicit", state.promoting and state.user_decided)
    return Intent(
        stable=state.stable,
        canary=canary,
        weights=weights,
        canary_scale=state.canary_scale,
        hold_s=hold,
        phase=state.phase,
        message=state.message,
        **extra,
    )


def _complete(state: RolloutState, now: float, message: str) -> RolloutState:
    assert state.canary is not None
    return replace(
        clear_step(state, now),
        phase=Phase.COMPLETED,
        previous_stable=state.stable,
        stable=state.canary,
        canary=None,
        promoting=False,
        skip_analysis=False,
        canary_scale=None,
        user_paused=False,
        message=message,
    )


def _waiting(
    state: RolloutState, spec: models.RolloutSpec, view: View, version: int, what: str
) -> RolloutState:
    """The rollout waits for ``version`` to get capacity: run the progress deadline."""
    ready = int(view.ready.get(version, 0))
    if state.wait_since is None or ready > state.wait_ready:
        # A replica became ready: progress. A Degraded rollout is progressing again.
        phase = Phase.PROGRESSING if state.phase is Phase.DEGRADED else state.phase
        return replace(state, phase=phase, wait_since=view.now, wait_ready=ready, message=what)
    deadline = float(spec.progress_deadline_seconds)
    stalled = view.now - state.wait_since
    if stalled > deadline and state.phase is Phase.PROGRESSING:
        needed = view.needed.get(version, 0)
        return replace(
            state,
            phase=Phase.DEGRADED,
            message=(
                f"v{version} has had {ready} of {needed} replicas ready for {stalled:.0f} s "
                f"(progress deadline {deadline:.0f} s): check its pods; abort, or fix and "
                "resume"
            ),
        )
    if state.phase is Phase.DEGRADED:
        return state
    return replace(state, message=what)


def _progressed(state: RolloutState) -> RolloutState:
    if state.phase is Phase.DEGRADED:
        state = replace(state, phase=Phase.PROGRESSING)
    return replace(state, wait_since=None, wait_ready=0)


def _advance_canary(
    state: RolloutState, spec: models.RolloutSpec, view: View, hold: float
) -> tuple[RolloutState, Intent]:
    canary = state.canary
    assert canary is not None
    now = view.now
    applied = int(view.weights.get(canary, 0))
    for _ in range(len(spec.steps) + 2):  # instant steps chain within one cycle
        if state.phase is not Phase.PROGRESSING and state.phase is not Phase.DEGRADED:
            break
        if state.promoting or state.step >= len(spec.steps):
            state = replace(state, promoting=True, canary_scale=None)
            if applied >= 100 and view.available.get(canary, False):
                state = _complete(state, now, f"v{canary} promoted: it serves 100 %")
                return state, _settled(state, hold)
            state = _waiting(state, spec, view, canary, f"promoting v{canary}: {applied} % moved")
            return state, _intent(state, 100, hold)
        step = spec.steps[state.step]
        state = replace(state, canary_scale=_canary_scale(spec, state.step))
        if step.set_weight is not None:
            if applied >= step.set_weight:
                state = next_step(_progressed(state), now, f"weight {step.set_weight} % reached")
                continue
            state = _waiting(
                state,
                spec,
                view,
                canary,
                f"step {state.step}: moving to {step.set_weight} % ({applied} % so far)",
            )
            break
        if step.set_canary_scale is not None:
            state = next_step(state, now, "canary scale set")
            continue
        state, passed = hold_step(state, spec, step, view, f"step {state.step}")
        if passed:
            continue
        break
    if state.phase is Phase.ABORTED:
        return state, _abort_intent(state, hold)
    target = 100 if state.promoting else _weight_reached(spec, state.step)
    return state, _intent(state, target, hold)


def _advance_ab(
    state: RolloutState, spec: models.RolloutSpec, view: View, hold: float
) -> tuple[RolloutState, Intent]:
    canary = state.canary
    assert canary is not None
    now = view.now
    ab = spec.ab_test
    assert ab is not None
    if state.promoting:
        applied = int(view.weights.get(canary, 0))
        if applied >= 100 and view.available.get(canary, False):
            state = _complete(state, now, f"B (v{canary}) won and serves 100 %")
            return state, _settled(state, hold)
        state = _waiting(state, spec, view, canary, f"promoting B (v{canary}): {applied} % moved")
        return state, _intent(state, 100, hold, header=canary)
    if view.header != canary:
        state = _waiting(state, spec, view, canary, f"bringing up B (v{canary}) for its users")
        return state, _intent(state, 0, hold, header=canary)
    state = _progressed(state)
    if state.ab_started is None:
        state = replace(state, ab_started=now, message="A/B test running")
    if state.phase is Phase.PAUSED:
        return state, _intent(state, 0, hold, header=canary)
    state, result = run_analysis(state, spec, None, view)
    if result is not None and result.verdict in (models.Verdict.FAILED, models.Verdict.ERROR):
        if result.verdict is models.Verdict.FAILED:
            state, _ = apply_verdict(state, spec, None, result, now)
            return state, _abort_intent(state, hold)
        state = record_verdict(state, result, now)
    duration = float(ab.duration_seconds)
    assert state.ab_started is not None
    if now + 1e-9 < state.ab_started + duration or result is None:
        elapsed = now - state.ab_started
        if result is not None:
            state = record_verdict(state, result, now)
        state = replace(state, message=f"A/B test: {elapsed:.0f} of {duration:.0f} s")
        return state, _intent(state, 0, hold, header=canary)
    _, min_samples, _, max_ext = analysis_spec(spec, None)
    a = window(state, view, state.stable)
    b = window(state, view, canary)
    metric = ab.winner_metric
    winner: str | None = None
    message = "no counters yet"
    if a is not None and b is not None:
        winner, message = analysis.compare_variants(
            metric,
            a,
            b,
            higher_is_better=ab.higher_is_better,
            min_samples=min_samples,
            bounds_us=view.bounds_us,
        )
    if winner is None:
        extensions = state.extensions + 1
        if max_ext is not None and extensions > max_ext:
            state = replace(
                state,
                phase=Phase.PAUSED,
                extensions=extensions,
                message=f"no winner after {max_ext} extensions: {message}",
            )
        else:
            state = replace(state, extensions=extensions, message=f"A/B test extended: {message}")
        return state, _intent(state, 0, hold, header=canary)
    state = replace(state, winner=winner)
    if winner == "A":
        state = replace(
            state,
            phase=Phase.COMPLETED,
            message=f"A (v{state.stable}) won: {message}; B removed",
        )
        return state, Intent(
            stable=state.stable,
            canary=canary,
            weights={state.stable: 100},
            hold_s=hold,
            phase=state.phase,
            message=state.message,
        )
    if not ab.promote_winner:
        state = replace(state, phase=Phase.PAUSED, message=f"B won: {message}; promote or abort")
        return state, _intent(state, 0, hold, header=canary)
    state = replace(state, promoting=True, message=f"B won: {message}; promoting")
    return state, _intent(state, 100, hold, header=canary)


def _advance_blue_green(
    state: RolloutState, spec: models.RolloutSpec, view: View, hold: float
) -> tuple[RolloutState, Intent]:
    canary = state.canary
    assert canary is not None
    now = view.now
    blue_green = spec.blue_green or models.BlueGreenSpec()
    delay = float(blue_green.scale_down_delay_seconds)
    auto = blue_green.auto_promote
    hold_bg = max(hold, delay)
    preview_scale = ("weight", 100)
    if state.promoting:
        applied = int(view.weights.get(canary, 0))
        if applied >= 100:
            state = _complete(
                state, now, f"switched to v{canary}; v{state.stable} kept {delay:.0f} s"
            )
            state = replace(state, switched_at=now)
            return state, _settled(state, hold_bg)
        state = _waiting(state, spec, view, canary, f"switching to v{canary}")
        return state, _switch_intent(state, hold_bg)
    ready = int(view.ready.get(canary, 0))
    needed = int(view.needed.get(canary, 1))
    # previewHeader: requests carrying it reach the preview before the switch.
    preview = Intent(
        stable=state.stable,
        canary=canary,
        weights={state.stable: 100},
        header=canary if blue_green.preview_header is not None else None,
        canary_scale=preview_scale,
        hold_s=hold_bg,
        phase=state.phase,
        message=state.message,
    )
    if ready < needed or not view.available.get(canary, False):
        state = _waiting(state, spec, view, canary, f"preview v{canary}: {ready} of {needed} ready")
        return state, replace(preview, phase=state.phase, message=state.message)
    if state.wait_since is not None:
        # The steps run against a ready preview: a pause or an analysis window starts
        # when the preview is (again) at full size, not while it was still coming up.
        state = clear_step(state, now)
    state = _progressed(state)
    while state.step < len(spec.steps) and state.phase is Phase.PROGRESSING:
        step = spec.steps[state.step]
        state, passed = hold_step(state, spec, step, view, "preview")
        if not passed:
            break
    if state.phase is Phase.ABORTED:
        return state, _abort_intent(state, hold_bg)
    if state.step >= len(spec.steps) and state.phase is Phase.PROGRESSING:
        if not auto:
            state = replace(
                state, phase=Phase.PAUSED, message=f"preview v{canary} ready: promote to switch"
            )
        else:
            state = replace(state, promoting=True, message=f"switching to v{canary}")
            return state, _switch_intent(state, hold_bg)
    return state, replace(preview, phase=state.phase, message=state.message)
