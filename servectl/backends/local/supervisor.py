"""Run each replica as a model-server process and keep it running, like a kubelet.

The local runtime's controller decides how many replicas each revision has and calls this
supervisor once a tick (1 s): :meth:`Supervisor.start` and :meth:`Supervisor.stop` say what
should run, :meth:`Supervisor.poll` does the rest. No call but :meth:`Supervisor.shutdown`
waits on a process: starting is a ``fork``/``exec``, readiness checks run on a small thread
pool, and a stop is SIGTERM now and SIGKILL from a later ``poll`` once the grace period has
passed. With 20 replicas ``poll`` takes 0.5 ms (median; 5 ms at most while they start); when
many replicas crash at once, the work is spread over calls (:data:`POLL_BUDGET_S`).

**What runs.** ``tensorflow_model_server`` when it is on PATH, else servectl's own
TF-Serving-compatible server (``python -m servectl model-server``, docs/modelserver.md), one
process per replica, each on two free loopback ports chosen when it starts (gRPC and REST),
serving one model at one version::

    <dir>/replicas/<pod>/models.config      ModelServerConfig: the model, version N only
    <dir>/replicas/<pod>/monitoring.config  Prometheus metrics on the REST port
    <dir>/replicas/<pod>/batching.config    when the spec has batching
    <dir>/replicas/<pod>/replica.json       the record a new supervisor adopts from
    <dir>/logs/<pod>.log                    stdout and stderr, appended across restarts
    <dir>/replicas.json                     the exporters' replica registry

servectl's server is also told to bind loopback only (TF Serving binds ``0.0.0.0`` and has
no flag for it) and, with a CPU limit, to size TensorFlow's thread pools to it. A port can be
taken by another process between the choice and the bind; the server then exits saying
"already in use" and is started again at once on new ports (up to 3 times in a row), which
is not counted as a restart.

**Limits.** With a :class:`cgroups.Setup` that can limit, each replica gets its own group
(``<namespace>.<pod>``) with the spec's CPU cores and memory bytes; its process joins right
after it starts and the group is removed once the process has gone. Without one, replicas
run unlimited and :attr:`Supervisor.limits` says why.

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

Not thread-safe: call it from one thread (the controller's loop).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import errno
import fcntl
import http.client
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from servectl.backends.local import cgroups
from servectl.metrics.exporters import replicas as registry

log = logging.getLogger(__name__)

TF_SERVING_BINARY = "tensorflow_model_server"
"""The real TF Serving, preferred when on PATH."""
CONTAINER = "model-server"
"""The container name replicas have in the exporters' registry."""
METRICS_PATH = "/monitoring/prometheus/metrics"

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
GROUP_REMOVE_RETRY_S = 30.0
"""How long a group that could not be removed is retried (its last process may linger)."""

_POD_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?: [A-Z] [^\]]*\] ")
_RECORD_FORMAT = 1


# --------------------------------------------------------------------------- errors


class SupervisorError(Exception):
    """Base of the errors this module raises; the message says what to do."""


class InvalidSpecError(SupervisorError, ValueError):
    """A :class:`ReplicaSpec` field is out of range; the message names it."""


class ReplicaConflictError(SupervisorError):
    """``start`` named a pod that runs another spec."""


class UnknownReplicaError(SupervisorError, LookupError):
    """No replica has that pod name."""


class NotRunningError(SupervisorError):
    """The replica has no process now (it is waiting to restart)."""


class ServerStartError(SupervisorError):
    """The model-server command could not be executed."""


class DirectoryBusyError(SupervisorError):
    """Another supervisor manages this directory."""


