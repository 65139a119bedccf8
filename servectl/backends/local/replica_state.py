"""One replica's state as the supervisor keeps it (:class:`Slot`), shows it (:class:`Replica`
in a :class:`Phase`) and records it: ``replica.json``, which a later supervisor adopts the
replica from, and its entry in the exporters' registry (``replicas.json``).

The transitions between phases are the supervisor's
(:mod:`servectl.backends.local.supervisor`); this module holds no process and decides
nothing.
"""

from __future__ import annotations

import concurrent.futures
import enum
import json
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.backends.local import cgroups
from servectl.backends.local import replica_events as events
from servectl.backends.local import replica_launch as launch
from servectl.metrics.exporters import replicas as registry

log = logging.getLogger(__name__)

CONTAINER = "model-server"
"""The container name replicas have in the exporters' registry."""
RECORD_FORMAT = 1
"""The version of ``replica.json``'s layout."""


class Phase(enum.StrEnum):
    STARTING = "STARTING"  # the process runs; its version is not AVAILABLE yet
    READY = "READY"  # the version is AVAILABLE: route traffic to it
    NOT_READY = "NOT_READY"  # was READY; its checks fail now
    BACKOFF = "BACKOFF"  # the process exited; it starts again after a delay
    STOPPING = "STOPPING"  # stop() was called; the process has not gone yet


@dataclass(frozen=True)
class Replica:
    """One replica as :meth:`Supervisor.poll` saw it."""

    spec: launch.ReplicaSpec
    phase: Phase
    pid: int | None
    rest_port: int | None
    grpc_port: int | None
    restarts: int
    started_at: float | None  # wall clock of the current process start
    ready_at: float | None  # wall clock of the last change to READY; None unless READY
    message: str
    last_error: str | None
    cgroup: str | None  # its CPU group directory (else its memory group), or None
    limits: str = ""  # what is enforced, or why not
    log_path: Path | None = None
    adopted: bool = False  # its process was started by an earlier supervisor
    last_exit: events.Exit | None = None  # how its last process ended, if one did

    @property
    def url(self) -> str | None:
        """The REST endpoint (``http://127.0.0.1:<port>``), while a process runs."""
        return None if self.rest_port is None else f"http://127.0.0.1:{self.rest_port}"


