"""What servectl's child-process code shares: free loopback ports, starting a process with
its output in a log, atomic file writes, log tails, and the ``/proc`` checks that adopt a
running process by its pid.

The local runtime (supervisor, router, Prometheus), the test control plane
(:mod:`servectl.testing.k8s`) and the fake replicas all start processes that listen on
loopback ports, write files another process reads, log to a file whose tail goes into
error messages, and may outlive the process that started them, to be found again from a
pid file. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

LOOPBACK = "127.0.0.1"

_DEAD_STATES = ("Z", "X", "x")  # zombie, dead: the pid is no process that runs


# --------------------------------------------------------------------------- ports


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on ``host`` now (the kernel's pick). Another process may take
    it before the server binds it: a caller that starts a server on it retries on "already
    in use"."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def bind_error(port: int, host: str = LOOPBACK) -> OSError | None:
    """Why ``port`` cannot be bound on ``host`` now, or None when it can. Bound as servers
    bind (``SO_REUSEADDR``): a port whose last connections linger in TIME_WAIT is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error
    return None


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether ``port`` can be bound on ``host`` now (:func:`bind_error`)."""
    return bind_error(port, host) is None


# --------------------------------------------------------------------------- processes


def start_logged(
    argv: Sequence[str],
    log: Path,
    *,
    header: str = "",
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = True,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` with no stdin and its stdout and stderr appended to ``log``, after
    ``header`` (a line saying what starts). In its own session unless ``new_session`` is
    False: a signal to the caller's process group (Ctrl-C, a kill of the group) does not
    reach it, and it outlives the caller. Returns the process and the log's offset after the
    header, where the process's own output begins. Raises OSError when ``argv`` cannot be
    executed (the header is in the log then)."""
    with log.open("ab") as out:
        if header:
            out.write(header.encode())
            out.flush()
        offset = out.tell()
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=new_session,
        )
    return process, offset


# --------------------------------------------------------------------------- files


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a rename, so that no reader (a restarted process,
    a watcher on inotify) sees half a file. The temporary name holds this process's pid,
    so two writers never share one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a process's log, or ``(no log)`` when it cannot be read."""
    try:
        with path.open(encoding="utf-8", errors="replace") as log:
            return "".join(deque(log, maxlen=lines))
    except OSError:
        return "(no log)"


def log_since(path: Path, offset: int, limit: int = 16384) -> str:
    """What a log got since byte ``offset`` (its last ``limit`` bytes at most); empty when
    it cannot be read."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(offset, size - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- /proc


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot):
    with the pid, it names one process, never a later one that reuses the pid."""
    fields = _proc_stat(pid)
    return None if fields is None else int(fields[19])


def alive(pid: int, ticks: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie is dead: it only waits to be reaped) and, with
    ``ticks``, is the process that started then (:func:`start_ticks`)."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in _DEAD_STATES:
        return False
    return ticks is None or int(fields[19]) == ticks


def command_line(pid: int) -> list[bytes] | None:
    """The process's argv (``/proc/<pid>/cmdline``), or None if it cannot be read."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
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


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is the pid it wrote (``unknown`` if none)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by pid {holder}")
        self.holder = holder


def lock_pidfile(path: Path) -> IO[str]:
    """Hold an exclusive lock on ``path`` (``flock``, without waiting) and write this
    process's pid in it, so that a second process is refused and told whose it is. The lock
    lasts until :func:`unlock` or until this process ends. Raises :class:`LockHeld`."""
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise LockHeld(path, holder) from None
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def unlock(handle: IO[str]) -> None:
    """Release a :func:`lock_pidfile` lock."""
    with contextlib.suppress(OSError):
        fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def read_pidfile(path: Path) -> list[int] | None:
    """The whitespace-separated integers of a pid file (the pid first, then whatever its
    writer added, such as a port), or None when it is missing, empty or not integers."""
    try:
        fields = [int(field) for field in path.read_text().split()]
    except (OSError, ValueError):
        return None
    return fields or None
