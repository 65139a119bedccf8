"""The plan a rollout will follow, in words: one line per step, with the analysis each
runs, as ``servectl rollout start`` prints it.

Pure: a :class:`~servectl.api.models.RolloutSpec` in, lines out. The steps are the
spec's own, defaults included (a canary given none gets
:func:`~servectl.api.models.rollout.default_canary_steps`, filled in by the model), so
the plan is what :mod:`servectl.rollout.machine` runs, step for step.
"""

from __future__ import annotations

from servectl.api import models
from servectl.api.models.rollout import default_canary_steps


def _number(value: float) -> str:
    return f"{value:g}"


def check_text(check: models.AnalysisCheck) -> str:
    """One check as its bounds: ``errorRate <= 0.01``, ``latencyP99 <= 2x stable``,
    ``flagged (query): value < 0.02``."""
    name = check.metric + (" (query)" if check.query else "")
    bounds = []
    if check.max is not None:
        bounds.append(f"<= {_number(check.max)}")
    if check.min is not None:
        bounds.append(f">= {_number(check.min)}")
    if check.max_ratio_to_stable is not None:
        bounds.append(f"<= {_number(check.max_ratio_to_stable)}x stable")
    if check.min_ratio_to_stable is not None:
        bounds.append(f">= {_number(check.min_ratio_to_stable)}x stable")
    text = " ".join([name, *bounds])
    if check.condition:
        text += f"{' and' if bounds else ':'} {check.condition}"
    return text


def analysis_text(spec: models.RolloutSpec, step: models.StepAnalysis | None) -> str:
    """What an analysis step (or the A/B guard rails, ``step`` None) judges, how often and
    on how many requests."""
    shared = spec.analysis or models.AnalysisSpec()
    interval = (step.interval if step and step.interval else None) or shared.interval
    min_samples = (step.min_samples if step and step.min_samples else None) or shared.min_samples
    checks = (step.checks if step and step.checks else None) or shared.checks
    judged = ", ".join(check_text(c) for c in checks) or "no checks (rollout.analysis has none)"
    text = f"{judged}; every {interval}, on at least {min_samples} requests"
    if shared.max_extensions is not None:
        return text + f" (pauses after {shared.max_extensions} extensions short of them)"
    return text + " (waits for them)"


def step_text(spec: models.RolloutSpec, step: models.RolloutStep) -> str:
    """One step in words."""
    if step.set_weight is not None:
        return f"setWeight {step.set_weight} %"
    if step.pause is not None:
        if step.pause.seconds is None:
            return "pause until `servectl rollout resume`"
        return f"pause {step.pause.seconds} s"
    if step.analysis is not None:
        return f"analysis: {analysis_text(spec, step.analysis)}"
    scale = step.set_canary_scale
    assert scale is not None  # the model allows exactly one kind per step
    if scale.replicas is not None:
        return f"setCanaryScale {scale.replicas} replicas"
    if scale.weight is not None:
        return f"setCanaryScale as if at {scale.weight} %"
    return "setCanaryScale back to its weight"


def _default_steps(spec: models.RolloutSpec) -> bool:
    shared = bool(spec.analysis and spec.analysis.checks)
    given = [s.model_dump(mode="json", by_alias=True, exclude_none=True) for s in spec.steps]
    return given == default_canary_steps(shared)


def describe(spec: models.RolloutSpec, version: int) -> list[str]:
    """The plan of a rollout to ``version`` under ``spec``: a headline, one line per step
    (numbered as ``rollout status`` counts them, from 0), and how it ends."""
    numbered = [f"  {i}. {step_text(spec, step)}" for i, step in enumerate(spec.steps)]
    strategy = spec.strategy
    if strategy is models.RolloutStrategy.AB_TEST:
        ab = spec.ab_test
        assert ab is not None  # the model requires it for abTest
        match = ab.match.header or ab.match.cookie
        assert match is not None
        kind = "header" if ab.match.header is not None else "cookie"
        better = "higher" if ab.higher_is_better else "lower"
        return [
            f"plan: A/B test of v{version}",
            f"  requests with {kind} {match.name}: {match.value} go to v{version} for "
            f"{ab.duration_seconds} s",
            f"  guard rails: {analysis_text(spec, None)}",
            f"  then the better {ab.winner_metric} ({better} is better) wins; "
            + ("B is promoted to 100 %" if ab.promote_winner else "promote or abort by hand"),
        ]
    if strategy is models.RolloutStrategy.BLUE_GREEN:
        blue_green = spec.blue_green or models.BlueGreenSpec()
        switch = (
            "then all traffic switches at once"
            if blue_green.auto_promote
            else "then it waits for `servectl rollout promote` to switch all traffic"
        )
        return [
            f"plan: blue/green to v{version}: v{version} comes up at full size with no "
            "traffic (the preview)",
            *numbered,
            f"  {switch}; the old revision keeps its size for "
            f"{blue_green.scale_down_delay_seconds} s",
        ]
    headline = f"plan: canary to v{version}" + (
        " (the default steps)" if _default_steps(spec) else ""
    )
    return [headline, *numbered, f"  then v{version} is promoted: it serves 100 %"]