class Slot:
    """One replica's mutable state (the supervisor's own; :class:`Replica` is its view)."""

    def __init__(
        self, spec: launch.ReplicaSpec, files: launch.ReplicaFiles, backoff_s: float
    ) -> None:
        self.spec = spec
        self.files = files
        self.phase = Phase.STARTING
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.ticks: int | None = None
        self.adopted = False
        self.rest_port: int | None = None
        self.grpc_port: int | None = None
        self.restarts = 0
        self.backoff_s = backoff_s
        self.restart_at: float | None = None
        self.port_retries = 0
        self.port_retry_due = False  # the pending start is a port retry (not a restart)
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.ready_since: float | None = None  # on the supervisor's clock
        self.message = ""
        self.last_error: str | None = None
        self.group: cgroups.Group | None = None
        self.limits = ""
        self.log_offset = 0
        self.oom_kills: int | None = None  # in its memory group when the process started
        self.stop_deadline: float | None = None  # on the supervisor's clock
        self.stop_deadline_wall: float | None = None
        self.killed = False
        self.probe: tuple[int, concurrent.futures.Future[launch.Probe]] | None = None
        self.next_probe_at = 0.0
        self.probe_failures = 0
        self.last_exit: events.Exit | None = None

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None

    def view(self) -> Replica:
        group_dir = None
        if self.group is not None:
            group_dir = self.group.cpu_dir or self.group.memory_dir
        return Replica(
            spec=self.spec,
            phase=self.phase,
            pid=self.pid,
            rest_port=self.rest_port,
            grpc_port=self.grpc_port,
            restarts=self.restarts,
            started_at=self.started_at,
            ready_at=self.ready_at if self.phase == Phase.READY else None,
            message=self.message,
            last_error=self.last_error,
            cgroup=None if group_dir is None else str(group_dir),
            limits=self.limits,
            log_path=self.files.log,
            adopted=self.adopted,
            last_exit=self.last_exit,
        )

    def record(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "spec": self.spec.to_json(),
            "pid": self.pid,
            "start_ticks": self.ticks,
            "rest_port": self.rest_port,
            "grpc_port": self.grpc_port,
            "restarts": self.restarts,
            "backoff_s": self.backoff_s,
            "started_at": self.started_at,
            "ready": self.phase == Phase.READY,  # a supervisor that adopts it: READY (adopt)
            "cgroup_cpu": _str_or_none(self.group.cpu_dir if self.group else None),
            "cgroup_memory": _str_or_none(self.group.memory_dir if self.group else None),
            "cgroup_cpuacct": _str_or_none(self.group.cpuacct_dir if self.group else None),
            "limits": self.limits,
            "last_error": self.last_error,
            "stop_deadline": self.stop_deadline_wall,
            "log_offset": self.log_offset,
            "oom_kills": self.oom_kills,
            # For the CLI (describe, top -o wide), which reads these records:
            "phase": str(self.phase),
            "last_exit": self.last_exit.to_json() if self.last_exit is not None else None,
        }

    def registry_entry(self) -> dict[str, Any] | None:
        """The replica in the exporters' registry (``replicas.json``), while a process runs."""
        if self.pid is None:
            return None
        cpu_dir = self.group.cpu_dir if self.group is not None else None
        entry = registry.Replica(
            namespace=self.spec.namespace,
            service=self.spec.service,
            revision=self.spec.revision,
            pod=self.spec.pod,
            container=CONTAINER,
            pid=self.pid,
            cgroup=_str_or_none(cpu_dir),
            cpu_request_cores=self.spec.cpu_cores,
        )
        return entry.model_dump()


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _path_or_none(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


def adopt(slot: Slot, data: dict[str, Any], now: float, wall: float) -> None:
    """``slot`` as its record left it, for a live process a new supervisor adopts (``now``
    on the supervisor's clock, ``wall`` the wall clock): its pid, ports and start time;
    STOPPING when a stop was under way; READY when it was READY.

    An adopted replica that was READY stays READY until its checks fail as a READY
    one's do (3 in a row). Taken for STARTING until a first check answered within a
    starting replica's 0.2 s, a replica busy at its CPU quota would leave HAProxy's
    rotation and count as no capacity, when only the controller had restarted.

    Its ``ready_at`` is the adoption, not when it first became READY: the CPU exporter
    runs in the controller, so the CPU rates start again with it, and a rate over a
    window that is partly empty reads low (Prometheus divides the increase it saw by the
    whole window: 10, 15, 20, 24 % in the first four ticks, then about 25 %, measured
    after a ``kill -9`` of the controller). Counted from the adoption, the replica's CPU
    counts once its window is whole, as a new replica's does (``CPU_SETTLE_S``)."""
    pid = data.get("pid")
    slot.pid, slot.ticks, slot.adopted = pid, data.get("start_ticks"), True
    slot.rest_port, slot.grpc_port = data.get("rest_port"), data.get("grpc_port")
    slot.started_at = data.get("started_at")
    stop_wall = data.get("stop_deadline")
    if stop_wall is not None:
        slot.stop_deadline = now + max(0.0, stop_wall - wall)
        slot.stop_deadline_wall = stop_wall
        slot.phase = Phase.STOPPING
        slot.message = f"stopping: adopted pid {pid} (SIGTERM was sent before)"
    elif data.get("ready") is True:
        slot.phase = Phase.READY
        slot.ready_at, slot.ready_since = wall, now
        slot.message = f"adopted running pid {pid} (READY before); checking readiness"
    else:
        slot.message = f"adopted running pid {pid}; checking readiness"


def load(path: Path, directory: Path, backoff_s: float) -> tuple[Slot, dict[str, Any]] | None:
    """A replica record under ``directory`` as a slot (no process yet; ``backoff_s`` when the
    record has none) and its raw fields; None (and a warning) if it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        spec = launch.ReplicaSpec.from_json(data["spec"])
        if spec.pod != path.parent.name:
            raise ValueError(f"it names pod {spec.pod}")
        slot = Slot(spec, launch.ReplicaFiles.under(directory, spec.pod), backoff_s)
        slot.restarts = int(data.get("restarts") or 0)
        slot.backoff_s = float(data.get("backoff_s") or backoff_s)
        slot.log_offset = int(data.get("log_offset") or 0)
        slot.oom_kills = data.get("oom_kills")
        if slot.oom_kills is not None and not isinstance(slot.oom_kills, int):
            raise ValueError(f"oom_kills: expected an integer, got {slot.oom_kills!r}")
        slot.last_error = data.get("last_error")
        slot.last_exit = events.Exit.from_json(data.get("last_exit"))
        slot.limits = str(data.get("limits") or "")
        for key in ("pid", "start_ticks", "rest_port", "grpc_port"):
            if data.get(key) is not None and not isinstance(data[key], int):
                raise ValueError(f"{key}: expected an integer, got {data[key]!r}")
        for key in ("started_at", "stop_deadline"):
            if data.get(key) is not None and not isinstance(data[key], int | float):
                raise ValueError(f"{key}: expected a number, got {data[key]!r}")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("%s: not a replica record, left alone (%s)", path, exc)
        return None
    cpu_dir = _path_or_none(data.get("cgroup_cpu"))
    memory_dir = _path_or_none(data.get("cgroup_memory"))
    cpuacct_dir = _path_or_none(data.get("cgroup_cpuacct"))
    if cpu_dir is not None or memory_dir is not None:
        slot.group = cgroups.Group(spec.group_name, cpu_dir, memory_dir, cpuacct_dir)
    return slot, data
