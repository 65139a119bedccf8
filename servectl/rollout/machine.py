"""The rollout state machine: where a rollout stands and what it wants next.

Pure and persisted: :class:`RolloutState` is a value with a JSON form (``to_dict`` /
``from_dict``) kept in ``status.rollout.state``, so a restarted controller resumes
exactly where it was. Two entry points:

- :func:`command` applies a user's operation (start, pause, resume, promote, abort,
  retry, undo) or raises :class:`RolloutError` naming the problem and the fix; the state
  passed in is never modified (nothing is lost on a refused command);
- :func:`advance` moves the rollout on from what was observed (the weights the planner
  actually applied, readiness, counters) and returns an :class:`Intent`: the weights the
  rollout wants, the header route, the canary scale and whether it is aborting. The
  planner (``servectl.planning``) decides how fast the intent can safely be reached;
  a weight step completes only when the planner has applied it, so "scale first, then
  shift" holds by construction.

Strategies:

- ``canary``: the steps in order (setWeight, pause, analysis, setCanaryScale), then the
  promotion to 100 %.
- ``abTest``: requests matching the header or cookie go to the new revision (B); the
  rest stay on stable (A). The guard-rail checks run every interval; after
  ``abTest.durationSeconds`` the variants are compared on ``winnerMetric``.
- ``blueGreen``: the new revision is brought to full size at weight 0 (the preview),
  the pause/analysis steps run against it, then all traffic switches at once and the old
  revision is kept ``scaleDownDelaySeconds`` so that a rollback is instant.

The progress deadline measures how long the rollout waits, at one step, for the
revision receiving traffic to get ready capacity *without any new replica becoming
ready*: waits caused by autoscaling, where replicas keep arriving, never consume it;
pauses and analysis never do either.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from servectl.api import models
from servectl.rollout import analysis
from servectl.rollout.counters import Counters

Phase = models.RolloutPhase
"""The rollout's phase: the API's ``status.rollout.phase`` enum itself (one vocabulary)."""


ACTIVE = (Phase.PROGRESSING, Phase.PAUSED, Phase.DEGRADED)


class Op(enum.StrEnum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"
    PROMOTE_FULL = "promote-full"
    ABORT = "abort"
    RETRY = "retry"
    UNDO = "undo"


class RolloutError(ValueError):
    """A command that cannot be carried out now; ``fix`` says what to do instead."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} ({fix})")
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class VerdictRecord:
    step: int
    verdict: models.Verdict
    message: str
    samples: int
    time: float


@dataclass(frozen=True)
class RolloutState:
    """Everything the rollout needs to resume. Versions identify revisions."""

    stable: int
    phase: Phase = Phase.IDLE
    canary: int | None = None
    previous_stable: int | None = None
    step: int = 0
    step_started: float | None = None
    user_paused: bool = False
    message: str = ""
    # analysis of the current step (or the A/B guard rails)
    baseline: Mapping[int, Counters] = field(default_factory=dict)
    next_check: float | None = None
    extensions: int = 0
    verdicts: tuple[VerdictRecord, ...] = ()
    # progress deadline
    wait_since: float | None = None
    wait_ready: int = 0
    # canary scale override: ("replicas", n) or ("weight", w)
    canary_scale: tuple[str, int] | None = None
    hard_abort: bool = False
    promoting: bool = False  # all steps done (or promote-full): going to 100 %
    skip_analysis: bool = False  # undo: straight back to the previous version
    winner: str | None = None
    ab_started: float | None = None  # when the header route was first applied
    switched_at: float | None = None  # blueGreen: when the switch was applied

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE


@dataclass(frozen=True)
class View:
    """What the rollout observes this cycle (versions as keys)."""

    now: float
    weights: Mapping[int, int]  # applied weights
    header: int | None  # version the header route points at, as applied
    ready: Mapping[int, int]  # ready replicas
    needed: Mapping[int, int]  # replicas the planner wants each revision to have
    available: Mapping[int, bool]
    counters: Mapping[int, Counters]
    bounds_us: tuple[float, ...] = ()
    custom: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    metrics_ok: bool = True


@dataclass(frozen=True)
class Intent:
    """What the rollout wants the planner to reach. Versions not in ``weights`` get 0."""

    stable: int
    canary: int | None
    weights: Mapping[int, int]
    header: int | None = None
    canary_scale: tuple[str, int] | None = None
    abort: bool = False
    hard: bool = False
    hold_s: float = 30.0  # a revision that loses traffic keeps its size this long
    phase: Phase = Phase.IDLE
    message: str = ""


