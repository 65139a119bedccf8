"""Pause and analysis steps: when an analysis is due, judging its window (from the step's
baseline counters to now) with :mod:`servectl.rollout.analysis`, recording the verdict and
applying it (pass, abort, extend, or pause after too many extensions)."""

from __future__ import annotations

from dataclasses import replace

from servectl.api import models
from servectl.rollout import analysis
from servectl.rollout.counters import Counters
from servectl.rollout.machine.state import Phase, RolloutState, VerdictRecord, View
from servectl.rollout.machine.transitions import abort, next_step


def analysis_spec(
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


def run_analysis(
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
    interval, min_samples, checks, _ = analysis_spec(spec, step)
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
    canary_window = window(state, view, canary)
    stable_window = window(state, view, state.stable)
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


def window(state: RolloutState, view: View, version: int) -> analysis.Window | None:
    start = state.baseline.get(version)
    end = view.counters.get(version)
    if end is None:
        return None
    if start is None:
        start = Counters(time=end.time, requests=0.0, errors=0.0, cpu_seconds=0.0)
        start = replace(start, latency_buckets=tuple(0.0 for _ in end.latency_buckets))
    return analysis.Window.between(start, end)


def record_verdict(
    state: RolloutState, result: analysis.AnalysisResult, now: float
) -> RolloutState:
    record = VerdictRecord(
        step=state.step,
        verdict=result.verdict,
        message=result.message,
        samples=int(result.samples),
        time=now,
    )
    kept = tuple(v for v in state.verdicts if v.step != state.step)
    return replace(state, verdicts=(*kept, record))


def waiting_for_traffic(result: analysis.AnalysisResult, weight: int | None) -> str | None:
    """What an analysis short of samples waits for, in numbers ("waiting for traffic: 12
    of 100 samples at 20 %"); None when the verdict is not for want of samples."""
    if not result.short_of_samples:
        return None
    at = "" if weight is None else f" at {weight} %"
    return f"waiting for traffic: {result.samples} of {result.needed} samples{at}"


def apply_verdict(
    state: RolloutState,
    spec: models.RolloutSpec,
    step: models.RolloutStep | None,
    result: analysis.AnalysisResult,
    now: float,
    *,
    weight: int | None = None,
) -> tuple[RolloutState, bool]:
    """Apply a verdict; returns (state, passed). ``weight``: the canary's applied weight,
    for the status of an analysis that waits for traffic."""
    state = record_verdict(state, result, now)
    verdict = result.verdict
    if verdict is models.Verdict.SUCCESSFUL:
        return replace(state, message=f"analysis passed: {result.message}"), True
    if verdict is models.Verdict.FAILED:
        return (
            abort(
                state,
                now,
                f"analysis failed at step {state.step}: {result.message}",
                hard=result.hard_failure,
            ),
            False,
        )
    _, _, _, max_ext = analysis_spec(spec, step)
    extensions = state.extensions + 1
    waiting = waiting_for_traffic(result, weight)
    if max_ext is not None and extensions > max_ext:
        return (
            replace(
                state,
                phase=Phase.PAUSED,
                extensions=extensions,
                message=(
                    f"analysis {verdict} after {max_ext} extensions: {waiting or result.message}"
                    "; generate load (`servectl loadtest`) and resume, or promote/abort"
                ),
            ),
            False,
        )
    if waiting is not None:
        # Rule 7: never a pass on too few samples; the status says how far it is.
        message = f"{waiting} (analysis {verdict}, step extended {extensions}x)"
    else:
        message = f"analysis {verdict}, step extended ({extensions}): {result.message}"
    return replace(state, extensions=extensions, message=message), False


def hold_step(
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
            return next_step(state, now, f"pause of {seconds} s over"), True
        return replace(state, message=f"{label}: paused {now - started:.0f} of {seconds} s"), False
    if state.skip_analysis:
        return next_step(state, now, "analysis skipped"), True
    state, result = run_analysis(state, spec, step, view)
    if result is None:
        # Between two evaluations the last verdict's message stands.
        if not state.message.startswith(("analysis", "waiting for traffic")):
            state = replace(state, message=f"{label}: analysing")
        return state, False
    weight = None if state.canary is None else int(view.weights.get(state.canary, 0))
    state, passed = apply_verdict(state, spec, step, result, now, weight=weight)
    return (next_step(state, now, state.message), True) if passed else (state, False)
