"""spec.rollout.analysis: the checks that judge a new revision, and the built-in metrics."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Self

from pydantic import Field, field_validator, model_validator

from servectl.api import conditions
from servectl.api.models.common import (
    CEL_IDENTIFIER,
    DURATION,
    Int,
    Number,
    SpecModel,
    cel_rules,
    spec_error,
)

BUILTIN_ANALYSIS_METRICS: Mapping[str, str] = {
    "errorRate": "failed requests / requests of the revision (0-1)",
    "successRate": "1 - errorRate",
    "requestRate": "requests per second the revision served",
    "latencyP<N>": "latency percentile N in ms from TF Serving's histogram, e.g. latencyP99",
    "modelAvailable": "1 when TF Serving reports the version AVAILABLE, else 0 (the probe)",
}
"""Metrics an analysis check may name without a ``query``."""

_LATENCY_METRIC = re.compile(r"^latencyP([0-9]{1,2}(?:\.[0-9]+)?)$")


def latency_metric_percentile(metric: str) -> float | None:
    """``latencyP99`` -> 99.0, ``latencyP99.9`` -> 99.9; None if not a latency metric."""
    found = _LATENCY_METRIC.match(metric)
    if found is None:
        return None
    percentile = float(found.group(1))
    return percentile if 0 < percentile < 100 else None


def is_builtin_metric(metric: str) -> bool:
    """Whether ``metric`` is computed by servectl itself (no ``query`` needed)."""
    return metric in BUILTIN_ANALYSIS_METRICS or latency_metric_percentile(metric) is not None


# Bounded lengths keep the CRD's CEL rules over these strings within the API server's
# cost budget (checks repeat in every step).
METRIC_NAME_MAX = 128
QUERY_MAX = 4096
_BUILTIN_NAMES = [name for name in BUILTIN_ANALYSIS_METRICS if name != "latencyP<N>"]
# The latency metrics is_builtin_metric accepts among CEL identifiers: latencyP1 .. latencyP99.
_LATENCY_METRIC_CEL = "^latencyP(0?[1-9]|[1-9][0-9])$"
BUILTIN_METRICS_TEXT = ", ".join(
    "latencyP<N> (latencyP50, latencyP99, ...)" if name == "latencyP<N>" else name
    for name in BUILTIN_ANALYSIS_METRICS
)
"""The built-in metrics, as error messages list them."""


def builtin_metric_rule(field: str) -> str:
    """CEL: ``self.<field>`` is a built-in metric (as is_builtin_metric decides)."""
    names = ", ".join(f"'{name}'" for name in _BUILTIN_NAMES)
    return f"self.{field} in [{names}] || self.{field}.matches('{_LATENCY_METRIC_CEL}')"


_CONDITION_FIX = (
    "write a CEL expression over value and stable (doubles) that is true when the check "
    "passes, e.g. value < 0.01 || value < stable * 1.2"
)
_QUERY_EXAMPLE = 'sum(rate(my_failures_total{revision="{{revision}}"}[1m]))'


class AnalysisCheck(SpecModel):
    """One pass/fail rule on a metric of the judged revision; at least one bound.

    ``value`` is the metric for the judged revision (canary, preview or variant B); every
    bound given must hold, and ``condition`` must return true.
    """

    model_config = cel_rules(
        (
            "has(self.max) || has(self.min) || has(self.maxRatioToStable)"
            " || has(self.minRatioToStable) || has(self.condition)",
            "a check needs max, min, maxRatioToStable, minRatioToStable or condition",
        ),
        (
            "has(self.query) || " + builtin_metric_rule("metric"),
            "metric must be a built-in (" + BUILTIN_METRICS_TEXT + ") unless query is given",
        ),
        (
            "!has(self.query) || self.query.contains('{{revision}}')",
            "query must select the revision with {{revision}}",
        ),
        (
            "!has(self.min) || !has(self.max) || self.min <= self.max",
            "min must not exceed max",
        ),
        (
            "!has(self.minRatioToStable) || !has(self.maxRatioToStable)"
            " || self.minRatioToStable <= self.maxRatioToStable",
            "minRatioToStable must not exceed maxRatioToStable",
        ),
    )

    metric: str = Field(
        max_length=METRIC_NAME_MAX,
        pattern=CEL_IDENTIFIER,
        description="Metric name: a built-in (" + BUILTIN_METRICS_TEXT + "), or any name "
        "for the value of query.",
        examples=["errorRate"],
    )
    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=QUERY_MAX,
        description="PromQL giving the metric's value for one revision; placeholders "
        "{{revision}}, {{service}}, {{namespace}}. Omitted: metric must be a built-in.",
        examples=[_QUERY_EXAMPLE],
    )
    max: Number | None = Field(default=None, description="Fail above this value.")
    min: Number | None = Field(default=None, description="Fail below this value.")
    max_ratio_to_stable: Number | None = Field(
        default=None, gt=0, description="Fail above this multiple of the stable revision's value."
    )
    min_ratio_to_stable: Number | None = Field(
        default=None, gt=0, description="Fail below this multiple of the stable revision's value."
    )
    condition: str | None = Field(
        default=None,
        min_length=1,
        max_length=conditions.MAX_CONDITION_CHARS,
        description="CEL over value and stable (doubles; stable absent when unknown, and a "
        "condition that needs it is then Inconclusive) returning true to pass.",
        examples=["value < 0.01 || value < stable * 1.2"],
    )

    @field_validator("condition")
    @classmethod
    def _condition_compiles(cls, condition: str | None) -> str | None:
        if condition is None:
            return None
        try:
            conditions.compile_condition(condition)
        except conditions.ConditionCompileError as error:
            where = f" at {error.line}:{error.column}" if error.line is not None else ""
            raise spec_error(
                f"condition does not compile{where}: {error.message}", fix=_CONDITION_FIX
            ) from None
        return condition

    @field_validator("query")
    @classmethod
    def _known_placeholders(cls, query: str | None) -> str | None:
        if query is None:
            return None
        allowed = ", ".join(f"{{{{{name}}}}}" for name in conditions.QUERY_PLACEHOLDERS)
        for name in conditions.placeholders(query):
            if name not in conditions.QUERY_PLACEHOLDERS:
                close = difflib.get_close_matches(name.strip(), conditions.QUERY_PLACEHOLDERS, 1)
                hint = f"did you mean {{{{{close[0]}}}}}? " if close else ""
                raise spec_error(
                    f"unknown placeholder {{{{{name}}}}} in query",
                    fix=f"{hint}placeholders: {allowed}",
                )
        if "revision" not in conditions.placeholders(query):
            raise spec_error(
                "the query does not select a revision, so every revision would get the same value",
                fix=f"filter by {{{{revision}}}}, e.g. {_QUERY_EXAMPLE}",
            )
        return query

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.query is None and not is_builtin_metric(self.metric):
            raise spec_error(
                f"unknown metric {self.metric!r}; built-in metrics: {BUILTIN_METRICS_TEXT}",
                field=("metric",),
                fix="use a built-in metric, or add query: '<PromQL>' to define a custom metric",
            )
        bounds = (self.max, self.min, self.max_ratio_to_stable, self.min_ratio_to_stable)
        if all(bound is None for bound in bounds) and self.condition is None:
            raise spec_error(
                f"check on {self.metric} has no bound",
                field=("max",),
                fix="add max, min, maxRatioToStable, minRatioToStable or condition",
            )
        for low, high, low_name, high_name in (
            (self.min, self.max, "min", "max"),
            (
                self.min_ratio_to_stable,
                self.max_ratio_to_stable,
                "minRatioToStable",
                "maxRatioToStable",
            ),
        ):
            if low is not None and high is not None and low > high:
                raise spec_error(
                    f"{low_name} ({low:g}) is above {high_name} ({high:g}): no value passes",
                    field=(low_name,),
                    fix=f"set {low_name} <= {high_name}",
                )
        return self


class AnalysisSpec(SpecModel):
    """How a canary is judged against the stable revision."""

    interval: str = Field(
        default="30s", pattern=DURATION, description="How often checks are evaluated."
    )
    min_samples: Int = Field(
        default=100,
        ge=1,
        description="Requests needed before a check can pass or fail (else Inconclusive).",
    )
    max_extensions: Int | None = Field(
        default=None,
        ge=0,
        description="How many times an Inconclusive analysis (too few samples) extends the "
        "step by one interval before the rollout pauses and asks for load; omitted: keep "
        "extending.",
    )
    checks: list[AnalysisCheck] = Field(
        default_factory=list, max_length=20, description="All must pass for a step to pass."
    )


class StepAnalysis(SpecModel):
    """An analysis step; omitted fields come from rollout.analysis."""

    interval: str | None = Field(default=None, pattern=DURATION, description="Overrides.")
    min_samples: Int | None = Field(default=None, ge=1, description="Overrides.")
    checks: list[AnalysisCheck] | None = Field(
        default=None, max_length=20, description="Replace rollout.analysis.checks."
    )