class ClosedError(SupervisorError):
    """The supervisor was shut down or closed."""


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class ReplicaSpec:
    """What one replica runs: one model version, with its limits."""

    namespace: str
    service: str
    revision: str
    pod: str  # unique name, [a-z0-9-]
    model_name: str
    base_path: Path  # absolute; holds the numbered version directories
    version: int
    cpu_cores: float | None = None
    memory_bytes: int | None = None
    batching: tuple[int, int] | None = None  # (max_batch_size, batch_timeout_micros)

    def __post_init__(self) -> None:
        for name in ("namespace", "pod"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _POD_NAME.match(value):
                raise InvalidSpecError(
                    f"{name}: {value!r} is not a DNS label; use 1-63 characters of a-z, 0-9 "
                    "and '-', starting and ending with a letter or digit"
                )
        for name in ("service", "revision", "model_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or not value.isprintable():
                raise InvalidSpecError(
                    f"{name}: expected a non-empty printable name, got {value!r}"
                )
        if not isinstance(self.base_path, Path) or not self.base_path.is_absolute():
            raise InvalidSpecError(
                f"base_path: {self.base_path!r} is not absolute; pass Path(...).resolve() "
                "(the server runs in the replica's directory)"
            )
        if "\n" in str(self.base_path):
            raise InvalidSpecError(f"base_path: {self.base_path!r} holds a newline")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise InvalidSpecError(f"version: expected an integer >= 0, got {self.version!r}")
        if self.cpu_cores is not None and not (
            isinstance(self.cpu_cores, int | float)
            and math.isfinite(self.cpu_cores)
            and self.cpu_cores > 0
        ):
            raise InvalidSpecError(
                f"cpu_cores: expected a positive number of cores or None, got {self.cpu_cores!r}"
            )
        if self.memory_bytes is not None and (
            isinstance(self.memory_bytes, bool)
            or not isinstance(self.memory_bytes, int)
            or self.memory_bytes <= 0
        ):
            raise InvalidSpecError(
                f"memory_bytes: expected a positive integer or None, got {self.memory_bytes!r}"
            )
        if self.batching is not None:
            size, timeout = self.batching
            if size < 1 or timeout < 0:
                raise InvalidSpecError(
                    f"batching: expected (max_batch_size >= 1, batch_timeout_micros >= 0), "
                    f"got {self.batching!r}"
                )

    @property
    def group_name(self) -> str:
        """The replica's cgroup name (one path segment, unique per namespace and pod)."""
        return f"{self.namespace}.{self.pod}"

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "service": self.service,
            "revision": self.revision,
            "pod": self.pod,
            "model_name": self.model_name,
            "base_path": str(self.base_path),
            "version": self.version,
            "cpu_cores": self.cpu_cores,
            "memory_bytes": self.memory_bytes,
            "batching": list(self.batching) if self.batching is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplicaSpec:
        batching = data.get("batching")
        return cls(
            namespace=data["namespace"],
            service=data["service"],
            revision=data["revision"],
            pod=data["pod"],
            model_name=data["model_name"],
            base_path=Path(data["base_path"]),
            version=data["version"],
            cpu_cores=data.get("cpu_cores"),
            memory_bytes=data.get("memory_bytes"),
            batching=(int(batching[0]), int(batching[1])) if batching is not None else None,
        )


class Phase(enum.StrEnum):
    STARTING = "STARTING"  # the process runs; its version is not AVAILABLE yet
    READY = "READY"  # the version is AVAILABLE: route traffic to it
    NOT_READY = "NOT_READY"  # was READY; its checks fail now
    BACKOFF = "BACKOFF"  # the process exited; it starts again after a delay
    STOPPING = "STOPPING"  # stop() was called; the process has not gone yet


@dataclass(frozen=True)
class Replica:
    """One replica as :meth:`Supervisor.poll` saw it."""

    spec: ReplicaSpec
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

    @property
    def url(self) -> str | None:
        """The REST endpoint (``http://127.0.0.1:<port>``), while a process runs."""
        return None if self.rest_port is None else f"http://127.0.0.1:{self.rest_port}"


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class ReplicaFiles:
    """Where one replica's files are."""

    directory: Path
    model_config: Path
    monitoring_config: Path
    batching_config: Path
    record: Path
    log: Path

    @classmethod
    def under(cls, root: Path, pod: str) -> ReplicaFiles:
        directory = root / "replicas" / pod
        return cls(
            directory=directory,
            model_config=directory / "models.config",
            monitoring_config=directory / "monitoring.config",
            batching_config=directory / "batching.config",
            record=directory / "replica.json",
            log=root / "logs" / f"{pod}.log",
        )


def _proto_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def model_config_text(spec: ReplicaSpec) -> str:
    """The replica's ``--model_config_file``: its model, its revision's version only."""
    return (
        "model_config_list {\n"
        "  config {\n"
        f"    name: {_proto_string(spec.model_name)}\n"
        f"    base_path: {_proto_string(str(spec.base_path))}\n"
        '    model_platform: "tensorflow"\n'
        f"    model_version_policy {{ specific {{ versions: {spec.version} }} }}\n"
        "  }\n"
        "}\n"
    )


def monitoring_config_text() -> str:
    return f"prometheus_config {{ enable: true, path: {_proto_string(METRICS_PATH)} }}\n"


def batching_config_text(max_batch_size: int, batch_timeout_micros: int) -> str:
    return (
        f"max_batch_size {{ value: {max_batch_size} }}\n"
        f"batch_timeout_micros {{ value: {batch_timeout_micros} }}\n"
    )


def is_tf_serving(command: Sequence[str]) -> bool:
    """Whether ``command`` runs TF Serving's binary (which lacks servectl's bind flags)."""
    return Path(command[0]).name.startswith(TF_SERVING_BINARY)


def default_command() -> list[str]:
    """``tensorflow_model_server`` when on PATH, else servectl's own model server."""
    found = shutil.which(TF_SERVING_BINARY)
    if found is not None:
        return [found]
    return [sys.executable, "-m", "servectl", "model-server"]


def server_argv(
    command: Sequence[str], spec: ReplicaSpec, files: ReplicaFiles, rest_port: int, grpc_port: int
) -> list[str]:
    """The full command line of one replica's server."""
    argv = [
        *command,
        f"--port={grpc_port}",
        f"--rest_api_port={rest_port}",
        f"--model_config_file={files.model_config}",
        f"--monitoring_config_file={files.monitoring_config}",
        "--file_system_poll_wait_seconds=0",
    ]
    if not is_tf_serving(command):
        argv += ["--rest_api_bind_address=127.0.0.1", "--grpc_bind_address=127.0.0.1"]
    if spec.cpu_cores is not None:
        argv += [
            f"--tensorflow_intra_op_parallelism={max(1, math.ceil(spec.cpu_cores))}",
            "--tensorflow_inter_op_parallelism=1",
        ]
    if spec.batching is not None:
        argv += ["--enable_batching", f"--batching_parameters_file={files.batching_config}"]
    return argv


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- processes


def _free_port() -> int:
    """A port that is free on 127.0.0.1 now (another process may take it before the server
    binds it; the supervisor then retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot)."""
    fields = _proc_stat(pid)
    return None if fields is None else int(fields[19])


def alive(pid: int, ticks: int | None) -> bool:
    """Whether ``pid`` runs and is the process that started at ``ticks`` (a zombie is dead)."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return False
    return ticks is None or int(fields[19]) == ticks


def oom_kills(group_dir: Path | None) -> int | None:
    """How many processes the kernel has OOM-killed in a memory group (``oom_kill`` in
    v2's ``memory.events`` or v1's ``memory.oom_control``), or None where it cannot say."""
    if group_dir is None:
        return None
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (group_dir / name).read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def rss_bytes(pid: int) -> int | None:
    """The process's resident memory (``VmRSS``), or None if it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _describe_exit(code: int | None, pid: int) -> str:
    if code is None:
        return f"exited (exit code unknown: pid {pid} was adopted, not this supervisor's child)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def _log_tail(path: Path, offset: int, limit: int = 16384) -> str:
    """What the log got since ``offset`` (its last ``limit`` bytes)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_line(text: str, limit: int = 400) -> str:
    for line in reversed(text.splitlines()):
        line = _LOG_PREFIX.sub("", line.strip())
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


# --------------------------------------------------------------------------- readiness


@dataclass(frozen=True)
class _Probe:
    ok: bool
    detail: str
    answered: bool  # the server answered (an error it reports, not a refused connection)


def check_version(port: int, model: str, version: int, timeout_s: float) -> _Probe:
    """Ask the server on ``port`` whether ``model`` ``version`` is AVAILABLE (REST status)."""
    path = f"/v1/models/{urllib.parse.quote(model, safe='')}/versions/{version}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        status, body = response.status, response.read(65536)
    except TimeoutError:
        return _Probe(False, f"no answer from port {port} within {timeout_s:g} s", False)
    except ConnectionRefusedError:
        return _Probe(False, f"port {port} refuses connections (still loading?)", False)
    except (OSError, http.client.HTTPException) as exc:
        return _Probe(False, f"status check on port {port} failed: {exc!r}", False)
    finally:
        conn.close()
    try:
        data = json.loads(body)
    except ValueError:
        return _Probe(False, f"GET {path}: HTTP {status}, not JSON", True)
    if status != 200 or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else None
        return _Probe(False, f"GET {path}: HTTP {status}: {error or body[:200]!r}", True)
    for entry in data.get("model_version_status") or []:
        if isinstance(entry, dict) and str(entry.get("version")) == str(version):
            state = entry.get("state")
            if state == "AVAILABLE":
                return _Probe(True, f"version {version} of {model} is AVAILABLE", True)
            status_obj = entry.get("status") or {}
            error = status_obj.get("error_message") if isinstance(status_obj, dict) else None
            detail = f"version {version} of {model} is {state}"
            return _Probe(False, f"{detail}: {error}" if error else detail, bool(error))
    return _Probe(False, f"version {version} of {model} is not listed by {path}", True)


# --------------------------------------------------------------------------- the supervisor


class _Slot:
    """One replica's mutable state (the supervisor's own; :class:`Replica` is its view)."""

    def __init__(self, spec: ReplicaSpec, files: ReplicaFiles) -> None:
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
        self.backoff_s = BACKOFF_INITIAL_S
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
        self.probe: tuple[int, concurrent.futures.Future[_Probe]] | None = None
        self.next_probe_at = 0.0
        self.probe_failures = 0

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
        )

    def record(self) -> dict[str, Any]:
        return {
            "format": _RECORD_FORMAT,
            "spec": self.spec.to_json(),
            "pid": self.pid,
            "start_ticks": self.ticks,
            "rest_port": self.rest_port,
            "grpc_port": self.grpc_port,
            "restarts": self.restarts,
            "backoff_s": self.backoff_s,
            "started_at": self.started_at,
            "cgroup_cpu": _str_or_none(self.group.cpu_dir if self.group else None),
            "cgroup_memory": _str_or_none(self.group.memory_dir if self.group else None),
            "cgroup_cpuacct": _str_or_none(self.group.cpuacct_dir if self.group else None),
            "limits": self.limits,
            "last_error": self.last_error,
            "stop_deadline": self.stop_deadline_wall,
            "log_offset": self.log_offset,
            "oom_kills": self.oom_kills,
        }


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _path_or_none(value: object) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


class Supervisor:
    """Runs replicas as model-server processes under ``directory`` (module docstring).

    ``cgroups``: where CPU and memory limits go (:func:`cgroups.detect`); None runs
    without. ``command``: the server command, flags excluded (default
    :func:`default_command`); paths in it must be absolute, as the server runs in its
    replica's directory. ``clock`` (monotonic seconds) drives probes, backoff and stop
    deadlines; ``wall`` stamps ``started_at`` and ``ready_at``.
    """

    _orphan_groups: list[tuple[cgroups.Group, float]]  # removal failed: retried until then

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
        self._setup = cgroups
        self._command = list(command) if command is not None else default_command()
        if not self._command:
            raise ValueError("command: expected the server's argv, got an empty list")
        self._clock = clock
        self._wall = wall
        self._slots: dict[str, _Slot] = {}
        self._orphan_groups = []
        self._registry_text: str | None = None
        self._budget_end = 0.0  # restarts happen in poll() only, within its budget
        self._spawn_cost = 0.01  # seconds a restart took lately (a moving average)
        self._spawned_this_poll = 0
        self._resume_at = ""  # the pod the next poll starts with (after one that ran out)
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
        if self._setup is None:
            return "no cgroup limits: the supervisor was given no cgroup setup"
        return self._setup.describe()

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
        files = ReplicaFiles.under(self.directory, spec.pod)
        slot = _Slot(spec, files)
        files.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(slot, self._clock(), fresh=True)
        except ServerStartError:
            self._release_group(slot)
            shutil.rmtree(files.directory, ignore_errors=True)
            raise
        self._slots[spec.pod] = slot
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
        self._retry_orphan_groups(now)
        self._write_registry()
        return self.replicas()

    def replicas(self) -> list[Replica]:
        """Every replica as of the last call, by pod name."""
        return [self._slots[pod].view() for pod in sorted(self._slots)]

    def get(self, pod: str) -> Replica | None:
        slot = self._slots.get(pod)
        return None if slot is None else slot.view()

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
                killed, deadline = True, time.monotonic() + 5.0
            elif killed and time.monotonic() >= deadline:
                left = ", ".join(f"{s.spec.pod} (pid {s.pid})" for s in self._slots.values())
                log.warning("replicas still running 5 s after SIGKILL: %s", left)
                break
            time.sleep(0.02)
        self._write_registry()
        self.close()

    def close(self) -> None:
        """Stop supervising without stopping the replicas (a new supervisor adopts them)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    # -- processes ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(
                f"the supervisor of {self.directory} was closed; create a new Supervisor "
                "(it adopts the replicas still running)"
            )

    def _take_lock(self) -> IO[str]:
        path = self.directory / "supervisor.lock"
        handle = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise DirectoryBusyError(
                    f"another supervisor (pid {holder}) manages {self.directory}; stop it "
                    "(or close() it) first, or use another directory"
                ) from None
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return handle

    def _pick_ports(self) -> tuple[int, int]:
        taken = {p for s in self._slots.values() for p in (s.rest_port, s.grpc_port) if p}
        ports: list[int] = []
        for _ in range(100):
            port = _free_port()
            if port not in taken and port not in ports:
                ports.append(port)
                if len(ports) == 2:
                    return ports[0], ports[1]
        raise ServerStartError("no two free loopback ports found in 100 tries; free some ports")

    def _ensure_group(self, slot: _Slot) -> None:
        setup, spec = self._setup, slot.spec
        wanted = []
        if spec.cpu_cores is not None:
            wanted.append(f"{spec.cpu_cores:g} cores")
        if spec.memory_bytes is not None:
            wanted.append(f"{spec.memory_bytes} bytes of memory")
        if setup is None or not (setup.limits_cpu or setup.limits_memory):
            slot.limits = ("not enforced: " + self.limits) if wanted else "none asked"
            return
        if slot.group is None:
            try:
                slot.group = cgroups.create(
                    setup, spec.group_name, cpu_cores=spec.cpu_cores, memory_bytes=spec.memory_bytes
                )
            except (cgroups.CgroupError, OSError) as exc:
                slot.limits = f"not enforced: {exc}"
                return
        enforced: list[str] = []
        missing: list[str] = []
        if spec.cpu_cores is not None:
            (enforced if setup.limits_cpu else missing).append(f"cpu {spec.cpu_cores:g} cores")
        if spec.memory_bytes is not None:
            (enforced if setup.limits_memory else missing).append(f"memory {spec.memory_bytes} B")
        parts = []
        if enforced:
            parts.append(", ".join(enforced) + f" in cgroup {spec.group_name}")
        if missing:
            parts.append(", ".join(missing) + " not enforced (" + "; ".join(setup.notes) + ")")
        slot.limits = "; ".join(parts) or f"no limits asked; accounted in cgroup {spec.group_name}"

    def _spawn(self, slot: _Slot, now: float, *, fresh: bool = False) -> None:
        """Start the slot's process on new ports (raises ServerStartError if it cannot);
        ``fresh``: a new replica, whose config files are (re)written."""
        spec, files = slot.spec, slot.files
        rest_port, grpc_port = self._pick_ports()
        if fresh or not files.model_config.exists():  # they depend on the spec alone
            files.directory.mkdir(parents=True, exist_ok=True)
            files.model_config.write_text(model_config_text(spec), encoding="utf-8")
            files.monitoring_config.write_text(monitoring_config_text(), encoding="utf-8")
            if spec.batching is not None:
                files.batching_config.write_text(batching_config_text(*spec.batching), "utf-8")
        self._ensure_group(slot)
        argv = server_argv(self._command, spec, files, rest_port, grpc_port)
        files.log.parent.mkdir(parents=True, exist_ok=True)
        wall = self._wall()
        with files.log.open("ab") as out:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
            marker = (
                f"==== servectl supervisor {stamp}: starting {spec.pod} ({spec.revision}, "
                f"{spec.model_name} v{spec.version}), restart {slot.restarts}, "
                f"REST {rest_port}, gRPC {grpc_port}: {' '.join(argv)}\n"
            )
            out.write(marker.encode())
            out.flush()
            offset = out.tell()
            try:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=files.directory,
                    start_new_session=True,
                )
            except OSError as exc:
                out.write(f"==== cannot start: {exc}\n".encode())
                raise ServerStartError(
                    f"cannot run the model server {self._command[0]!r}: {exc.strerror or exc}; "
                    "install tensorflow_model_server or servectl's serving extra "
                    "(pip install 'servectl[serving]'), or pass command="
                ) from exc
        if slot.group is not None:
            try:
                slot.group.add(process.pid)
            except cgroups.CgroupError as exc:
                slot.limits = f"not enforced: {exc}"
        slot.oom_kills = oom_kills(slot.group.memory_dir if slot.group else None)
        slot.process, slot.pid, slot.adopted = process, process.pid, False
        slot.ticks = start_ticks(process.pid)
        slot.rest_port, slot.grpc_port = rest_port, grpc_port
        slot.started_at, slot.ready_at, slot.ready_since = wall, None, None
        slot.log_offset = offset
        slot.phase = Phase.STARTING
        slot.restart_at = None
        slot.probe, slot.next_probe_at, slot.probe_failures = None, now, 0
        slot.message = f"started pid {process.pid}; waiting for version {spec.version} to load"
        self._save(slot)

    def _signal(self, slot: _Slot, sig: int) -> None:
        if slot.process is not None:
            with contextlib.suppress(ProcessLookupError):
                slot.process.send_signal(sig)  # no-op once reaped
        elif slot.pid is not None and alive(slot.pid, slot.ticks):  # never a reused pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.pid, sig)

    def _exit_code(self, slot: _Slot) -> tuple[bool, int | None]:
        """(exited, its code: None when unknown)."""
        if slot.process is not None:
            code = slot.process.poll()
            return code is not None, code
        if slot.pid is None:
            return True, None
        return not alive(slot.pid, slot.ticks), None

    # -- the state machine --------------------------------------------------------------

    def _step(self, slot: _Slot, now: float) -> None:
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

    def _submit_probe(self, slot: _Slot, now: float) -> None:
        """Start a readiness check; the next is due an interval after this one began (so
        a controller that polls once a second gets one check a second while starting)."""
        assert slot.pid is not None and slot.rest_port is not None
        ready = slot.phase == Phase.READY
        timeout = (
            READY_PROBE_TIMEOUT_S if ready or slot.phase == Phase.NOT_READY else PROBE_TIMEOUT_S
        )
        slot.next_probe_at = now + (READY_PROBE_INTERVAL_S if ready else PROBE_INTERVAL_S)
        future = self._pool.submit(
            check_version, slot.rest_port, slot.spec.model_name, slot.spec.version, timeout
        )
        slot.probe = (slot.pid, future)

    def _collect_probe(self, slot: _Slot, now: float) -> None:
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
            result = _Probe(False, f"readiness check failed: {exc!r}", False)
        self._apply_probe(slot, result, now)

    def _apply_probe(self, slot: _Slot, result: _Probe, now: float) -> None:
        spec = slot.spec
        if result.ok:
            slot.probe_failures = 0
            slot.port_retries = 0
            if slot.phase != Phase.READY:
                slot.phase = Phase.READY
                slot.ready_at, slot.ready_since = self._wall(), now
                slot.next_probe_at = now + READY_PROBE_INTERVAL_S
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
            slot.ready_at = slot.ready_since = None
        if slot.phase == Phase.NOT_READY:
            slot.message = f"not ready (pid {slot.pid}): {result.detail}"
        else:
            slot.message = f"starting (pid {slot.pid}): {result.detail}"
        if result.answered:
            slot.last_error = result.detail

    def _exited(self, slot: _Slot, code: int | None, now: float) -> None:
        pid = slot.pid
        assert pid is not None
        slot.probe = None
        tail = _log_tail(slot.files.log, slot.log_offset)
        slot.process, slot.pid, slot.ticks = None, None, None
        slot.started_at = slot.ready_at = slot.ready_since = None
        if slot.stopping:
            self._forget(slot)
            return
        reason = _describe_exit(code, pid)
        line = _last_line(tail)
        oom = self._oom_killed(slot)
        if oom is not None:
            reason = f"{oom} ({reason})"
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
        self._crashed(slot, reason, now)

    def _oom_killed(self, slot: _Slot) -> str | None:
        """What to say when the kernel killed the process for its memory limit, or None."""
        memory_dir = slot.group.memory_dir if slot.group is not None else None
        before, after = slot.oom_kills, oom_kills(memory_dir)
        if before is None or after is None or after <= before:
            return None
        limit = slot.spec.memory_bytes
        size = "" if limit is None else f" of {limit / 2**20:g} MiB"
        return (
            f"OOM-killed: the server needed more than its memory limit{size}; raise "
            "memory_bytes (servectl's server with TensorFlow uses about 260 MiB)"
        )

    def _crashed(self, slot: _Slot, reason: str, now: float) -> None:
        delay = slot.backoff_s
        slot.backoff_s = min(BACKOFF_MAX_S, slot.backoff_s * 2)
        slot.port_retries = 0
        slot.phase = Phase.BACKOFF
        slot.restart_at = now + delay
        slot.last_error = reason
        slot.message = f"{reason}; restarting in {delay:g} s"
        self._save(slot)

    def _restart(self, slot: _Slot, now: float) -> None:
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
            self._crashed(slot, str(exc), now)
            return
        finally:
            self._spawn_cost = 0.7 * self._spawn_cost + 0.3 * (time.perf_counter() - began)
        if not counted:
            slot.message = (
                f"a port was taken before the server bound it; started again on new ports "
                f"(try {slot.port_retries} of {PORT_RETRIES}): pid {slot.pid}"
            )

    def _forget(self, slot: _Slot) -> None:
        slot.probe = None
        self._slots.pop(slot.spec.pod, None)
        self._release_group(slot)
        shutil.rmtree(slot.files.directory, ignore_errors=True)

    def _release_group(self, slot: _Slot) -> None:
        if slot.group is None:
            return
        group, slot.group = slot.group, None
        try:
            group.remove()
        except cgroups.CgroupError:
            self._orphan_groups.append((group, self._clock() + GROUP_REMOVE_RETRY_S))

    def _retry_orphan_groups(self, now: float) -> None:
        left = []
        for group, until in self._orphan_groups:
            try:
                group.remove()
            except cgroups.CgroupError as exc:
                if now < until:
                    left.append((group, until))
                else:
                    log.warning("giving up removing cgroup %s: %s", group.name, exc)
        self._orphan_groups = left

    # -- files --------------------------------------------------------------------------

    def _save(self, slot: _Slot) -> None:
        slot.files.directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(slot.files.record, json.dumps(slot.record(), indent=2) + "\n")

    def _write_registry(self) -> None:
        entries = []
        for pod in sorted(self._slots):
            slot = self._slots[pod]
            if slot.pid is None:
                continue
            cpu_dir = slot.group.cpu_dir if slot.group is not None else None
            entry = registry.Replica(
                namespace=slot.spec.namespace,
                service=slot.spec.service,
                revision=slot.spec.revision,
                pod=slot.spec.pod,
                container=CONTAINER,
                pid=slot.pid,
                cgroup=_str_or_none(cpu_dir),
                cpu_request_cores=slot.spec.cpu_cores,
            )
            entries.append(entry.model_dump())
        text = json.dumps({"replicas": entries}, indent=2) + "\n"
        if text != self._registry_text:
            _write_atomic(self.registry_path, text)
            self._registry_text = text

    # -- adoption -----------------------------------------------------------------------

    def _load(self, path: Path) -> tuple[_Slot, dict[str, Any]] | None:
        """A replica record as a slot (no process yet) and its raw fields; None if invalid."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            spec = ReplicaSpec.from_json(data["spec"])
            if spec.pod != path.parent.name:
                raise ValueError(f"it names pod {spec.pod}")
            slot = _Slot(spec, ReplicaFiles.under(self.directory, spec.pod))
            slot.restarts = int(data.get("restarts") or 0)
            slot.backoff_s = float(data.get("backoff_s") or BACKOFF_INITIAL_S)
            slot.log_offset = int(data.get("log_offset") or 0)
            slot.oom_kills = data.get("oom_kills")
            if slot.oom_kills is not None and not isinstance(slot.oom_kills, int):
                raise ValueError(f"oom_kills: expected an integer, got {slot.oom_kills!r}")
            slot.last_error = data.get("last_error")
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

    def _adopt(self) -> None:
        """Adopt the replicas recorded under the directory (module docstring)."""
        now, wall = self._clock(), self._wall()
        gone: list[_Slot] = []
        for path in sorted((self.directory / "replicas").glob("*/replica.json")):
            loaded = self._load(path)
            if loaded is None:
                continue
            slot, data = loaded
            self._slots[slot.spec.pod] = slot
            pid, ticks, stop_wall = (
                data.get("pid"),
                data.get("start_ticks"),
                data.get("stop_deadline"),
            )
            if pid is not None and pid > 0 and alive(pid, ticks):
                slot.pid, slot.ticks, slot.adopted = pid, ticks, True
                slot.rest_port, slot.grpc_port = data.get("rest_port"), data.get("grpc_port")
                slot.started_at = data.get("started_at")
                if stop_wall is not None:
                    slot.stop_deadline = now + max(0.0, stop_wall - wall)
                    slot.stop_deadline_wall = stop_wall
                    slot.phase = Phase.STOPPING
                    slot.message = f"stopping: adopted pid {pid} (SIGTERM was sent before)"
                else:
                    slot.message = f"adopted running pid {pid}; checking readiness"
                    if slot.rest_port is not None:
                        self._submit_probe(slot, now)
            elif stop_wall is not None:
                gone.append(slot)  # it was being stopped, and has gone
            else:
                what = "its process" if pid is None else f"pid {pid}"
                reason = f"{what} was not running when the supervisor started (exit code unknown)"
                line = _last_line(_log_tail(slot.files.log, slot.log_offset))
                self._crashed(slot, reason + (f": {line}" if line else ""), now)
        for slot in gone:
            self._forget(slot)
        probes = [s.probe[1] for s in self._slots.values() if s.probe is not None]
        if probes:
            concurrent.futures.wait(probes, timeout=ADOPT_WAIT_S)
            for slot in self._slots.values():
                self._collect_probe(slot, now)
        self._write_registry()
