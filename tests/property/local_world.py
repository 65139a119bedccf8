"""The local runtime's controller over a simulated machine, killed and started again at
will: the code a ``kill -9`` of ``servectl controller`` and ``servectl up`` exercise, with
the processes, HAProxy and Prometheus simulated (issue 25, item 5).

What runs for real: the store (SQLite, in a temporary directory), the supervisor's
bookkeeping and adoption (:class:`SimulatedSupervisor` replaces only what touches a process:
starting one, signalling it, asking it for its model's state), ``LocalFleet``,
``LocalBackend`` (observe, ``revision_states``, ``CPU_SETTLE_S``, apply, ``scale_revision``,
drains) and the driver with servectl's loop. :meth:`Controller.tick` mirrors
``Runtime.tick``: poll the supervisor, read the routes HAProxy runs and the runtime
records, one driver tick, stop what finished draining, hand every route to HAProxy.

What is simulated (:class:`Machine`), at one-second steps:

- a replica loads for :data:`COLD_S` (burning :data:`LOAD_CORES`), then serves; its status
  check answers in ``status_s`` while it serves traffic (a replica busy at its quota on
  a busy machine: the real demo's answered late) and at once otherwise;
- HAProxy splits the requests by the routes' weights over each revision's endpoints that
  are not draining; a replica's CPU is its requests times :data:`COST_S` (both versions
  cost the same), at most its quota;
- Prometheus: rates over :data:`WINDOW_S`; the CPU exporter runs in the controller, so a
  killed controller takes the CPU series with it, and the first windows after ``up`` are
  partly empty and read low (Prometheus divides the increase it saw by the whole window),
  as measured on the real runtime.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import tempfile
import unittest.mock
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servectl import processes
from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.backends.local import replica_launch as launch
from servectl.backends.local import replica_state
from servectl.backends.local import router as router_mod
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, TickView, drained
from servectl.backends.local.fleet import LocalFleet
from servectl.backends.local.record import ServiceRecord
from servectl.backends.local.store import Store
from servectl.controller.driver import Driver, SnapshotRequest
from servectl.controller.reconcile import Cycle
from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics

NS, NAME = "default", "cost"
COLD_S = 10.0
"""Process start to READY (the demo's replicas take 9-11 s at half a core)."""
LOAD_CORES = 0.45
"""What a replica burns while it loads TensorFlow and its model."""
CORES = 0.5
COST_S = 0.02
"""CPU seconds per request, the same for both versions."""
WINDOW_S = 5
T0 = 1_800_000_000.0


@dataclass
class Process:
    pod: str
    revision: str
    started: float
    rest_port: int
    alive: bool = True


@dataclass
class Machine:
    """The simulated processes, HAProxy and Prometheus (module docstring)."""

    rps: float
    status_s: float
    now: float = T0
    procs: dict[int, Process] = field(default_factory=dict)
    routes: dict[tuple[str, str], router_mod.ServiceRoute] = field(default_factory=dict)
    exporter_up: bool = True
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # pod -> samples
    requests: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    serving: set[str] = field(default_factory=set)  # pods taking requests this second
    lost: list[tuple[float, str, float]] = field(default_factory=list)  # (when, revision, rps)
    _next_pid: int = 1000

    # -- processes

    def spawn(self, spec: launch.ReplicaSpec) -> tuple[int, int, int]:
        self._next_pid += 1
        pid = self._next_pid
        self.procs[pid] = Process(spec.pod, spec.revision, self.now, 20000 + 2 * pid)
        return pid, 20000 + 2 * pid, 20001 + 2 * pid

    def alive(self, pid: int, ticks: int | None = None) -> bool:
        proc = self.procs.get(pid)
        return proc is not None and proc.alive

    def kill(self, pid: int) -> None:
        if pid in self.procs:
            self.procs[pid].alive = False

    def loaded(self, proc: Process) -> bool:
        return self.now >= proc.started + COLD_S

    def probe(self, port: int, timeout_s: float) -> launch.Probe:
        proc = next((p for p in self.procs.values() if p.rest_port == port and p.alive), None)
        if proc is None or not self.loaded(proc):
            return launch.Probe(False, "connection refused", False)
        answer_s = self.status_s if proc.pod in self.serving else 0.01
        if answer_s > timeout_s:
            return launch.Probe(False, f"timed out after {timeout_s:g} s", False)
        return launch.Probe(True, "AVAILABLE", True)

    # -- one second

    def step(self) -> None:
        """The second up to ``now`` + 1: requests routed, CPU burnt, samples taken."""
        self.now += 1.0
        loaded = {p.pod: p for p in self.procs.values() if p.alive}
        self.serving = set()
        per_pod: dict[str, float] = {}
        for route in self.routes.values():
            live = {
                rev.name: [e.name for e in rev.endpoints if not e.draining and e.name in loaded]
                for rev in route.revisions
            }
            for rev in route.revisions:
                share = self.rps * rev.weight / 100.0
                pods = [p for p in live[rev.name] if self.loaded(loaded[p])]
                self.requests.setdefault(rev.name, []).append((self.now, share if pods else 0.0))
                if share > 0 and not pods:  # HAProxy has no server for them: 503
                    self.lost.append((self.now, rev.name, share))
                for pod in pods:
                    per_pod[pod] = share / len(pods)
                    self.serving.add(pod)
        for pod, proc in loaded.items():
            cores = LOAD_CORES if not self.loaded(proc) else per_pod.get(pod, 0.0) * COST_S
            if self.exporter_up:
                self.cpu.setdefault(pod, []).append((self.now, min(CORES, cores)))

    def _rate(self, samples: list[tuple[float, float]]) -> float | None:
        """Prometheus' rate over the window: None with fewer than two samples; a window
        partly empty reads low."""
        recent = [v for t, v in samples if t > self.now - WINDOW_S]
        if len(recent) < 2:
            return None
        return sum(recent) / WINDOW_S

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot:
        revisions: dict[tuple[str, str, str], RevisionMetrics] = {}
        for key in request.expected:
            revision = key[2]
            pods = []
            for proc in self.procs.values():  # a stopped one's series lasts its window
                rate = self._rate(self.cpu.get(proc.pod, []))
                if proc.revision == revision and (proc.alive or rate is not None):
                    pods.append(PodSample(proc.pod, cpu_usage_cores=rate, cpu_request_cores=CORES))
            counted = [p for p in pods if p.cpu_usage_cores is not None]
            usage = sum(p.cpu_usage_cores or 0.0 for p in counted) if counted else None
            recent = [v for t, v in self.requests.get(revision, []) if t > self.now - WINDOW_S]
            rps = sum(recent) / len(recent) if recent else 0.0
            signals = Signals(
                cpu_usage_cores=usage,
                cpu_utilization=100.0 * usage / (CORES * len(counted))
                if usage is not None
                else None,
                rps=rps,
            )
            revisions[key] = RevisionMetrics(
                key, self.now, signals, tuple(pods), missing=("cpu",) if usage is None else ()
            )
        return MetricsSnapshot(time=self.now, revisions=revisions, latency_bounds_us=())


class _Checks:
    """The supervisor's readiness pool, answered by the machine at once."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def submit(self, fn: Any, port: int, model: str, version: int, timeout_s: float) -> Any:
        done: concurrent.futures.Future[launch.Probe] = concurrent.futures.Future()
        done.set_result(self.machine.probe(port, timeout_s))
        return done

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


class SimulatedSupervisor(sup.Supervisor):
    """The real supervisor (phases, records, adoption), its processes on the machine."""

    def __init__(self, directory: Path, machine: Machine) -> None:
        self.machine = machine
        super().__init__(
            directory, command=["simulated"], clock=lambda: machine.now, wall=lambda: machine.now
        )

    def _adopt(self) -> None:
        self._pool.shutdown()
        self._pool = _Checks(self.machine)  # type: ignore[assignment]
        super()._adopt()

    def _spawn(self, slot: replica_state.Slot, now: float, *, fresh: bool = False) -> None:
        pid, rest, grpc = self.machine.spawn(slot.spec)
        slot.process, slot.pid, slot.ticks, slot.adopted = None, pid, pid, False
        slot.rest_port, slot.grpc_port = rest, grpc
        slot.started_at, slot.ready_at, slot.ready_since = self.machine.now, None, None
        slot.phase, slot.restart_at = sup.Phase.STARTING, None
        slot.probe, slot.next_probe_at, slot.probe_failures = None, now, 0
        slot.message = f"started pid {pid}"
        self._save(slot)

    def _signal(self, slot: replica_state.Slot, sig: int) -> None:
        if slot.pid is not None:
            self.machine.kill(slot.pid)  # it stops at once: the drain came first


@dataclass
class Timeline:
    """What happened, for the invariants."""

    started: dict[str, float] = field(default_factory=dict)  # pod -> when
    drained: dict[str, float] = field(default_factory=dict)  # pod -> when it began draining
    cycles: list[Cycle] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)


class Controller:
    """``servectl controller`` on the machine: start it, tick it, kill it, start it again."""

    def __init__(self, root: Path, machine: Machine, spec: Mapping[str, Any]) -> None:
        self.root = root
        self.machine = machine
        self.timeline = Timeline()
        models = root / "models" / "cost_model"
        for version in (1, 2):
            (models / str(version)).mkdir(parents=True, exist_ok=True)
            (models / str(version) / "saved_model.pb").write_bytes(b"")
        doc = {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"model": {"name": "cost_model", "basePath": str(models), "version": 1}}
            | dict(spec),
        }
        self._up()
        self.store.put_spec(NS, NAME, doc, now=machine.now)

    def _up(self) -> None:
        machine = self.machine
        self.store = Store.open(self.root / "state.db")
        self.supervisor = SimulatedSupervisor(self.root, machine)
        self.fleet = _Fleet(
            self.store,
            self.supervisor,
            wall_clock=lambda: machine.now,
            allocate_ports=lambda taken: (8501, 8500),
        )
        self.fleet.machine = machine
        self.driver = Driver(self.fleet)

    def restart(self, gap_s: int) -> None:
        """``kill -9``, ``gap_s`` seconds with no controller, then ``up``."""
        self.timeline.restarts.append(self.machine.now)
        self.supervisor.close()  # its lock only: a killed one leaves its replicas running
        self.store.close()
        self.machine.exporter_up = False  # it ran in the controller
        for _ in range(gap_s):
            self.machine.step()
        self.machine.exporter_up = True
        self._up()

    def command(self, op: str, version: int | None = None) -> None:
        self.store.enqueue_command(NS, NAME, op, version)

    def tick(self) -> Cycle | None:
        """One ``Runtime.tick`` (its order, its glue), then one second of the machine."""
        machine, store, supervisor = self.machine, self.store, self.supervisor
        now = machine.now
        supervisor.poll()
        routes = dict(machine.routes)
        records = {key: ServiceRecord.from_dict(doc) for key, doc in store.all_runtime().items()}
        self.fleet.begin(TickView(replicas=supervisor.replicas(), routes=routes), records)
        for replica in supervisor.replicas():
            self.timeline.started.setdefault(replica.spec.pod, replica.started_at or now)
        result = self.driver.tick(now)
        assert not result.errors, result.errors
        cycle = result.cycles.get((NS, NAME))
        if cycle is not None:
            self.timeline.cycles.append(cycle)
        backends = {k: b for k, b in result.backends.items() if isinstance(b, LocalBackend)}
        for backend in backends.values():
            for pod in backend.record.draining if backend.record else {}:
                self.timeline.drained.setdefault(pod, now)
        self._finish_drains(backends, routes, now)
        stopping = {r.spec.pod for r in supervisor.replicas() if r.phase is sup.Phase.STOPPING}
        machine.routes = {
            key: _without(b.route, stopping) for key, b in backends.items() if b.route is not None
        }
        machine.step()
        return cycle

    def _finish_drains(
        self,
        backends: Mapping[tuple[str, str], LocalBackend],
        routes: Mapping[tuple[str, str], router_mod.ServiceRoute],
        now: float,
    ) -> None:
        replicas = {r.spec.pod: r for r in self.supervisor.replicas()}
        for key, backend in backends.items():
            record = backend.record
            if record is None or not record.draining:
                continue
            drain_s = float(backend.service.spec.rollout.drain_seconds)  # type: ignore[union-attr]
            route = routes.get(key)
            routed = (
                [e.name for rev in route.revisions for e in rev.endpoints if not e.draining]
                if route is not None
                else []
            )
            for pod in drained(record, replicas, {}, routed, now, drain_s):
                self.supervisor.stop(pod, 30.0)
            gone = [pod for pod in record.draining if pod not in replicas]
            if gone:
                draining = {p: t for p, t in record.draining.items() if p not in gone}
                self.store.put_runtime(*key, replace(record, draining=draining).to_dict(), now=now)


class _Fleet(LocalFleet):
    machine: Machine

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot:
        return self.machine.snapshot(request)


def _without(route: router_mod.ServiceRoute, pods: set[str]) -> router_mod.ServiceRoute:
    return replace(
        route,
        revisions=tuple(
            replace(rev, endpoints=tuple(e for e in rev.endpoints if e.name not in pods))
            for rev in route.revisions
        ),
    )


@contextlib.contextmanager
def running(machine: Machine) -> Iterator[Path]:
    """A directory for the runtime's files while the machine runs; a pid is alive when the
    machine says so (the supervisor asks /proc)."""
    with (
        tempfile.TemporaryDirectory(prefix="servectl-restart-") as root,
        unittest.mock.patch.object(processes, "alive", machine.alive),
    ):
        yield Path(root)
