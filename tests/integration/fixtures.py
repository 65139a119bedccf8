"""Fixture exporters for the integration tests: loopback ``/metrics`` servers whose text the
test controls, builders of exposition text shaped like the real sources, and `Scenario`,
which grows per-pod cumulative counters in real time so that ``rate()`` sees steady rates.

The builders follow what each source really prints (DESIGN §6, servectl/metrics/names.py):

- cAdvisor (kubelet ``/metrics/cadvisor``): HELP/TYPE, label names sorted (client_golang),
  one series per container plus the pod-level cgroup (``container=""``, no image/name) and
  the pause container (``container="POD"``); optional millisecond timestamps, as the kubelet
  really prints them.
- kube-state-metrics: KSM's own label order (namespace, pod, uid, ...), cpu *and* memory
  requests (so queries must select ``resource="cpu"``).
- dcgm-exporter: integer gauges, the pod labels only for a device held by a pod.
- TF Serving: TYPE lines only (its exporter prints no HELP), counters without ``_total``,
  integer counts, and ``le`` / ``_sum`` printed with ``absl::StrCat(double)``, i.e. six
  significant digits like C's ``%.6g``: ``le="10"``, ``"32.4"``, ``"104.976"``, ``"1102"``,
  ``"1.27482e+06"``; `tfs_le` gives the string for a bound. TF's histogram puts a value
  equal to a bound into the *next* bucket (bounds are exclusive), which the builders copy.

Numbers from Go exporters are formatted like Go's ``strconv.FormatFloat(v, 'g', -1, 64)``
(shortest digits, exponent from 1e+06 on: ``2.147483648e+09``), see `go_float`.
"""

from __future__ import annotations

import bisect
import dataclasses
import decimal
import math
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pytest

from servectl.metrics import names
from servectl.metrics.server import INSTALL_HINT, ScrapeTarget

# --- binaries -----------------------------------------------------------------------------

REQUIRE_ENV = "SERVECTL_REQUIRE_PROMETHEUS"


def require_binary(name: str) -> str:
    """The path of ``prometheus``/``promtool``; skip the test when missing, or fail when
    ``SERVECTL_REQUIRE_PROMETHEUS=1`` (CI), with the install hint."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name} not found on PATH; {INSTALL_HINT}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


DEPLOY_PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def without_kubernetes_sd(jobs: list[dict[str, Any]], sd_file: Path) -> list[dict[str, Any]]:
    """Scrape jobs with ``kubernetes_sd_configs`` swapped for a file_sd reading ``sd_file``.

    Debian's Prometheus is built without Kubernetes discovery (its config parser rejects
    ``kubernetes_sd_configs``). Everything else, the relabelling included, stays as is,
    and ``sd_file`` can hand it the ``__meta_kubernetes_*`` labels the pod role would.
    """
    swapped = []
    for job in jobs:
        job = dict(job)
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": "1s"}]
        swapped.append(job)
    return swapped


def eventually(check: Callable[[], None], timeout_s: float = 30.0) -> None:
    """Retry ``check`` (which asserts) every 0.2 s until it passes; after ``timeout_s``
    its last AssertionError fails the test. For values that settle, like ``rate()``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


# --- the exporter -------------------------------------------------------------------------

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class FixtureExporter:
    """A threaded loopback HTTP server answering ``GET <metrics_path>`` with exposition text.

    The text is either fixed (`set_text`) or produced at every scrape (`set_source`). It
    speaks HTTP/1.0, one request per connection, so that a stopped exporter really is gone
    for Prometheus (no kept-alive connection keeps answering). `stop` then `start` comes
    back on the same port, as a restarted pod behind the same address would.
    """

    def __init__(self, text: str = "", *, metrics_path: str = "/metrics", port: int = 0):
        self.metrics_path = metrics_path
        self._text = text
        self._source: Callable[[], str] | None = None
        self._status = 200
        self._port = port
        self._lock = threading.Lock()
        self._scrapes = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # control

    def set_text(self, text: str) -> None:
        with self._lock:
            self._text, self._source = text, None

    def set_source(self, source: Callable[[], str]) -> None:
        """Call ``source()`` at every scrape for the text (e.g. counters grown to now)."""
        with self._lock:
            self._source = source

    def set_status(self, status: int) -> None:
        """Answer scrapes with this HTTP status (e.g. 500 to fail them; 200 is normal)."""
        with self._lock:
            self._status = status

    @property
    def scrape_count(self) -> int:
        """How many ``GET <metrics_path>`` it has answered (any status), over restarts."""
        with self._lock:
            return self._scrapes

    def wait_for_scrapes(self, more: int = 1, timeout_s: float = 15.0) -> None:
        """Wait until ``more`` scrapes beyond the current count have been answered."""
        target = self.scrape_count + more
        wait_until(lambda: self.scrape_count >= target, timeout_s, f"{more} scrapes of {self}")

    def current_text(self) -> str:
        with self._lock:
            source, text = self._source, self._text
        return source() if source is not None else text

    # lifecycle

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}{self.metrics_path}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def target(self, job: str, labels: Mapping[str, str] | None = None) -> ScrapeTarget:
        return ScrapeTarget(job, self.address, dict(labels or {}), self.metrics_path)

    def start(self) -> Self:
        if self._server is not None:
            return self
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != exporter.metrics_path:
                    self.send_error(404)
                    return
                with exporter._lock:
                    exporter._scrapes += 1
                    status = exporter._status
                body = exporter.current_text().encode() if status == 200 else b"failing\n"
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        server.daemon_threads = True
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"FixtureExporter({self.url}, {'running' if self.running else 'stopped'})"


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


