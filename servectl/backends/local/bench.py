"""``servectl bench --local``: the local runtime's figures, measured side by side in one run.

Four parts, run one after the other on this machine (pick with ``parts``):

- ``router``: HAProxy alone in front of fake replicas (two per revision, weights 90/10):
  the split at ~1 request/s and at ~500 requests/s against the exact expectation, and the
  latency it adds (sequential requests on one kept-alive connection, straight to a replica
  and through HAProxy: median and p99);
- ``controller``: one controller tick's CPU and wall time at 1, 10 and 50 services, each
  with one replica, under the real store, supervisor, HAProxy, Prometheus and exporter,
  with fake model servers as replicas (TensorFlow would only add its own CPU to the
  machine, not to the tick); HAProxy's and Prometheus' CPU over the same ticks;
- ``replica``: the real model server serving the demo's ``cost_model`` v1 under the
  runtime at half a core: start to READY, memory (resident, proportional, charged to its
  memory cgroup), and the latency HAProxy adds to a real predict;
- ``demo``: ``servectl demo`` itself (load step ×5 to the first scale-up decision, step to
  p99 back under the SLO, requests and the failures servectl caused, its duration);
- ``standby``: the same demo with one warm standby replica per serving revision
  (``servectl demo --standby 1``; docs/standby.md), its figures beside the ``demo`` part's
  (``key`` ``step_to_p99_under_slo_s`` with ``standby`` true and false in ``-o json``).

Every figure is a :class:`Figure`; the CLI prints them as one table (or JSON/YAML).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.backends.local import router as router_mod
from servectl.backends.local import router_model
from servectl.backends.local import supervisor as sup
from servectl.backends.local.client import ClientError, LocalClient
from servectl.backends.local.runtime import Runtime
from servectl.backends.local.store import StoreError
from servectl.demo.story import DemoError
from servectl.metrics.server import PrometheusError
from servectl.modelserver.demo import DemoExportError
from servectl.processes import free_port, rss_bytes

Progress = Callable[[str], None]

DEFAULT_SERVICES = (1, 10, 50)
SPLIT_WEIGHTS = (90, 10)
PREDICT_BODY = json.dumps({"instances": [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]]}).encode()


class Part(enum.StrEnum):
    ROUTER = "router"
    CONTROLLER = "controller"
    REPLICA = "replica"
    DEMO = "demo"
    STANDBY = "standby"


@dataclass(frozen=True)
class Figure:
    """One measured figure: ``value`` in ``unit`` (None: could not be measured; ``detail``
    says why), with what it was measured on."""

    part: str
    name: str
    value: float | None
    unit: str
    detail: str = ""
    key: str = ""  # a stable name for scripts (``step_to_p99_under_slo_s``), where it has one
    standby: bool | None = None  # measured with a warm standby pool, where that matters

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    def shown(self) -> str:
        if self.value is None:
            return "—"
        if self.unit == "ms" and abs(self.value) < 10:
            return f"{self.value:.3f} ms"
        if self.unit in ("", "requests"):
            return f"{self.value:,.0f}" + (f" {self.unit}" if self.unit else "")
        return f"{self.value:,.1f} {self.unit}"


class BenchError(RuntimeError):
    """A part could not run (a missing binary, a runtime that did not come up); the message
    says which and what to do."""


def _quiet(_: str) -> None:
    return None


# ----------------------------------------------------------------------------- HTTP


class _Client:
    """One kept-alive HTTP/1.1 connection; reconnects when the server closes it."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None

    def request(
        self, method: str = "GET", path: str = "/", body: bytes | None = None
    ) -> tuple[int, str | None]:
        """The status and the ``x-servectl-revision`` header HAProxy adds (None direct)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        if response.will_close:
            self.conn.close()
            self.conn = None
        return response.status, response.getheader(router_model.REVISION_HEADER)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def paced(port: int, rate: float, duration_s: float, threads: int) -> tuple[Counter[str], int]:
    """Send ``rate`` requests/s for ``duration_s`` from ``threads`` paced threads; the
    requests each revision answered, and the errors."""
    revisions: Counter[str] = Counter()
    errors = [0]
    lock = threading.Lock()
    total = round(rate * duration_s)
    start = time.perf_counter() + 0.05

    def run(offset: int) -> None:
        client = _Client(port)
        for index in range(offset, total, threads):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                status, revision = client.request()
            except (OSError, http.client.HTTPException):
                status, revision = 0, None
            with lock:
                if status == 200 and revision is not None:
                    revisions[revision] += 1
                else:
                    errors[0] += 1
        client.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(min(threads, total))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return revisions, errors[0]


def latencies_ms(
    port: int, n: int, method: str = "GET", path: str = "/", body: bytes | None = None
) -> list[float]:
    """``n`` sequential requests on one kept-alive connection after 50 to warm up; each
    one's latency in ms. A failed request raises :class:`BenchError`."""
    client = _Client(port)
    samples = []
    try:
        for i in range(50 + n):
            started = time.perf_counter()
            status, _ = client.request(method, path, body)
            took = (time.perf_counter() - started) * 1000
            if status != 200:
                raise BenchError(f"{method} 127.0.0.1:{port}{path} answered {status}")
            if i >= 50:
                samples.append(took)
    except (OSError, http.client.HTTPException) as exc:
        raise BenchError(f"{method} 127.0.0.1:{port}{path} failed: {exc}") from exc
    finally:
        client.close()
    return samples


