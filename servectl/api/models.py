"""The resource model: ``ModelService`` and ``ScalingPolicy`` as pydantic v2 models.

These classes are the single source of truth for the user-facing documents: the CRDs
in ``deploy/crds/`` are generated from their JSON schema (``servectl.api.crd``), the
field reference in docs/resource-model.md is generated from the same schema, and the
pure engine receives ``AutoscalingSpec.to_config()``, never these models.

Documents use camelCase names (``minReplicas``); Python code may use the snake_case
field names. Unknown fields are rejected so a typo such as ``targetUtilisation`` fails
loudly instead of silently falling back to a default.

Cross-field rules raise ``PydanticCustomError`` carrying ``field`` (a loc relative to the
model that raised it) and ``fix`` in the error context; ``servectl.api.validation`` turns
those into ``SpecError`` issues with exact paths. Load documents through
``servectl.api.validation``, which also compiles CEL policies.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from servectl.api import conditions
from servectl.autoscaling import config

GROUP = "servectl.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# ----------------------------------------------------------------------------- scalars

# Strict numbers: the API server types these fields as integer/number, so the string
# "3" or the boolean true must fail here too, or a deploy would accept a file
# that `kubectl apply` rejects.
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]  # strict float still takes integers
Bool = Annotated[bool, Strict()]

# Kubernetes names. A ModelService name must be a DNS-1035 label because it names the
# per-revision Services; the shorter limit leaves room for the "-v<version>" suffix of
# each revision (a 10-digit timestamp version included) within the 63-character limit.
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MODEL_SERVICE_NAME_MAX = 50
TF_MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NO_WHITESPACE = r"^\S+$"
# Go-style durations as Argo and Kubernetes write them: "30s", "5m", "1h30m", "250ms".
DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
HTTP_HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
CEL_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A non-negative Kubernetes resource quantity ("2", "500m", "4Gi", "1.5", "1e3").
QUANTITY = (
    r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

_QUANTITY_RE = re.compile(QUANTITY)
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_SUFFIX_FACTORS: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_quantity(quantity: int | str) -> Decimal:
    """The value of a Kubernetes quantity: "500m" -> 0.5, "4Gi" -> 4294967296."""
    if isinstance(quantity, int):
        return Decimal(quantity)
    match = _QUANTITY_RE.match(quantity)
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    number, suffix = match.group(1), match.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number + suffix)
    return Decimal(number) * _SUFFIX_FACTORS[suffix]


def parse_duration(duration: str) -> float:
    """Seconds in a Go-style duration: "30s" -> 30.0, "1h30m" -> 5400.0."""
    if re.fullmatch(DURATION, duration) is None:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(
        float(amount) * _DURATION_FACTORS[unit]
        for amount, unit in _DURATION_PART_RE.findall(duration)
    )


def _check_quantity(value: object) -> object:
    # Runs before the int | str union so every bad quantity gets one clear error
    # instead of one per union member.
    example = 'e.g. "2", "500m" or "4Gi"'
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PydanticCustomError(
            "quantity",
            "expected a resource quantity, got {got}",
            {"got": repr(value), "fix": f"write a quantity, {example}"},
        )
    if isinstance(value, float):
        if value.is_integer() and value >= 0:
            return int(value)
        # The CRD types quantities as int-or-string (as Kubernetes does), so a bare
        # 0.5 would be refused by the API server; refuse it here as well.
        raise PydanticCustomError(
            "quantity",
            "a fractional quantity must be a string, got {got}",
            {"got": repr(value), "fix": f'quote it ("{value:g}") or use millicores, {example}'},
        )
    if isinstance(value, int):
        if value < 0:
            raise PydanticCustomError(
                "quantity",
                "a quantity cannot be negative, got {got}",
                {"got": str(value), "fix": f"use a positive quantity, {example}"},
            )
        return value
    if _QUANTITY_RE.match(value) is None:
        raise PydanticCustomError(
            "quantity",
            "not a Kubernetes quantity: {got}",
            {"got": repr(value), "fix": f"use a number with an optional suffix, {example}"},
        )
    return value


Quantity = Annotated[
    int | str,
    BeforeValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


def cel_rules(*rules: tuple[str, str]) -> ConfigDict:
    """Repeat a model's cross-field rules as CRD ``x-kubernetes-validations``.

    Each rule is (CEL expression over ``self``, message). The API server then refuses
    what ``servectl.api.validation`` refuses, for ``kubectl apply`` users too;
    tests/unit/api/test_crds.py checks the two agree.
    """
    return ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": rule, "message": message} for rule, message in rules
            ]
        }
    )


def spec_error(message: str, *, field: tuple[str | int, ...] = (), fix: str) -> PydanticCustomError:
    """A cross-field error that ``validation`` renders at ``<model's path>.<field>``."""
    return PydanticCustomError(
        "spec", "{message}", {"message": message, "field": field, "fix": fix}
    )


