"""Request metrics with TF Serving's names, exposed in its Prometheus text format.

``--monitoring_config_file`` is a text-proto ``MonitoringConfig``::

    prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }

When enabled, the REST port serves the metrics at that path (TF Serving's default path
when ``path`` is empty). Every front end calls :meth:`ServingMetrics.record` once per
request; the page has the two series servectl's queries read
(:mod:`servectl.metrics.names`):

- ``:tensorflow:serving:request_count{model_name,status}``: a counter printed without
  ``_total`` (status is the canonical code name: ``OK``, ``INVALID_ARGUMENT``, ...);
- ``:tensorflow:serving:request_latency{model_name,API,entrypoint}``: a histogram in
  microseconds over TF Serving's 33 exponential bounds plus ``+Inf``.

The exposition is written here, following TF Serving's ``prometheus_exporter.cc``: a
``# TYPE`` line per metric (no ``# HELP``), bucket bounds and sums printed as absl's
``StrCat(double)`` does (``%.6g``), and TensorFlow's bucket rule (a value goes to the first
bucket whose bound is strictly greater; ``upper_bound``).
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from pathlib import Path

from servectl.metrics.names import TFS_LATENCY_BOUNDS_US, TFS_REQUEST_COUNT, TFS_REQUEST_LATENCY
from servectl.modelserver.errors import invalid_argument

DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Entry points and API names (the ``entrypoint`` and ``API`` labels).
ENTRYPOINT_REST = "REST"
ENTRYPOINT_GRPC = "GRPC"
API_PREDICT = "predict"
API_CLASSIFY = "classify"
API_REGRESS = "regress"


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class MonitoringConfig:
    """The part of TF Serving's MonitoringConfig that is served: Prometheus on or off."""

    prometheus_enabled: bool = False
    prometheus_path: str = DEFAULT_PROMETHEUS_PATH


