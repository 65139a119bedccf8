"""The user's operations: :func:`command` applies start, pause, resume, promote, abort,
retry or undo, or raises :class:`RolloutError` naming the problem and the fix; the state
passed in is never modified (nothing is lost on a refused command)."""

from __future__ import annotations

from dataclasses import replace

from servectl.api import models
from servectl.rollout.machine.state import Op, Phase, RolloutError, RolloutState
from servectl.rollout.machine.transitions import abort, clear_step, next_step, step_at


def initial(stable: int) -> RolloutState:
    return RolloutState(stable=stable)


def command(
    state: RolloutState,
    op: Op,
    spec: models.RolloutSpec,
    now: float,
    version: int | None = None,
) -> RolloutState:
    """Apply a user's operation; raises RolloutError (state untouched) when it can't."""
    if op is Op.START:
        return _start(state, spec, now, version)
    if op is Op.ABORT:
        if not state.active:
            raise RolloutError(
                f"no rollout is running (phase {state.phase}); nothing to abort",
                "to go back to the previous version, roll out that version again",
            )
        return abort(state, now, "aborted by the user", hard=False)
    if op is Op.PAUSE:
        if state.phase is not Phase.PROGRESSING:
            raise RolloutError(
                f"only a progressing rollout can be paused (phase {state.phase})",
                "check the rollout's phase (status.rollout.phase)",
            )
        return replace(state, phase=Phase.PAUSED, user_paused=True, message="paused by the user")
    if op is Op.RESUME:
        if state.phase not in (Phase.PAUSED, Phase.DEGRADED):
            raise RolloutError(
                f"the rollout is not paused (phase {state.phase})",
                "nothing to resume; status.rollout.phase shows where it stands",
            )
        resumed = replace(
            state, phase=Phase.PROGRESSING, user_paused=False, message="resumed", wait_since=None
        )
        step = step_at(spec, state.step)
        if step is not None and step.pause is not None and step.pause.seconds is None:
            resumed = next_step(resumed, now, "indefinite pause resumed")
        return resumed
    if op in (Op.PROMOTE, Op.PROMOTE_FULL):
        if not state.active:
            raise RolloutError(
                f"no rollout is running (phase {state.phase}); nothing to promote",
                "start a rollout of a new version first",
            )
        base = replace(state, phase=Phase.PROGRESSING, user_paused=False, wait_since=None)
        if op is Op.PROMOTE_FULL or spec.strategy is not models.RolloutStrategy.CANARY:
            return replace(
                clear_step(base, now), promoting=True, user_decided=True, message="promoted in full"
            )
        if state.promoting:
            return replace(base, message="already promoting")
        return next_step(base, now, "step promoted by the user", spec=spec, skip_wait=True)
    if op is Op.SETTLE:
        if state.phase is not Phase.ABORTED:
            raise RolloutError(
                f"only an aborted rollout is settled by reverting the spec (phase {state.phase})",
                "nothing to do",
            )
        return _settle(state)
    if op is Op.RETRY:
        if state.phase is not Phase.ABORTED or state.canary is None:
            raise RolloutError(
                f"only an aborted rollout can be retried (phase {state.phase})",
                "start a rollout of a new version instead",
            )
        return _restart(state, state.canary, now, "retrying from step 0")
    if state.active:  # Op.UNDO during a rollout: back to stable, which is an abort
        return abort(state, now, "undone by the user: back to the stable version", hard=False)
    if state.previous_stable is None:
        raise RolloutError(
            f"there is no previous version to go back to (serving v{state.stable})",
            "start a rollout of the version you want instead",
        )
    target = state.previous_stable
    undone = _restart(state, target, now, f"undo: back to v{target}")
    return replace(undone, promoting=True, skip_analysis=True, user_decided=True)


def _settle(state: RolloutState) -> RolloutState:
    """An aborted rollout put aside: the spec (or the user) names the stable version again."""
    aborted = f" (the rollout to v{state.canary} was aborted)" if state.canary else ""
    return replace(
        state,
        phase=Phase.IDLE,
        canary=None,
        message=f"spec.model.version names v{state.stable} again, which serves{aborted}",
    )


def _start(
    state: RolloutState, spec: models.RolloutSpec, now: float, version: int | None
) -> RolloutState:
    if version is None:
        raise RolloutError("start needs a version", "name the model version to roll out")
    if version < 1:
        raise RolloutError(f"version {version} is not a model version", "versions are >= 1")
    if version == state.stable and state.phase is Phase.ABORTED:
        return _settle(state)  # back to what serves: the aborted rollout is put aside
    if version == state.stable and not state.active:
        raise RolloutError(
            f"v{version} is already the stable version", "nothing to roll out; pick another"
        )
    if state.active and version == state.canary:
        raise RolloutError(
            f"v{version} is already rolling out (phase {state.phase}, step {state.step})",
            "use promote, pause or abort",
        )
    if state.active and version == state.stable:
        return abort(state, now, f"v{version} is the stable version: rollout abandoned", hard=False)
    note = (
        f"v{version} replaces v{state.canary} mid-rollout: restarting from step 0 "
        f"against v{state.stable}"
        if state.active
        else f"rolling out v{version} over v{state.stable}"
    )
    del spec  # the steps are read when advancing
    return _restart(state, version, now, note)


def _restart(state: RolloutState, version: int, now: float, message: str) -> RolloutState:
    return RolloutState(
        stable=state.stable,
        phase=Phase.PROGRESSING,
        canary=version,
        previous_stable=state.previous_stable,
        step=0,
        step_started=now,
        message=message,
        verdicts=(),
    )