# ----------------------------------------------------------------------------- bases


class SpecModel(BaseModel):
    """Base of everything a user writes: camelCase, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )


class StatusModel(BaseModel):
    """Base of status: written by the controller, read by the CLI.

    Unknown fields are ignored, not rejected, so an older CLI can still read the status
    a newer controller wrote.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,
    )


# ----------------------------------------------------------------------------- metadata


class ObjectMeta(SpecModel):
    """The subset of Kubernetes ObjectMeta servectl reads; server-set fields round-trip."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Object name, unique in its namespace.",
        examples=["resnet"],
    )
    namespace: str = Field(default="default", min_length=1, max_length=63, pattern=DNS1123_LABEL)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # Set by the API server. Declared so objects read back from a cluster validate,
    # while a misspelled field a user writes is still rejected.
    uid: str | None = None
    resource_version: str | None = None
    generation: Int | None = None
    creation_timestamp: AwareDatetime | None = None
    deletion_timestamp: AwareDatetime | None = None
    generate_name: str | None = None
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)
    managed_fields: list[dict[str, Any]] = Field(default_factory=list)


class ModelServiceMeta(ObjectMeta):
    """ObjectMeta whose name can also name the per-revision Services and Deployments."""

    name: str = Field(
        min_length=1,
        max_length=MODEL_SERVICE_NAME_MAX,
        pattern=DNS1035_LABEL,
        description="Object name; prefixes each revision's Deployment and Service.",
        examples=["resnet"],
    )


# ----------------------------------------------------------------------------- spec.model


class ModelRef(SpecModel):
    """Which exported TensorFlow model to serve (TF Serving layout)."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=TF_MODEL_NAME,
        description="Model name as TF Serving exposes it (/v1/models/<name>).",
        examples=["resnet"],
    )
    base_path: str = Field(
        min_length=1,
        pattern=NO_WHITESPACE,
        description="Directory holding one numbered subdirectory per version "
        "(<basePath>/<version>/saved_model.pb); s3://, gs://, or a local path.",
        examples=["s3://models/resnet"],
    )
    version: Int | None = Field(
        default=None,
        ge=0,
        description="Version to serve; omitted means the latest version under basePath.",
        examples=[3],
    )


# ----------------------------------------------------------------------------- spec.runtime


class Resources(SpecModel):
    """Per-replica resource requests (the denominators of utilization signals)."""

    cpu: Quantity = Field(
        default="1", description='CPU request per replica, e.g. "2" or "500m".', examples=["2"]
    )
    memory: Quantity = Field(
        default="2Gi", description="Memory request per replica, e.g. 4Gi.", examples=["4Gi"]
    )
    gpu: Int = Field(default=0, ge=0, description="Whole GPUs per replica.")

    @model_validator(mode="after")
    def _positive_requests(self) -> Self:
        # CPU utilization is usage over request: a zero request makes it undefined.
        for name in ("cpu", "memory"):
            if parse_quantity(getattr(self, name)) <= 0:
                raise spec_error(
                    f"{name} request must be greater than zero",
                    field=(name,),
                    fix='set a positive quantity, e.g. cpu: "1", memory: 2Gi',
                )
        return self

    def cpu_cores(self) -> float:
        """The CPU request in cores ("500m" -> 0.5)."""
        return float(parse_quantity(self.cpu))

    def memory_bytes(self) -> int:
        """The memory request in bytes ("4Gi" -> 4294967296)."""
        return int(parse_quantity(self.memory))


class Batching(SpecModel):
    """TF Serving server-side batching (--enable_batching)."""

    max_batch_size: Int = Field(ge=1, description="Largest batch TF Serving forms.", examples=[32])
    batch_timeout_micros: Int = Field(
        ge=0, description="How long a batch waits to fill, in microseconds.", examples=[2000]
    )


class RuntimeSpec(SpecModel):
    """How each replica runs."""

    image: str = Field(
        default="tensorflow/serving:2.19.0",
        min_length=1,
        pattern=NO_WHITESPACE,
        description="Model server image (in the cluster).",
    )
    resources: Resources = Field(default_factory=Resources, description="Requests per replica.")
    batching: Batching | None = Field(default=None, description="Omitted: batching off.")


# ----------------------------------------------------------------------------- spec.autoscaling

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


