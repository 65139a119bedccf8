"""Follow replicas' log files as ``tail -f`` does, for ``servectl logs -f``.

A :class:`LogFollower` remembers, per log file, how far it has read: a file it meets after
it began (a replica started since) is read from its start, one it knew is read from where
it stopped, and one that shrank (rewritten) from its start again. Only whole lines are
handed out; a line still being written waits for its newline. No clock, no sleep: the
caller decides when to :meth:`~LogFollower.read` again.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from servectl.backends.client import LogTail

CHUNK = 1 << 20
"""At most this many bytes are read from one file per call (a huge log catches up in
steps rather than in one read)."""


class LogFollower:
    """New whole lines of ``<logs_dir>/<pod>.log`` files."""

    def __init__(self, logs_dir: Path, pods: Iterable[str]) -> None:
        """``pods``: the logs already shown up to their end; they are followed from there."""
        self.logs_dir = logs_dir
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        for pod in pods:
            try:
                self._offsets[pod] = self._path(pod).stat().st_size
            except OSError:
                self._offsets[pod] = 0

    def _path(self, pod: str) -> Path:
        return self.logs_dir / f"{pod}.log"

    def read(self, pods: Iterable[str]) -> list[LogTail]:
        """What each of ``pods`` (and every pod followed so far) logged since the last
        read, by pod name; pods with nothing new are left out."""
        batch = []
        for pod in sorted(set(pods) | set(self._offsets)):
            lines = self._read_one(pod)
            if lines:
                batch.append(LogTail(pod, lines))
        return batch

    def _read_one(self, pod: str) -> list[str]:
        offset = self._offsets.get(pod, 0)
        try:
            with self._path(pod).open("rb") as log:
                size = log.seek(0, 2)
                if size < offset:  # rewritten: start again
                    offset, self._partial[pod] = 0, b""
                log.seek(offset)
                data = log.read(CHUNK)
        except OSError:
            return []
        self._offsets[pod] = offset + len(data)
        data = self._partial.pop(pod, b"") + data
        complete, newline, rest = data.rpartition(b"\n")
        if not newline:  # no whole line yet
            self._partial[pod] = rest
            return []
        if rest:
            self._partial[pod] = rest
        return complete.decode("utf-8", "replace").split("\n")
