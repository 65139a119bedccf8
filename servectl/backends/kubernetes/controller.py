"""``servectl controller --kubernetes``: the loop over every ModelService in a cluster.

One :class:`Controller` per process:

- watch caches (:mod:`.cache`) of ModelServices and of what servectl created
  (Deployments, Services, ConfigMaps, pods, routes, selected by servectl's
  ``managed-by`` label), cluster-wide or per watched namespace;
- every ``period_s`` (and soon after a ModelService changes), when it holds the Lease
  (:mod:`.leader`), one tick of the driver (:mod:`servectl.controller.driver`) over the
  cluster as a fleet (:mod:`.fleet`): one Prometheus snapshot for every service (one
  query per signal), then per ModelService the first revision of a new service and
  ``reconcile_once`` with a :class:`~.backend.KubeBackend`, services in parallel on a
  thread pool. A spec servectl refuses, or a service that fails, gets ``Ready=False``
  with the reason in its status, and the others go on;
- a deleted ModelService (its finalizer) has its objects deleted, then the finalizer
  removed; owner references let the garbage collector catch anything left;
- ``/healthz`` and ``/readyz`` on the probe port, and its own Prometheus metrics.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servectl.api import models
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.backend import Caches, KubeBackend, Memory
from servectl.backends.kubernetes.cache import Informer, Key
from servectl.backends.kubernetes.fleet import KubeFleet
from servectl.backends.kubernetes.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    GRPCROUTES,
    HTTPROUTES,
    MODELSERVICES,
    PDBS,
    PODS,
    SERVICES,
    Doc,
    Kube,
    KubeError,
)
from servectl.backends.kubernetes.leader import LeaderElector, LeaseConfig
from servectl.controller import reconcile
from servectl.controller.driver import Driver
from servectl.metrics.config import MetricsConfig
from servectl.metrics.source import PrometheusSource

log = logging.getLogger("servectl.kubernetes")

SELECTOR = f"{obj.MANAGED_BY}=servectl"


@dataclass(frozen=True)
class ControllerConfig:
    namespaces: tuple[str, ...] = ()  # () = cluster-wide
    period_s: float = 5.0
    options: obj.Options = field(default_factory=obj.Options)
    prometheus_url: str | None = None
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    leader_elect: bool = True
    lease: LeaseConfig | None = None
    checkpoint_s: float = 60.0
    resync_s: float = 600.0  # re-apply everything (a hand edit of a servectl field reverts)
    min_gap_s: float = 0.5  # earliest next cycle after a ModelService changed
    workers: int = 8  # services reconciled at once (their API requests overlap)


@dataclass
class CycleReport:
    time: float
    services: int = 0
    writes: int = 0
    requests: int = 0
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)


def identity() -> str:
    """The Lease holder's name: the pod's (downward API), else host and pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: ControllerConfig,
        *,
        clock: Callable[[], float] = time.time,
        source: PrometheusSource | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.source = source
        if self.source is None and config.prometheus_url:
            self.source = PrometheusSource(config.prometheus_url, config.metrics)
        scopes: tuple[str | None, ...] = config.namespaces or (None,)
        self.caches: dict[str | None, Caches] = {ns: self._caches(ns) for ns in scopes}
        self.fleet = KubeFleet(
            kube,
            self.caches,
            options=config.options,
            source=self.source,
            wall_clock=self.clock,
            checkpoint_s=config.checkpoint_s,
        )
        self.driver = Driver(self.fleet)
        self.elector: LeaderElector | None = None
        if config.leader_elect:
            lease = config.lease or LeaseConfig(
                namespace=os.environ.get("POD_NAMESPACE", "default"), identity=identity()
            )
            if not lease.identity:
                lease = LeaseConfig(**{**lease.__dict__, "identity": identity()})
            self.elector = LeaderElector(kube, lease, on_change=self._leadership)
        self.last: CycleReport | None = None
        self.last_cycle_mono: float | None = None
        self._last_resync = -float("inf")
        self.metrics = _Metrics(self)
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self.flush_on_stop = True  # tests turn it off to play a crash
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ set-up

    def _caches(self, namespace: str | None) -> Caches:
        def informer(res: Any, selector: str | None) -> Informer:
            return Informer(
                self.kube,
                res,
                namespace=namespace,
                label_selector=selector,
                on_change=self._changed if res is MODELSERVICES else None,
            )

        gateway = self.config.options.traffic == obj.TrafficProvider.GATEWAY
        return Caches(
            modelservices=informer(MODELSERVICES, None),
            deployments=informer(DEPLOYMENTS, SELECTOR),
            services=informer(SERVICES, SELECTOR),
            configmaps=informer(CONFIGMAPS, SELECTOR),
            pods=informer(PODS, f"{obj.LABEL_SERVICE}"),
            httproutes=informer(HTTPROUTES, SELECTOR) if gateway else None,
            grpcroutes=informer(GRPCROUTES, SELECTOR) if gateway else None,
            pdbs=informer(PDBS, SELECTOR),
        )

    def informers(self) -> list[Informer]:
        out: list[Informer] = []
        for c in self.caches.values():
            out += [c.modelservices, c.pods] + [i for i, _ in c.owned()]
        return out

    def _changed(self, kind: str, doc: Doc) -> None:
        self._wake.set()

    def _leadership(self, leader: bool) -> None:
        if not leader:
            # A leader that lost the Lease forgets what it kept in memory: the next time
            # it leads, it resumes from the status the other leader wrote.
            self.memory.clear()
        self._wake.set()

    def start(self, sync_timeout_s: float = 60.0) -> None:
        for informer in self.informers():
            informer.start()
        deadline = time.monotonic() + sync_timeout_s
        for informer in self.informers():
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                raise KubeError(
                    0,
                    "NotSynced",
                    f"{informer.resource.plural}: watch cache not synced in {sync_timeout_s:.0f} s"
                    f" ({informer.error or 'no answer'})",
                    verb="LIST",
                    path=informer.resource.plural,
                )

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers())

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader if self.elector is not None else True

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Cycle until :meth:`stop`; the Lease is renewed in its own thread."""
        if self.elector is not None:
            thread = threading.Thread(target=self._elect, name="leader-election", daemon=True)
            thread.start()
            self._threads.append(thread)
        next_cycle = time.monotonic()
        while not self._stop.is_set():
            if self.is_leader:
                self.cycle()
            next_cycle += self.config.period_s
            delay = max(0.0, next_cycle - time.monotonic())
            if delay == 0.0:
                next_cycle = time.monotonic()
            if self._wake.wait(delay):
                self._wake.clear()
                if self._stop.is_set():
                    break
                self._stop.wait(self.config.min_gap_s)
                next_cycle = time.monotonic()
        if self.flush_on_stop and self.is_leader and self.memory:
            # A clean stop saves every service's loop state (a last cycle with a forced
            # checkpoint) before the Lease goes, so the successor loses nothing.
            for memory in self.memory.values():
                memory.force_checkpoint = True
            try:
                self.cycle()
            except Exception:  # pragma: no cover - the stop goes on
                log.exception("the last cycle before stopping failed")
        if self.elector is not None:
            self.elector.release()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _elect(self) -> None:
        assert self.elector is not None
        while not self._stop.is_set():
            self.elector.tick()
            self.metrics.leader(self.is_leader)
            self._stop.wait(self.elector.config.retry_period_s)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for informer in self.informers():
            informer.stop()
        if self._server is not None:
            self._server.shutdown()

    @property
    def memory(self) -> dict[Key, Memory]:
        """What the controller keeps per service between cycles (see :class:`Memory`)."""
        return self.fleet.memory

    def cycle(self) -> CycleReport:
        """One pass over every ModelService (the leader's)."""
        started = time.monotonic()
        now = self.clock()
        requests_before = self.kube.requests()
        writes_before = self.kube.writes()
        report = CycleReport(time=now)
        resync = now - self._last_resync >= self.config.resync_s
        self.fleet.resync = resync
        # Services are independent, and a cycle that writes waits on the API server: a
        # rollout started on 200 services at once is ~1,000 requests. Workers overlap the
        # waits (the decisions themselves still take turns under the GIL).
        mapper: Any = map
        count = sum(len(c.modelservices.items()) for c in self.caches.values())
        if self.config.workers > 1 and count > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.workers, "reconcile")
            mapper = self._pool.map
        result = self.driver.tick(now, mapper=mapper)
        for key, error in {**self.fleet.lifecycle_errors, **result.errors}.items():
            log.error("%s/%s: %s", *key, error)
            self.metrics.error("reconcile")
            report.errors["/".join(key)] = error
        for key, backend in result.backends.items():
            if not isinstance(backend, KubeBackend):
                continue
            for error in backend.applied.errors:
                log.warning("%s/%s: %s", *key, error)
                self.metrics.error("apply")
            cycle = result.cycles.get(key)
            if cycle is not None:
                self.metrics.service(key, cycle, backend.service)
        if resync:
            self._last_resync = now
        report.services = result.services + len(self.fleet.lifecycle_errors)
        report.requests = self.kube.requests() - requests_before
        report.writes = self.kube.writes() - writes_before
        report.seconds = time.monotonic() - started
        self.last = report
        self.last_cycle_mono = time.monotonic()
        self.metrics.cycle(report)
        return report

    # ------------------------------------------------------------------ probes and metrics

    def serve(
        self, probe_port: int | None, metrics_port: int | None, host: str = "0.0.0.0"
    ) -> None:
        """/healthz, /readyz on ``probe_port`` and /metrics on ``metrics_port`` (may be equal)."""
        controller = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, body, ctype = controller.http(self.path, _port(self.server))
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        ports = {p for p in (probe_port, metrics_port) if p is not None}
        self._ports = (probe_port, metrics_port)
        for port in ports:
            server = ThreadingHTTPServer((host, port), Handler)
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
            self._server = server

    def http(self, path: str, port: int) -> tuple[int, str, str]:
        _probe, metrics = getattr(self, "_ports", (None, None))
        path = path.split("?", 1)[0]
        if path == "/metrics" and (metrics is None or port == metrics):
            return 200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8"
        if path == "/healthz":
            ok, why = self.healthy()
            return (200 if ok else 500), why + "\n", "text/plain"
        if path == "/readyz":
            ok = self.synced
            why = (
                "ok"
                if ok
                else "watch caches not synced: "
                + "; ".join(
                    f"{i.resource.plural}: {i.error or 'listing'}"
                    for i in self.informers()
                    if not i.synced.is_set()
                )
            )
            return (200 if ok else 503), why + "\n", "text/plain"
        return 404, "not found\n", "text/plain"

    def healthy(self) -> tuple[bool, str]:
        """Alive unless the leader's loop has stopped cycling (stuck for 5 periods)."""
        if not self.is_leader or self.last_cycle_mono is None:
            return True, "ok"
        stuck = time.monotonic() - self.last_cycle_mono
        limit = max(30.0, 5 * self.config.period_s)
        if stuck > limit:
            return False, f"no reconcile cycle for {stuck:.0f} s"
        return True, "ok"