# ----------------------------------------------------------------------------- commands


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
        return _abort(state, now, "aborted by the user", hard=False)
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
        step = _step(spec, state.step)
        if step is not None and step.pause is not None and step.pause.seconds is None:
            resumed = _next_step(resumed, now, "indefinite pause resumed")
        return resumed
    if op in (Op.PROMOTE, Op.PROMOTE_FULL):
        if not state.active:
            raise RolloutError(
                f"no rollout is running (phase {state.phase}); nothing to promote",
                "start a rollout of a new version first",
            )
        base = replace(state, phase=Phase.PROGRESSING, user_paused=False, wait_since=None)
        if op is Op.PROMOTE_FULL or spec.strategy is not models.RolloutStrategy.CANARY:
            return replace(_clear_step(base, now), promoting=True, message="promoted in full")
        if state.promoting:
            return replace(base, message="already promoting")
        return _next_step(base, now, "step promoted by the user", spec=spec, skip_wait=True)
    if op is Op.RETRY:
        if state.phase is not Phase.ABORTED or state.canary is None:
            raise RolloutError(
                f"only an aborted rollout can be retried (phase {state.phase})",
                "start a rollout of a new version instead",
            )
        return _restart(state, state.canary, now, "retrying from step 0")
    if state.active:  # Op.UNDO during a rollout: back to stable, which is an abort
        return _abort(state, now, "undone by the user: back to the stable version", hard=False)
    if state.previous_stable is None:
        raise RolloutError(
            f"there is no previous version to go back to (serving v{state.stable})",
            "start a rollout of the version you want instead",
        )
    target = state.previous_stable
    undone = _restart(state, target, now, f"undo: back to v{target}")
    return replace(undone, promoting=True, skip_analysis=True)


def _start(
    state: RolloutState, spec: models.RolloutSpec, now: float, version: int | None
) -> RolloutState:
    if version is None:
        raise RolloutError("start needs a version", "name the model version to roll out")
    if version < 1:
        raise RolloutError(f"version {version} is not a model version", "versions are >= 1")
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
        return _abort(
            state, now, f"v{version} is the stable version: rollout abandoned", hard=False
        )
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


def _abort(state: RolloutState, now: float, message: str, *, hard: bool) -> RolloutState:
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


def _clear_step(state: RolloutState, now: float) -> RolloutState:
    return replace(
        state,
        step_started=now,
        baseline={},
        next_check=None,
        extensions=0,
        wait_since=None,
    )


def _next_step(
    state: RolloutState,
    now: float,
    message: str,
    *,
    spec: models.RolloutSpec | None = None,
    skip_wait: bool = False,
) -> RolloutState:
    del spec, skip_wait
    return replace(_clear_step(state, now), step=state.step + 1, message=message)


def _step(spec: models.RolloutSpec, index: int) -> models.RolloutStep | None:
    return spec.steps[index] if 0 <= index < len(spec.steps) else None


# ----------------------------------------------------------------------------- advance


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


def _analysis_spec(
    spec: models.RolloutSpec, step: models.RolloutStep | None
) -> tuple[float, int, list[models.AnalysisCheck], int | None]:
    shared = spec.analysis or models.AnalysisSpec()
    own = step.analysis if step is not None else None
    interval = models.parse_duration(
        (own.interval if own and own.interval else None) or shared.interval
    )
    min_samples = (own.min_samples if own and own.min_samples else None) or shared.min_samples
    checks = list((own.checks if own and own.checks else None) or shared.checks)
    return interval, min_samples, checks, shared.max_extensions


def advance(
    state: RolloutState, spec: models.RolloutSpec, view: View
) -> tuple[RolloutState, Intent]:
    """One cycle: move the rollout on from ``view``; return the new state and the intent."""
    hold = float(spec.drain_seconds)
    if state.phase is Phase.IDLE or state.canary is None:
        return state, Intent(
            stable=state.stable,
            canary=None,
            weights={state.stable: 100},
            hold_s=hold,
            phase=state.phase,
            message=state.message,
        )
    if state.phase is Phase.COMPLETED:
        return state, _settled(state, hold)
    if state.phase is Phase.ABORTED:
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
        _clear_step(state, now),
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


