"""Prometheus text exposition shaped like the sources servectl reads, and a reader for it.

Builders return the text a real exporter would print for the samples you give them, so a
test can feed servectl's queries, recording rules or a real Prometheus exactly what it
will meet in a cluster, with no cluster. Each follows what its source really prints
(servectl/metrics/names.py names the metrics):

- :func:`cadvisor` (kubelet ``/metrics/cadvisor``): HELP/TYPE, label names sorted
  (client_golang), one series per container plus the pod-level cgroup (``container=""``,
  no image/name) and the pause container (``container="POD"``); optional millisecond
  timestamps, as the kubelet really prints them.
- :func:`kube_state_metrics`: KSM's own label order (namespace, pod, uid, ...), cpu *and*
  memory requests (so queries must select ``resource="cpu"``), and ``kube_pod_labels``.
- :func:`dcgm` (dcgm-exporter): integer gauges, the pod labels only for a device held by a
  pod.
- :func:`tf_serving` (TF Serving's ``/monitoring/prometheus/metrics``): TYPE lines only
  (its exporter prints no HELP), counters without ``_total``, integer counts, and ``le`` /
  ``_sum`` printed with ``absl::StrCat(double)``, i.e. six significant digits like C's
  ``%.6g``: ``le="10"``, ``"32.4"``, ``"104.976"``, ``"1102"``, ``"1.27482e+06"``;
  :func:`tfs_le` gives the string for a bound. TF's histogram puts a value equal to a
  bound into the *next* bucket (bounds are exclusive), which :func:`latency_bucket` copies.

Numbers from Go exporters are formatted like Go's ``strconv.FormatFloat(v, 'g', -1, 64)``
(shortest digits, exponent from 1e+06 on: ``2.147483648e+09``), see :func:`go_float`.

To read exposition back (what an exporter under test serves), :func:`parse_samples`
gives every sample keyed by name and label set; :func:`samples_named` and
:func:`label_set` pick from it.

Example::

    from servectl.testing import exposition

    text = exposition.tf_serving(
        "resnet", {"OK": 90, "INTERNAL": 10},
        exposition.LatencyHistogram.of([25_000.0] * 100),
    )
    samples = exposition.parse_samples(text)

No I/O and no clock here: :mod:`servectl.testing.exporters` serves this text over HTTP.
"""

from __future__ import annotations

import bisect
import decimal
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from servectl.metrics import names

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The exposition format's HTTP Content-Type (text format 0.0.4)."""


# --- number and label formatting ----------------------------------------------------------


def go_float(value: float) -> str:
    """``strconv.FormatFloat(value, 'g', -1, 64)`` as client_golang and KSM print samples."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    exact = decimal.Decimal(repr(abs(value))).normalize()
    exponent = exact.adjusted()
    if -4 <= exponent < 6:
        return sign + format(exact, "f")
    digits = "".join(str(d) for d in exact.as_tuple().digits)
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def six_digits(value: float) -> str:
    """``absl::StrCat(double)`` (TF Serving's ``le`` and ``_sum``): like C's ``%.6g``."""
    return format(value, ".6g")


def tfs_le(bound_us: float) -> str:
    """The ``le`` label value TF Serving prints for a bucket bound (``"+Inf"`` for inf)."""
    return "+Inf" if math.isinf(bound_us) else six_digits(bound_us)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: Sequence[tuple[str, str]], value: str, ts: int | None) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    line = f"{name}{{{body}}} {value}" if body else f"{name} {value}"
    return f"{line} {ts}" if ts is not None else line


def _family(name: str, help_text: str | None, kind: str, lines: Iterable[str]) -> list[str]:
    head = [f"# HELP {name} {help_text}"] if help_text is not None else []
    return [*head, f"# TYPE {name} {kind}", *lines]


def _text(*families: list[str]) -> str:
    return "".join(line + "\n" for family in families for line in family)


# --- cAdvisor and kube-state-metrics ------------------------------------------------------

TFS_IMAGE = "docker.io/tensorflow/serving:2.14.1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
TFS_CONTAINER = "tf-serving"
GIB = 1024**3


def pod_uid(namespace: str, name: str) -> str:
    """A stable pod UID for a namespace/name (a UUID, as Kubernetes assigns)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))