def to_snake(camel: str) -> str:
    """targetMs -> target_ms (the inverse of the alias generator for our names)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


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


class UnknownPolicyError(LookupError):
    """``policy.ref`` names a ScalingPolicy that is not in the library given."""


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
        )

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


# ----------------------------------------------------------------------------- spec.rollout
# The rules here teach the strategies' shapes (docs/resource-model.md, "Rollouts");
# servectl.rollout runs them.


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

    replicas: Int | None = Field(default=None, ge=0, description="Exactly this many replicas.")
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


def _builtin_metric_rule(field: str) -> str:
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
            "has(self.query) || " + _builtin_metric_rule("metric"),
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
            "!has(self.winnerMetric) || " + _builtin_metric_rule("winnerMetric"),
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
        "blueGreen: pause and analysis only (against the preview); abTest: none.",
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


# ----------------------------------------------------------------------------- ModelService


class ModelServiceSpec(SpecModel):
    """What to serve, how to scale it, and how to roll out new versions."""

    model_config = cel_rules(
        (
            "!has(self.autoscaling) || !has(self.autoscaling.signals)"
            " || !self.autoscaling.signals.exists(s, s.type == 'gpu')"
            " || (has(self.runtime) && has(self.runtime.resources)"
            " && has(self.runtime.resources.gpu) && self.runtime.resources.gpu > 0)",
            "a gpu signal needs runtime.resources.gpu >= 1",
        ),
        (
            "!has(self.rollout) || !has(self.rollout.surgeBudget)"
            " || !has(self.rollout.surgeBudget.gpus) || !has(self.runtime)"
            " || !has(self.runtime.resources) || !has(self.runtime.resources.gpu)"
            " || self.rollout.surgeBudget.gpus >= self.runtime.resources.gpu",
            "surgeBudget.gpus must fit at least one replica's GPUs",
        ),
    )

    model: ModelRef = Field(description="The model to serve.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="How replicas run.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        description=(
            f"Omitted: {config.AutoscalingConfig.min_replicas}-"
            f"{config.AutoscalingConfig.max_replicas} replicas on the default signals."
        ),
    )
    rollout: RolloutSpec | None = Field(
        default=None, description="How new versions roll out: strategy, steps, analysis."
    )

    @model_validator(mode="after")
    def _gpu_signal_needs_gpu(self) -> Self:
        for index, signal in enumerate(self.autoscaling.signals):
            if signal.type is config.SignalType.GPU and self.runtime.resources.gpu == 0:
                raise spec_error(
                    "a gpu signal needs replicas with a GPU",
                    field=("autoscaling", "signals", index, "type"),
                    fix="set runtime.resources.gpu >= 1, or use another signal type",
                )
        return self

    @model_validator(mode="after")
    def _surge_fits_a_replica(self) -> Self:
        budget = None if self.rollout is None else self.rollout.surge_budget
        per_replica = self.runtime.resources.gpu
        if budget is not None and budget.gpus is not None and budget.gpus < per_replica:
            raise spec_error(
                f"surgeBudget.gpus ({budget.gpus}) cannot fit one new replica, which needs "
                f"{per_replica} GPU(s)",
                field=("rollout", "surgeBudget", "gpus"),
                fix=f"set gpus >= {per_replica} (runtime.resources.gpu), or leave gpus out "
                "to limit the surge by replicas only",
            )
        return self


class ModelState(enum.StrEnum):
    """TF Serving's ModelVersionStatus.State."""

    UNKNOWN = "UNKNOWN"
    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"


class RevisionStatus(StatusModel):
    """One revision (model version) being served."""

    name: str = Field(description="Revision name, <service>-v<version>.")
    version: Int = Field(description="Model version it serves.")
    weight: Int = Field(default=0, ge=0, le=100, description="Percent of traffic it receives.")
    desired_replicas: Int = Field(default=0, ge=0, description="Replicas the planner asks for.")
    ready_replicas: Int = Field(default=0, ge=0, description="Replicas serving now.")
    model_state: ModelState = Field(
        default=ModelState.UNKNOWN, description="TF Serving's state of the version."
    )