# --- Scenario -----------------------------------------------------------------------------

JOB_CADVISOR = "kubelet"
JOB_KSM = "kube-state-metrics"
JOB_DCGM = "dcgm-exporter"
JOB_TF_SERVING = "tf-serving"
TFS_METRICS_PATH = "/monitoring/prometheus/metrics"


@dataclass(frozen=True)
class Pod:
    """A pod of a scenario: who it is, what it requests, and its rates from now on.

    Rates: ``cpu_cores`` (CPU of the model server container), ``rps`` requests per
    second of which ``error_share`` fail with ``error_status``, every request taking
    ``latency_ms`` (one value, or ``{ms: share}``). ``gpu_util_percent`` set: the pod
    holds one GPU with that duty cycle. ``serves=False``: no TF Serving target (a pod
    whose model server is not scraped).
    """

    name: str
    service: str | None = "svc"
    revision: str | None = "v1"
    namespace: str = "default"
    node: str = "node-1"
    model_name: str = "model"
    container: str = TFS_CONTAINER
    cpu_request_cores: float = 1.0
    memory_request_bytes: float = 2 * GIB
    cpu_cores: float = 0.0
    pause_cpu_cores: float = 0.0
    rps: float = 0.0
    error_share: float = 0.0
    error_status: str = "INTERNAL"
    latency_ms: float | Mapping[float, float] = 10.0
    gpu_util_percent: float | None = None
    gpu_fb_used_mib: float = 1024.0
    serves: bool = True

    def latency_shares(self) -> dict[float, float]:
        """``{latency µs: share of requests}``, shares summing to 1."""
        spread = (
            {float(self.latency_ms): 1.0}
            if isinstance(self.latency_ms, int | float)
            else dict(self.latency_ms)
        )
        total = sum(spread.values())
        if total <= 0 or any(s < 0 for s in spread.values()):
            raise ValueError(f"latency shares must be >= 0 with a positive sum: {spread}")
        return {ms * 1000.0: share / total for ms, share in spread.items()}


@dataclass
class PodCounters:
    """The cumulative counters of one pod, as floats (TF Serving prints them floored)."""

    cpu_seconds: float = 0.0
    pause_cpu_seconds: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)
    latency_buckets: list[float] | None = None
    latency_sum_us: float = 0.0


@dataclass
class _PodState:
    pod: Pod
    counters: PodCounters
    gpu_index: int | None
    exporter: FixtureExporter | None


