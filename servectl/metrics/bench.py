"""``servectl bench --metrics``: what one metrics snapshot costs against a real Prometheus.

A synthetic cluster (services x revisions x pods) is served as one scrape target whose
series have exactly the shapes of cAdvisor, kube-state-metrics, dcgm-exporter and TF
Serving (with the target labels a cluster's scrape would add), a real Prometheus scrapes
it, and :class:`~servectl.metrics.source.PrometheusSource` takes snapshots. Two
namespaces are measured side by side in the same Prometheus: a small one and a large one,
so the figure that matters, queries per snapshot, is compared at two sizes in one run.
"""

from __future__ import annotations

import http.server
import math
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servectl.api.names import revision_name
from servectl.metrics import names
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import PrometheusServer
from servectl.metrics.source import PrometheusSource

#: Every pod's steady signals (what the snapshot must read back).
CPU_CORES = 0.4
CPU_REQUEST = 1.0
GPU_UTIL = 37.0
RPS = 5.0
ERROR_SHARE = 0.02
#: Share of requests per latency bucket index (TF Serving's layout): a realistic spread
#: over three buckets, 4.6-15 ms.
LATENCY_SHARES = {11: 0.5, 12: 0.3, 13: 0.2}


@dataclass(frozen=True)
class Case:
    namespace: str
    services: int
    revisions: int
    pods: int


class SyntheticCluster:
    """Exposition text for every pod of every case, counters growing in real time."""

    def __init__(self, cases: list[Case], clock: Callable[[], float] = time.time) -> None:
        self.cases = cases
        self.clock = clock
        self.start = clock()
        self.bounds = [f"{b:g}" for b in names.TFS_LATENCY_BOUNDS_US] + ["+Inf"]
        self._lines: list[tuple[str, float, float]] = []  # (prefix, base, rate per s)
        for case in cases:
            for s in range(case.services):
                svc = f"svc-{s:04d}"
                for r in range(case.revisions):
                    rev = revision_name(svc, r + 1)
                    for p in range(case.pods):
                        self._pod(case.namespace, svc, rev, f"{rev}-{p}")
        self.series = len(self._lines)

    def _add(self, prefix: str, base: float, rate: float = 0.0) -> None:
        self._lines.append((prefix, base, rate))

    def _pod(self, ns: str, svc: str, rev: str, pod: str) -> None:
        ids = f'namespace="{ns}",pod="{pod}"'
        self._add(
            f'{names.CADVISOR_CPU}{{{ids},container="model-server",cpu="total",'
            f'id="/kubepods/{pod}",image="tensorflow/serving"}}',
            10.0,
            CPU_CORES,
        )
        self._add(
            f'{names.KSM_REQUESTS}{{{ids},container="model-server",node="n1",resource="cpu",'
            f'unit="core"}}',
            CPU_REQUEST,
        )
        self._add(
            f'{names.KSM_POD_LABELS}{{{ids},{names.KSM_LABEL_SERVICE}="{svc}",'
            f'{names.KSM_LABEL_REVISION}="{rev}"}}',
            1.0,
        )
        gpu = (
            f'gpu="0",UUID="GPU-{pod}",modelName="NVIDIA H100",Hostname="n1",'
            f'container="model-server",{ids}'
        )
        self._add(f"{names.DCGM_GPU_UTIL}{{{gpu}}}", GPU_UTIL)
        self._add(f"{names.DCGM_FB_USED}{{{gpu}}}", 2048.0)
        tfs = f'namespace="{ns}",service="{svc}",revision="{rev}",pod="{pod}",model_name="m"'
        self._add(f'{names.TFS_REQUEST_COUNT}{{{tfs},status="OK"}}', 0.0, RPS * (1 - ERROR_SHARE))
        self._add(
            f'{names.TFS_REQUEST_COUNT}{{{tfs},status="UNAVAILABLE"}}', 0.0, RPS * ERROR_SHARE
        )
        lat = f'{tfs},API="predict",entrypoint="REST"'
        share = 0.0
        for index, le in enumerate(self.bounds):
            share += LATENCY_SHARES.get(index, 0.0)
            self._add(f'{names.TFS_REQUEST_LATENCY}_bucket{{{lat},le="{le}"}}', 0.0, RPS * share)
        bounds = names.TFS_LATENCY_BOUNDS_US
        mean_us = sum(s * (bounds[i - 1] + bounds[i]) / 2 for i, s in LATENCY_SHARES.items())
        self._add(f"{names.TFS_REQUEST_LATENCY}_sum{{{lat}}}", 0.0, RPS * mean_us)
        self._add(f"{names.TFS_REQUEST_LATENCY}_count{{{lat}}}", 0.0, RPS)

    def text(self) -> str:
        elapsed = self.clock() - self.start
        return "\n".join(f"{p} {base + rate * elapsed:.6g}" for p, base, rate in self._lines) + "\n"


