"""The replica registry: which local processes are replicas, read from a JSON file.

The local runtime writes the file (atomically: write a temporary file, then rename) each time
it starts or stops a replica; the exporters re-read it when it changes, so a scrape always
describes the replicas running now::

    {"replicas": [{"namespace": "default", "service": "resnet", "revision": "resnet-v2",
                   "pod": "resnet-v2-0", "container": "model-server", "pid": 1234,
                   "cgroup": "/sys/fs/cgroup/cpu/servectl/resnet-v2-0",
                   "cpu_request_cores": 1.0}]}

A missing file means no replicas. A malformed file is reported (once per version of the file)
and the last good list is kept, so a bad write never blanks the metrics.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Protocol

import pydantic
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

Warn = Callable[[str], None]

Name = Annotated[str, Field(min_length=1)]


def warn_to_stderr(message: str) -> None:
    """The default warning sink: one line on stderr (looked up at call time)."""
    print(f"servectl exporter: {message}", file=sys.stderr, flush=True)


class Replica(BaseModel):
    """One replica: a model-server process standing in for one Kubernetes pod."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: Name
    service: Name = Field(description="The ModelService; label servectl.io/service.")
    revision: Name = Field(description="The revision; label servectl.io/revision.")
    pod: Name = Field(description="The replica's name, unique within its namespace.")
    container: Name = "model-server"
    pid: int = Field(gt=0, description="The model server's process id (host PID namespace).")
    cgroup: Name | None = Field(
        default=None,
        description="The replica's cgroup directory (v2, or any v1 hierarchy), or null when "
        "the runtime could not create one; CPU is then read from /proc/<pid>/stat.",
    )
    cpu_request_cores: float | None = Field(
        default=None,
        gt=0,
        description="The CPU the replica was given, in cores; null exports no request.",
    )


class ReplicaList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: list[Replica]


class ReplicasFileError(ValueError):
    """The replicas file is not valid; the message names the file and the fields."""


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def parse_replicas(text: str, source: str = "<replicas>") -> tuple[Replica, ...]:
    """Parse the replicas JSON; raise ReplicasFileError naming each bad field.

    Errors read like ``replicas.json: replicas[2].pid: Input should be greater than 0``.
    A pod listed twice in one namespace is an error too: its series would collide.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplicasFileError(f"{source}: not JSON: {exc}") from exc
    try:
        parsed = ReplicaList.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ReplicasFileError(f"{source}: " + "; ".join(problems)) from None
    seen: dict[tuple[str, str], int] = {}
    for index, replica in enumerate(parsed.replicas):
        key = (replica.namespace, replica.pod)
        if key in seen:
            raise ReplicasFileError(
                f"{source}: replicas[{index}].pod: {replica.namespace}/{replica.pod} is listed "
                f"twice (also replicas[{seen[key]}]); pods are unique within a namespace"
            )
        seen[key] = index
    return tuple(parsed.replicas)


class ReplicaSource(Protocol):
    """Where the collectors get the current replicas from, on every scrape."""

    def replicas(self) -> Sequence[Replica]: ...


@dataclass(frozen=True)
class StaticReplicas:
    """A fixed list of replicas (tests, and embedding the exporters in the runtime)."""

    items: tuple[Replica, ...] = ()

    def replicas(self) -> Sequence[Replica]:
        return self.items


class ReplicaFile:
    """The replicas file, re-read when its (inode, size, mtime) changes.

    ``replicas()`` never raises for a missing or malformed file: missing means no
    replicas; malformed keeps the last good list and sets ``error`` (and warns once per
    version of the file). Safe to call from concurrent scrapes.
    """

    def __init__(self, path: str | os.PathLike[str], warn: Warn | None = None) -> None:
        self.path = Path(path)
        self._warn = warn
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._replicas: tuple[Replica, ...] = ()
        self.error: str | None = None

    def _emit(self, message: str) -> None:
        (self._warn or warn_to_stderr)(message)

    def replicas(self) -> Sequence[Replica]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._stamp, self._replicas, self.error = None, (), None
                return self._replicas
            except OSError as exc:
                return self._failed(None, f"{self.path}: cannot stat: {exc.strerror}")
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp:
                return self._replicas
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                self._stamp, self._replicas, self.error = None, (), None
                return self._replicas
            except (OSError, UnicodeDecodeError) as exc:
                return self._failed(stamp, f"{self.path}: cannot read: {exc}")
            try:
                self._replicas = parse_replicas(text, str(self.path))
            except ReplicasFileError as exc:
                return self._failed(stamp, str(exc))
            self._stamp, self.error = stamp, None
            return self._replicas

    def _failed(self, stamp: tuple[int, int, int] | None, message: str) -> Sequence[Replica]:
        if stamp != self._stamp or message != self.error:
            kept = len(self._replicas)
            self._emit(f"{message} (keeping the last good list: {kept} replicas)")
        self._stamp, self.error = stamp, message
        return self._replicas


class ReplicaFileCollector(Collector):
    """The exporter's own view of the replicas file (servectl's extra, not a cluster name).

    ``servectl_exporter_replicas`` is the number of replicas being exported and
    ``servectl_exporter_replicas_file_error`` is 1 while the file is malformed (the last
    good list is being served), so a bad write can be alerted on. Register it once per
    registry, beside the CPU and GPU collectors.
    """

    def __init__(self, source: ReplicaFile) -> None:
        self.source = source

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families(0, 0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count = len(self.source.replicas())
        yield from self._families(count, 0 if self.source.error is None else 1)

    def _families(self, count: int, error: int) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "servectl_exporter_replicas",
            "Replicas listed in the replicas file (the last good version of it).",
            value=count,
        )
        yield GaugeMetricFamily(
            "servectl_exporter_replicas_file_error",
            "1 while the replicas file is malformed and the last good list is served.",
            value=error,
        )
