"""What the supervisor did to a replica, as values: a :class:`Happening` per action a user
would want to know about (a crash with its exit code or signal, a restart, a start, a stop,
a SIGKILL after the grace period, an adoption by a new controller, a replica that stopped
answering its readiness checks or recovered).

The supervisor (:mod:`servectl.backends.local.supervisor`) records them as they happen and
hands them over with ``take_happenings()``; the runtime
(:mod:`servectl.backends.local.runtime`) turns each into an event on its service and a line
in the controller's log. Nothing here writes anything.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from servectl.backends.local import replica_launch as launch


class Kind(enum.StrEnum):
    """The event reason of each happening (Kubernetes event ``reason``)."""

    STARTED = "ReplicaStarted"  # a new replica's first process
    CRASHED = "ReplicaCrashed"  # its process exited unasked: code or signal, next restart
    OOM_KILLED = "ReplicaOOMKilled"  # the kernel killed it for its memory limit
    RESTARTED = "ReplicaRestarted"  # started again after a crash
    START_FAILED = "ReplicaStartFailed"  # the server's command could not be run
    NOT_READY = "ReplicaNotReady"  # a READY replica failed its checks (out of the router)
    READY_AGAIN = "ReplicaReady"  # a NOT_READY replica answers again
    STOPPED = "ReplicaStopped"  # stop() finished: its process has gone
    KILLED = "ReplicaKilled"  # still running at the end of its grace period: SIGKILL
    ADOPTED = "ReplicaAdopted"  # a new supervisor took over its running process


WARNINGS = frozenset(
    {Kind.CRASHED, Kind.OOM_KILLED, Kind.START_FAILED, Kind.NOT_READY, Kind.KILLED}
)
"""The kinds that are Warning events; the others are Normal."""


@dataclass(frozen=True)
class Happening:
    """One thing the supervisor did or saw, about one replica."""

    kind: Kind
    time: float  # wall clock
    spec: launch.ReplicaSpec
    message: str  # one line: what happened and what follows
    pid: int | None = None  # the process it concerns
    exit_code: int | None = None  # a process that exited by itself, when known
    signal: int | None = None  # a process killed by a signal
    restarts: int = 0  # the replica's restarts after it

    @classmethod
    def of(
        cls,
        kind: Kind,
        time: float,
        spec: launch.ReplicaSpec,
        message: str,
        pid: int | None,
        returncode: int | None,
        restarts: int,
    ) -> Happening:
        """``returncode`` as ``Popen`` has it: negative for a signal, None when unknown."""
        killed = returncode is not None and returncode < 0
        return cls(
            kind,
            time,
            spec,
            message,
            pid=pid,
            exit_code=None if killed else returncode,
            signal=-returncode if killed and returncode is not None else None,
            restarts=restarts,
        )

    @property
    def warning(self) -> bool:
        return self.kind in WARNINGS

    @property
    def event_type(self) -> str:
        """``Warning`` or ``Normal``, as a Kubernetes event's type."""
        return "Warning" if self.warning else "Normal"

    @property
    def service_key(self) -> tuple[str, str]:
        return self.spec.namespace, self.spec.service


@dataclass(frozen=True)
class Exit:
    """How a replica's process ended (its last one, for ``describe`` and ``top -o wide``)."""

    time: float  # wall clock, when the supervisor saw it
    code: int | None  # exit code; None when killed by a signal or unknown (adopted)
    signal: int | None
    reason: str  # the words: "killed by signal 9 (SIGKILL)", "exited with code 1: ..."

    @classmethod
    def of(cls, returncode: int | None, time: float, reason: str) -> Exit:
        """From ``Popen.returncode`` (negative: the signal; None: unknown)."""
        if returncode is not None and returncode < 0:
            return cls(time, None, -returncode, reason)
        return cls(time, returncode, None, reason)

    def to_json(self) -> dict[str, object]:
        return {"time": self.time, "code": self.code, "signal": self.signal, "reason": self.reason}

    @classmethod
    def from_json(cls, data: object) -> Exit | None:
        if not isinstance(data, dict):
            return None
        time, code, sig, reason = (data.get(k) for k in ("time", "code", "signal", "reason"))
        if not isinstance(time, int | float) or not isinstance(reason, str):
            return None
        return cls(
            float(time),
            code if isinstance(code, int) else None,
            sig if isinstance(sig, int) else None,
            reason,
        )


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(code: int | None, pid: int) -> str:
    """A process's end in words, from ``Popen.returncode`` (None: unknown, adopted)."""
    if code is None:
        return f"exited (exit code unknown: pid {pid} was adopted, not this supervisor's child)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"
