"""spec.autoscaling: signals, the custom CEL policy, behavior; ``to_config()`` for the engine.

Defaults come from ``servectl.autoscaling.config`` so the documents and the engine
cannot disagree; ``AutoscalingSpec.resolve_policy`` finds the CEL policy a service runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Self

from pydantic import Field, model_validator

from servectl.api.models.common import (
    CEL_IDENTIFIER,
    DNS1123_SUBDOMAIN,
    Int,
    Number,
    Quantity,
    SpecModel,
    cel_rules,
    parse_quantity,
    spec_error,
    to_snake,
)
from servectl.api.models.scalingpolicy import ScalingPolicy
from servectl.autoscaling import config, forecast
from servectl.autoscaling.policy import UnknownPolicyError

# The target field each signal type carries (and no other).
SIGNAL_TARGET_FIELDS: Mapping[config.SignalType, str] = {
    config.SignalType.CPU: "targetUtilization",
    config.SignalType.GPU: "targetDutyCycle",
    config.SignalType.LATENCY: "targetMs",
    config.SignalType.RPS: "targetPerReplica",
    config.SignalType.CONCURRENCY: "targetPerReplica",
}
_SIGNAL_EXAMPLES: Mapping[config.SignalType, str] = {
    config.SignalType.CPU: "{type: cpu, targetUtilization: 70}",
    config.SignalType.GPU: "{type: gpu, targetDutyCycle: 80}",
    config.SignalType.LATENCY: "{type: latency, percentile: 99, targetMs: 150}",
    config.SignalType.RPS: "{type: rps, targetPerReplica: 400}",
    config.SignalType.CONCURRENCY: "{type: concurrency, targetPerReplica: 8}",
}


class Signal(SpecModel):
    """One scaling signal; each type takes exactly its own target field."""

    model_config = cel_rules(
        ("has(self.targetUtilization) == (self.type == 'cpu')", "targetUtilization is for cpu"),
        ("has(self.targetDutyCycle) == (self.type == 'gpu')", "targetDutyCycle is for gpu"),
        ("has(self.targetMs) == (self.type == 'latency')", "targetMs is for latency"),
        ("!has(self.percentile) || self.type == 'latency'", "percentile is for latency"),
        (
            "has(self.targetPerReplica) == (self.type == 'rps' || self.type == 'concurrency')",
            "targetPerReplica is for rps and concurrency",
        ),
    )

    type: config.SignalType = Field(description="cpu, gpu, latency, rps or concurrency.")
    target_utilization: Number | None = Field(
        default=None, gt=0, description="cpu: target percent of the CPU request (may exceed 100)."
    )
    target_duty_cycle: Number | None = Field(
        default=None, gt=0, le=100, description="gpu: target GPU duty cycle percent."
    )
    percentile: Number | None = Field(
        default=None,
        gt=0,
        lt=100,
        description="latency: which percentile to hold under targetMs (default 99).",
    )
    target_ms: Number | None = Field(
        default=None, gt=0, description="latency: target latency at the percentile, in ms."
    )
    target_per_replica: Number | None = Field(
        default=None, gt=0, description="rps, concurrency: target load per replica."
    )

    @model_validator(mode="after")
    def _own_target_only(self) -> Self:
        own = SIGNAL_TARGET_FIELDS[self.type]
        allowed = {own, "percentile"} if self.type is config.SignalType.LATENCY else {own}
        example = _SIGNAL_EXAMPLES[self.type]
        for name, info in type(self).model_fields.items():
            alias = info.alias or name
            if alias in allowed or alias == "type" or getattr(self, name) is None:
                continue
            raise spec_error(
                f"{alias} does not apply to a {self.type.value} signal",
                field=(alias,),
                fix=f"remove {alias}; a {self.type.value} signal is {example}",
            )
        if getattr(self, to_snake(own)) is None:
            raise spec_error(
                f"a {self.type.value} signal needs {own}",
                field=(own,),
                fix=f"add {own}, e.g. {example}",
            )
        return self

    def to_target(self) -> config.SignalTarget:
        """The engine's form of this signal."""
        target = getattr(self, to_snake(SIGNAL_TARGET_FIELDS[self.type]))
        assert target is not None  # guaranteed by _own_target_only
        if self.type is config.SignalType.LATENCY and self.percentile is not None:
            return config.SignalTarget(self.type, float(target), float(self.percentile))
        return config.SignalTarget(self.type, float(target))