def _run_analysis(
    state: RolloutState,
    spec: models.RolloutSpec,
    step: models.RolloutStep | None,
    view: View,
) -> tuple[RolloutState, analysis.AnalysisResult | None]:
    """Evaluate the analysis of the current step when its interval has come.

    Returns the state (baseline and next evaluation time set) and the result, or None
    when no evaluation was due. The window runs from the step's start, so samples keep
    accumulating across extensions.
    """
    canary = state.canary
    assert canary is not None
    interval, min_samples, checks, _ = _analysis_spec(spec, step)
    now = view.now
    if not state.baseline:
        baseline = {v: c for v, c in view.counters.items() if v in (canary, state.stable)}
        return replace(state, baseline=baseline, next_check=now + interval), None
    if state.next_check is not None and now + 1e-9 < state.next_check:
        return state, None
    state = replace(state, next_check=now + interval)
    if not view.metrics_ok:
        return state, analysis.AnalysisResult(
            verdict=models.Verdict.INCONCLUSIVE,
            message="metrics are stale or missing: holding the step",
            samples=0,
            checks=(),
            hard_failure=False,
        )
    canary_window = _window(state, view, canary)
    stable_window = _window(state, view, state.stable)
    if canary_window is None:
        return state, analysis.AnalysisResult(
            verdict=models.Verdict.INCONCLUSIVE,
            message=f"no counters for v{canary} yet",
            samples=0,
            checks=(),
            hard_failure=False,
        )
    result = analysis.judge(
        checks,
        canary_window,
        stable_window,
        min_samples=min_samples,
        bounds_us=view.bounds_us,
        canary_available=bool(view.available.get(canary, False)),
        custom=view.custom,
        hard_failure_error_rate=float(spec.hard_failure_error_rate),
    )
    return state, result


def _window(state: RolloutState, view: View, version: int) -> analysis.Window | None:
    start = state.baseline.get(version)
    end = view.counters.get(version)
    if end is None:
        return None
    if start is None:
        start = Counters(time=end.time, requests=0.0, errors=0.0, cpu_seconds=0.0)
        start = replace(start, latency_buckets=tuple(0.0 for _ in end.latency_buckets))
    return analysis.Window.between(start, end)


def _record(state: RolloutState, result: analysis.AnalysisResult, now: float) -> RolloutState:
    record = VerdictRecord(
        step=state.step,
        verdict=result.verdict,
        message=result.message,
        samples=int(result.samples),
        time=now,
    )
    kept = tuple(v for v in state.verdicts if v.step != state.step)
    return replace(state, verdicts=(*kept, record))


def _judged(
    state: RolloutState,
    spec: models.RolloutSpec,
    step: models.RolloutStep | None,
    result: analysis.AnalysisResult,
    now: float,
) -> tuple[RolloutState, bool]:
    """Apply a verdict; returns (state, passed)."""
    state = _record(state, result, now)
    verdict = result.verdict
    if verdict is models.Verdict.SUCCESSFUL:
        return replace(state, message=f"analysis passed: {result.message}"), True
    if verdict is models.Verdict.FAILED:
        return (
            _abort(
                state,
                now,
                f"analysis failed at step {state.step}: {result.message}",
                hard=result.hard_failure,
            ),
            False,
        )
    _, _, _, max_ext = _analysis_spec(spec, step)
    extensions = state.extensions + 1
    if max_ext is not None and extensions > max_ext:
        return (
            replace(
                state,
                phase=Phase.PAUSED,
                extensions=extensions,
                message=(
                    f"analysis {verdict} after {max_ext} extensions: {result.message}; generate "
                    "load (`servectl loadtest`) and resume, or promote/abort"
                ),
            ),
            False,
        )
    return (
        replace(
            state,
            extensions=extensions,
            message=f"analysis {verdict}, step extended ({extensions}): {result.message}",
        ),
        False,
    )