def p99(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def overhead_figures(
    part: str, what: str, direct: Sequence[float], routed: Sequence[float]
) -> list[Figure]:
    """Median and p99 straight to a replica and through HAProxy, and the differences."""
    n = f"{len(direct)} sequential requests, one kept-alive connection"
    return [
        Figure(part, f"{what}: direct, median", statistics.median(direct), "ms", n),
        Figure(part, f"{what}: direct, p99", p99(direct), "ms", n),
        Figure(part, f"{what}: through HAProxy, median", statistics.median(routed), "ms", n),
        Figure(part, f"{what}: through HAProxy, p99", p99(routed), "ms", n),
        Figure(
            part,
            f"{what}: HAProxy adds, median",
            statistics.median(routed) - statistics.median(direct),
            "ms",
        ),
        Figure(part, f"{what}: HAProxy adds, p99", p99(routed) - p99(direct), "ms"),
    ]


# ----------------------------------------------------------------------------- router


def split_figure(
    label: str, got: Counter[str], errors: int, weights: dict[str, int], elapsed_s: float
) -> Figure:
    """How far the split was from exact: the largest |got - weight × requests / 100| over
    the revisions, in requests; the detail lists each revision's got/expected."""
    n = sum(got.values()) + errors
    expected = {name: weight * n / 100 for name, weight in weights.items()}
    off = max(abs(got.get(name, 0) - exp) for name, exp in expected.items())
    cells = ", ".join(f"{name} {got.get(name, 0)}/{exp:g}" for name, exp in expected.items())
    detail = f"{n} requests at {n / elapsed_s:.1f}/s: {cells} (got/exact), {errors} errors"
    return Figure(Part.ROUTER, f"split off exact, {label}", off, "requests", detail)


def router_figures(
    work: Path,
    *,
    slow_s: float = 30.0,
    fast_rate: float = 500.0,
    fast_s: float = 10.0,
    latency_requests: int = 2000,
    split: Sequence[int] = SPLIT_WEIGHTS,
    progress: Progress = _quiet,
) -> list[Figure]:
    """HAProxy in front of fake replicas, two per revision: the split (``split``: percents,
    one revision each) at ~1 and ~``fast_rate`` requests/s, and its latency overhead."""
    from servectl.testing.replicas import FakeReplica

    if sum(split) != 100 or any(w < 0 for w in split):
        raise BenchError(f"weights {list(split)}: percents, each 0..100, summing to 100")
    replicas = [
        FakeReplica(f"r{i}-{j}", grpc=False).start() for i in range(len(split)) for j in range(2)
    ]
    revisions = tuple(
        router_mod.RevisionRoute(
            f"rev-{i}", weight, tuple(r.endpoint() for r in replicas[2 * i : 2 * i + 2])
        )
        for i, weight in enumerate(split)
    )
    route = router_mod.ServiceRoute("bench", "split", free_port(), free_port(), revisions)
    router = router_mod.Router(work / "router", stats_port=free_port())
    router.start()
    figures = []
    try:
        router.apply([route])
        weights = {r.name: r.weight for r in revisions}
        for label, rate, duration, threads in (
            ("~1 request/s", 1.0, slow_s, 1),
            (f"~{fast_rate:g} requests/s", fast_rate, fast_s, 8),
        ):
            shares = "/".join(str(w) for w in split)
            progress(f"router: {label} for {duration:g} s through HAProxy (weights {shares}) ...")
            started = time.perf_counter()
            got, errors = paced(route.rest_port, rate, duration, threads)
            figures.append(split_figure(label, got, errors, weights, time.perf_counter() - started))
        progress(f"router: {latency_requests} sequential requests, direct and through HAProxy")
        direct = latencies_ms(replicas[0].rest_port, latency_requests)
        routed = latencies_ms(route.rest_port, latency_requests)
        figures += overhead_figures(Part.ROUTER, "fake replica", direct, routed)
    finally:
        router.stop(timeout_s=2.0)
        for replica in replicas:
            replica.stop()
    return figures


# ----------------------------------------------------------------------------- runtime


def _service_doc(name: str, base: Path, *, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": base.name, "basePath": str(base), "version": 1},
            "runtime": {"resources": {"cpu": cpu, "memory": memory}},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
        },
    }


