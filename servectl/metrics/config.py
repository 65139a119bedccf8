"""How servectl reads metrics from Prometheus: label mapping, windows, query templates.

Pure: a pydantic model and its defaults. The defaults fit a cluster running cAdvisor,
kube-state-metrics (with the servectl pod labels allowed), dcgm-exporter and TF Serving
scraped with deploy/prometheus/scrape-config.yaml, and the local runtime's exporters,
which publish the same names. docs/metrics.md documents every field.

A config file is YAML or JSON (``servectl metrics show --config FILE``)::

    rateWindow: 1m
    gpuLabels: {namespace: exported_namespace, pod: exported_pod}
    queries:
      requests: 'sum by (namespace, service, revision, status) (rate(my_requests[1m]))'
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servectl.metrics import names

# Prometheus' own duration syntax (model.ParseDuration): units largest first, each once.
_DURATION = re.compile(r"^([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class SeriesLabels(_Model):
    """Which label of a source's series holds the pod's namespace and name."""

    namespace: str = Field(default="namespace", description="Label with the pod's namespace.")
    pod: str = Field(default="pod", description="Label with the pod's name.")

    @field_validator("namespace", "pod")
    @classmethod
    def _label_name(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError(f"{value!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        return value


class ServingLabels(_Model):
    """The target labels the scrape adds to TF Serving's series (it has no version label)."""

    namespace: str = Field(default="namespace")
    service: str = Field(default="service")
    revision: str = Field(default="revision")
    pod: str = Field(default="pod")

    @field_validator("namespace", "service", "revision", "pod")
    @classmethod
    def _label_name(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError(f"{value!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        return value


class PodInfo(_Model):
    """Where the pod -> (service, revision) mapping comes from, for cAdvisor and DCGM series.

    Default: kube-state-metrics' ``kube_pod_labels``, where pod label
    ``servectl.io/revision`` appears as ``label_servectl_io_revision``.
    """

    metric: str = Field(default=names.KSM_POD_LABELS, description="Series with one sample per pod.")
    service_label: str = Field(
        default=names.KSM_LABEL_SERVICE,
        alias="serviceLabel",
        description="Its label holding the servectl service name.",
    )
    revision_label: str = Field(
        default=names.KSM_LABEL_REVISION,
        alias="revisionLabel",
        description="Its label holding the revision name.",
    )

    @field_validator("service_label", "revision_label")
    @classmethod
    def _label_name(cls, value: str) -> str:
        if not _LABEL.match(value):
            raise ValueError(f"{value!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        return value


#: The signals servectl queries, one PromQL query each per tick (docs/metrics.md), and the
#: parts each query is made of (``signal.part`` keys of ``MetricsConfig.queries``).
SIGNAL_PARTS: dict[str, tuple[str, ...]] = {
    "cpu": ("value", "total", "sample_time"),
    "cpu_requests": ("value",),
    "gpu": ("util", "memory", "sample_time"),
    "requests": ("rate", "total", "sample_time", "scraped"),
    "latency": ("rate", "count", "busy", "total", "sample_time", "scraped"),
}
SIGNALS = tuple(SIGNAL_PARTS)
PART_KEYS = tuple(f"{signal}.{part}" for signal, parts in SIGNAL_PARTS.items() for part in parts)


class MetricsConfig(_Model):
    """Everything the Prometheus source needs besides the URL."""

    rate_window: str = Field(
        default="1m",
        alias="rateWindow",
        description="PromQL range of rate(): at least 4 scrape intervals.",
    )
    timeout_seconds: float = Field(
        default=5.0, gt=0, alias="timeoutSeconds", description="Per-query HTTP timeout."
    )
    stale_after_seconds: float = Field(
        default=60.0,
        gt=0,
        alias="staleAfterSeconds",
        description="A signal whose newest sample is older than this is stale (missing).",
    )
    percentiles: tuple[float, ...] = Field(
        default=(50.0, 90.0, 95.0, 99.0),
        description="Latency percentiles computed per revision (any is computable on demand).",
    )
    latency_bounds_us: tuple[float, ...] = Field(
        default=names.TFS_LATENCY_BOUNDS_US,
        alias="latencyBoundsUs",
        description=(
            "The latency histogram's finite bucket bounds in µs (TF Serving's 33 by default); "
            "the query returns only the buckets between empty and full, the rest follow."
        ),
    )
    namespaces: tuple[str, ...] = Field(
        default=(),
        description="Only these namespaces (empty: all). Applied as a label matcher.",
    )
    cpu_labels: SeriesLabels = Field(
        default_factory=SeriesLabels, alias="cpuLabels", description="cAdvisor and KSM labels."
    )
    gpu_labels: SeriesLabels = Field(
        default_factory=SeriesLabels,
        alias="gpuLabels",
        description=(
            "dcgm-exporter's pod labels; exported_namespace/exported_pod when it is scraped "
            "through a Service without honorLabels."
        ),
    )
    pod_info: PodInfo = Field(default_factory=PodInfo, alias="podInfo")
    tf_serving_labels: ServingLabels = Field(
        default_factory=lambda: ServingLabels(),
        alias="tfServingLabels",
        description="Target labels the scrape puts on TF Serving series.",
    )
    gateway: str | None = Field(
        default=None,
        description=(
            "Optional query for the router's view: rate of requests by namespace, service, "
            "revision and code ('2xx', '5xx', ...). Requests the router refused (no capacity) "
            "never reach TF Serving, so with a gateway query the error rate is the clients' one."
        ),
    )
    queries: dict[str, str] = Field(
        default_factory=dict,
        description="Replace one part's query template (keys like cpu.value; docs/metrics.md).",
    )

    @field_validator("rate_window")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not value or not _DURATION.match(value):
            raise ValueError(
                f"{value!r} is not a PromQL duration (e.g. 30s, 1m, 1m30s: units largest first)"
            )
        if not any(int(n) for n in re.findall(r"[0-9]+", value)):
            raise ValueError(f"{value!r}: the rate window must be longer than 0")
        return value

    @field_validator("latency_bounds_us")
    @classmethod
    def _bounds(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value or any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError("must be a non-empty list of increasing bucket bounds (µs)")
        return value

    @field_validator("percentiles")
    @classmethod
    def _percentiles(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for p in value:
            if not 0 < p < 100:
                raise ValueError(f"percentile {p:g} must be between 0 and 100 (exclusive)")
        return value

    @model_validator(mode="after")
    def _known_queries(self) -> MetricsConfig:
        unknown = sorted(set(self.queries) - set(PART_KEYS))
        if unknown:
            raise ValueError(
                f"queries: unknown part(s) {', '.join(unknown)}; known: {', '.join(PART_KEYS)}"
            )
        return self

    @property
    def rate_window_seconds(self) -> float:
        """``rate_window`` in seconds."""
        units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
        pieces = re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", self.rate_window)
        return float(sum(int(n) * units[u] for n, u in pieces))


class MetricsConfigError(ValueError):
    """A metrics config document is malformed; the message names the field and the fix."""


def parse_config(doc: Any) -> MetricsConfig:
    """Validate a config document (already parsed from YAML/JSON)."""
    from pydantic import ValidationError

    if doc is None:
        return MetricsConfig()
    if not isinstance(doc, dict):
        raise MetricsConfigError("metrics config: expected a mapping (YAML object)")
    try:
        return MetricsConfig.model_validate(doc)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or "config"
            message = str(error["msg"]).removeprefix("Value error, ")  # pydantic's prefix
            lines.append(f"{where}: {message}")
        raise MetricsConfigError("; ".join(lines)) from None
