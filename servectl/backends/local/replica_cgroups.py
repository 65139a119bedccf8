"""Each replica's cgroup: created with its spec's CPU and memory limits, what is enforced
said in words, OOM kills counted, removed once the replica's process has gone.

With a :class:`cgroups.Setup` that can limit, each replica gets its own group
(``<namespace>.<pod>``) with the spec's CPU cores and memory bytes; the supervisor
(:mod:`servectl.backends.local.supervisor`) has its process join right after it starts and
removes the group once the process has gone. Without one, replicas run unlimited and
:func:`describe` says why.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from servectl.backends.local import cgroups
from servectl.backends.local import replica_launch as launch

log = logging.getLogger(__name__)

GROUP_REMOVE_RETRY_S = 30.0
"""How long a group that could not be removed is retried (its last process may linger)."""
SCOPE_REMOVE_WAIT_S = 5.0
"""How long :func:`release_scope` waits for the groups to empty before leaving them."""


def describe(setup: cgroups.Setup | None) -> str:
    """What limits replicas get, or why none (``Setup.describe()``)."""
    if setup is None:
        return "no cgroup limits: the supervisor was given no cgroup setup"
    return setup.describe()


def ensure(
    setup: cgroups.Setup | None, spec: launch.ReplicaSpec, group: cgroups.Group | None
) -> tuple[cgroups.Group | None, str]:
    """The replica's group (``group`` when it has one, else a new one with the spec's
    limits; None where none can be made) and what is enforced, in words."""
    wanted = []
    if spec.cpu_cores is not None:
        wanted.append(f"{spec.cpu_cores:g} cores")
    if spec.memory_bytes is not None:
        wanted.append(f"{spec.memory_bytes} bytes of memory")
    if setup is None or not (setup.limits_cpu or setup.limits_memory):
        return group, ("not enforced: " + describe(setup)) if wanted else "none asked"
    if group is None:
        try:
            group = cgroups.create(
                setup, spec.group_name, cpu_cores=spec.cpu_cores, memory_bytes=spec.memory_bytes
            )
        except (cgroups.CgroupError, OSError) as exc:
            return None, f"not enforced: {exc}"
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
    return group, "; ".join(parts) or f"no limits asked; accounted in cgroup {spec.group_name}"


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


def oom_killed(
    spec: launch.ReplicaSpec, group: cgroups.Group | None, before: int | None
) -> str | None:
    """What to say when the kernel killed the process for its memory limit (its group
    counts more OOM kills than ``before``, counted when the process started), or None."""
    memory_dir = group.memory_dir if group is not None else None
    after = oom_kills(memory_dir)
    if before is None or after is None or after <= before:
        return None
    limit = spec.memory_bytes
    size = "" if limit is None else f" of {limit / 2**20:g} MiB"
    return (
        f"OOM-killed: the server needed more than its memory limit{size}; raise "
        "memory_bytes (servectl's server with TensorFlow uses about 260 MiB)"
    )


def release_scope(setup: cgroups.Setup, wait_s: float = SCOPE_REMOVE_WAIT_S) -> None:
    """Remove a supervisor's cgroup scope once its replicas have gone (``servectl down``),
    waiting up to ``wait_s`` for groups still busy: an adopted replica is not the
    supervisor's child, and its last task stays in its group until whoever adopted the
    orphan reaps it (measured: both groups of a ``down`` after a controller restart were
    busy at first). What is still busy then is logged and left."""
    deadline = time.monotonic() + wait_s
    while (left := cgroups.remove_scope(setup)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for problem in left:
        log.warning("cgroup left behind: %s", problem)


class Orphans:
    """Groups whose removal failed (their last process may linger), retried on each
    :meth:`retry` for :data:`GROUP_REMOVE_RETRY_S`, then given up with a warning."""

    def __init__(self) -> None:
        self._groups: list[tuple[cgroups.Group, float]] = []  # and until when to retry

    def release(self, group: cgroups.Group, now: float) -> None:
        """Remove ``group``, or keep it to retry."""
        try:
            group.remove()
        except cgroups.CgroupError:
            self._groups.append((group, now + GROUP_REMOVE_RETRY_S))

    def retry(self, now: float) -> None:
        left = []
        for group, until in self._groups:
            try:
                group.remove()
            except cgroups.CgroupError as exc:
                if now < until:
                    left.append((group, until))
                else:
                    log.warning("giving up removing cgroup %s: %s", group.name, exc)
        self._groups = left