def _port(server: Any) -> int:
    return int(server.server_address[1])


class _ApiRequests:
    """``servectl_controller_api_requests_total{verb,resource,code}``: the client's tally,
    exported as the counter it is."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "servectl_controller_api_requests",
            "Requests sent to the API server (code 0: no answer).",
            labels=["verb", "resource", "code"],
        )
        for (verb, resource, code), n in sorted(dict(self.controller.kube.counts).items()):
            family.add_metric([verb, resource, str(code)], n)
        yield family


class _Metrics:
    """The controller's own metrics (prometheus_client, a private registry)."""

    def __init__(self, controller: Controller) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.controller = controller
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "servectl_controller_reconciles", "Reconcile cycles.", ["result"], registry=r
        )
        self.duration = Histogram(
            "servectl_controller_reconcile_duration_seconds",
            "One cycle over every service.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.decisions = Counter(
            "servectl_controller_decisions",
            "Decisions that changed something.",
            ["namespace", "service", "kind"],
            registry=r,
        )
        self.errors = Counter("servectl_controller_errors", "Errors.", ["kind"], registry=r)
        r.register(_ApiRequests(controller))
        self.is_leader = Gauge(
            "servectl_controller_is_leader", "1 on the Lease holder.", registry=r
        )
        self.replicas = Gauge(
            "servectl_revision_replicas",
            "Replicas per revision.",
            ["namespace", "service", "revision", "state"],
            registry=r,
        )
        self.weight = Gauge(
            "servectl_revision_weight",
            "Percent of traffic.",
            ["namespace", "service", "revision"],
            registry=r,
        )
        self.p99 = Gauge(
            "servectl_service_p99_seconds",
            "The service's p99 latency.",
            ["namespace", "service"],
            registry=r,
        )
        self.slo = Gauge(
            "servectl_service_slo_seconds",
            "The latency target, if any.",
            ["namespace", "service"],
            registry=r,
        )
        self._revisions: dict[Key, set[str]] = {}

    def leader(self, leader: bool) -> None:
        self.is_leader.set(1 if leader else 0)

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

    def cycle(self, report: CycleReport) -> None:
        self.reconciles.labels("error" if report.errors else "ok").inc()
        self.duration.observe(report.seconds)
        if self.controller.elector is None:
            self.is_leader.set(1)

    def service(self, key: Key, cycle: reconcile.Cycle, service: models.ModelService) -> None:
        ns, name = key
        seen = set()
        for rev in cycle.status.revisions:
            seen.add(rev.name)
            self.replicas.labels(ns, name, rev.name, "desired").set(rev.desired_replicas)
            self.replicas.labels(ns, name, rev.name, "ready").set(rev.ready_replicas)
            self.weight.labels(ns, name, rev.name).set(rev.weight)
        for gone in self._revisions.get(key, set()) - seen:
            for state in ("desired", "ready"):
                self.replicas.remove(ns, name, gone, state)
            self.weight.remove(ns, name, gone)
        self._revisions[key] = seen
        for event in cycle.events:
            self.decisions.labels(ns, name, str(event.reason)).inc()
        p99 = cycle.observed.service.signals.latency(99)
        if p99 is not None:
            self.p99.labels(ns, name).set(p99 / 1000.0)
        for signal in service.spec.autoscaling.signals:
            if signal.target_ms is not None and signal.percentile == 99:
                self.slo.labels(ns, name).set(float(signal.target_ms) / 1000.0)

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