def _hold_step(
    state: RolloutState,
    spec: models.RolloutSpec,
    step: models.RolloutStep,
    view: View,
    label: str,
) -> tuple[RolloutState, bool]:
    """Run a pause or analysis step; returns (state, True) when it is over and the
    rollout moved to the next step."""
    now = view.now
    if step.pause is not None:
        seconds = step.pause.seconds
        if seconds is None:
            return replace(
                state, phase=Phase.PAUSED, message=f"{label}: paused until resumed"
            ), False
        started = state.step_started if state.step_started is not None else now
        if now + 1e-9 >= started + seconds:
            return _next_step(state, now, f"pause of {seconds} s over"), True
        return replace(state, message=f"{label}: paused {now - started:.0f} of {seconds} s"), False
    if state.skip_analysis:
        return _next_step(state, now, "analysis skipped"), True
    state, result = _run_analysis(state, spec, step, view)
    if result is None:
        if not state.message.startswith("analysis"):
            state = replace(state, message=f"{label}: analysing")
        return state, False
    state, passed = _judged(state, spec, step, result, now)
    return (_next_step(state, now, state.message), True) if passed else (state, False)


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
                state = _next_step(_progressed(state), now, f"weight {step.set_weight} % reached")
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
            state = _next_step(state, now, "canary scale set")
            continue
        state, passed = _hold_step(state, spec, step, view, f"step {state.step}")
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
    state, result = _run_analysis(state, spec, None, view)
    if result is not None and result.verdict in (models.Verdict.FAILED, models.Verdict.ERROR):
        if result.verdict is models.Verdict.FAILED:
            state, _ = _judged(state, spec, None, result, now)
            return state, _abort_intent(state, hold)
        state = _record(state, result, now)
    duration = float(ab.duration_seconds)
    assert state.ab_started is not None
    if now + 1e-9 < state.ab_started + duration or result is None:
        elapsed = now - state.ab_started
        if result is not None:
            state = _record(state, result, now)
        state = replace(state, message=f"A/B test: {elapsed:.0f} of {duration:.0f} s")
        return state, _intent(state, 0, hold, header=canary)
    _, min_samples, _, max_ext = _analysis_spec(spec, None)
    a = _window(state, view, state.stable)
    b = _window(state, view, canary)
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
    preview = Intent(
        stable=state.stable,
        canary=canary,
        weights={state.stable: 100},
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
        state = _clear_step(state, now)
    state = _progressed(state)
    while state.step < len(spec.steps) and state.phase is Phase.PROGRESSING:
        step = spec.steps[state.step]
        state, passed = _hold_step(state, spec, step, view, "preview")
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


# ----------------------------------------------------------------------------- JSON


def _counters_to_dict(c: Counters) -> dict[str, Any]:
    return {
        "time": c.time,
        "requests": c.requests,
        "errors": c.errors,
        "cpuSeconds": c.cpu_seconds,
        "latencyBuckets": list(c.latency_buckets),
    }


def _counters_from_dict(doc: Mapping[str, Any]) -> Counters:
    return Counters(
        time=float(doc["time"]),
        requests=float(doc["requests"]),
        errors=float(doc["errors"]),
        cpu_seconds=float(doc["cpuSeconds"]),
        latency_buckets=tuple(float(x) for x in doc.get("latencyBuckets", ())),
    )


def to_dict(state: RolloutState) -> dict[str, Any]:
    """The JSON form kept in ``status.rollout.state``."""
    return {
        "stable": state.stable,
        "phase": str(state.phase),
        "canary": state.canary,
        "previousStable": state.previous_stable,
        "step": state.step,
        "stepStarted": state.step_started,
        "userPaused": state.user_paused,
        "message": state.message,
        "baseline": {str(v): _counters_to_dict(c) for v, c in state.baseline.items()},
        "nextCheck": state.next_check,
        "extensions": state.extensions,
        "verdicts": [
            {
                "step": v.step,
                "verdict": str(v.verdict),
                "message": v.message,
                "samples": v.samples,
                "time": v.time,
            }
            for v in state.verdicts
        ],
        "waitSince": state.wait_since,
        "waitReady": state.wait_ready,
        "canaryScale": list(state.canary_scale) if state.canary_scale else None,
        "hardAbort": state.hard_abort,
        "promoting": state.promoting,
        "skipAnalysis": state.skip_analysis,
        "winner": state.winner,
        "abStarted": state.ab_started,
        "switchedAt": state.switched_at,
    }


def from_dict(doc: Mapping[str, Any]) -> RolloutState:
    """Inverse of :func:`to_dict`; raises ValueError naming a bad field."""
    try:
        scale = doc.get("canaryScale")
        return RolloutState(
            stable=int(doc["stable"]),
            phase=Phase(doc.get("phase", "Idle")),
            canary=None if doc.get("canary") is None else int(doc["canary"]),
            previous_stable=(
                None if doc.get("previousStable") is None else int(doc["previousStable"])
            ),
            step=int(doc.get("step", 0)),
            step_started=_opt_float(doc.get("stepStarted")),
            user_paused=bool(doc.get("userPaused", False)),
            message=str(doc.get("message", "")),
            baseline={
                int(v): _counters_from_dict(c) for v, c in dict(doc.get("baseline", {})).items()
            },
            next_check=_opt_float(doc.get("nextCheck")),
            extensions=int(doc.get("extensions", 0)),
            verdicts=tuple(
                VerdictRecord(
                    step=int(v["step"]),
                    verdict=models.Verdict(v["verdict"]),
                    message=str(v.get("message", "")),
                    samples=int(v.get("samples", 0)),
                    time=float(v["time"]),
                )
                for v in doc.get("verdicts", ())
            ),
            wait_since=_opt_float(doc.get("waitSince")),
            wait_ready=int(doc.get("waitReady", 0)),
            canary_scale=(str(scale[0]), int(scale[1])) if scale else None,
            hard_abort=bool(doc.get("hardAbort", False)),
            promoting=bool(doc.get("promoting", False)),
            skip_analysis=bool(doc.get("skipAnalysis", False)),
            winner=None if doc.get("winner") is None else str(doc["winner"]),
            ab_started=_opt_float(doc.get("abStarted")),
            switched_at=_opt_float(doc.get("switchedAt")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"status.rollout.state is malformed: {exc!r}") from exc


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number
