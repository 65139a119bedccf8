"""Run each replica as a model-server process and keep it running, like a kubelet.

The local runtime's controller decides how many replicas each revision has and calls this
supervisor once a tick (1 s): :meth:`Supervisor.start` and :meth:`Supervisor.stop` say what
should run, :meth:`Supervisor.poll` does the rest. No call but :meth:`Supervisor.shutdown`
waits on a process: starting is a ``fork``/``exec``, readiness checks run on a small thread
pool, and a stop is SIGTERM now and SIGKILL from a later ``poll`` once the grace period has
passed. With 20 replicas ``poll`` takes 0.5 ms (median; 5 ms at most while they start); when
many replicas crash at once, the work is spread over calls (:data:`POLL_BUDGET_S`).

**What runs** (:mod:`~servectl.backends.local.replica_launch`): one model-server process
per replica, on two free loopback ports chosen when it starts, serving one model at one
version, with its config files under ``<dir>/replicas/<pod>/`` and its log in
``<dir>/logs/<pod>.log``. A port taken by another process before the server bound it makes
the server exit "already in use"; it is started again at once on new ports (up to 3 times
in a row), which is not counted as a restart.

**Limits** (:mod:`~servectl.backends.local.replica_cgroups`): with a :class:`cgroups.Setup`
that can limit, each replica runs in its own group with the spec's CPU and memory; without
one, replicas run unlimited and :attr:`Supervisor.limits` says why.

**Phases** (:class:`Phase`). ``STARTING`` until ``GET /v1/models/<m>/versions/<v>`` says
``AVAILABLE``, then ``READY``. Checked every 0.25 s (0.2 s timeout) while starting, every
2 s (1 s timeout) once ready; 3 failed checks in a row make a ready replica ``NOT_READY``
(a replica throttled by its CPU quota may answer one check late; one late answer should not
take it out of the router), and one good check makes it ``READY`` again. A process that exits
is ``BACKOFF`` and starts again after 1 s, 2 s, 4 s, ... at most 30 s (a kubelet's
CrashLoopBackOff, 10 s to 5 min there, shorter here because a local replica that crashed is
usually cheap to retry and a developer is watching); the delay goes back to 1 s once the
replica has stayed ``READY`` for 60 s. ``message`` says what the replica is doing and why
(``exited with code 1: No versions of servable cost_model found under base path ...``),
``last_error`` keeps the last failure, also after a recovery. ``STOPPING`` after
:meth:`Supervisor.stop` until the process has gone; then the replica is forgotten: its group
and files are removed, its log kept.

**Adoption.** Replicas are started in their own session, so they outlive the controller
(a ``kill -9`` of it, or of its process group, leaves them serving). ``replica.json`` records
the spec, the pid and the process's start time (field 22 of ``/proc/<pid>/stat``, so a
reused pid is not taken for the replica), the ports, restarts and backoff. A new
:class:`Supervisor` on the same directory adopts every replica whose process still runs
(same pid, same start time; a zombie is dead), checks its readiness before the constructor
returns, and treats the others as crashed: restarted after their backoff. An adopted process
is not this process's child: its liveness comes from ``/proc`` and its exit code is unknown
(the message says so). A lock file keeps a second supervisor off a directory in use.

**Happenings** (:mod:`~servectl.backends.local.replica_events`): each start, crash (exit
code or signal), restart, stop, SIGKILL, adoption and readiness change is recorded as a
value; :meth:`Supervisor.take_happenings` hands them over once, and the runtime turns them
into events and log lines (this module writes no event). A replica keeps its restarts and
how its last process ended (``Replica.last_exit``, also in ``replica.json`` for the CLI).

Not thread-safe: call it from one thread (the controller's loop).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO

from servectl import processes
from servectl.backends.local import cgroups, replica_cgroups, replica_state
from servectl.backends.local import replica_events as events
from servectl.backends.local import replica_launch as launch

# The supervisor's API takes a ReplicaSpec, returns Replicas in a Phase and Happenings, and
# raises these errors: its callers name them through this module.
from servectl.backends.local.replica_events import Happening as Happening
from servectl.backends.local.replica_launch import InvalidSpecError as InvalidSpecError
from servectl.backends.local.replica_launch import ReplicaSpec as ReplicaSpec
from servectl.backends.local.replica_launch import ServerStartError as ServerStartError
from servectl.backends.local.replica_launch import SupervisorError as SupervisorError
from servectl.backends.local.replica_state import Phase as Phase
from servectl.backends.local.replica_state import Replica as Replica

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 1.0
"""The wait before the first restart of a crashed replica; doubled per crash."""
BACKOFF_MAX_S = 30.0
"""The longest wait before a restart."""
BACKOFF_RESET_S = 60.0
"""A replica READY this long has its backoff set back to :data:`BACKOFF_INITIAL_S`."""
PROBE_INTERVAL_S = 0.25
"""Between readiness checks of a replica that is not READY."""
PROBE_TIMEOUT_S = 0.2
"""A readiness check's timeout while the replica is not READY (a loading server refuses
connections, it does not hang)."""
READY_PROBE_INTERVAL_S = 2.0
"""Between checks of a READY replica (to notice one that hung or stopped serving)."""
READY_PROBE_TIMEOUT_S = 1.0
"""A READY replica's check timeout: a replica throttled by its quota may answer slowly."""
READY_FAILURE_THRESHOLD = 3
"""Failed checks in a row that make a READY replica NOT_READY."""
PORT_RETRIES = 3
"""Immediate restarts on new ports after "already in use", before it counts as a crash."""
POLL_BUDGET_S = 0.03
"""How long one ``poll`` works on replicas before it leaves the rest to the next call (which
goes on where this one stopped). Reaping and restarting a crashed replica takes 5-15 ms while
others load, most of it waiting (a ``fork``/``exec`` is 0.3 ms on an idle machine, 6 ms and
more on a busy one, and each record is an atomic rename), so 20 replicas crashing at once
would otherwise hold one call for 170 ms. A restart is not begun when the recent restarts'
average says it would end past the budget (but one always is, so restarts go on)."""
PROBE_WORKERS = 8
"""Threads running readiness checks (a check takes at most its timeout)."""
ADOPT_WAIT_S = 1.0
"""How long the constructor waits for the readiness of the replicas it adopts."""
HAPPENINGS_KEPT = 1000
"""Happenings kept for :meth:`Supervisor.take_happenings` (the oldest go first)."""