@contextlib.contextmanager
def _runtime(
    state: Path, server_command: list[str] | None
) -> Iterator[tuple[Runtime, LocalClient]]:
    """A runtime ticked by the caller (not a controller process), stopped on the way out."""
    runtime = Runtime(state, server_command=server_command)
    client: LocalClient | None = None
    try:
        runtime.start()  # inside: a Prometheus that fails to start must not leave HAProxy
        client = LocalClient(state)
        yield runtime, client
    finally:
        if client is not None:
            client.close()
        runtime.shutdown(grace_s=5)
        runtime.close()


def _tick_until(runtime: Runtime, done: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Tick every second until ``done()``; the seconds it took."""
    started = time.monotonic()
    while True:
        tick_began = time.monotonic()
        runtime.tick()
        if done():
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise BenchError(f"{what} not within {timeout_s:g} s (logs: {runtime.paths.logs})")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick_began)))


def _all_ready(client: LocalClient, services: int) -> bool:
    return _ready_services(client) == services


def _ready_services(client: LocalClient) -> int:
    ready = 0
    for service in client.services():
        status = client.status(service.namespace, service.name) or {}
        if any(int(r.get("readyReplicas", 0)) >= 1 for r in status.get("revisions", [])):
            ready += 1
    return ready


def cpu_seconds(*pids: int | None) -> float | None:
    """User plus system CPU of these processes so far (``/proc/<pid>/stat``), or None when
    there is none or one of them is gone."""
    total = 0
    if not pids:
        return None
    for pid in pids:
        if pid is None:
            return None
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def controller_figures(
    work: Path,
    services: Sequence[int] = DEFAULT_SERVICES,
    *,
    ticks: int = 20,
    progress: Progress = _quiet,
) -> list[Figure]:
    """One tick's CPU (this process, every thread: the loop and the exporter Prometheus
    scrapes) and wall time, median and p90 over ``ticks`` ticks a second apart once every
    service serves; and HAProxy's and Prometheus' CPU over the same seconds."""
    from servectl.api import validation
    from servectl.testing import fake_model_server

    command = [sys.executable, fake_model_server.__file__]
    figures = []
    for count in services:
        root = work / f"controller-{count}"
        base = root / "models" / "m"
        (base / "1").mkdir(parents=True)
        (base / "1" / "saved_model.pb").write_bytes(b"")
        progress(f"controller: {count} service(s), one fake replica each; starting ...")
        with _runtime(root / "state", command) as (runtime, client):
            for i in range(count):
                doc = _service_doc(f"svc{i}", base, cpu="100m", memory="256Mi")
                client.deploy(validation.load_model_service(doc))
            _tick_until(
                runtime,
                functools.partial(_all_ready, client, count),
                60 + 2 * count,
                f"{count} services serving",
            )
            progress(f"controller: {count} service(s) serving; timing {ticks} ticks ...")
            cpu: list[float] = []
            wall: list[float] = []
            # HAProxy's worker does the work, its master next to nothing: count them all.
            others: dict[str, list[int | None]] = {
                "HAProxy": list(runtime.router.processes()),
                "Prometheus": [runtime.prometheus.pid],
            }
            before = {name: cpu_seconds(*pids) for name, pids in others.items()}
            window = time.perf_counter()
            for _ in range(ticks):
                c0, w0 = time.process_time(), time.perf_counter()
                runtime.tick()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
                time.sleep(max(0.0, 1.0 - wall[-1]))
            window = time.perf_counter() - window
            after = {name: cpu_seconds(*pids) for name, pids in others.items()}
        label = f"{count} service{'s' if count > 1 else ''}"
        detail = f"median over {ticks} ticks, p90 {1000 * p90(cpu):.1f} ms"
        figures.append(
            Figure(
                Part.CONTROLLER,
                f"CPU per tick, {label}",
                1000 * statistics.median(cpu),
                "ms",
                detail,
            )
        )
        figures.append(
            Figure(
                Part.CONTROLLER,
                f"wall time per tick, {label}",
                1000 * statistics.median(wall),
                "ms",
                f"median over {ticks} ticks, p90 {1000 * p90(wall):.1f} ms",
            )
        )
        for name in others:
            b, a = before[name], after[name]
            figures.append(
                Figure(
                    Part.CONTROLLER,
                    f"{name} CPU, {label}",
                    None if a is None or b is None else 1000 * (a - b) / window,
                    "ms/s",
                    f"over the same {window:.0f} s"
                    if a is not None and b is not None
                    else "its process was not found",
                )
            )
    return figures


# ----------------------------------------------------------------------------- replica


def pss_bytes(pid: int) -> int | None:
    """The proportional set size (shared pages split between their users), or None."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_memory_bytes(runtime: Runtime, replica: sup.Replica) -> int | None:
    """What the replica's memory group is charged (v1 ``memory.usage_in_bytes``, v2
    ``memory.current``), or None without memory limits."""
    setup = runtime.cgroups
    if setup.memory is None:
        return None
    name = "memory.usage_in_bytes" if setup.memory_version == 1 else "memory.current"
    try:
        return int((setup.memory / replica.spec.group_name / name).read_text())
    except (OSError, ValueError):
        return None