@contextmanager
def serve(cluster: SyntheticCluster) -> Iterator[str]:
    """Serve ``cluster`` on a loopback port; yields ``host:port``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = cluster.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class BenchRow:
    case: str
    services: int
    revisions: int
    analysed_services: int
    queries_per_snapshot: int
    median_ms: float
    p90_ms: float
    revisions_seen: int
    revisions_missing_signals: int
    max_rps_error: float


def _measure(
    source: PrometheusSource,
    case: Case,
    repeat: int,
    analysis: list[str] | None,
    label: str,
) -> BenchRow:
    times = []
    queries = set()
    snap = None
    for _ in range(repeat):
        began = time.perf_counter()
        snap = source.snapshot(analysis_services=analysis, diagnose=False)
        times.append(time.perf_counter() - began)
        queries.add(snap.queries)
    assert snap is not None
    missing = sum(1 for r in snap.revisions.values() if set(r.missing) - {"gpu"} or r.stale)
    errors = [
        abs((r.signals.rps or 0.0) - RPS * case.pods) / (RPS * case.pods)
        for r in snap.revisions.values()
    ]
    times.sort()
    return BenchRow(
        case=label,
        services=case.services,
        revisions=case.revisions,
        analysed_services=len(analysis or ()),
        queries_per_snapshot=max(queries),
        median_ms=1000 * statistics.median(times),
        p90_ms=1000 * times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)],
        revisions_seen=len(snap.revisions),
        revisions_missing_signals=missing,
        max_rps_error=max(errors, default=math.nan),
    )


def run_metrics_bench(
    services: int = 1000,
    revisions: int = 3,
    *,
    small: int = 10,
    repeat: int = 15,
    scrape_interval_s: float = 2.0,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[BenchRow]:
    """Snapshots of ``small`` and ``services`` services x ``revisions`` against one Prometheus."""
    cases = [Case("small", small, revisions, 1), Case("large", services, revisions, 1)]
    progress("building the synthetic cluster")
    cluster = SyntheticCluster(cases)
    progress(
        f"{cluster.series:,} series; starting Prometheus (scrape every {scrape_interval_s:g} s)"
    )
    window = f"{max(4, round(6 * scrape_interval_s))}s"
    with tempfile.TemporaryDirectory(prefix="servectl-bench-") as tmp, serve(cluster) as address:
        scrape = {
            "job_name": "synthetic",
            "honor_labels": True,
            "scrape_interval": f"{scrape_interval_s:g}s",
            "scrape_timeout": f"{scrape_interval_s:g}s",
            "static_configs": [{"targets": [address]}],
        }
        prom = PrometheusServer(
            Path(tmp), scrape_interval_s=scrape_interval_s, extra_scrape_configs=[scrape]
        )
        prom.start()
        try:
            wanted = services * revisions
            deadline = time.monotonic() + 120
            config = MetricsConfig(rateWindow=window, namespaces=("large",))
            probe = PrometheusSource(prom.url, config)
            while True:
                snap = probe.snapshot(diagnose=False)
                ready = sum(
                    1
                    for r in snap.revisions.values()
                    if r.signals.rps is not None and r.signals.cpu_usage_cores is not None
                )
                progress(f"waiting for scrapes: {ready}/{wanted} revisions have rates")
                if ready >= wanted:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"only {ready}/{wanted} revisions had rates after 120 s "
                        f"(Prometheus log: {prom.log_path})"
                    )
                time.sleep(scrape_interval_s)
            # Let the rate window fill so the read-back check compares steady rates.
            time.sleep(6 * scrape_interval_s)
            rows = []
            for case in cases:
                cfg = MetricsConfig(rateWindow=window, namespaces=(case.namespace,))
                source = PrometheusSource(prom.url, cfg)
                source.snapshot(diagnose=False)  # warm-up (connection, Prometheus caches)
                progress(f"timing {case.namespace}: {case.services} services x {case.revisions}")
                rows.append(_measure(source, case, repeat, None, case.namespace))
                analysed = [f"svc-{s:04d}" for s in range(min(10, case.services))]
                rows.append(_measure(source, case, repeat, analysed, f"{case.namespace}+analysis"))
        finally:
            prom.stop()
    return rows


def rows_as_records(rows: list[BenchRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