def _container_id(uid: str, container: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{uid}/{container}").hex * 2


@dataclass(frozen=True)
class ContainerSample:
    """One container of a pod at one instant: cumulative CPU seconds and its requests."""

    name: str = TFS_CONTAINER
    cpu_seconds: float = 0.0
    cpu_request_cores: float = 1.0
    memory_request_bytes: float = 2 * GIB
    image: str = TFS_IMAGE


@dataclass(frozen=True)
class PodSample:
    """One pod at one instant, the input of `cadvisor` and `kube_state_metrics`.

    ``service``/``revision`` are the pod labels servectl sets; None leaves the label off
    ``kube_pod_labels`` (a pod that is not servectl's, or a label mismatch).
    """

    name: str
    namespace: str = "default"
    service: str | None = "svc"
    revision: str | None = "v1"
    node: str = "node-1"
    containers: tuple[ContainerSample, ...] = (ContainerSample(),)
    pause_cpu_seconds: float = 0.0
    uid: str = ""

    @property
    def pod_uid(self) -> str:
        """``uid``, or a stable UUID from namespace and name (:func:`pod_uid`)."""
        return self.uid or pod_uid(self.namespace, self.name)


def cadvisor(pods: Iterable[PodSample], *, timestamp_ms: int | None = None) -> str:
    """``container_cpu_usage_seconds_total`` as the kubelet's ``/metrics/cadvisor`` prints it.

    Per pod: one series per container, the pause container (``container="POD"``) and the
    pod cgroup (``container=""``, the sum of all of them), which queries must exclude.
    """
    lines = []
    for pod in pods:
        uid = pod.pod_uid
        pod_cgroup = (
            "/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        )
        total = pod.pause_cpu_seconds + sum(c.cpu_seconds for c in pod.containers)
        # (container, image, name, id, seconds): the pod cgroup has no image and no name.
        rows = [("", "", "", pod_cgroup, total)]
        pause = ContainerSample("POD", pod.pause_cpu_seconds, image=PAUSE_IMAGE)
        for container in (pause, *pod.containers):
            cid = _container_id(uid, container.name)
            cgroup = f"{pod_cgroup}/cri-containerd-{cid}.scope"
            rows.append((container.name, container.image, cid, cgroup, container.cpu_seconds))
        for container_name, image, cid, cgroup, seconds in rows:
            labels = [
                ("container", container_name),
                ("cpu", "total"),
                ("id", cgroup),
                ("image", image),
                ("name", cid),
                ("namespace", pod.namespace),
                ("pod", pod.name),
            ]
            lines.append(_series(names.CADVISOR_CPU, labels, go_float(seconds), timestamp_ms))
    return _text(
        _family(names.CADVISOR_CPU, "Cumulative cpu time consumed in seconds.", "counter", lines)
    )


KSM_REQUESTS_HELP = (
    "The number of requested request resource by a container. It is recommended to use "
    "the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is "
    "more precise."
)


def kube_state_metrics(pods: Iterable[PodSample]) -> str:
    """``kube_pod_container_resource_requests`` (cpu and memory) and ``kube_pod_labels``.

    ``kube_pod_labels`` carries only the servectl labels, as KSM v2 does with
    ``--metric-labels-allowlist=pods=[servectl.io/service,servectl.io/revision]``.
    """
    requests, pod_labels = [], []
    for pod in pods:
        head = [("namespace", pod.namespace), ("pod", pod.name), ("uid", pod.pod_uid)]
        for container in pod.containers:
            where = [*head, ("container", container.name), ("node", pod.node)]
            for resource, unit, value in (
                ("cpu", "core", container.cpu_request_cores),
                ("memory", "byte", container.memory_request_bytes),
            ):
                if value > 0:
                    labels = [*where, ("resource", resource), ("unit", unit)]
                    requests.append(_series(names.KSM_REQUESTS, labels, go_float(value), None))
        extra = [(names.KSM_LABEL_REVISION, pod.revision), (names.KSM_LABEL_SERVICE, pod.service)]
        labels = head + [(k, v) for k, v in extra if v is not None]
        pod_labels.append(_series(names.KSM_POD_LABELS, labels, "1", None))
    return _text(
        _family(names.KSM_REQUESTS, KSM_REQUESTS_HELP, "gauge", requests),
        _family(
            names.KSM_POD_LABELS,
            "[STABLE] Kubernetes labels converted to Prometheus labels.",
            "gauge",
            pod_labels,
        ),
    )


# --- dcgm-exporter ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSample:
    """One GPU as dcgm-exporter reports it; ``pod`` is (namespace, pod, container) or None."""

    index: int
    util_percent: float = 0.0
    fb_used_mib: float = 0.0
    pod: tuple[str, str, str] | None = None
    hostname: str = "node-1"
    model_name: str = "NVIDIA A100-SXM4-40GB"
    driver_version: str = "535.104.05"
    uuid: str = ""

    @property
    def gpu_uuid(self) -> str:
        """``uuid``, or a stable ``GPU-<uuid>`` from hostname and index."""
        return self.uuid or f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.hostname}/{self.index}')}"


def dcgm(devices: Iterable[GpuSample]) -> str:
    """``DCGM_FI_DEV_GPU_UTIL`` (percent) and ``DCGM_FI_DEV_FB_USED`` (MiB), integers."""
    devices = list(devices)

    def lines(value_of: Callable[[GpuSample], float], name: str) -> list[str]:
        out = []
        for gpu in devices:
            labels = [
                ("gpu", str(gpu.index)),
                ("UUID", gpu.gpu_uuid),
                ("device", f"nvidia{gpu.index}"),
                ("modelName", gpu.model_name),
                ("Hostname", gpu.hostname),
                ("DCGM_FI_DRIVER_VERSION", gpu.driver_version),
            ]
            if gpu.pod is not None:
                namespace, pod, container = gpu.pod
                labels += [("container", container), ("namespace", namespace), ("pod", pod)]
            out.append(_series(name, labels, str(round(value_of(gpu))), None))
        return out

    return _text(
        _family(
            names.DCGM_GPU_UTIL,
            "GPU utilization (in %).",
            "gauge",
            lines(lambda g: g.util_percent, names.DCGM_GPU_UTIL),
        ),
        _family(
            names.DCGM_FB_USED,
            "Framebuffer memory used (in MiB).",
            "gauge",
            lines(lambda g: g.fb_used_mib, names.DCGM_FB_USED),
        ),
    )


# --- TF Serving ---------------------------------------------------------------------------

TFS_BUCKETS = len(names.TFS_LATENCY_BOUNDS_US) + 1
"""33 bounds plus the +Inf bucket."""


def latency_bucket(value_us: float) -> int:
    """Index (0..33) of the bucket TF Serving counts ``value_us`` in; 33 is +Inf.

    TF's histogram counts bucket i for ``bound[i-1] <= v < bound[i]`` (exclusive bounds).
    """
    return bisect.bisect_right(names.TFS_LATENCY_BOUNDS_US, value_us)


@dataclass(frozen=True)
class LatencyHistogram:
    """Per-bucket (not cumulative) observation counts, 34 of them, and their sum in µs."""

    counts: tuple[int, ...] = (0,) * TFS_BUCKETS
    sum_us: float = 0.0

    def __post_init__(self) -> None:
        if len(self.counts) != TFS_BUCKETS:
            raise ValueError(f"need {TFS_BUCKETS} bucket counts, got {len(self.counts)}")

    @classmethod
    def of(cls, observations_us: Iterable[float]) -> LatencyHistogram:
        """The histogram of these latencies (µs), bucketed as TF Serving buckets them."""
        counts = [0] * TFS_BUCKETS
        total = 0.0
        for value in observations_us:
            counts[latency_bucket(value)] += 1
            total += value
        return cls(tuple(counts), total)


def tf_serving(
    model_name: str,
    request_counts_by_status: Mapping[str, int],
    latency: LatencyHistogram | None = None,
    *,
    api: str = "predict",
    entrypoint: str = "REST",
) -> str:
    """TF Serving's ``/monitoring/prometheus/metrics`` for one model.

    Only the cells that exist are printed: TF creates a status's counter cell at its first
    request, and the latency cell at the first request of that API, so a model that has
    seen no errors has no error series at all (pass only the statuses seen so far).
    """
    counts = [
        _series(
            names.TFS_REQUEST_COUNT,
            [("model_name", model_name), ("status", status)],
            str(int(count)),
            None,
        )
        for status, count in request_counts_by_status.items()
    ]
    # A loaded model always has its load counter, so a pod that has served nothing yet
    # still exposes a series (and its target is not empty).
    load = _series(
        ":tensorflow:cc:saved_model:load_attempt_count",
        [("model_path", f"/models/{model_name}/1"), ("status", "success")],
        "1",
        None,
    )
    families = [
        _family(":tensorflow:cc:saved_model:load_attempt_count", None, "counter", [load]),
        _family(names.TFS_REQUEST_COUNT, None, "counter", counts),
    ]
    if latency is not None:
        head = [("model_name", model_name), ("API", api), ("entrypoint", entrypoint)]
        lines, cumulative = [], 0
        bounds = [*names.TFS_LATENCY_BOUNDS_US, math.inf]
        for bound, count in zip(bounds, latency.counts, strict=True):
            cumulative += int(count)
            labels = [*head, ("le", tfs_le(bound))]
            lines.append(
                _series(f"{names.TFS_REQUEST_LATENCY}_bucket", labels, str(cumulative), None)
            )
        lines.append(
            _series(f"{names.TFS_REQUEST_LATENCY}_sum", head, six_digits(latency.sum_us), None)
        )
        lines.append(_series(f"{names.TFS_REQUEST_LATENCY}_count", head, str(cumulative), None))
        families.append(_family(names.TFS_REQUEST_LATENCY, None, "histogram", lines))
    return _text(*families)


# --- reading exposition -------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""Sample values keyed by (sample name, label set); a histogram's ``_bucket``, ``_sum``
and ``_count`` samples are separate names."""


def parse_samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by (sample name, labels), as prometheus_client's
    parser reads it: ValueError for text it rejects, and a counter's samples are named
    with ``_total`` even when printed without (TF Serving's ``request_count`` reads as
    ``request_count_total``)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def samples_named(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples called ``name``, keyed by label set (see :func:`label_set`)."""
    return {labels: value for (n, labels), value in samples.items() if n == name}


def label_set(**labels: str) -> frozenset[tuple[str, str]]:
    """A label set as :func:`parse_samples` keys it: ``label_set(pod="a", le="+Inf")``."""
    return frozenset(labels.items())