def replica_figures(
    work: Path,
    *,
    latency_requests: int = 1000,
    progress: Progress = _quiet,
) -> list[Figure]:
    """The real model server on the demo's cost_model v1 (half a core, 1 GiB), under the
    runtime: start to READY, memory, and HAProxy's overhead on a predict."""
    from servectl.api import validation
    from servectl.modelserver.demo import export_demo

    models = work / "models"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    progress("replica: exporting the demo's cost_model ...")
    export_demo(models, ["cost_model"], force=True)
    base = models / "cost_model"
    with _runtime(work / "replica" / "state", None) as (runtime, client):
        doc = _service_doc("cost", base, cpu="500m", memory="1Gi")
        client.deploy(validation.load_model_service(doc))
        progress("replica: starting one model server at half a core ...")
        _tick_until(
            runtime, functools.partial(_all_ready, client, 1), 120, "the model server READY"
        )
        replicas = [r for r in runtime.supervisor.replicas() if r.phase is sup.Phase.READY]
        replica = replicas[0] if replicas else None
        pid = None if replica is None else replica.pid
        rest_port = None if replica is None else replica.rest_port
        if replica is None or pid is None or rest_port is None:
            raise BenchError("the model server is READY but not running")
        record = client.record("default", "cost")
        if record is None:
            raise BenchError("the service has no front ports")
        figures = []
        if replica.ready_at is not None and replica.started_at is not None:
            figures.append(
                Figure(
                    Part.REPLICA,
                    "start to READY",
                    replica.ready_at - replica.started_at,
                    "s",
                    f"cost_model v1, {replica.limits or 'no limits'}; READY seen at a 1 s tick",
                )
            )
        rss, pss = rss_bytes(pid), pss_bytes(pid)
        charged = cgroup_memory_bytes(runtime, replica)
        for name, value, detail in (
            ("memory: resident (RSS)", rss, "TensorFlow's shared libraries counted whole"),
            ("memory: proportional (PSS)", pss, "shared pages split between their users"),
            (
                "memory: charged to its memory cgroup",
                charged,
                "what its limit is measured against"
                if charged is not None
                else "no memory cgroup here",
            ),
        ):
            figures.append(
                Figure(
                    Part.REPLICA,
                    name,
                    None if value is None else value / 2**20,
                    "MiB",
                    detail,
                )
            )
        path = "/v1/models/cost_model:predict"
        progress(f"replica: {latency_requests} predicts, direct and through HAProxy ...")
        direct = latencies_ms(rest_port, latency_requests, "POST", path, PREDICT_BODY)
        routed = latencies_ms(record.rest_port, latency_requests, "POST", path, PREDICT_BODY)
        figures += overhead_figures(Part.REPLICA, "predict", direct, routed)
    return figures


# ----------------------------------------------------------------------------- demo


