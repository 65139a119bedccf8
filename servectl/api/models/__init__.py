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

Use the names from here (``from servectl.api import models`` then ``models.RolloutSpec``);
the modules behind them are private and follow the document's shape, lowest first:

    common         API group/version, strict scalars, patterns, quantities and durations,
                   cel_rules / spec_error, the SpecModel and StatusModel bases
    meta           metadata (ObjectMeta, ModelServiceMeta)
    runtime        spec.model and spec.runtime (ModelRef, Resources, Batching, RuntimeSpec)
    pod            spec.runtime.pod (PodOptions: Kubernetes pod fields servectl passes on)
    autoscaling    spec.autoscaling (Signal, PolicySpec, BehaviorSpec, StandbySpec,
                   AutoscalingSpec, ResolvedPolicy)
    analysis       spec.rollout.analysis (AnalysisCheck, AnalysisSpec, StepAnalysis) and
                   the built-in analysis metrics
    rollout        spec.rollout (RolloutStrategy, RolloutStep, AbTestSpec, BlueGreenSpec,
                   SurgeBudget, RolloutSpec)
    routing        spec.routing (RoutingSpec: the routes' hostnames)
    status         status (RevisionStatus, RolloutStatus, AutoscalingStatus, Condition,
                   ModelServiceStatus) and its enums (Verdict, RolloutPhase, ...)
    scalingpolicy  the ScalingPolicy document
    modelservice   the ModelService document (ModelServiceSpec, ModelService) and Resource
"""

from __future__ import annotations

from servectl.api.models.analysis import (
    BUILTIN_ANALYSIS_METRICS,
    BUILTIN_METRICS_TEXT,
    METRIC_NAME_MAX,
    QUERY_MAX,
    AnalysisCheck,
    AnalysisSpec,
    StepAnalysis,
    is_builtin_metric,
    latency_metric_percentile,
)
from servectl.api.models.autoscaling import (
    SIGNAL_TARGET_FIELDS,
    AutoscalingSpec,
    BehaviorSpec,
    PolicySpec,
    RatePolicySpec,
    ResolvedPolicy,
    ScalingRulesSpec,
    Signal,
    StandbySpec,
    describe_rules,
)
from servectl.api.models.common import (
    API_VERSION,
    CEL_IDENTIFIER,
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    DURATION,
    GROUP,
    HTTP_HEADER_NAME,
    MODEL_SERVICE_NAME_MAX,
    NO_WHITESPACE,
    QUANTITY,
    TF_MODEL_NAME,
    VERSION,
    Bool,
    Int,
    Number,
    Quantity,
    SpecModel,
    StatusModel,
    cel_rules,
    parse_duration,
    parse_quantity,
    spec_error,
    to_snake,
)
from servectl.api.models.meta import (
    ModelServiceMeta,
    ObjectMeta,
)
from servectl.api.models.modelservice import (
    ModelService,
    ModelServiceSpec,
    Resource,
)
from servectl.api.models.pod import PodOptions
from servectl.api.models.rollout import (
    AbTestSpec,
    BlueGreenSpec,
    CookieMatch,
    HeaderMatch,
    PauseStep,
    RolloutSpec,
    RolloutStep,
    RolloutStrategy,
    SetCanaryScale,
    SurgeBudget,
    TrafficMatch,
)
from servectl.api.models.routing import (
    HOSTNAME,
    RoutingSpec,
    shared_hostname,
)
from servectl.api.models.runtime import (
    Batching,
    ModelRef,
    Resources,
    RuntimeSpec,
)
from servectl.api.models.scalingpolicy import (
    ScalingPolicy,
    ScalingPolicySpec,
)
from servectl.api.models.status import (
    AnalysisVerdict,
    AutoscalingStatus,
    Condition,
    ConditionStatus,
    ConditionType,
    ModelServiceStatus,
    ModelState,
    RevisionStatus,
    RolloutPhase,
    RolloutStatus,
    Verdict,
)
from servectl.autoscaling.policy import UnknownPolicyError

__all__ = [
    "API_VERSION",
    "BUILTIN_ANALYSIS_METRICS",
    "BUILTIN_METRICS_TEXT",
    "CEL_IDENTIFIER",
    "DNS1035_LABEL",
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "DURATION",
    "GROUP",
    "HOSTNAME",
    "HTTP_HEADER_NAME",
    "METRIC_NAME_MAX",
    "MODEL_SERVICE_NAME_MAX",
    "NO_WHITESPACE",
    "QUANTITY",
    "QUERY_MAX",
    "SIGNAL_TARGET_FIELDS",
    "TF_MODEL_NAME",
    "VERSION",
    "AbTestSpec",
    "AnalysisCheck",
    "AnalysisSpec",
    "AnalysisVerdict",
    "AutoscalingSpec",
    "AutoscalingStatus",
    "Batching",
    "BehaviorSpec",
    "BlueGreenSpec",
    "Bool",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "CookieMatch",
    "HeaderMatch",
    "Int",
    "ModelRef",
    "ModelService",
    "ModelServiceMeta",
    "ModelServiceSpec",
    "ModelServiceStatus",
    "ModelState",
    "Number",
    "ObjectMeta",
    "PauseStep",
    "PodOptions",
    "PolicySpec",
    "Quantity",
    "RatePolicySpec",
    "ResolvedPolicy",
    "Resource",
    "Resources",
    "RevisionStatus",
    "RolloutPhase",
    "RolloutSpec",
    "RolloutStatus",
    "RolloutStep",
    "RolloutStrategy",
    "RoutingSpec",
    "RuntimeSpec",
    "ScalingPolicy",
    "ScalingPolicySpec",
    "ScalingRulesSpec",
    "SetCanaryScale",
    "Signal",
    "SpecModel",
    "StandbySpec",
    "StatusModel",
    "StepAnalysis",
    "SurgeBudget",
    "TrafficMatch",
    "UnknownPolicyError",
    "Verdict",
    "cel_rules",
    "describe_rules",
    "is_builtin_metric",
    "latency_metric_percentile",
    "parse_duration",
    "parse_quantity",
    "shared_hostname",
    "spec_error",
    "to_snake",
]