class Scenario:
    """Pods with steady rates, published by fixture exporters shaped like the real sources.

    Counters are integrals of the rates: a scrape settles them to the clock's now, so in
    live mode (the default, real monotonic clock) every scrape sees counters that grew at
    exactly the configured rate since the last one, and ``rate()`` in Prometheus returns
    it (once it has two samples in its window). With ``live=False`` time only moves on
    `advance`, for checking the text without Prometheus.

    Exporters: one kubelet/cAdvisor, one kube-state-metrics, one dcgm-exporter for the
    whole "cluster", and one TF Serving per pod, whose target labels carry ``namespace,
    service, revision, pod`` as the cluster's scrape config adds them. `targets` lists
    them for `PrometheusServer.set_targets`.

    Example::

        with Scenario() as sc:
            sc.add_pod(Pod("a-1", service="a", revision="v1", cpu_cores=0.5))
            sc.add_pod(Pod("a-2", service="a", revision="v2", rps=20, error_share=0.05,
                           latency_ms=25))
            prometheus.set_targets(sc.targets())
            prometheus.wait_for_targets(len(sc.targets()), timeout_s=20)
            sc.update("a-2", rps=40)
    """

    def __init__(
        self,
        *,
        live: bool = True,
        cadvisor_timestamps: bool = False,
        spare_gpus: int = 0,
        gpu_hostname: str = "node-1",
    ) -> None:
        self.live = live
        self.cadvisor_timestamps = cadvisor_timestamps
        self.spare_gpus = spare_gpus
        self.gpu_hostname = gpu_hostname
        self._lock = threading.RLock()
        self._manual_now = 0.0
        self._settled_at = self._now()
        self._pods: dict[str, _PodState] = {}
        self._next_gpu = spare_gpus
        self.cadvisor_exporter = FixtureExporter(metrics_path="/metrics/cadvisor")
        self.ksm_exporter = FixtureExporter()
        self.dcgm_exporter = FixtureExporter()
        self.cadvisor_exporter.set_source(self.render_cadvisor)
        self.ksm_exporter.set_source(self.render_kube_state_metrics)
        self.dcgm_exporter.set_source(self.render_dcgm)
        self._started = False

    # clock

    def _now(self) -> float:
        return time.monotonic() if self.live else self._manual_now

    def advance(self, seconds: float) -> None:
        """Move the manual clock (``live=False`` only): counters grow by rate x seconds."""
        if self.live:
            raise RuntimeError("advance() is for live=False; a live scenario follows the clock")
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._settle()
            self._manual_now += seconds
            self._settle()

    def _settle(self) -> None:
        now = self._now()
        dt = now - self._settled_at
        self._settled_at = now
        if dt <= 0:
            return
        for state in self._pods.values():
            pod, counters = state.pod, state.counters
            counters.cpu_seconds += pod.cpu_cores * dt
            counters.pause_cpu_seconds += pod.pause_cpu_cores * dt
            if pod.rps <= 0:
                continue
            requests = pod.rps * dt
            for status, share in (
                (names.TFS_STATUS_OK, 1 - pod.error_share),
                (pod.error_status, pod.error_share),
            ):
                if share > 0:
                    counters.requests[status] = (
                        counters.requests.get(status, 0.0) + requests * share
                    )
            if counters.latency_buckets is None:
                counters.latency_buckets = [0.0] * TFS_BUCKETS
            for value_us, share in pod.latency_shares().items():
                counters.latency_buckets[latency_bucket(value_us)] += requests * share
                counters.latency_sum_us += requests * share * value_us

    # pods

    def add_pod(self, pod: Pod) -> Pod:
        """Add a pod (its counters start at zero) and, if started, its TF Serving exporter."""
        with self._lock:
            if pod.name in self._pods:
                raise ValueError(f"pod {pod.name} already exists")
            pod.latency_shares()  # validate now rather than in a scrape
            self._settle()
            gpu_index = None
            if pod.gpu_util_percent is not None:
                gpu_index, self._next_gpu = self._next_gpu, self._next_gpu + 1
            state = _PodState(pod, PodCounters(), gpu_index, None)
            self._pods[pod.name] = state
            if pod.serves:
                state.exporter = FixtureExporter(metrics_path=TFS_METRICS_PATH)
                state.exporter.set_source(lambda: self.render_tf_serving(pod.name))
                if self._started:
                    state.exporter.start()
            return pod

    def add_pods(self, *pods: Pod) -> None:
        for pod in pods:
            self.add_pod(pod)

    def update(self, name: str, **changes: Any) -> Pod:
        """Change a pod's rates (or anything else) from now on; counters keep their values."""
        with self._lock:
            self._settle()
            state = self._pods[name]
            if "name" in changes or "serves" in changes:
                raise ValueError("remove and add the pod to change its name or serves")
            state.pod = dataclasses.replace(state.pod, **changes)
            state.pod.latency_shares()
            if state.pod.gpu_util_percent is not None and state.gpu_index is None:
                state.gpu_index, self._next_gpu = self._next_gpu, self._next_gpu + 1
            return state.pod

    def remove_pod(self, name: str) -> None:
        """The pod is gone: out of cAdvisor/KSM/dcgm, and its TF Serving exporter stops."""
        with self._lock:
            self._settle()
            state = self._pods.pop(name)
        if state.exporter is not None:
            state.exporter.stop()

    def pod(self, name: str) -> Pod:
        with self._lock:
            return self._pods[name].pod

    @property
    def pods(self) -> list[Pod]:
        with self._lock:
            return [s.pod for s in self._pods.values()]

    def counters(self, name: str) -> PodCounters:
        """A copy of the pod's counters settled to now."""
        with self._lock:
            self._settle()
            c = self._pods[name].counters
            buckets = None if c.latency_buckets is None else list(c.latency_buckets)
            return PodCounters(
                c.cpu_seconds, c.pause_cpu_seconds, dict(c.requests), buckets, c.latency_sum_us
            )

    def tf_serving_exporter(self, name: str) -> FixtureExporter:
        exporter = self._pods[name].exporter
        if exporter is None:
            raise KeyError(f"pod {name} has no TF Serving exporter (serves=False)")
        return exporter

    # exporters and targets

    def start(self) -> Self:
        with self._lock:
            self._started = True
            exporters = [self.cadvisor_exporter, self.ksm_exporter, self.dcgm_exporter]
            exporters += [s.exporter for s in self._pods.values() if s.exporter is not None]
        for exporter in exporters:
            exporter.start()
        return self

    def close(self) -> None:
        with self._lock:
            self._started = False
            exporters = [self.cadvisor_exporter, self.ksm_exporter, self.dcgm_exporter]
            exporters += [s.exporter for s in self._pods.values() if s.exporter is not None]
        for exporter in exporters:
            exporter.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def targets(self) -> list[ScrapeTarget]:
        """Every exporter as a scrape target; TF Serving ones labelled like the cluster's."""
        if not self._started:
            raise RuntimeError("start() the scenario first: targets need the exporters' ports")
        with self._lock:
            targets = [
                self.cadvisor_exporter.target(JOB_CADVISOR),
                self.ksm_exporter.target(JOB_KSM),
                self.dcgm_exporter.target(JOB_DCGM),
            ]
            for state in self._pods.values():
                if state.exporter is not None:
                    targets.append(
                        state.exporter.target(JOB_TF_SERVING, tfs_target_labels(state.pod))
                    )
            return targets

    # rendering (each settles the counters to now)

    def pod_samples(self) -> list[PodSample]:
        with self._lock:
            self._settle()
            return [
                PodSample(
                    name=s.pod.name,
                    namespace=s.pod.namespace,
                    service=s.pod.service,
                    revision=s.pod.revision,
                    node=s.pod.node,
                    containers=(
                        ContainerSample(
                            s.pod.container,
                            s.counters.cpu_seconds,
                            s.pod.cpu_request_cores,
                            s.pod.memory_request_bytes,
                        ),
                    ),
                    pause_cpu_seconds=s.counters.pause_cpu_seconds,
                )
                for s in self._pods.values()
            ]

    def render_cadvisor(self) -> str:
        stamp = int(time.time() * 1000) if self.cadvisor_timestamps else None
        return cadvisor(self.pod_samples(), timestamp_ms=stamp)

    def render_kube_state_metrics(self) -> str:
        return kube_state_metrics(self.pod_samples())

    def render_dcgm(self) -> str:
        with self._lock:
            devices = [GpuSample(i, hostname=self.gpu_hostname) for i in range(self.spare_gpus)]
            for s in self._pods.values():
                if s.gpu_index is not None:
                    devices.append(
                        GpuSample(
                            s.gpu_index,
                            util_percent=s.pod.gpu_util_percent or 0.0,
                            fb_used_mib=s.pod.gpu_fb_used_mib,
                            pod=(s.pod.namespace, s.pod.name, s.pod.container),
                            hostname=self.gpu_hostname,
                        )
                    )
        return dcgm(sorted(devices, key=lambda d: d.index))

    def render_tf_serving(self, name: str) -> str:
        with self._lock:
            self._settle()
            state = self._pods.get(name)
            if state is None:
                return ""
            c = state.counters
            counts = {status: math.floor(n) for status, n in c.requests.items()}
            latency = None
            if c.latency_buckets is not None:
                # Floor the cumulative counts so that they stay monotonic across buckets.
                cumulative, floors, running = 0.0, [], 0
                for count in c.latency_buckets:
                    cumulative += count
                    floors.append(math.floor(cumulative + 1e-9) - running)
                    running += floors[-1]
                latency = LatencyHistogram(tuple(floors), c.latency_sum_us)
            return tf_serving(state.pod.model_name, counts, latency)


def tfs_target_labels(pod: Pod) -> dict[str, str]:
    """The target labels the cluster's scrape config puts on a TF Serving pod's series."""
    labels = {"namespace": pod.namespace, "pod": pod.name}
    if pod.service is not None:
        labels["service"] = pod.service
    if pod.revision is not None:
        labels["revision"] = pod.revision
    return labels