def demo_figures(work: Path, *, standby: int = 0, progress: Progress = _quiet) -> list[Figure]:
    """``servectl demo`` under ``work/demo`` (``--standby N`` under ``work/demo-standby``,
    the ``standby`` part): its measured figures."""
    from servectl.demo import local
    from servectl.demo.story import DemoSettings

    part = Part.STANDBY if standby else Part.DEMO
    settings = DemoSettings(out=work / ("demo-standby" if standby else "demo"), standby=standby)
    result = local.run(settings, lambda line: progress(f"{part.value}: {line}"))
    settings = result.settings  # as paced on this machine
    requests = sum(p.requests for p in result.phases)
    failures = sum(p.failures for p in result.phases)
    model = sum(p.model_failures for p in result.phases)
    pool = f"; {standby} standby replica{'s' if standby > 1 else ''}" if standby else ""
    with_pool = standby > 0
    return [
        Figure(
            part,
            "load step ×5 to the first scale-up decision",
            result.decision_s,
            "s",
            f"{settings.base_rps:g} -> {settings.base_rps * settings.step:g} requests/s; "
            f"goal ≤ 5 s{pool}",
            key="step_to_decision_s",
            standby=with_pool,
        ),
        Figure(
            part,
            "load step to the first added replica serving",
            result.capacity_s,
            "s",
            "its ready count, sampled each second" + pool,
            key="step_to_capacity_s",
            standby=with_pool,
        ),
        Figure(
            part,
            "load step to p99 back under the SLO",
            result.recovered_s,
            "s",
            f"SLO {settings.slo_ms:g} ms, and staying under it{pool}",
            key="step_to_p99_under_slo_s",
            standby=with_pool,
        ),
        Figure(part, "requests", requests, "requests", "every phase, Locust's count"),
        Figure(
            part,
            "failed requests servectl caused",
            failures - model,
            "requests",
            f"{failures} failed in all, {model} of them the failing v3's own",
            key="failed_requests",
            standby=with_pool,
        ),
        Figure(part, "the demo, start to report", result.wall_s, "s"),
    ]


# ----------------------------------------------------------------------------- all


def missing_binaries(parts: Sequence[Part]) -> list[str]:
    """The binaries ``parts`` need that are not on PATH."""
    need = {"haproxy"} if parts else set()
    if set(parts) - {Part.ROUTER}:
        need.add("prometheus")
    return sorted(b for b in need if shutil.which(b) is None)


FAILED = "failed"
"""The name of the figure a part that could not finish leaves (value None, detail why)."""


def run(
    parts: Sequence[Part] = tuple(Part),
    *,
    services: Sequence[int] = DEFAULT_SERVICES,
    ticks: int = 20,
    work: Path | None = None,
    progress: Progress = _quiet,
) -> list[Figure]:
    """Run ``parts`` in this order (router, controller, replica, demo) under ``work`` and
    return every figure. A part that fails leaves one :data:`FAILED` figure saying why, and
    the others still run. ``work`` None: a temporary directory, removed afterwards unless a
    part failed (its logs are there then; the failed figure says where)."""
    missing = missing_binaries(parts)
    if missing:
        raise BenchError(f"{' and '.join(missing)} not found: apt-get install {' '.join(missing)}")
    figures: list[Figure] = []
    temporary = work is None
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="servectl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    for part in Part:
        if part not in parts:
            continue
        started = time.monotonic()
        try:
            if part is Part.ROUTER:
                figures += router_figures(work, progress=progress)
            elif part is Part.CONTROLLER:
                figures += controller_figures(work, services, ticks=ticks, progress=progress)
            elif part is Part.REPLICA:
                figures += replica_figures(work, progress=progress)
            elif part is Part.STANDBY:
                figures += demo_figures(work, standby=1, progress=progress)
            else:
                figures += demo_figures(work, progress=progress)
        except (
            BenchError,
            ClientError,
            DemoError,
            DemoExportError,
            PrometheusError,
            router_mod.RouterError,
            StoreError,
            sup.SupervisorError,
            OSError,
        ) as exc:
            failed = True
            kind = "" if isinstance(exc, BenchError) else f"{type(exc).__name__}: "
            message = f"{kind}{exc} (files: {work})"
            progress(f"{part.value}: FAILED after {time.monotonic() - started:.0f} s: {message}")
            figures.append(Figure(part, FAILED, None, "", message))
            continue
        progress(f"{part.value}: done in {time.monotonic() - started:.0f} s")
    if temporary and not failed:
        shutil.rmtree(work, ignore_errors=True)
    return figures