def describe_rules(rules: config.ScalingRules) -> str:
    """A one-line summary of scaling rules: "120 s window, max(50 % / 30 s)"."""
    window = f"{rules.stabilization_s:g} s window" if rules.stabilization_s else "no window"
    if rules.select is config.SelectPolicy.DISABLED:
        return f"{window}, disabled"
    limits = ", ".join(
        f"{p.value}{' %' if p.type is config.RateType.PERCENT else ' pods'} / {p.period_s:g} s"
        for p in rules.policies
    )
    return f"{window}, {rules.select.value.lower()}({limits})"


class PolicySpec(SpecModel):
    """A custom CEL policy: inline (cel) or a ScalingPolicy by name (ref)."""

    model_config = cel_rules(("has(self.cel) != has(self.ref)", "set exactly one of cel or ref"))

    cel: str | None = Field(
        default=None,
        min_length=1,
        description="Inline CEL expression returning replicas or {replicas, reason}.",
    )
    ref: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Name of a ScalingPolicy in the same namespace.",
        examples=["business-hours"],
    )
    params: dict[Annotated[str, Field(pattern=CEL_IDENTIFIER)], Number] = Field(
        default_factory=dict,
        description="Values for params.* in the expression; override the ScalingPolicy's.",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        if (self.cel is None) == (self.ref is None):
            both = self.cel is not None
            raise spec_error(
                "set exactly one of cel or ref" + (", not both" if both else ""),
                field=("ref",) if both else (),
                fix="either {cel: '<expression>'} or {ref: <ScalingPolicy name>}",
            )
        return self


class RatePolicySpec(SpecModel):
    """At most ``value`` pods (or percent) of change per ``periodSeconds``."""

    type: config.RateType = Field(description="Pods or Percent.")
    value: Int = Field(gt=0, description="Pods, or percent of the current count.")
    period_seconds: Int = Field(ge=1, le=1800, description="Window the value applies to.")

    def to_config(self) -> config.RatePolicy:
        return config.RatePolicy(self.type, self.value, float(self.period_seconds))


class ScalingRulesSpec(SpecModel):
    """One direction of HPA-style behavior; omitted fields keep servectl's defaults."""

    stabilization_seconds: Int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="Window whose most conservative recommendation is applied.",
    )
    select_policy: config.SelectPolicy | None = Field(
        default=None, description="Max, Min or Disabled (no scaling in this direction)."
    )
    policies: list[RatePolicySpec] | None = Field(
        default=None, min_length=1, description="Rate limits; selectPolicy picks among them."
    )

    def to_config(self, defaults: config.ScalingRules) -> config.ScalingRules:
        """These rules, with each omitted field taken from ``defaults``."""
        return config.ScalingRules(
            stabilization_s=(
                defaults.stabilization_s
                if self.stabilization_seconds is None
                else float(self.stabilization_seconds)
            ),
            policies=(
                defaults.policies
                if self.policies is None
                else tuple(p.to_config() for p in self.policies)
            ),
            select=defaults.select if self.select_policy is None else self.select_policy,
        )


class BehaviorSpec(SpecModel):
    """Stabilization and rate limits per direction (Kubernetes HPA v2 semantics)."""

    scale_up: ScalingRulesSpec | None = Field(
        default=None,
        description=f"Omitted: {describe_rules(config.servectl_default_behavior().scale_up)}.",
    )
    scale_down: ScalingRulesSpec | None = Field(
        default=None,
        description=f"Omitted: {describe_rules(config.servectl_default_behavior().scale_down)}.",
    )

    def to_config(self) -> config.Behavior:
        defaults = config.servectl_default_behavior()
        return config.Behavior(
            scale_up=(
                defaults.scale_up
                if self.scale_up is None
                else self.scale_up.to_config(defaults.scale_up)
            ),
            scale_down=(
                defaults.scale_down
                if self.scale_down is None
                else self.scale_down.to_config(defaults.scale_down)
            ),
        )


@dataclass(frozen=True)
class ResolvedPolicy:
    """The CEL policy a ModelService runs, wherever it was written."""

    name: str  # the ScalingPolicy's name, or "inline"
    cel: str
    params: Mapping[str, float]
    ref: str | None = None  # the ScalingPolicy name when referenced


_SIGNAL_DEFAULTS_TEXT = [
    f"{target.type.value} at {target.target:g}" for target in config.AutoscalingConfig.signals
]


def _default_signals() -> list[Signal]:
    return [
        Signal(type=target.type, **{to_snake(SIGNAL_TARGET_FIELDS[target.type]): target.target})
        for target in config.AutoscalingConfig.signals
    ]