def _monitoring_config_class() -> type:
    """``tensorflow.serving.MonitoringConfig``, built from its two-message schema.

    The pip package ``tensorflow-serving-api`` does not ship ``monitoring_config_pb2``,
    so the schema (``monitoring_config.proto``) is declared here in a private pool and
    parsed with protobuf's own text format parser.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(
        name="servectl/tensorflow_serving/monitoring_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
    )
    opt = descriptor_pb2.FieldDescriptorProto
    prom = fdp.message_type.add(name="PrometheusConfig")
    prom.field.add(name="enable", number=1, type=opt.TYPE_BOOL, label=opt.LABEL_OPTIONAL)
    prom.field.add(name="path", number=2, type=opt.TYPE_STRING, label=opt.LABEL_OPTIONAL)
    mon = fdp.message_type.add(name="MonitoringConfig")
    mon.field.add(
        name="prometheus_config",
        number=1,
        type=opt.TYPE_MESSAGE,
        label=opt.LABEL_OPTIONAL,
        type_name=".tensorflow.serving.PrometheusConfig",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls: type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig")
    )
    return cls


def parse_monitoring_config_text(text: str) -> MonitoringConfig:
    from google.protobuf import text_format

    message = _monitoring_config_class()()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise invalid_argument(f"Invalid MonitoringConfig text proto: {exc}") from exc
    prom = message.prometheus_config
    path = prom.path or DEFAULT_PROMETHEUS_PATH
    if not path.startswith("/"):
        raise invalid_argument(f"prometheus_config.path must start with '/': {path!r}")
    return MonitoringConfig(bool(prom.enable), path)


def parse_monitoring_config_file(path: str) -> MonitoringConfig:
    return parse_monitoring_config_text(Path(path).read_text())


# --------------------------------------------------------------------------- metrics


def _g(value: float) -> str:
    """A double as absl::StrCat prints it (six significant digits)."""
    return f"{value:.6g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


class _Histogram:
    __slots__ = ("buckets", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.sum = 0.0


class ServingMetrics:
    """Thread-safe request counters and latency histograms; ``exposition()`` renders them."""

    COUNT_LABELS = ("model_name", "status")
    LATENCY_LABELS = ("model_name", "API", "entrypoint")
    #: Distinct model names that are not served and still get their own series; past
    #: this, requests naming yet another unknown model are counted under UNKNOWN_MODEL,
    #: so a client inventing names cannot grow the page (and the server) without bound.
    MAX_UNSERVED_NAMES = 64
    UNKNOWN_MODEL = "__unknown__"

    def __init__(self, bounds_us: tuple[float, ...] = TFS_LATENCY_BOUNDS_US) -> None:
        self._bounds = tuple(bounds_us)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._latency: dict[tuple[str, str, str], _Histogram] = {}
        self._unserved: set[str] = set()

    def record(
        self,
        model_name: str,
        api: str,
        entrypoint: str,
        status_code_name: str,
        latency_us: float,
        *,
        served: bool = True,
    ) -> None:
        """One finished request: count it by status and add its latency (µs).

        ``served`` False: the name is no model the server has (see MAX_UNSERVED_NAMES).
        """
        index = bisect.bisect_right(self._bounds, latency_us)
        with self._lock:
            if not served and model_name not in self._unserved:
                if len(self._unserved) < self.MAX_UNSERVED_NAMES:
                    self._unserved.add(model_name)
                else:
                    model_name = self.UNKNOWN_MODEL
            key = (model_name, status_code_name)
            self._counts[key] = self._counts.get(key, 0) + 1
            hist = self._latency.get((model_name, api, entrypoint))
            if hist is None:
                hist = _Histogram(len(self._bounds) + 1)
                self._latency[(model_name, api, entrypoint)] = hist
            hist.buckets[index] += 1
            hist.sum += latency_us

    def exposition(self) -> str:
        """The Prometheus text page, as TF Serving's exporter writes it."""
        with self._lock:
            counts = sorted(self._counts.items())
            latency = sorted((k, list(h.buckets), h.sum) for k, h in self._latency.items())
        lines = [f"# TYPE {TFS_REQUEST_COUNT} counter"]
        for key, count in counts:
            lines.append(f"{TFS_REQUEST_COUNT}{{{_labels(self.COUNT_LABELS, key)}}} {count}")
        lines.append(f"# TYPE {TFS_REQUEST_LATENCY} histogram")
        for lkey, buckets, total in latency:
            labels = _labels(self.LATENCY_LABELS, lkey)
            cumulative = 0
            for i, n in enumerate(buckets):
                cumulative += n
                le = _g(self._bounds[i]) if i < len(self._bounds) else "+Inf"
                lines.append(f'{TFS_REQUEST_LATENCY}_bucket{{{labels},le="{le}"}} {cumulative}')
            lines.append(f"{TFS_REQUEST_LATENCY}_sum{{{labels}}} {_g(total)}")
            lines.append(f"{TFS_REQUEST_LATENCY}_count{{{labels}}} {cumulative}")
        return "\n".join(lines) + "\n"


__all__ = [
    "API_CLASSIFY",
    "API_PREDICT",
    "API_REGRESS",
    "CONTENT_TYPE",
    "DEFAULT_PROMETHEUS_PATH",
    "ENTRYPOINT_GRPC",
    "ENTRYPOINT_REST",
    "MonitoringConfig",
    "ServingMetrics",
    "metrics_for_flags",
    "parse_monitoring_config_file",
    "parse_monitoring_config_text",
]


def metrics_for_flags(monitoring_config_file: str) -> tuple[ServingMetrics, str | None]:
    """The server's shared metrics and the REST path serving them (None: not served)."""
    path = None
    if monitoring_config_file:
        config = parse_monitoring_config_file(monitoring_config_file)
        if config.prometheus_enabled:
            path = config.prometheus_path
    return ServingMetrics(), path
