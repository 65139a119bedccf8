"""The local runtime's controller: every piece ``servectl up`` starts, and the 1 s loop.

One :class:`Runtime` owns, under one state directory::

    state.db          the SQLite store (specs, status, loop state, events, commands)
    replicas/<pod>/   the supervisor's files per replica (config, record)
    logs/<pod>.log    each replica's output
    replicas.json     the replica registry the CPU/GPU exporter reads
    haproxy/          the router: HAProxy's config, maps, sockets and log
    prometheus/       a real Prometheus: config, file-SD targets, TSDB
    controller.pid    the controller's pid (``servectl up`` / ``down``)
    controller.log    what the controller said

Each :meth:`Runtime.tick` (one wall-clock ``now``):

1. polls the supervisor (readiness, restarts, kill deadlines) and makes sure HAProxy and
   Prometheus run (restarting them, routes re-applied level-triggered); what the
   supervisor did and what was restarted become events and log lines (``runtime_events``);
2. reads HAProxy's routes and one Prometheus snapshot for every service at once;
3. runs ``reconcile_once`` with a :class:`~servectl.backends.local.backend.LocalBackend`
   per service (a service that fails is reported in its events, the others go on);
4. stops the draining replicas that have finished, then applies every service's route to
   HAProxy (runtime API) and the scrape targets to Prometheus (file discovery).

Everything the loop needs survives a ``kill -9`` of the controller: the replicas, HAProxy
and Prometheus run in their own sessions and are adopted by the next controller; specs,
loop state and per-service records are in the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servectl.api import models
from servectl.api.models import ConditionStatus
from servectl.backends.local import cgroups, front_ports, runtime_events
from servectl.backends.local import router as router_mod
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, TickView, drained
from servectl.backends.local.fleet import LocalFleet
from servectl.backends.local.haproxy_state import RuntimeState
from servectl.backends.local.paths import Paths
from servectl.backends.local.record import ServiceRecord
from servectl.backends.local.store import Store
from servectl.controller import explain
from servectl.controller.driver import Driver
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import (
    PrometheusError,
    PrometheusPortInUse,
    PrometheusServer,
    ScrapeTarget,
)
from servectl.metrics.source import PrometheusSource
from servectl.processes import free_port

log = logging.getLogger("servectl.runtime")

TICK_S = 1.0
STOP_GRACE_S = 30.0
"""SIGTERM to SIGKILL for a replica being stopped (Kubernetes' default grace period)."""
LOCAL_METRICS = MetricsConfig(rateWindow="5s", timeoutSeconds=2.0, staleAfterSeconds=15.0)
"""Rates over 5 s (five 1 s scrapes): a load step shows within a few seconds."""

JOB_SERVING = "servectl-tf-serving"
JOB_EXPORTER = "servectl-exporter"
JOB_HAPROXY = "servectl-haproxy"


@dataclass
class TickReport:
    """What one tick did, for ``servectl status`` and the tests."""

    time: float
    seconds: float = 0.0
    services: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    router_restarted: bool = False
    prometheus_restarted: bool = False


class Runtime:
    """The local runtime under ``state_dir``. ``start()`` brings up (or adopts) HAProxy,
    Prometheus and the exporter; ``tick()`` runs one loop pass; ``run()`` ticks until
    stopped; ``shutdown()`` stops everything."""

    def __init__(
        self,
        state_dir: Path,
        *,
        tick_s: float = TICK_S,
        metrics: MetricsConfig = LOCAL_METRICS,
        server_command: list[str] | None = None,
        clock: Callable[[], float] = time.time,
        haproxy_binary: str = "haproxy",
        prometheus_binary: str = "prometheus",
    ) -> None:
        self.paths = Paths(Path(state_dir).expanduser().resolve())
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.tick_s = tick_s
        self.metrics_config = metrics
        self.clock = clock
        self.store = Store.open(self.paths.store)
        self.supervisor = sup.Supervisor(
            self.paths.root, cgroups=cgroups.detect(), command=server_command
        )
        # The supervisor's setup: its groups are in this state directory's own scope.
        self.cgroups = self.supervisor.cgroup_setup or cgroups.detect([])
        ports = self._ports()
        self.router = router_mod.Router(
            self.paths.haproxy, stats_port=ports["haproxy_stats"], binary=haproxy_binary
        )
        self.prometheus = PrometheusServer(
            self.paths.prometheus,
            port=ports["prometheus"],
            scrape_interval_s=1.0,
            binary=prometheus_binary,
            detach=True,
        )
        self.exporter_port = ports["exporter"]
        self._exporter: Any = None
        self._source: PrometheusSource | None = None
        self._targets: tuple[ScrapeTarget, ...] | None = None
        self.fleet = LocalFleet(
            self.store,
            self.supervisor,
            wall_clock=self.clock,
            allocate_ports=front_ports.allocator(self.store),
        )
        self.driver = Driver(self.fleet)
        self.last: TickReport | None = None
        self._stop = threading.Event()
        # What the supervisor did and what happened to HAProxy and Prometheus: events on
        # the services and lines in controller.log (runtime_events).
        self.events = runtime_events.Reporter(self.store)
        self._pids: dict[str, int | None] = {}  # HAProxy's and Prometheus' last seen

    # ------------------------------------------------------------------ set-up

    def _ports(self) -> dict[str, int]:
        """Ports of the runtime's own pieces, picked once and kept in the store."""
        ports = dict(self.store.get_setting("ports") or {})
        changed = False
        for key in ("haproxy_stats", "prometheus", "exporter"):
            if key not in ports:
                ports[key] = free_port()
                changed = True
        if changed:
            self.store.put_setting("ports", ports)
        return {k: int(v) for k, v in ports.items()}

    def _start_prometheus(self, tries: int = 3) -> None:
        """Start Prometheus; where another process took its port since it was picked (CI
        saw it: two runtimes starting at once on one machine), move it to a free port,
        kept in the store, and start again."""
        for attempt in range(tries):
            try:
                self.prometheus.start()
                return
            except PrometheusPortInUse:
                if attempt == tries - 1:
                    raise
                taken, port = self.prometheus.port, free_port()
                log.warning("Prometheus port %d is taken by another process: using %d", taken, port)
                ports = dict(self.store.get_setting("ports") or {})
                ports["prometheus"] = port
                self.store.put_setting("ports", ports)
                self.prometheus.move_to(port)

    def start(self) -> None:
        """Start or adopt HAProxy and Prometheus, and serve the exporter."""
        router_adopted = self.router.running
        if not router_adopted:
            self.router.start()
        prometheus_adopted = self.prometheus.adopt()
        if not prometheus_adopted:
            self._start_prometheus()
        self._pids = {"HAProxy": self.router.pid, "Prometheus": self.prometheus.pid}
        replicas = self.supervisor.replicas()
        adopted = sum(1 for r in replicas if r.adopted and r.pid is not None)

        def how(name: str, was_running: bool) -> str:
            return f"{name} {'adopted' if was_running else 'started'} (pid {self._pids[name]})"

        self.events.runtime(
            runtime_events.CONTROLLER_STARTED,
            f"controller pid {os.getpid()} started in {self.paths.root}: "
            f"{how('HAProxy', router_adopted)}, {how('Prometheus', prometheus_adopted)}, "
            f"{adopted} of {len(replicas)} recorded replicas still running (adopted)",
            self.clock(),
            warning=False,
        )
        self.events.happenings(self.supervisor.take_happenings())  # adopted, found dead
        self._source = PrometheusSource(
            self.prometheus.url,
            self.metrics_config,
            local_exporter=f"127.0.0.1:{self.exporter_port}",  # its words for empty signals
        )
        self._start_exporter()
        self._sync_targets()
        self.store.put_setting(
            "controller",
            {"pid": os.getpid(), "started": self.clock(), "stateDir": str(self.paths.root)},
        )

    def _start_exporter(self) -> None:
        from prometheus_client import CollectorRegistry

        from servectl.metrics.exporters import serve
        from servectl.metrics.exporters.cgroup import CpuCollector
        from servectl.metrics.exporters.replicas import ReplicaFile, ReplicaFileCollector

        def warn(message: str) -> None:
            log.warning("exporter: %s", message)

        source = ReplicaFile(self.paths.registry, warn=warn)
        registry = CollectorRegistry()
        registry.register(CpuCollector(source, warn=warn))
        registry.register(ReplicaFileCollector(source))
        try:
            from servectl.metrics.exporters.gpu import GpuCollector, NoGPU

            registry.register(GpuCollector(source, warn=warn))
        except NoGPU:
            pass
        except ImportError:  # pragma: no cover - no NVML bindings
            pass
        self._exporter, _url = serve.start(registry, "127.0.0.1", self.exporter_port)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Tick every ``tick_s`` until :meth:`request_stop` (or SIGTERM/SIGINT in the CLI)."""
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            next_tick += self.tick_s
            delay = next_tick - time.monotonic()
            if delay < 0:  # a slow tick: start the next one now, do not pile up
                next_tick = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def request_stop(self) -> None:
        self._stop.set()

    def tick(self) -> TickReport:
        started = time.monotonic()
        now = self.clock()
        report = TickReport(time=now)
        self.supervisor.poll()
        report.router_restarted = self._ensure_router()
        report.prometheus_restarted = self._ensure_prometheus()
        # Crashes and restarts first: the events of this tick's cycle follow from them.
        self.events.happenings(self.supervisor.take_happenings())
        observed = self._observe_router()  # once a tick: the loop's view and apply's base
        routes = self.router.actual(observed) if observed is not None else {}
        records = {
            key: ServiceRecord.from_dict(doc) for key, doc in self.store.all_runtime().items()
        }
        self.fleet.source = self._source
        self.fleet.begin(TickView(replicas=self.supervisor.replicas(), routes=routes), records)
        result = self.driver.tick(now)
        for key, error in result.errors.items():
            report.errors["/".join(key)] = error
        backends = {
            key: backend
            for key, backend in result.backends.items()
            if isinstance(backend, LocalBackend)
        }
        for key, cycle in result.cycles.items():
            self.store.put_cycle(*key, explain.cycle_record(cycle))
        for key, backend in backends.items():
            for error in backend.errors:
                log.warning("%s/%s: %s", *key, error)
        self._retire_deleted(set(backends))
        services = {key: backend.service for key, backend in backends.items()}
        applied = {
            key: backend.record for key, backend in backends.items() if backend.record is not None
        }
        self._finish_drains(services, applied, now, routes)
        stopping = {r.spec.pod for r in self.supervisor.replicas() if r.phase is sup.Phase.STOPPING}
        self._apply_routes(
            [_without(b.route, stopping) for b in backends.values() if b.route is not None],
            observed,
        )
        self._sync_targets()
        self.events.happenings(self.supervisor.take_happenings())  # starts and stops
        report.services = len(backends)
        report.seconds = time.monotonic() - started
        self.last = report
        self.store.put_setting(
            "heartbeat",
            {
                "pid": os.getpid(),
                "time": now,
                "tickSeconds": round(report.seconds, 4),
                "services": report.services,
                "errors": report.errors,
            },
        )
        return report

    # ------------------------------------------------------------------ router, drains

    def _observe_router(self) -> RuntimeState | None:
        try:
            return self.router.observe()
        except router_mod.RouterError as exc:
            log.warning("router: %s", exc)
            return None

    def _ensure_router(self) -> bool:
        try:
            restarted = self.router.ensure_running()
        except router_mod.RouterError as exc:
            log.error("router: %s", exc)
            message = f"HAProxy is not running and could not be started: {exc}"
            self.events.failing(runtime_events.ROUTER_FAILED, message, self.clock())
            return False
        self.events.failing(runtime_events.ROUTER_FAILED, None, self.clock())
        if restarted:
            self.events.runtime(
                runtime_events.ROUTER_RESTARTED,
                f"HAProxy{_pid(self._pids.get('HAProxy'))} was not running: restarted from "
                f"its files as pid {self.router.pid} (the same front ports, servers and "
                "weights; routes re-applied)",
                self.clock(),
                warning=True,
            )
        self._pids["HAProxy"] = self.router.pid
        return restarted

    def _ensure_prometheus(self) -> bool:
        if self.prometheus.running:
            return False
        try:
            adopted = self.prometheus.adopt()
            if not adopted:
                self.prometheus.start()
        except PrometheusError as exc:
            log.error("prometheus: %s", exc)
            message = f"Prometheus is not running and could not be started: {exc}"
            self.events.failing(runtime_events.PROMETHEUS_FAILED, message, self.clock())
            return False
        self.events.failing(runtime_events.PROMETHEUS_FAILED, None, self.clock())
        how = "found another Prometheus on its TSDB" if adopted else "restarted it on its TSDB"
        self.events.runtime(
            runtime_events.PROMETHEUS_RESTARTED,
            f"Prometheus{_pid(self._pids.get('Prometheus'))} was not running: {how} as pid "
            f"{self.prometheus.pid} ({self.prometheus.url}); metrics are missing until its "
            "first scrapes",
            self.clock(),
            warning=True,
        )
        self._pids["Prometheus"] = self.prometheus.pid
        self._targets = None  # rewrite them for the new process
        return True

    def _finish_drains(
        self,
        parsed: Mapping[tuple[str, str], models.ModelService],
        records: dict[tuple[str, str], ServiceRecord],
        now: float,
        routes: Mapping[tuple[str, str], router_mod.ServiceRoute],
    ) -> None:
        """Stop draining replicas that finished; forget the ones that are gone. ``routes``:
        what HAProxy routed at the start of the tick (nothing has changed it since)."""
        if not any(record.draining for record in records.values()):
            return  # the common tick: no reads of HAProxy's state for nothing
        try:
            inflight = self.router.inflight()
        except router_mod.RouterError:
            inflight = {}
        replicas = {r.spec.pod: r for r in self.supervisor.replicas()}
        for key, record in list(records.items()):
            if not record.draining:
                continue
            service = parsed[key]
            rollout = service.spec.rollout or models.RolloutSpec()
            drain_s = float(rollout.drain_seconds)
            route = routes.get(key)
            routed = (
                [e.name for rev in route.revisions for e in rev.endpoints if not e.draining]
                if route is not None
                else []
            )
            own_inflight = {pod: n for (ns, svc, pod), n in inflight.items() if (ns, svc) == key}
            for pod in drained(record, replicas, own_inflight, routed, now, drain_s):
                self.supervisor.stop(pod, STOP_GRACE_S)
            gone = [pod for pod in record.draining if pod not in replicas]
            if gone:
                draining = {p: t for p, t in record.draining.items() if p not in gone}
                records[key] = replace(record, draining=draining)
                self.store.put_runtime(*key, records[key].to_dict(), now=self.clock())

    def _retire_deleted(self, live: set[tuple[str, str]]) -> None:
        """Replicas of services deleted from the store: stop them (SIGTERM, then SIGKILL)."""
        for replica in self.supervisor.replicas():
            key = (replica.spec.namespace, replica.spec.service)
            if key not in live and replica.phase is not sup.Phase.STOPPING:
                self.supervisor.stop(replica.spec.pod, STOP_GRACE_S)

    def _apply_routes(
        self, routes: list[router_mod.ServiceRoute], observed: RuntimeState | None
    ) -> None:
        """Every service's route to HAProxy at once (only what differs is sent)."""
        try:
            self.router.apply(
                sorted(routes, key=lambda r: (r.namespace, r.service)), observed=observed
            )
        except router_mod.RouterError as exc:
            log.error("router: %s", exc)

    # ------------------------------------------------------------------ Prometheus

    def scrape_targets(self) -> tuple[ScrapeTarget, ...]:
        targets = [
            ScrapeTarget(JOB_EXPORTER, f"127.0.0.1:{self.exporter_port}"),
            ScrapeTarget(JOB_HAPROXY, self.router.metrics_address),
        ]
        for replica in sorted(self.supervisor.replicas(), key=lambda r: r.spec.pod):
            if replica.rest_port is None or replica.phase is sup.Phase.STOPPING:
                continue
            spec = replica.spec
            targets.append(
                ScrapeTarget(
                    JOB_SERVING,
                    f"127.0.0.1:{replica.rest_port}",
                    labels={
                        "namespace": spec.namespace,
                        "service": spec.service,
                        "revision": spec.revision,
                        "pod": spec.pod,
                        "container": "model-server",
                    },
                    metrics_path="/monitoring/prometheus/metrics",
                )
            )
        return tuple(targets)

    def _sync_targets(self) -> None:
        targets = self.scrape_targets()
        if targets == self._targets:
            return
        try:
            self.prometheus.set_targets(targets)
        except (PrometheusError, OSError) as exc:
            log.warning("prometheus targets: %s", exc)
            return
        self._targets = targets

    # ------------------------------------------------------------------ stop

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop every replica, HAProxy, Prometheus and the exporter (``servectl down``)."""
        self.request_stop()
        self.events.runtime(
            runtime_events.CONTROLLER_STOPPING,
            f"controller pid {os.getpid()} stopping: {len(self.supervisor.replicas())} "
            f"replicas (SIGTERM, SIGKILL after {grace_s:g} s), HAProxy and Prometheus",
            self.clock(),
            warning=False,
        )
        self.supervisor.shutdown(grace_s)
        self.events.happenings(self.supervisor.take_happenings())
        with contextlib.suppress(router_mod.RouterError):
            self.router.stop()
        with contextlib.suppress(PrometheusError, OSError):
            self.prometheus.stop()
        if self._exporter is not None:
            from servectl.metrics.exporters import serve

            serve.stop(self._exporter)
            self._exporter = None
        self.store.put_setting("controller", None)

    def close(self) -> None:
        if self._exporter is not None:
            from servectl.metrics.exporters import serve

            serve.stop(self._exporter)
            self._exporter = None
        self.store.close()


def condition_true(status: Mapping[str, Any] | None, kind: str) -> bool | None:
    """Whether the status condition ``kind`` is True (None: no such condition)."""
    for cond in (status or {}).get("conditions", []):
        if cond.get("type") == kind:
            return bool(cond.get("status") == ConditionStatus.TRUE)
    return None


def install_signal_handlers(runtime: Runtime) -> None:
    """SIGTERM/SIGINT end the loop after the current tick."""

    def handler(signum: int, frame: Any) -> None:
        runtime.request_stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _pid(pid: int | None) -> str:
    return "" if pid is None else f" (pid {pid})"


def _without(route: router_mod.ServiceRoute, pods: set[str]) -> router_mod.ServiceRoute:
    """``route`` without the endpoints of replicas stopped this tick (after their drain)."""
    if not pods:
        return route
    return replace(
        route,
        revisions=tuple(
            replace(rev, endpoints=tuple(e for e in rev.endpoints if e.name not in pods))
            for rev in route.revisions
        ),
    )
