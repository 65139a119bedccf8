"""What one replica is to the supervisor: its spec, its files, its server's command line,
how the server is started and how it is asked whether its version is ready.

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
"already in use" and the supervisor (:mod:`servectl.backends.local.supervisor`) starts it
again at once on new ports (up to 3 times in a row), which is not counted as a restart.

**Ready** is TF Serving's REST status (``GET /v1/models/<m>/versions/<v>`` says
``AVAILABLE``): :func:`check_version` asks it; the supervisor decides when and what follows.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl import processes

TF_SERVING_BINARY = "tensorflow_model_server"
"""The real TF Serving, preferred when on PATH."""
METRICS_PATH = "/monitoring/prometheus/metrics"

_POD_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?: [A-Z] [^\]]*\] ")


class SupervisorError(Exception):
    """Base of the supervisor's errors; the message says what to do."""


class InvalidSpecError(SupervisorError, ValueError):
    """A :class:`ReplicaSpec` field is out of range; the message names it."""


class ServerStartError(SupervisorError):
    """The model-server command could not be executed."""


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


def write_config_files(spec: ReplicaSpec, files: ReplicaFiles) -> None:
    """The replica's config files (they depend on the spec alone)."""
    files.directory.mkdir(parents=True, exist_ok=True)
    files.model_config.write_text(model_config_text(spec), encoding="utf-8")
    files.monitoring_config.write_text(monitoring_config_text(), encoding="utf-8")
    if spec.batching is not None:
        files.batching_config.write_text(batching_config_text(*spec.batching), "utf-8")


def start_server(
    command: Sequence[str],
    spec: ReplicaSpec,
    files: ReplicaFiles,
    rest_port: int,
    grpc_port: int,
    *,
    restarts: int,
    wall: float,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the replica's server in its own session (so it outlives the supervisor), its
    output appended to its log after a marker line that says what starts (``wall``: now);
    return the process and the log's offset after the marker. Raises
    :class:`ServerStartError` when the command cannot be executed."""
    argv = server_argv(command, spec, files, rest_port, grpc_port)
    files.log.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
    marker = (
        f"==== servectl supervisor {stamp}: starting {spec.pod} ({spec.revision}, "
        f"{spec.model_name} v{spec.version}), restart {restarts}, "
        f"REST {rest_port}, gRPC {grpc_port}: {' '.join(argv)}\n"
    )
    try:
        return processes.start_logged(argv, files.log, header=marker, cwd=files.directory)
    except OSError as exc:
        with files.log.open("ab") as out:
            out.write(f"==== cannot start: {exc}\n".encode())
        raise ServerStartError(
            f"cannot run the model server {command[0]!r}: {exc.strerror or exc}; "
            "install tensorflow_model_server or servectl's serving extra "
            "(pip install 'servectl[serving]'), or pass command="
        ) from exc


# --------------------------------------------------------------------------- readiness


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    answered: bool  # the server answered (an error it reports, not a refused connection)


def check_version(port: int, model: str, version: int, timeout_s: float) -> Probe:
    """Ask the server on ``port`` whether ``model`` ``version`` is AVAILABLE (REST status)."""
    path = f"/v1/models/{urllib.parse.quote(model, safe='')}/versions/{version}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        status, body = response.status, response.read(65536)
    except TimeoutError:
        return Probe(False, f"no answer from port {port} within {timeout_s:g} s", False)
    except ConnectionRefusedError:
        return Probe(False, f"port {port} refuses connections (still loading?)", False)
    except (OSError, http.client.HTTPException) as exc:
        return Probe(False, f"status check on port {port} failed: {exc!r}", False)
    finally:
        conn.close()
    try:
        data = json.loads(body)
    except ValueError:
        return Probe(False, f"GET {path}: HTTP {status}, not JSON", True)
    if status != 200 or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else None
        return Probe(False, f"GET {path}: HTTP {status}: {error or body[:200]!r}", True)
    for entry in data.get("model_version_status") or []:
        if isinstance(entry, dict) and str(entry.get("version")) == str(version):
            state = entry.get("state")
            if state == "AVAILABLE":
                return Probe(True, f"version {version} of {model} is AVAILABLE", True)
            status_obj = entry.get("status") or {}
            error = status_obj.get("error_message") if isinstance(status_obj, dict) else None
            detail = f"version {version} of {model} is {state}"
            return Probe(False, f"{detail}: {error}" if error else detail, bool(error))
    return Probe(False, f"version {version} of {model} is not listed by {path}", True)


def last_line(text: str, limit: int = 400) -> str:
    """The last line of a server's log text that says something, without TF Serving's
    ``<date>: E <file>] `` prefix, cut to ``limit`` characters: what an exit message quotes."""
    for line in reversed(text.splitlines()):
        line = _LOG_PREFIX.sub("", line.strip())
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""
