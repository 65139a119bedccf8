"""spec.rollout: strategy (canary, abTest, blueGreen), steps, A/B match, surge budget.

The rules here teach the strategies' shapes (docs/resource-model.md, "Rollouts");
servectl.rollout runs them. A canary given no steps gets :data:`DEFAULT_CANARY_WEIGHTS`
with an analysis after each partial weight, written into the spec when it is read, so
every reader (the rollout machine, ``rollout start``'s plan, the simulator's peers) sees
the same steps.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, model_validator

from servectl.api.models.analysis import (
    BUILTIN_METRICS_TEXT,
    METRIC_NAME_MAX,
    AnalysisSpec,
    StepAnalysis,
    builtin_metric_rule,
    is_builtin_metric,
    latency_metric_percentile,
)
from servectl.api.models.common import (
    CEL_IDENTIFIER,
    HTTP_HEADER_NAME,
    NO_WHITESPACE,
    Bool,
    Int,
    Number,
    SpecModel,
    cel_rules,
    spec_error,
)


class RolloutStrategy(enum.StrEnum):
    CANARY = "canary"  # shift weight step by step, analysing each step
    AB_TEST = "abTest"  # route matching requests to the new revision
    BLUE_GREEN = "blueGreen"  # bring the new revision to full size, then switch at once


class PauseStep(SpecModel):
    """Hold the current weights."""

    seconds: Int | None = Field(
        default=None, ge=0, description="Omitted: until a person resumes the rollout."
    )


class SetCanaryScale(SpecModel):
    """Size the canary independently of its traffic weight (exactly one field)."""

    model_config = cel_rules(
        (
            "[has(self.replicas), has(self.weight), has(self.matchTrafficWeight)]"
            ".filter(x, x).size() == 1",
            "set exactly one of replicas, weight, matchTrafficWeight",
        )
    )

    replicas: Int | None = Field(
        default=None,
        ge=0,
        description="At least this many replicas (more where its weight, now or next, needs).",
    )
    weight: Int | None = Field(default=None, ge=0, le=100, description="Size as if at this weight.")
    match_traffic_weight: Bool | None = Field(default=None, description="Back to weight-sized.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [
            f
            for f in ("replicas", "weight", "match_traffic_weight")
            if getattr(self, f) is not None
        ]
        if len(given) != 1:
            raise spec_error(
                "setCanaryScale takes exactly one of replicas, weight, matchTrafficWeight",
                fix="e.g. {setCanaryScale: {replicas: 2}}",
            )
        return self


class RolloutStep(SpecModel):
    """One step of a rollout: exactly one of setWeight, pause, analysis, setCanaryScale."""

    model_config = cel_rules(
        (
            "[has(self.setWeight), has(self.pause), has(self.analysis), has(self.setCanaryScale)]"
            ".filter(x, x).size() == 1",
            "a step takes exactly one of setWeight, pause, analysis, setCanaryScale",
        )
    )

    set_weight: Int | None = Field(
        default=None, ge=0, le=100, description="Percent of traffic to the new revision."
    )
    pause: PauseStep | None = Field(default=None, description="Hold the weights.")
    analysis: StepAnalysis | None = Field(
        default=None, description="Judge the new revision; proceed on pass, abort on fail."
    )
    set_canary_scale: SetCanaryScale | None = Field(
        default=None, description="Size the canary apart from its weight."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(given) != 1:
            raise spec_error(
                "a step takes exactly one of setWeight, pause, analysis, setCanaryScale"
                + (f" (got {len(given)})" if given else ""),
                fix="split it into one step per action, e.g. [{setWeight: 10}, {pause: {}}]",
            )
        return self


class HeaderMatch(SpecModel):
    """Requests carrying this header value."""

    name: str = Field(pattern=HTTP_HEADER_NAME, description="Header name.", examples=["x-variant"])
    value: str = Field(description="Exact value.", examples=["b"])


class CookieMatch(SpecModel):
    """Requests carrying this cookie value."""

    name: str = Field(
        min_length=1, pattern=NO_WHITESPACE, description="Cookie name.", examples=["variant"]
    )
    value: str = Field(description="Exact value.", examples=["b"])


class TrafficMatch(SpecModel):
    """Which requests go to the new revision in an A/B test (exactly one)."""

    model_config = cel_rules(
        ("has(self.header) != has(self.cookie)", "set exactly one of header, cookie")
    )

    header: HeaderMatch | None = Field(default=None, description="Match on a request header.")
    cookie: CookieMatch | None = Field(default=None, description="Match on a cookie.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.header is None) == (self.cookie is None):
            raise spec_error(
                "match takes exactly one of header, cookie",
                fix="e.g. {header: {name: x-model-variant, value: b}}",
            )
        return self


# Built-in metrics whose better direction is not a matter of taste.
_LOWER_IS_BETTER = ("errorRate", "latencyP<N>")
_HIGHER_IS_BETTER = ("successRate",)


class AbTestSpec(SpecModel):
    """The A/B split: matching requests go to B (the new revision), the rest to A (stable)."""

    model_config = cel_rules(
        (
            "!has(self.winnerMetric) || " + builtin_metric_rule("winnerMetric"),
            "winnerMetric must be a built-in metric (" + BUILTIN_METRICS_TEXT + ")",
        ),
        (
            "!has(self.winnerMetric) || self.winnerMetric != 'successRate'"
            " || (has(self.higherIsBetter) && self.higherIsBetter)",
            "successRate needs higherIsBetter: true",
        ),
        (
            "!has(self.higherIsBetter) || !self.higherIsBetter || (has(self.winnerMetric)"
            " && self.winnerMetric != 'errorRate' && !self.winnerMetric.startsWith('latencyP'))",
            "errorRate and latency are better lower: remove higherIsBetter",
        ),
    )

    match: TrafficMatch = Field(description="Which requests see B, the new revision.")
    duration_seconds: Int = Field(
        default=600, ge=1, description="How long both variants serve before the winner is picked."
    )
    winner_metric: str = Field(
        default="errorRate",
        max_length=METRIC_NAME_MAX,
        pattern=CEL_IDENTIFIER,
        description="Built-in metric that picks the winner (" + BUILTIN_METRICS_TEXT + ").",
        examples=["latencyP99"],
    )
    higher_is_better: Bool = Field(
        default=False, description="Whether a higher winnerMetric wins (true for successRate)."
    )
    promote_winner: Bool = Field(
        default=True,
        description="Promote B when it wins; when A wins B is removed. false: wait for a "
        "person to promote or abort either way.",
    )

    @model_validator(mode="after")
    def _winner_metric(self) -> Self:
        metric = self.winner_metric
        if not is_builtin_metric(metric):
            raise spec_error(
                f"unknown winnerMetric {metric!r}; built-in metrics: {BUILTIN_METRICS_TEXT}",
                field=("winnerMetric",),
                fix="pick the winner on a built-in metric, e.g. winnerMetric: latencyP99",
            )
        lower_is_better = metric == "errorRate" or latency_metric_percentile(metric) is not None
        if self.higher_is_better and lower_is_better:
            raise spec_error(
                f"higherIsBetter: true would pick the variant with the higher {metric}",
                field=("higherIsBetter",),
                fix=f"remove higherIsBetter ({metric} is better lower)",
            )
        if metric in _HIGHER_IS_BETTER and not self.higher_is_better:
            raise spec_error(
                f"{metric} is better higher, but higherIsBetter is false",
                field=("higherIsBetter",),
                fix="set higherIsBetter: true",
            )
        return self


class BlueGreenSpec(SpecModel):
    """Blue-green: the new revision (the preview) comes up at full size, then all traffic
    switches to it at once."""

    auto_promote: Bool = Field(
        default=True,
        description="Switch once the steps pass; false: wait at the preview until a "
        "person promotes it.",
    )
    scale_down_delay_seconds: Int = Field(
        default=30,
        ge=0,
        description="The old revision stays at full size this long after the switch, so a "
        "rollback is instant.",
    )
    preview_header: HeaderMatch | None = Field(
        default=None,
        description="Requests carrying this header reach the preview before the switch. "
        "Omitted: the preview gets no user traffic.",
    )


class SurgeBudget(SpecModel):
    """Extra capacity a rollout may hold above the steady-state size."""

    model_config = cel_rules(
        (
            "(has(self.gpus) && self.gpus > 0) || (has(self.replicas) && self.replicas > 0)",
            "a surge budget of 0 leaves no room to start the new revision",
        )
    )

    gpus: Int | None = Field(default=None, ge=0, description="Extra GPUs at most.")
    replicas: Int | None = Field(default=None, ge=0, description="Extra replicas at most.")

    @model_validator(mode="after")
    def _has_room(self) -> Self:
        if not any(limit for limit in (self.gpus, self.replicas)):
            raise spec_error(
                "a surge budget of 0 leaves no room to start the new revision before moving "
                "traffic",
                field=(
                    ("replicas",)
                    if self.replicas is not None
                    else ("gpus",)
                    if self.gpus is not None
                    else ()
                ),
                fix="allow at least one extra replica, e.g. surgeBudget: {replicas: 2} "
                "(gpus: 2 on GPU replicas), or remove surgeBudget for no limit beyond "
                "maxReplicas",
            )
        return self


#: A canary with no steps moves traffic 20 % -> 50 % -> 100 %, analysing after 20 and 50.
DEFAULT_CANARY_WEIGHTS = (20, 50, 100)
#: The checks of those analyses when rollout.analysis has none: at most 1 % of the
#: canary's requests may fail (Flagger's default success rate is 99 % too).
DEFAULT_CANARY_CHECKS: tuple[dict[str, Any], ...] = ({"metric": "errorRate", "max": 0.01},)
DEFAULT_STEPS_TEXT = (
    "setWeight 20, analysis, setWeight 50, analysis, setWeight 100; each analysis uses "
    "rollout.analysis (interval 30s, minSamples 100 by default) and, when that has no "
    "checks, errorRate max 0.01"
)


def default_canary_steps(shared_checks: bool) -> list[dict[str, Any]]:
    """The steps of a canary whose spec gives none (as a document, camelCase).

    ``shared_checks``: rollout.analysis has checks, which the analyses then use; else each
    analysis step carries :data:`DEFAULT_CANARY_CHECKS`."""
    analysis: dict[str, Any] = {} if shared_checks else {"checks": list(DEFAULT_CANARY_CHECKS)}
    steps: list[dict[str, Any]] = []
    for weight in DEFAULT_CANARY_WEIGHTS:
        steps.append({"setWeight": weight})
        if weight < 100:
            steps.append({"analysis": dict(analysis)})
    return steps


def _has_checks(analysis: Any) -> bool:
    if isinstance(analysis, AnalysisSpec):
        return bool(analysis.checks)
    return isinstance(analysis, Mapping) and bool(analysis.get("checks"))


class RolloutSpec(SpecModel):
    """How a new model version replaces the serving one."""

    model_config = cel_rules(
        (
            "!has(self.strategy) || self.strategy != 'abTest' || has(self.abTest)",
            "strategy abTest needs abTest.match",
        ),
        (
            "!has(self.abTest) || (has(self.strategy) && self.strategy == 'abTest')",
            "abTest settings need strategy: abTest",
        ),
        (
            "!has(self.blueGreen) || (has(self.strategy) && self.strategy == 'blueGreen')",
            "blueGreen settings need strategy: blueGreen",
        ),
        (
            "!has(self.strategy) || self.strategy != 'abTest' || !has(self.steps)"
            " || size(self.steps) == 0",
            "an abTest runs for abTest.durationSeconds; remove steps",
        ),
        (
            "!has(self.strategy) || self.strategy != 'blueGreen' || !has(self.steps)"
            " || self.steps.all(s, !has(s.setWeight) && !has(s.setCanaryScale))",
            "blueGreen steps are pause and analysis only",
        ),
        (
            "!has(self.strategy) || self.strategy != 'blueGreen' || !has(self.surgeBudget)",
            "blueGreen needs a full second fleet; use canary with surgeBudget",
        ),
        (
            # isSorted() is in the Kubernetes CEL list library.
            "!has(self.steps)"
            " || self.steps.filter(s, has(s.setWeight)).map(s, s.setWeight).isSorted()",
            "canary weights only go up; to send traffic back, abort",
        ),
    )

    strategy: RolloutStrategy = Field(
        default=RolloutStrategy.CANARY, description="canary, abTest or blueGreen."
    )
    steps: list[RolloutStep] = Field(
        default_factory=list,
        max_length=100,
        description="Executed in order. canary: any step kinds, setWeight only going up; "
        "omitted or empty: " + DEFAULT_STEPS_TEXT + " (write [{setWeight: 100}] for an "
        "instant switch). blueGreen: pause and analysis only (against the preview); "
        "abTest: none.",
    )
    analysis: AnalysisSpec | None = Field(default=None, description="Defaults for analysis steps.")
    ab_test: AbTestSpec | None = Field(default=None, description="Required for strategy abTest.")
    blue_green: BlueGreenSpec | None = Field(
        default=None, description="For strategy blueGreen; omitted: the defaults."
    )
    drain_seconds: Int = Field(
        default=30, ge=0, description="Wait after a route change before shrinking the giver."
    )
    surge_budget: SurgeBudget | None = Field(
        default=None, description="Omitted: no limit beyond maxReplicas."
    )
    progress_deadline_seconds: Int = Field(
        default=600,
        ge=1,
        description="Longest wait for the new revision's capacity to become ready at a step; "
        "time spent on autoscaling-driven waits where replicas keep becoming ready, pauses "
        "and analysis does not count.",
    )
    hard_failure_error_rate: Number = Field(
        default=0.5,
        gt=0,
        le=1,
        description="A canary with at least this error rate is failing hard: abort moves its "
        "traffic at once instead of first restoring stable capacity.",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_canary_steps(cls, data: Any) -> Any:
        """A canary with no steps gets the default ones, so it never switches in one go.

        Done on the document, before validation: the stored spec (and ``get -o yaml``)
        then shows the steps the rollout follows; blueGreen and abTest are untouched."""
        if not isinstance(data, Mapping) or data.get("steps"):
            return data
        if (data.get("strategy") or RolloutStrategy.CANARY) != RolloutStrategy.CANARY:
            return data
        return {**data, "steps": default_canary_steps(_has_checks(data.get("analysis")))}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        self._strategy_blocks()
        if self.strategy is RolloutStrategy.AB_TEST and self.steps:
            raise spec_error(
                "an abTest runs for abTest.durationSeconds; remove steps",
                field=("steps",),
                fix="remove steps; set abTest.durationSeconds to choose how long it runs",
            )
        if self.strategy is RolloutStrategy.BLUE_GREEN:
            self._blue_green_steps()
        if self.strategy is RolloutStrategy.CANARY:
            self._weights_go_up()
        shared_checks = bool(self.analysis and self.analysis.checks)
        for index, step in enumerate(self.steps):
            if step.analysis is not None and not step.analysis.checks and not shared_checks:
                raise spec_error(
                    "analysis step has no checks",
                    field=("steps", index, "analysis"),
                    fix="add rollout.analysis.checks, or checks in this step",
                )
        return self

    def _strategy_blocks(self) -> None:
        if self.strategy is RolloutStrategy.AB_TEST and self.ab_test is None:
            raise spec_error(
                "strategy abTest needs abTest.match",
                field=("abTest",),
                fix="add abTest: {match: {header: {name: x-model-variant, value: b}}}",
            )
        for block, alias, strategy in (
            (self.ab_test, "abTest", RolloutStrategy.AB_TEST),
            (self.blue_green, "blueGreen", RolloutStrategy.BLUE_GREEN),
        ):
            if block is not None and self.strategy is not strategy:
                raise spec_error(
                    f"{alias} settings apply to strategy {strategy.value}, not "
                    f"{self.strategy.value}",
                    field=(alias,),
                    fix=f"set strategy: {strategy.value}, or remove {alias}",
                )
        if self.strategy is RolloutStrategy.BLUE_GREEN and self.surge_budget is not None:
            raise spec_error(
                "blueGreen needs a full second fleet; use canary with surgeBudget",
                field=("surgeBudget",),
                fix="remove surgeBudget, or use strategy: canary to roll out within a budget",
            )

    def _blue_green_steps(self) -> None:
        for index, step in enumerate(self.steps):
            for name, alias in (
                ("set_weight", "setWeight"),
                ("set_canary_scale", "setCanaryScale"),
            ):
                if getattr(step, name) is not None:
                    raise spec_error(
                        f"{alias} does not apply to blueGreen: its steps run against the "
                        "preview before the switch",
                        field=("steps", index, alias),
                        fix="keep only pause and analysis steps; use strategy: canary to "
                        "shift traffic step by step",
                    )

    def _weights_go_up(self) -> None:
        previous: tuple[int, int] | None = None  # (index, weight)
        for index, step in enumerate(self.steps):
            if step.set_weight is None:
                continue
            if previous is not None and step.set_weight < previous[1]:
                raise spec_error(
                    f"setWeight {step.set_weight} after {previous[1]} (steps[{previous[0]}]): "
                    "canary weights only go up",
                    field=("steps", index, "setWeight"),
                    fix="to send traffic back, abort the rollout instead; otherwise "
                    f"use a weight >= {previous[1]}",
                )
            previous = (index, step.set_weight)
