"""Fake Prometheus exporters on loopback ports: fixed text, or a whole scenario of pods.

- :class:`FixtureExporter`: a threaded HTTP server answering ``GET <metrics_path>`` with
  exposition text that the test sets (or computes at every scrape); it can fail scrapes,
  stop, and come back on the same port like a restarted pod.
- :class:`Scenario`: pods with steady rates (CPU, requests, errors, latency, GPU) whose
  cumulative counters grow in real time, published by exporters shaped like the real
  sources (kubelet/cAdvisor, kube-state-metrics, dcgm-exporter, one TF Serving per pod,
  built by :mod:`servectl.testing.exposition`), so that ``rate()`` in a real Prometheus
  returns the configured rates. :meth:`Scenario.targets` lists the exporters as scrape
  targets for :class:`~servectl.metrics.server.PrometheusServer`.
- :func:`scrape`, :func:`wait_until`, :func:`eventually`: read an exporter, and wait for
  what settles in real time (a scrape, a rate). A wait that times out raises
  AssertionError, so it fails a test under any runner.

Example, with ``prometheus`` a started
:class:`~servectl.metrics.server.PrometheusServer`::

    from servectl.testing.exporters import Pod, Scenario, eventually

    def rps_is_20() -> None:
        samples = prometheus.query(
            'sum(rate(:tensorflow:serving:request_count{pod="resnet-1"}[10s]))'
        )
        assert samples and abs(samples[0].value - 20) < 2

    with Scenario() as scenario:
        scenario.add_pod(Pod("resnet-1", service="resnet", revision="v1", rps=20))
        prometheus.set_targets(scenario.targets())
        eventually(rps_is_20, timeout_s=30)

Nothing here needs pytest.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self, TypeVar

from servectl.metrics import names
from servectl.metrics.server import ScrapeTarget
from servectl.testing.exposition import (
    CONTENT_TYPE,
    GIB,
    TFS_BUCKETS,
    TFS_CONTAINER,
    ContainerSample,
    GpuSample,
    LatencyHistogram,
    PodSample,
    Samples,
    cadvisor,
    dcgm,
    kube_state_metrics,
    latency_bucket,
    parse_samples,
    tf_serving,
)

_T = TypeVar("_T")


# --- waiting ------------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``condition`` every 50 ms until it holds; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def eventually(check: Callable[[], _T], timeout_s: float = 30.0, every_s: float = 0.2) -> _T:
    """Retry ``check`` (which asserts) every ``every_s`` until it passes and return its
    result; after ``timeout_s`` its last AssertionError propagates. For values that
    settle, like ``rate()``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(every_s)


def scrape(url: str, timeout_s: float = 5.0) -> tuple[str, Samples]:
    """``GET url``: the exposition text and its samples (:func:`parse_samples`)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    return text, parse_samples(text)


# --- the exporter -------------------------------------------------------------------------


class FixtureExporter:
    """A threaded loopback HTTP server answering ``GET <metrics_path>`` with exposition text.

    The text is either fixed (:meth:`set_text`) or produced at every scrape
    (:meth:`set_source`). It speaks HTTP/1.0, one request per connection, so that a stopped
    exporter really is gone for Prometheus (no kept-alive connection keeps answering).
    :meth:`stop` then :meth:`start` comes back on the same port, as a restarted pod behind
    the same address would. ``port=0`` picks a free port at the first start. A context
    manager: ``with FixtureExporter("up 1\n") as exporter: ...`` starts and stops it.
    Any other path is 404 and not counted as a scrape.

    Example::

        with FixtureExporter("# TYPE up gauge\nup 1\n") as exporter:
            prometheus.set_targets([exporter.target("fake")])
            exporter.wait_for_scrapes(2)
            exporter.set_status(500)  # the next scrapes fail
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
        """Answer every scrape from now on with ``text`` (replaces a source)."""
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
        """The text a scrape would get now."""
        with self._lock:
            source, text = self._source, self._text
        return source() if source is not None else text

    # lifecycle

    @property
    def port(self) -> int:
        """The port it listens on (0 until first started with ``port=0``)."""
        return self._port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``, as a scrape target's address."""
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        """The scrape URL: ``http://127.0.0.1:<port><metrics_path>``."""
        return f"http://{self.address}{self.metrics_path}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def target(self, job: str, labels: Mapping[str, str] | None = None) -> ScrapeTarget:
        """This exporter as a scrape target of ``job`` with extra target ``labels``."""
        return ScrapeTarget(job, self.address, dict(labels or {}), self.metrics_path)

    def start(self) -> Self:
        """Listen (on the same port as before after a stop) and serve in a daemon thread."""
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
        """Stop listening; a scrape then fails to connect. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def restart(self) -> None:
        """Stop and start again on the same port, as a restarted pod."""
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

    ``cadvisor_timestamps`` prints millisecond timestamps on cAdvisor samples, as the
    kubelet does; ``spare_gpus`` GPUs held by no pod come first in dcgm-exporter's
    output (pods' GPUs are numbered after them); ``gpu_hostname`` is their ``Hostname``.

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
        """:meth:`add_pod` each of ``pods``."""
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
        """The pod called ``name`` as it is now (KeyError if there is none)."""
        with self._lock:
            return self._pods[name].pod

    @property
    def pods(self) -> list[Pod]:
        """Every pod, in the order they were added."""
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
        """The pod's TF Serving exporter, to stop, restart or fail its scrapes."""
        exporter = self._pods[name].exporter
        if exporter is None:
            raise KeyError(f"pod {name} has no TF Serving exporter (serves=False)")
        return exporter

    # exporters and targets

    def start(self) -> Self:
        """Start every exporter (cluster-wide ones and each pod's TF Serving)."""
        with self._lock:
            self._started = True
            exporters = [self.cadvisor_exporter, self.ksm_exporter, self.dcgm_exporter]
            exporters += [s.exporter for s in self._pods.values() if s.exporter is not None]
        for exporter in exporters:
            exporter.start()
        return self

    def close(self) -> None:
        """Stop every exporter; the counters stay, and :meth:`start` serves them again."""
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
        """Every pod with its counters settled to now, as the builders take them."""
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
        """What the kubelet's ``/metrics/cadvisor`` would print now."""
        stamp = int(time.time() * 1000) if self.cadvisor_timestamps else None
        return cadvisor(self.pod_samples(), timestamp_ms=stamp)

    def render_kube_state_metrics(self) -> str:
        """What kube-state-metrics would print now."""
        return kube_state_metrics(self.pod_samples())

    def render_dcgm(self) -> str:
        """What dcgm-exporter would print now: spare GPUs first, then the pods' GPUs."""
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
        """What pod ``name``'s TF Serving would print now (empty once it is removed)."""
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
