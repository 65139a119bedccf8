"""``servectl controller --kubernetes``: the loop over every ModelService in a cluster.

One :class:`Controller` per process:

- watch caches (:mod:`.cache`) of ModelServices and of what servectl created
  (Deployments, Services, ConfigMaps, pods, routes, selected by servectl's
  ``managed-by`` label), cluster-wide or per watched namespace;
- every ``period_s`` (and soon after a ModelService changes), when it holds the Lease
  (:mod:`.leader`), one cycle: one Prometheus snapshot for every service (one query per
  signal), then per ModelService: its finalizer, servectl's validation (a spec the CRD
  schema let through but servectl refuses gets ``Ready=False`` with the reason, and
  nothing is created), the first revision of a new service, and ``reconcile_once`` with
  a :class:`~.backend.KubeBackend`. A service that fails is reported and the others go on;
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
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servectl.api import models
from servectl.autoscaling.config import Routing
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.backend import Caches, KubeBackend, Memory, parse, post_event
from servectl.backends.kubernetes.cache import Informer, Key, key_of
from servectl.backends.kubernetes.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    GRPCROUTES,
    HTTPROUTES,
    MODELSERVICES,
    PODS,
    SCALINGPOLICIES,
    SERVICES,
    Doc,
    Kube,
    KubeError,
)
from servectl.backends.kubernetes.leader import LeaderElector, LeaseConfig
from servectl.controller import reconcile
from servectl.controller.spec import PolicySpecError, policy_for, service_spec
from servectl.metrics.assemble import ALL_SIGNALS, MetricsSnapshot, Problem, Reason
from servectl.metrics.config import MetricsConfig
from servectl.metrics.source import PrometheusSource
from servectl.planning.types import Plan, PlanReason, RevisionPlan

log = logging.getLogger("servectl.kubernetes")

SELECTOR = f"{obj.MANAGED_BY}=servectl"


def routing_for(traffic: str) -> Routing:
    """How requests reach a revision's pods, as the engine sizes for it: Gateway API
    implementations route least-request by default (Envoy Gateway's LeastRequest, Istio's
    LEAST_REQUEST); a plain Service (kube-proxy) spreads connections evenly."""
    if traffic == obj.TrafficProvider.GATEWAY:
        return Routing.LEAST_REQUEST
    return Routing.ROUND_ROBIN


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


@dataclass
class _Decider:
    generation: int
    loop: reconcile.ServectlLoop


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
        self.memory: dict[Key, Memory] = {}
        self._deciders: dict[Key, _Decider] = {}
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

    def cycle(self) -> CycleReport:
        """One pass over every ModelService (the leader's)."""
        started = time.monotonic()
        now = self.clock()
        requests_before = self.kube.requests()
        writes_before = self.kube.writes()
        report = CycleReport(time=now)
        resync = now - self._last_resync >= self.config.resync_s
        services = [
            (caches, doc) for caches in self.caches.values() for doc in caches.modelservices.items()
        ]
        snapshot = self._snapshot(services)

        def one(item: tuple[Caches, Doc]) -> tuple[Key, str] | None:
            caches, doc = item
            key = key_of(doc)
            try:
                self._reconcile(caches, doc, snapshot, now, resync)
            except Exception as exc:  # one service's failure must not stop the others
                log.error("%s/%s: %s\n%s", *key, exc, traceback.format_exc())
                self.metrics.error("reconcile")
                return key, f"{type(exc).__name__}: {exc}"
            return None

        # Services are independent, and a cycle that writes waits on the API server: a
        # rollout started on 200 services at once is ~1,000 requests. Workers overlap the
        # waits (the decisions themselves still take turns under the GIL).
        if self.config.workers > 1 and len(services) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.workers, "reconcile")
            failures = list(self._pool.map(one, services))
        else:
            failures = [one(item) for item in services]
        for failure in failures:
            if failure is not None:
                report.errors["/".join(failure[0])] = failure[1]
        live = {key_of(doc) for _c, doc in services}
        for key in list(self.memory):
            if key not in live:
                self.memory.pop(key, None)
                self._deciders.pop(key, None)
        if resync:
            self._last_resync = now
        report.services = len(services)
        report.requests = self.kube.requests() - requests_before
        report.writes = self.kube.writes() - writes_before
        report.seconds = time.monotonic() - started
        self.last = report
        self.last_cycle_mono = time.monotonic()
        self.metrics.cycle(report)
        return report

    def _snapshot(self, services: list[tuple[Caches, Doc]]) -> MetricsSnapshot:
        expected: list[tuple[str, str, str]] = []
        rolling: list[str] = []
        for caches, doc in services:
            ns, name = key_of(doc)
            revs = [
                str(d["metadata"]["labels"][obj.LABEL_REVISION])
                for d in caches.deployments.select(ns, {obj.LABEL_SERVICE: name})
                if obj.LABEL_REVISION in (d["metadata"].get("labels") or {})
            ]
            expected += [(ns, name, rev) for rev in revs]
            if len(revs) > 1:
                rolling.append(name)
        if self.source is None:
            return MetricsSnapshot(
                time=self.clock(),
                revisions={},
                latency_bounds_us=(),
                problems=tuple(
                    Problem(
                        signal,
                        Reason.UNREACHABLE,
                        "no Prometheus configured: start the controller with --prometheus-url",
                    )
                    for signal in ALL_SIGNALS
                ),
            )
        return self.source.snapshot(expected=expected, analysis_services=rolling)

    # ------------------------------------------------------------------ one service

    def _reconcile(
        self, caches: Caches, doc: Doc, snapshot: MetricsSnapshot, now: float, resync: bool
    ) -> None:
        key = key_of(doc)
        meta = doc.get("metadata") or {}
        memory = self.memory.setdefault(key, Memory())
        if meta.get("deletionTimestamp"):
            self._finalize(caches, doc)
            return
        if obj.FINALIZER not in (meta.get("finalizers") or []):
            self._add_finalizer(caches, doc)
        try:
            service = parse(doc)
            decider = self._decider(key, service, int(meta.get("generation") or 0))
            if service.spec.model.version is None:
                raise ValueError(
                    "spec.model.version: required on Kubernetes (the controller cannot list "
                    "basePath); set the version to serve"
                )
            obj.model_source(service.spec.model.base_path)
        except (ValueError, PolicySpecError) as exc:
            self._invalid(caches, doc, str(exc))
            return
        backend = KubeBackend(
            kube=self.kube,
            caches=caches,
            doc=doc,
            service=service,
            metrics=snapshot,
            memory=memory,
            options=self.config.options,
            wall_clock=self.clock,
            source=self.source,
            checkpoint_s=self.config.checkpoint_s,
        )
        if resync:
            for informer, _res in caches.owned():
                for item in informer.select(key[0], {obj.LABEL_SERVICE: key[1]}):
                    item.setdefault("metadata", {}).setdefault("annotations", {})
                    item = {
                        **item,
                        "metadata": {
                            **item["metadata"],
                            "annotations": {
                                **item["metadata"]["annotations"],
                                obj.APPLIED: "resync",
                            },
                        },
                    }
                    informer.put(item)
        if backend.load_state() is None and not backend.deployments():
            version = service.spec.model.version
            assert version is not None
            first = service_spec(service).revision_name(version)
            backend.apply(
                Plan(
                    revisions=(
                        RevisionPlan(
                            first,
                            version,
                            service.spec.autoscaling.min_replicas,
                            100,
                            str(PlanReason.STEADY),
                            "first revision",
                        ),
                    )
                ),
                now,
            )
            backend.event(
                "Normal",
                "Created",
                f"revision {first} at {service.spec.autoscaling.min_replicas} replicas",
            )
        cycle = reconcile.reconcile_once(backend, decider, now)
        for error in backend.applied.errors:
            log.warning("%s/%s: %s", *key, error)
            self.metrics.error("apply")
        self.metrics.service(key, cycle, service)

    def _decider(
        self, key: Key, service: models.ModelService, generation: int
    ) -> reconcile.ServectlLoop:
        cached = self._deciders.get(key)
        if cached is not None and cached.generation == generation:
            return cached.loop
        library = self._policies(service.metadata.namespace)
        routing = routing_for(self.config.options.traffic)
        loop = reconcile.ServectlLoop(
            service_spec(service), policy_for(service, library, routing=routing)
        )
        self._deciders[key] = _Decider(generation, loop)
        return loop

    def _policies(self, namespace: str) -> dict[str, models.ScalingPolicy]:
        """ScalingPolicies of the namespace (read when a spec changes, not every cycle)."""
        try:
            listed = self.kube.list(SCALINGPOLICIES, namespace)
        except KubeError as exc:
            log.warning("scalingpolicies in %s: %s", namespace, exc)
            return {}
        out = {}
        for item in listed["items"]:
            meta = item.get("metadata") or {}
            try:
                out[str(meta.get("name"))] = models.ScalingPolicy.model_validate(
                    {
                        "apiVersion": item.get("apiVersion"),
                        "kind": "ScalingPolicy",
                        "metadata": {"name": meta.get("name"), "namespace": namespace},
                        "spec": item.get("spec") or {},
                    }
                )
            except ValueError as exc:
                log.warning("scalingpolicy %s/%s: %s", namespace, meta.get("name"), exc)
        return out

    def _invalid(self, caches: Caches, doc: Doc, message: str) -> None:
        """servectl refuses the spec: Ready=False with the reason; nothing is created."""
        meta = doc["metadata"]
        status = dict(doc.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        old = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": message[:2000],
            "lastTransitionTime": (
                old.get("lastTransitionTime")
                if old and old.get("status") == "False" and old.get("reason") == "InvalidSpec"
                else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
            ),
            "observedGeneration": int(meta.get("generation") or 0),
        }
        if old == ready:
            return
        status["conditions"] = [ready, *conditions]
        status["observedGeneration"] = int(meta.get("generation") or 0)
        try:
            out = self.kube.apply(
                {
                    "apiVersion": MODELSERVICES.api_version,
                    "kind": MODELSERVICES.kind,
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                    "status": status,
                },
                sub="status",
            )
            caches.modelservices.put(out)
        except KubeError as exc:
            log.warning("%s/%s: status: %s", meta["namespace"], meta["name"], exc)
        try:
            post_event(self.kube, doc, "Warning", "InvalidSpec", message, self.clock())
        except KubeError as exc:
            log.warning("%s/%s: event: %s", meta["namespace"], meta["name"], exc)

    def _add_finalizer(self, caches: Caches, doc: Doc) -> None:
        meta = doc["metadata"]
        out = self.kube.apply(
            {
                "apiVersion": MODELSERVICES.api_version,
                "kind": MODELSERVICES.kind,
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "finalizers": [obj.FINALIZER],
                },
            },
            manager="servectl-finalizer",
        )
        caches.modelservices.put(out)

    def _finalize(self, caches: Caches, doc: Doc) -> None:
        """Delete what the service owns; drop the finalizer once it is all gone."""
        ns, name = key_of(doc)
        remaining = 0
        for informer, res in caches.owned():
            for item in informer.select(ns, {obj.LABEL_SERVICE: name}):
                remaining += 1
                item_name = str(item["metadata"]["name"])
                if not (item.get("metadata") or {}).get("deletionTimestamp"):
                    self.kube.delete(res, ns, item_name)
                informer.forget(ns, item_name)
        if remaining:
            return  # the next cycle checks again (the caches see the deletes)
        if obj.FINALIZER in ((doc.get("metadata") or {}).get("finalizers") or []):
            try:
                self.kube.apply(
                    {
                        "apiVersion": MODELSERVICES.api_version,
                        "kind": MODELSERVICES.kind,
                        "metadata": {"name": name, "namespace": ns, "finalizers": []},
                    },
                    manager="servectl-finalizer",
                )
            except KubeError as exc:
                if not exc.not_found:
                    raise
        self.memory.pop((ns, name), None)

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