class Verdict(enum.StrEnum):
    """An analysis verdict (Argo Rollouts' AnalysisPhase names)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class AnalysisVerdict(StatusModel):
    """The outcome of one analysis step."""

    step: Int = Field(ge=0, description="Index of the analysis step.")
    verdict: Verdict = Field(description="Pending, Running, Successful, Failed, ...")
    message: str = Field(default="", description="Which check decided, with values.")
    samples: Int | None = Field(default=None, ge=0, description="Requests judged.")
    time: AwareDatetime | None = Field(default=None, description="When it was reached.")


class RolloutPhase(enum.StrEnum):
    """Where a rollout stands (``status.rollout.phase``).

    - ``Idle``: no rollout: one revision serves everything.
    - ``Progressing``: the steps are running (capacity, weights, analysis).
    - ``Paused``: waiting for a person (a ``pause`` step without seconds, a blueGreen
      preview without autoPromote, or an analysis that ran out of extensions);
      a person's resume or promote continues.
    - ``Completed``: the new revision serves everything; the old one is being removed.
    - ``Aborted``: a check failed or a person aborted; traffic is back on the stable
      revision. Changing the version starts a new rollout.
    - ``Degraded``: the rollout cannot progress (the new revision's capacity did not
      become ready within progressDeadlineSeconds); stable keeps its traffic.
    """

    IDLE = "Idle"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    COMPLETED = "Completed"
    ABORTED = "Aborted"
    DEGRADED = "Degraded"


class RolloutStatus(StatusModel):
    """Where the rollout stands; enough to resume after a restart."""

    phase: RolloutPhase = Field(
        default=RolloutPhase.IDLE,
        description="Idle, Progressing, Paused, Completed, Aborted or Degraded.",
    )
    step: Int = Field(default=0, ge=0, description="Index of the current step.")
    stable_version: Int | None = Field(
        default=None, ge=0, description="Model version of the stable revision."
    )
    canary_version: Int | None = Field(
        default=None,
        ge=0,
        description="Model version being rolled out (canary, preview or B); absent when Idle.",
    )
    message: str = Field(default="", description="What the rollout is doing or waiting for.")
    winner: Literal["A", "B"] | None = Field(
        default=None, description="abTest: the winning variant, A (stable) or B (new)."
    )
    verdicts: list[AnalysisVerdict] = Field(default_factory=list, description="Per step.")
    state: dict[str, Any] = Field(
        default_factory=dict,
        description="The rollout state machine's persisted state (free-form).",
    )


class AutoscalingStatus(StatusModel):
    """The last autoscaling decision and the policy's state."""

    desired_replicas: Int | None = Field(default=None, ge=0, description="Total replicas wanted.")
    decided_by: str | None = Field(default=None, description="Winning signal, or the policy.")
    reason: str | None = Field(default=None, description="Reason code of the last decision.")
    message: str | None = Field(default=None, description="The decision in words.")
    last_scale_time: AwareDatetime | None = Field(
        default=None, description="When the replica count last changed."
    )
    policy_state: dict[str, Any] = Field(
        default_factory=dict, description="The policy's persisted state (free-form)."
    )


class ConditionType(enum.StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    METRICS_AVAILABLE = "MetricsAvailable"
    SCALING_LIMITED = "ScalingLimited"


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StatusModel):
    """A Kubernetes-style condition."""

    type: ConditionType = Field(description="Ready, Progressing, Degraded, MetricsAvailable, ...")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason code.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: AwareDatetime | None = Field(
        default=None, description="When status last changed."
    )
    observed_generation: Int | None = Field(
        default=None, description="metadata.generation the condition was computed for."
    )


class ModelServiceStatus(StatusModel):
    """Observed state, written by the controller once per reconcile."""

    observed_generation: Int | None = Field(
        default=None, description="metadata.generation this status reflects."
    )
    revisions: list[RevisionStatus] = Field(default_factory=list, description="Stable first.")
    rollout: RolloutStatus | None = Field(default=None, description="Rollout progress.")
    autoscaling: AutoscalingStatus | None = Field(default=None, description="Last decision.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, MetricsAvailable, ScalingLimited.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )

    def condition(self, condition_type: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is condition_type), None)


class ModelService(SpecModel):
    """A TensorFlow model served, autoscaled and rolled out by servectl."""

    api_version: Literal["servectl.io/v1alpha1"] = "servectl.io/v1alpha1"
    kind: Literal["ModelService"] = "ModelService"
    metadata: ModelServiceMeta
    spec: ModelServiceSpec
    status: ModelServiceStatus | None = None


# ----------------------------------------------------------------------------- ScalingPolicy


class ScalingPolicySpec(SpecModel):
    """A reusable CEL policy, referenced from ModelServices by name."""

    description: str = Field(min_length=1, description="What the policy does, in one line.")
    cel: str = Field(
        min_length=1, description="CEL expression returning replicas or {replicas, reason}."
    )
    params: dict[Annotated[str, Field(pattern=CEL_IDENTIFIER)], Number] = Field(
        default_factory=dict, description="Default values for params.* in the expression."
    )


class ScalingPolicy(SpecModel):
    """A named custom scaling policy."""

    api_version: Literal["servectl.io/v1alpha1"] = "servectl.io/v1alpha1"
    kind: Literal["ScalingPolicy"] = "ScalingPolicy"
    metadata: ObjectMeta
    spec: ScalingPolicySpec


Resource = ModelService | ScalingPolicy