_FORECAST_DEFAULT = forecast.ForecastConfig()


class ForecastSpec(SpecModel):
    """Predictive pre-scaling: a forecast of the request rate one cold start ahead (plus a
    slack for a ramp that comes earlier than it did one season ago), learnt from the
    service's own history (docs/forecasting.md). It only ever adds capacity to what the
    signals ask for, inside the behavior rails, and stays silent until it has a full
    season of history and while its recent forecasts are off by more than 35 %."""

    enabled: bool = Field(default=True, description="false: scale on the signals alone.")
    periods_seconds: list[Annotated[int, Field(ge=600, le=1_209_600)]] | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="Seasons to learn, in seconds (each a whole multiple of the shortest "
        "/ 288). Omitted: "
        + " and ".join(f"{p:.0f}" for p in _FORECAST_DEFAULT.periods_s)
        + " (a day and a week).",
    )

    timing_slack_buckets: int | None = Field(
        default=None,
        ge=0,
        description="How many buckets (the shortest period / 288) further than one cold "
        "start the forecast looks, so that a ramp coming earlier than it did one season ago "
        f"is met. Omitted: {_FORECAST_DEFAULT.timing_slack_buckets} (30 minutes of a day). "
        "Under half the shortest period.",
    )

    @model_validator(mode="after")
    def _buildable(self) -> Self:
        try:
            self.to_config()
        except ValueError as exc:
            text = str(exc)
            if text.startswith("timing_slack_buckets"):
                raise spec_error(
                    text.replace("timing_slack_buckets", "timingSlackBuckets"),
                    field=("timingSlackBuckets",),
                    fix="use fewer buckets than half the shortest period, e.g. 6",
                ) from None
            raise spec_error(
                text.replace("periods_s", "periodsSeconds"),
                field=("periodsSeconds",),
                fix="use periods that are whole multiples of the shortest / 288, e.g. "
                "[86400, 604800]",
            ) from None
        return self

    def to_config(self) -> forecast.ForecastConfig | None:
        if not self.enabled:
            return None
        if self.periods_seconds is None and self.timing_slack_buckets is None:
            return _FORECAST_DEFAULT
        periods = self.periods_seconds
        return forecast.ForecastConfig(
            periods_s=_FORECAST_DEFAULT.periods_s
            if periods is None
            else tuple(float(p) for p in periods),
            timing_slack_buckets=_FORECAST_DEFAULT.timing_slack_buckets
            if self.timing_slack_buckets is None
            else self.timing_slack_buckets,
        )


PARKED_CPU_DEFAULT = "20m"
"""What a parked standby replica's CPU quota is lowered to without ``parkedCpu``."""


class StandbySpec(SpecModel):
    """Warm standby replicas (docs/standby.md): started, model loaded, then parked (their
    CPU quota lowered, no traffic) beside each revision that takes traffic. A scale-up takes
    a parked replica first: its quota back and its route added, about a second, instead of
    a cold start; the pool is refilled behind it. They count apart from maxReplicas."""

    replicas: Int = Field(
        default=0,
        ge=0,
        le=100,
        description="Standby replicas per revision that takes traffic (0: none). Each keeps "
        "its memory (the model stays loaded) and a GPU if it has one.",
    )
    parked_cpu: Quantity = Field(
        default=PARKED_CPU_DEFAULT,
        description="The CPU a parked replica keeps, e.g. 20m (enough for its readiness "
        "checks; its requests wait for the quota to come back).",
    )

    @model_validator(mode="after")
    def _positive_cpu(self) -> Self:
        if parse_quantity(self.parked_cpu) <= 0:
            raise spec_error(
                "parkedCpu must be greater than zero",
                field=("parkedCpu",),
                fix=f'set a small positive quantity, e.g. parkedCpu: "{PARKED_CPU_DEFAULT}"',
            )
        return self

    def parked_cores(self) -> float:
        """The parked CPU in cores ("20m" -> 0.02)."""
        return float(parse_quantity(self.parked_cpu))