# --------------------------------------------------------------------------- errors


class ReplicaConflictError(SupervisorError):
    """``start`` named a pod that runs another spec."""


class UnknownReplicaError(SupervisorError, LookupError):
    """No replica has that pod name."""


class NotRunningError(SupervisorError):
    """The replica has no process now (it is waiting to restart)."""


class DirectoryBusyError(SupervisorError):
    """Another supervisor manages this directory."""


class ClosedError(SupervisorError):
    """The supervisor was shut down or closed."""


# --------------------------------------------------------------------------- processes


def _scope(directory: Path) -> str:
    """The directory's cgroup scope (a function: ``__init__``'s argument hides the module)."""
    return cgroups.scope_for(directory)


def _serves(slot: replica_state.Slot) -> str:
    return f"{slot.spec.model_name} version {slot.spec.version}"


def _where(slot: replica_state.Slot) -> str:
    """A started process, for a happening: pid, ports, limits."""
    return (
        f"pid {slot.pid}, REST 127.0.0.1:{slot.rest_port}, gRPC 127.0.0.1:{slot.grpc_port}; "
        f"limits: {slot.limits or 'none'}"
    )


# --------------------------------------------------------------------------- the supervisor


class Supervisor:
    """Runs replicas as model-server processes under ``directory`` (module docstring).

    ``cgroups``: where CPU and memory limits go (:func:`cgroups.detect`); None runs
    without. ``command``: the server command, flags excluded (default
    :func:`replica_launch.default_command`); paths in it must be absolute, as the server
    runs in its replica's directory. ``clock`` (monotonic seconds) drives probes, backoff
    and stop deadlines; ``wall`` stamps ``started_at`` and ``ready_at``.
    """

    def __init__(
        self,
        directory: Path,
        *,
        cgroups: cgroups.Setup | None = None,
        command: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        # Groups in this directory's own scope: another supervisor's replica of the same
        # name (another state directory, the tests) never shares its quota.
        self._setup = None if cgroups is None else cgroups.within(_scope(self.directory))
        self._command = list(command) if command is not None else launch.default_command()
        if not self._command:
            raise ValueError("command: expected the server's argv, got an empty list")
        self._clock = clock
        self._wall = wall
        self._slots: dict[str, replica_state.Slot] = {}
        self._orphan_groups = replica_cgroups.Orphans()
        self._registry_text: str | None = None
        self._budget_end = 0.0  # restarts happen in poll() only, within its budget
        self._spawn_cost = 0.01  # seconds a restart took lately (a moving average)
        self._spawned_this_poll = 0
        self._resume_at = ""  # the pod the next poll starts with (after one that ran out)
        self._happenings: list[Happening] = []  # since the last take_happenings()
        self._closed = False
        (self.directory / "replicas").mkdir(parents=True, exist_ok=True)
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        self._lock = self._take_lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=PROBE_WORKERS, thread_name_prefix="servectl-readiness"
        )
        self._adopt()

    # -- public API ---------------------------------------------------------------------

    @property
    def server_command(self) -> list[str]:
        """The model-server command replicas run (flags excluded), for ``servectl doctor``."""
        return list(self._command)

    @property
    def limits(self) -> str:
        """What limits replicas get, or why none (``Setup.describe()``)."""
        return replica_cgroups.describe(self._setup)

    @property
    def cgroup_setup(self) -> cgroups.Setup | None:
        """Where this supervisor's groups go (the setup given, in this directory's scope)."""
        return self._setup

    @property
    def registry_path(self) -> Path:
        """The exporters' replica registry (``servectl.metrics.exporters.replicas``)."""
        return self.directory / "replicas.json"

    def start(self, spec: ReplicaSpec) -> Replica:
        """Start ``spec.pod`` (returns at once, STARTING). The same spec again is a no-op,
        also while the pod is STOPPING (call again once it has gone); another spec under
        the same pod name is a :class:`ReplicaConflictError`."""
        self._check_open()
        existing = self._slots.get(spec.pod)
        if existing is not None:
            if existing.spec == spec:
                return existing.view()
            raise ReplicaConflictError(
                f"pod {spec.pod} already runs {existing.spec.revision} "
                f"({existing.spec.model_name} version {existing.spec.version}); stop it and "
                "wait until poll() no longer lists it, or start the new spec under another "
                "pod name"
            )
        files = launch.ReplicaFiles.under(self.directory, spec.pod)
        slot = replica_state.Slot(spec, files, BACKOFF_INITIAL_S)
        files.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(slot, self._clock(), fresh=True)
        except ServerStartError:
            self._release_group(slot)
            shutil.rmtree(files.directory, ignore_errors=True)
            raise
        self._slots[spec.pod] = slot
        self._tell(
            slot, events.Kind.STARTED, f"started {spec.pod} ({_serves(slot)}): {_where(slot)}"
        )
        self._write_registry()
        return slot.view()

    def stop(self, pod: str, grace_s: float = 30.0) -> None:
        """SIGTERM now, SIGKILL from the first ``poll`` after ``grace_s``; the replica is
        STOPPING until its process has gone, then forgotten. An unknown pod is a no-op (it
        may have gone already); stopping again keeps the earlier deadline if it is sooner."""
        self._check_open()
        slot = self._slots.get(pod)
        if slot is None:
            return
        now = self._clock()
        if slot.pid is None:  # waiting to restart: nothing runs
            self._forget(slot)
            self._tell(slot, events.Kind.STOPPED, f"stopped {pod}: it was waiting to restart")
            self._write_registry()
            return
        deadline = now + max(0.0, grace_s)
        if slot.stop_deadline is not None and slot.stop_deadline <= deadline:
            return
        first = slot.stop_deadline is None
        slot.stop_deadline = deadline
        slot.stop_deadline_wall = self._wall() + max(0.0, grace_s)
        slot.phase = Phase.STOPPING
        slot.probe = None
        if first:
            self._signal(slot, signal.SIGTERM)
            slot.message = f"stopping: sent SIGTERM to pid {slot.pid}; SIGKILL after {grace_s:g} s"
        self._save(slot)
        self._step(slot, now)
        self._write_registry()

    def poll(self) -> list[Replica]:
        """Reap exited processes, check readiness, restart after backoff, SIGKILL what
        outlived its grace period; return every replica."""
        self._check_open()
        now = self._clock()
        self._budget_end = time.perf_counter() + POLL_BUDGET_S
        self._spawned_this_poll = 0
        pods = sorted(self._slots)
        first = next((i for i, pod in enumerate(pods) if pod >= self._resume_at), 0)
        self._resume_at = ""
        for pod in pods[first:] + pods[:first]:
            if time.perf_counter() > self._budget_end:
                self._resume_at = pod
                break
            slot = self._slots.get(pod)
            if slot is not None:
                self._step(slot, now)
        self._orphan_groups.retry(now)
        self._write_registry()
        return self.replicas()

    def replicas(self) -> list[Replica]:
        """Every replica as of the last call, by pod name."""
        return [self._slots[pod].view() for pod in sorted(self._slots)]

    def take_happenings(self) -> list[Happening]:
        """What the supervisor did and saw since the last call (starts, crashes, restarts,
        stops, SIGKILLs, adoptions, readiness lost and regained), oldest first; each is
        handed out once. The runtime makes events and log lines of them."""
        taken, self._happenings = self._happenings, []
        return taken

    def get(self, pod: str) -> Replica | None:
        slot = self._slots.get(pod)
        return None if slot is None else slot.view()

    def set_cpu(self, pod: str, cores: float | None) -> bool:
        """Set ``pod``'s CPU quota to ``cores`` while it runs, no restart (None: its spec's
        own): how the local runtime parks a standby replica and activates it. The quota
        stays through a restart of the process (its group is kept). False where its CPU is
        not limited (no cgroup; nothing to park). Raises :class:`SupervisorError` for an
        unknown pod or a quota the kernel refuses."""
        self._check_open()
        slot = self._slots.get(pod)
        if slot is None:
            raise SupervisorError(f"no replica {pod}")
        if slot.group is None:
            return False
        try:
            return slot.group.set_cpu(slot.spec.cpu_cores if cores is None else cores)
        except (cgroups.CgroupError, ValueError) as exc:
            raise SupervisorError(f"{pod}: cannot set its CPU quota: {exc}") from exc

    def kill(self, pod: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the replica's process (chaos, tests); no bookkeeping: the next
        ``poll`` sees what happened."""
        self._check_open()
        slot = self._slots.get(pod)
        if slot is None:
            raise UnknownReplicaError(
                f"no replica named {pod!r}; replicas: {', '.join(sorted(self._slots)) or 'none'}"
            )
        if slot.pid is None:
            raise NotRunningError(f"replica {pod} has no process now ({slot.message})")
        self._signal(slot, sig)

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop every replica (SIGTERM, SIGKILL after ``grace_s``) and wait until all have
        gone (blocking, for ``servectl down``), then close."""
        if self._closed:
            return
        for pod in list(self._slots):
            self.stop(pod, grace_s)
        # Real time here: an injected test clock need not advance while we wait.
        deadline = time.monotonic() + max(0.0, grace_s)
        killed = False
        while self._slots:
            self.poll()
            if not self._slots:
                break
            if not killed and time.monotonic() >= deadline:
                for slot in self._slots.values():
                    if slot.pid is not None and not slot.killed:
                        self._signal(slot, signal.SIGKILL)
                        slot.killed = True
                        self._tell_killed(slot, grace_s)
                killed, deadline = True, time.monotonic() + 5.0
            elif killed and time.monotonic() >= deadline:
                left = ", ".join(f"{s.spec.pod} (pid {s.pid})" for s in self._slots.values())
                log.warning("replicas still running 5 s after SIGKILL: %s", left)
                break
            time.sleep(0.02)
        self._write_registry()
        if self._setup is not None and not self._slots:
            replica_cgroups.release_scope(self._setup)
        self.close()

    def close(self) -> None:
        """Stop supervising without stopping the replicas (a new supervisor adopts them)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        processes.unlock(self._lock)

    # -- processes ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(
                f"the supervisor of {self.directory} was closed; create a new Supervisor "
                "(it adopts the replicas still running)"
            )

    def _take_lock(self) -> IO[str]:
        try:
            return processes.lock_pidfile(self.directory / "supervisor.lock")
        except processes.LockHeld as held:
            raise DirectoryBusyError(
                f"another supervisor (pid {held.holder}) manages {self.directory}; stop it "
                "(or close() it) first, or use another directory"
            ) from None

    def _pick_ports(self) -> tuple[int, int]:
        taken = {p for s in self._slots.values() for p in (s.rest_port, s.grpc_port) if p}
        ports: list[int] = []
        for _ in range(100):
            port = processes.free_port()
            if port not in taken and port not in ports:
                ports.append(port)
                if len(ports) == 2:
                    return ports[0], ports[1]
        raise ServerStartError("no two free loopback ports found in 100 tries; free some ports")

    def _spawn(self, slot: replica_state.Slot, now: float, *, fresh: bool = False) -> None:
        """Start the slot's process on new ports (raises ServerStartError if it cannot);
        ``fresh``: a new replica, whose config files are (re)written."""
        spec, files = slot.spec, slot.files
        rest_port, grpc_port = self._pick_ports()
        if fresh or not files.model_config.exists():  # they depend on the spec alone
            launch.write_config_files(spec, files)
        slot.group, slot.limits = replica_cgroups.ensure(self._setup, spec, slot.group)
        wall = self._wall()
        process, offset = launch.start_server(
            self._command, spec, files, rest_port, grpc_port, restarts=slot.restarts, wall=wall
        )
        if slot.group is not None:
            try:
                slot.group.add(process.pid)
            except cgroups.CgroupError as exc:
                slot.limits = f"not enforced: {exc}"
        slot.oom_kills = replica_cgroups.oom_kills(slot.group.memory_dir if slot.group else None)
        slot.process, slot.pid, slot.adopted = process, process.pid, False
        slot.ticks = processes.start_ticks(process.pid)
        slot.rest_port, slot.grpc_port = rest_port, grpc_port
        slot.started_at, slot.ready_at, slot.ready_since = wall, None, None
        slot.log_offset = offset
        slot.phase = Phase.STARTING
        slot.restart_at = None
        slot.probe, slot.next_probe_at, slot.probe_failures = None, now, 0
        slot.message = f"started pid {process.pid}; waiting for version {spec.version} to load"
        self._save(slot)

    def _signal(self, slot: replica_state.Slot, sig: int) -> None:
        if slot.process is not None:
            with contextlib.suppress(ProcessLookupError):
                slot.process.send_signal(sig)  # no-op once reaped
        elif slot.pid is not None and processes.alive(slot.pid, slot.ticks):  # never a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.pid, sig)

    def _exit_code(self, slot: replica_state.Slot) -> tuple[bool, int | None]:
        """(exited, its code: None when unknown)."""
        if slot.process is not None:
            code = slot.process.poll()
            return code is not None, code
        if slot.pid is None:
            return True, None
        return not processes.alive(slot.pid, slot.ticks), None

    # -- the state machine --------------------------------------------------------------

    def _step(self, slot: replica_state.Slot, now: float) -> None:
        if slot.pid is not None:
            exited, code = self._exit_code(slot)
            if exited:
                self._exited(slot, code, now)
                if slot.spec.pod not in self._slots:
                    return  # it was stopping: forgotten
        if slot.phase == Phase.BACKOFF:
            if slot.restart_at is not None and now >= slot.restart_at:
                self._restart(slot, now)
            return
        if slot.stopping:
            assert slot.stop_deadline is not None
            if not slot.killed and now >= slot.stop_deadline:
                self._signal(slot, signal.SIGKILL)
                slot.killed = True
                slot.message = f"stopping: sent SIGKILL to pid {slot.pid} (grace period over)"
                self._tell_killed(slot, None)
            return
        self._collect_probe(slot, now)
        if (
            slot.phase == Phase.READY
            and slot.ready_since is not None
            and now - slot.ready_since >= BACKOFF_RESET_S
            and slot.backoff_s != BACKOFF_INITIAL_S
        ):
            slot.backoff_s = BACKOFF_INITIAL_S
            self._save(slot)
        if slot.probe is None and now >= slot.next_probe_at and slot.rest_port is not None:
            self._submit_probe(slot, now)

    def _submit_probe(self, slot: replica_state.Slot, now: float) -> None:
        """Start a readiness check; the next is due an interval after this one began (so
        a controller that polls once a second gets one check a second while starting)."""
        assert slot.pid is not None and slot.rest_port is not None
        ready = slot.phase == Phase.READY
        timeout = (
            READY_PROBE_TIMEOUT_S if ready or slot.phase == Phase.NOT_READY else PROBE_TIMEOUT_S
        )
        slot.next_probe_at = now + (READY_PROBE_INTERVAL_S if ready else PROBE_INTERVAL_S)
        future = self._pool.submit(
            launch.check_version, slot.rest_port, slot.spec.model_name, slot.spec.version, timeout
        )
        slot.probe = (slot.pid, future)

    def _collect_probe(self, slot: replica_state.Slot, now: float) -> None:
        if slot.probe is None:
            return
        pid, future = slot.probe
        if not future.done():
            return
        slot.probe = None
        if pid != slot.pid or future.cancelled():
            return
        try:
            result = future.result()
        except Exception as exc:  # a bug in the check itself: report it, keep checking
            result = launch.Probe(False, f"readiness check failed: {exc!r}", False)
        self._apply_probe(slot, result, now)

    def _apply_probe(self, slot: replica_state.Slot, result: launch.Probe, now: float) -> None:
        spec = slot.spec
        if result.ok:
            slot.probe_failures = 0
            slot.port_retries = 0
            if slot.phase != Phase.READY:
                if slot.phase == Phase.NOT_READY:
                    self._tell(
                        slot,
                        events.Kind.READY_AGAIN,
                        f"{spec.pod} (pid {slot.pid}) answers its readiness checks again: "
                        "back in the router",
                    )
                slot.phase = Phase.READY
                slot.ready_at, slot.ready_since = self._wall(), now
                slot.next_probe_at = now + READY_PROBE_INTERVAL_S
                self._save(slot)  # a supervisor that adopts it adopts it READY
            slot.message = (
                f"ready: {spec.model_name} version {spec.version} AVAILABLE on "
                f"127.0.0.1:{slot.rest_port} (pid {slot.pid})"
            )
            return
        if slot.phase == Phase.READY:
            slot.next_probe_at = min(slot.next_probe_at, now)  # check again at once
            slot.probe_failures += 1
            if slot.probe_failures < READY_FAILURE_THRESHOLD:
                return
            slot.phase = Phase.NOT_READY
            self._tell(
                slot,
                events.Kind.NOT_READY,
                f"{spec.pod} (pid {slot.pid}) failed {READY_FAILURE_THRESHOLD} readiness checks "
                f"in a row ({result.detail}): out of the router until it answers",
            )
            slot.ready_at = slot.ready_since = None
            self._save(slot)
        if slot.phase == Phase.NOT_READY:
            slot.message = f"not ready (pid {slot.pid}): {result.detail}"
        else:
            slot.message = f"starting (pid {slot.pid}): {result.detail}"
        if result.answered:
            slot.last_error = result.detail

    def _exited(self, slot: replica_state.Slot, code: int | None, now: float) -> None:
        pid = slot.pid
        assert pid is not None
        slot.probe = None
        tail = processes.log_since(slot.files.log, slot.log_offset)
        slot.process, slot.pid, slot.ticks = None, None, None
        slot.started_at = slot.ready_at = slot.ready_since = None
        reason = events.describe_exit(code, pid)
        slot.last_exit = events.Exit.of(code, self._wall(), reason)
        if slot.stopping:
            self._forget(slot)
            after = "SIGKILL" if slot.killed else "SIGTERM"
            how = "gone (adopted: exit code unknown)" if code is None else reason
            self._tell(
                slot,
                events.Kind.STOPPED,
                f"stopped {slot.spec.pod}: pid {pid} {how} after {after}",
                pid=pid,
                code=code,
            )
            return
        line = launch.last_line(tail)
        oom = replica_cgroups.oom_killed(slot.spec, slot.group, slot.oom_kills)
        if oom is not None:
            reason = f"{oom} ({reason})"
        elif line and code is not None and code < 0:  # a signal: the line is no cause
            reason += f"; its last log line: {line}"
        elif line:
            reason += f": {line}"
        if "already in use" in tail.lower() and slot.port_retries < PORT_RETRIES:
            slot.port_retries += 1
            slot.port_retry_due = True
            slot.phase, slot.restart_at = Phase.BACKOFF, now  # at once, not counted
            slot.message = (
                f"a port was taken before the server bound it; starting again on new ports "
                f"(try {slot.port_retries} of {PORT_RETRIES})"
            )
            self._save(slot)
            return
        version_dir = slot.spec.base_path / str(slot.spec.version)
        if not version_dir.is_dir():
            reason += (
                f" (version {slot.spec.version} of {slot.spec.model_name} is not on disk: "
                f"{version_dir} does not exist)"
            )
        slot.last_exit = replace(slot.last_exit, reason=reason)
        kind = events.Kind.OOM_KILLED if oom is not None else events.Kind.CRASHED
        self._crashed(slot, reason, now, kind=kind, pid=pid, code=code)

    def _crashed(
        self,
        slot: replica_state.Slot,
        reason: str,
        now: float,
        *,
        kind: events.Kind = events.Kind.CRASHED,
        pid: int | None = None,
        code: int | None = None,
    ) -> None:
        """BACKOFF after a crash, a failed start or a process gone while no supervisor
        ran: the next start after the backoff, and a happening that says so."""
        delay = slot.backoff_s
        slot.backoff_s = min(BACKOFF_MAX_S, slot.backoff_s * 2)
        slot.port_retries = 0
        slot.phase = Phase.BACKOFF
        slot.restart_at = now + delay
        slot.last_error = reason
        slot.message = f"{reason}; restarting in {delay:g} s"
        self._save(slot)
        who = slot.spec.pod if pid is None else f"{slot.spec.pod} (pid {pid})"
        self._tell(
            slot,
            kind,
            f"{who} {reason}; restart {slot.restarts + 1} in {delay:g} s",
            pid=pid,
            code=code,
        )

    def _restart(self, slot: replica_state.Slot, now: float) -> None:
        began = time.perf_counter()
        if self._spawned_this_poll and began + self._spawn_cost > self._budget_end:
            return  # it would take this poll over its budget: the next one starts it
        self._spawned_this_poll += 1  # the first always starts, so that restarts go on
        counted = not slot.port_retry_due
        slot.port_retry_due = False
        if counted:
            slot.restarts += 1
        try:
            self._spawn(slot, now)
        except ServerStartError as exc:
            self._crashed(slot, str(exc), now, kind=events.Kind.START_FAILED)
            return
        finally:
            self._spawn_cost = 0.7 * self._spawn_cost + 0.3 * (time.perf_counter() - began)
        if not counted:
            slot.message = (
                f"a port was taken before the server bound it; started again on new ports "
                f"(try {slot.port_retries} of {PORT_RETRIES}): pid {slot.pid}"
            )
            return
        self._tell(
            slot,
            events.Kind.RESTARTED,
            f"restarted {slot.spec.pod} (restart {slot.restarts}): {_where(slot)}",
        )

    def _tell(
        self,
        slot: replica_state.Slot,
        kind: events.Kind,
        message: str,
        *,
        pid: int | None = None,
        code: int | None = None,
    ) -> None:
        """Record a happening for :meth:`take_happenings` (``code``: ``Popen.returncode``)."""
        pid = pid if pid is not None else slot.pid
        now = self._wall()
        self._happenings.append(
            events.Happening.of(kind, now, slot.spec, message, pid, code, slot.restarts)
        )
        del self._happenings[:-HAPPENINGS_KEPT]

    def _tell_killed(self, slot: replica_state.Slot, grace_s: float | None) -> None:
        after = "its grace period" if grace_s is None else f"{grace_s:g} s"
        self._tell(
            slot,
            events.Kind.KILLED,
            f"{slot.spec.pod} (pid {slot.pid}) was still running {after} after SIGTERM: "
            "sent SIGKILL",
        )

    def _forget(self, slot: replica_state.Slot) -> None:
        slot.probe = None
        self._slots.pop(slot.spec.pod, None)
        self._release_group(slot)
        shutil.rmtree(slot.files.directory, ignore_errors=True)

    def _release_group(self, slot: replica_state.Slot) -> None:
        if slot.group is None:
            return
        group, slot.group = slot.group, None
        self._orphan_groups.release(group, self._clock())

    # -- files --------------------------------------------------------------------------

    def _save(self, slot: replica_state.Slot) -> None:
        slot.files.directory.mkdir(parents=True, exist_ok=True)
        processes.write_atomic(slot.files.record, json.dumps(slot.record(), indent=2) + "\n")

    def _write_registry(self) -> None:
        entries = [self._slots[pod].registry_entry() for pod in sorted(self._slots)]
        replicas = [entry for entry in entries if entry is not None]
        text = json.dumps({"replicas": replicas}, indent=2) + "\n"
        if text != self._registry_text:
            processes.write_atomic(self.registry_path, text)
            self._registry_text = text

    # -- adoption -----------------------------------------------------------------------

    def _adopt(self) -> None:
        """Adopt the replicas recorded under the directory (module docstring)."""
        now, wall = self._clock(), self._wall()
        gone: list[replica_state.Slot] = []
        for path in sorted((self.directory / "replicas").glob("*/replica.json")):
            loaded = replica_state.load(path, self.directory, BACKOFF_INITIAL_S)
            if loaded is None:
                continue
            slot, data = loaded
            self._slots[slot.spec.pod] = slot
            pid, ticks, stop_wall = (
                data.get("pid"),
                data.get("start_ticks"),
                data.get("stop_deadline"),
            )
            if pid is not None and pid > 0 and processes.alive(pid, ticks):
                replica_state.adopt(slot, data, now, wall)
                if not slot.stopping and slot.rest_port is not None:
                    self._submit_probe(slot, now)
            elif stop_wall is not None:
                gone.append(slot)  # it was being stopped, and has gone
            else:
                what = "its process" if pid is None else f"pid {pid}"
                reason = f"{what} was not running when the supervisor started (exit code unknown)"
                line = launch.last_line(processes.log_since(slot.files.log, slot.log_offset))
                self._crashed(slot, reason + (f": {line}" if line else ""), now)
        for slot in gone:
            self._forget(slot)
            self._tell(
                slot,
                events.Kind.STOPPED,
                f"stopped {slot.spec.pod}: its process had gone while no controller ran "
                "(it was being stopped)",
            )
        probes = [s.probe[1] for s in self._slots.values() if s.probe is not None]
        if probes:
            concurrent.futures.wait(probes, timeout=ADOPT_WAIT_S)
            for slot in self._slots.values():
                self._collect_probe(slot, now)
        for slot in self._slots.values():
            if slot.adopted and slot.pid is not None:
                self._tell(
                    slot,
                    events.Kind.ADOPTED,
                    f"adopted {slot.spec.pod}: pid {slot.pid} kept running while no "
                    f"controller ran ({slot.phase}; REST {slot.rest_port}, gRPC "
                    f"{slot.grpc_port})",
                )
        self._write_registry()