class AutoscalingSpec(SpecModel):
    """How many replicas to run, decided from signals and an optional CEL policy."""

    model_config = cel_rules(
        (
            "!has(self.minReplicas) || !has(self.maxReplicas)"
            " || self.minReplicas <= self.maxReplicas",
            "minReplicas must not exceed maxReplicas",
        )
    )

    # Defaults come from the engine's config so the two cannot disagree.
    # minReplicas >= 1: a TF Serving replica takes tens of seconds to load a model, and
    # with zero replicas no latency/CPU signal exists to wake the service.
    min_replicas: Int = Field(
        default=config.AutoscalingConfig.min_replicas, ge=1, description="Fewest replicas."
    )
    max_replicas: Int = Field(
        default=config.AutoscalingConfig.max_replicas, ge=1, description="Most replicas."
    )
    mode: config.Mode = Field(
        default=config.AutoscalingConfig.mode,
        description="active applies decisions; recommend only records them in status.",
    )
    signals: list[Signal] = Field(
        default_factory=_default_signals,
        min_length=1,
        max_length=len(config.SignalType),  # one per type
        description="Each signal proposes a replica count; the largest wins. Omitted: "
        + ", ".join(_SIGNAL_DEFAULTS_TEXT)
        + ".",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    policy: PolicySpec | None = Field(default=None, description="Optional custom CEL policy.")
    behavior: BehaviorSpec | None = Field(
        default=None, description="Omitted: servectl's defaults (fast up, cautious down)."
    )
    cold_start_seconds: Number | None = Field(
        default=None,
        ge=0,
        description="Time for a new replica to become ready (engine default "
        f"{config.AutoscalingConfig.cold_start_s:g}s).",
    )
    forecast: ForecastSpec | None = Field(
        default=None,
        description="Omitted: on, learning a day and a week of request rates; the forecast "
        "pre-scales one cold start ahead and never below what the signals ask for.",
    )
    standby: StandbySpec | None = Field(
        default=None,
        description="Omitted: no standby replicas; every scale-up is a cold start.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        low, high = self.min_replicas, self.max_replicas
        if low > high:
            raise spec_error(
                f"minReplicas ({low}) is greater than maxReplicas ({high})",
                field=("minReplicas",),
                fix=f"set minReplicas <= maxReplicas (now {low} > {high})",
            )
        seen: dict[config.SignalType, int] = {}
        for index, signal in enumerate(self.signals):
            if signal.type in seen:
                raise spec_error(
                    f"duplicate {signal.type.value} signal (also signals[{seen[signal.type]}])",
                    field=("signals", index, "type"),
                    fix=f"keep one {signal.type.value} signal; combine other conditions "
                    "in a CEL policy",
                )
            seen[signal.type] = index
        return self

    def to_config(self) -> config.AutoscalingConfig:
        """The engine's configuration; fields the spec cannot set keep engine defaults."""
        return config.AutoscalingConfig(
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            signals=tuple(signal.to_target() for signal in self.signals),
            mode=self.mode,
            behavior=(
                config.servectl_default_behavior()
                if self.behavior is None
                else self.behavior.to_config()
            ),
            cold_start_s=(
                config.AutoscalingConfig.cold_start_s
                if self.cold_start_seconds is None
                else float(self.cold_start_seconds)
            ),
            forecast=_FORECAST_DEFAULT if self.forecast is None else self.forecast.to_config(),
            standby=self.standby_replicas,
        )

    @property
    def standby_replicas(self) -> int:
        """Standby replicas per revision that takes traffic (0 without ``standby``)."""
        return 0 if self.standby is None else self.standby.replicas

    @property
    def inline_cel(self) -> str | None:
        """The inline CEL expression, if the policy is written in place."""
        return None if self.policy is None else self.policy.cel

    @property
    def policy_ref(self) -> str | None:
        """The referenced ScalingPolicy name, if any."""
        return None if self.policy is None else self.policy.ref

    def resolve_policy(self, library: Mapping[str, ScalingPolicy]) -> ResolvedPolicy | None:
        """The CEL policy to run, looking ``ref`` up in ``library`` (by name).

        Params: the ScalingPolicy's, overridden by ``policy.params``. Raises
        UnknownPolicyError when ``ref`` is not in ``library``.
        """
        if self.policy is None:
            return None
        if self.policy.cel is not None:
            return ResolvedPolicy(
                name="inline", cel=self.policy.cel, params=dict(self.policy.params)
            )
        assert self.policy.ref is not None  # exactly one of cel/ref is set
        found = library.get(self.policy.ref)
        if found is None:
            known = ", ".join(sorted(library)) or "none"
            raise UnknownPolicyError(
                f"ScalingPolicy {self.policy.ref!r} not found (known: {known})"
            )
        return ResolvedPolicy(
            name=self.policy.ref,
            cel=found.spec.cel,
            params={**found.spec.params, **self.policy.params},
            ref=self.policy.ref,
        )
