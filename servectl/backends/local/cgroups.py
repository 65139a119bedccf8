"""CPU quotas and memory limits for local replicas, in their own cgroups, like a kubelet.

Which hierarchy does the work is read from the mount table (``/proc/self/mountinfo``), never
assumed:

- **cgroup v1**: the ``cpu`` controller's hierarchy gets ``cpu.cfs_period_us`` and
  ``cpu.cfs_quota_us``, the ``memory`` controller's ``memory.limit_in_bytes``; each is a
  separate mount (``/sys/fs/cgroup/cpu``, ``/sys/fs/cgroup/memory``) or a shared one;
- **cgroup v2**: one unified hierarchy whose ``cgroup.controllers`` lists ``cpu`` and
  ``memory``: ``cpu.max`` (``"quota period"``) and ``memory.max``;
- **none**: neither is mounted and writable (an unprivileged user, a container without
  cgroup delegation, a v2 hierarchy without the controllers). Replicas then run without
  limits, and :class:`Setup` says why, for ``servectl doctor`` and ``status``.

Mixed machines exist (this project's development machines mount v1 ``cpu`` and ``memory``
and a v2 hierarchy without them, and have no systemd): v1 controllers are preferred per
resource when the v2 hierarchy does not offer that controller.

Groups live under ``<hierarchy>/servectl/<scope>/<name>``: the scope is one runtime's
(:func:`scope_for` its state directory, :meth:`Setup.within`), so two runtimes (or the tests
and a user's runtime) that run a replica of the same name never share its quota.
:meth:`Group.remove` deletes a group once its processes are gone, :func:`remove_scope` the
runtime's scope at ``servectl down``.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servectl.metrics.exporters.cgroup import CgroupMount, read_cgroup_mounts

PARENT = "servectl"
"""The directory under each hierarchy that holds servectl's groups."""
CFS_PERIOD_US = 100_000
"""The CFS period (100 ms), as a kubelet sets it."""
MIN_QUOTA_US = 1_000
"""The kernel's smallest CFS quota (1 ms)."""


class CgroupError(OSError):
    """A group could not be created, limited, joined or removed; the message says which file."""


@dataclass(frozen=True)
class Setup:
    """Where CPU and memory limits are written, or why they are not."""

    cpu: Path | None  # the parent of servectl's groups in the hierarchy that limits CPU
    memory: Path | None
    cpu_version: int | None  # 1 or 2
    memory_version: int | None
    notes: tuple[str, ...] = field(default_factory=tuple)  # what is missing, and why
    # cgroup v1 with cpu and cpuacct mounted apart: the parent of servectl's groups in the
    # cpuacct hierarchy, where a replica's CPU usage is counted (cpuacct.usage).
    cpuacct: Path | None = None
    scope: str | None = None  # the runtime's scope the parents above end in (within())

    def within(self, scope: str) -> Setup:
        """This setup with its groups one level down, in ``scope`` (one runtime's); the
        same setup when it is scoped there already."""
        if self.scope == scope:
            return self
        if not scope or "/" in scope or scope in (".", ".."):
            raise ValueError(f"cgroup scope must be one path segment, got {scope!r}")

        def below(parent: Path | None) -> Path | None:
            return None if parent is None else parent / scope

        return dataclasses.replace(
            self,
            cpu=below(self.cpu),
            memory=below(self.memory),
            cpuacct=below(self.cpuacct),
            scope=scope,
        )

    @property
    def parents(self) -> tuple[Path, ...]:
        """The directories that hold the groups, each once."""
        found = [p for p in (self.cpu, self.memory, self.cpuacct) if p is not None]
        return tuple(dict.fromkeys(found))

    @property
    def limits_cpu(self) -> bool:
        return self.cpu is not None

    @property
    def limits_memory(self) -> bool:
        return self.memory is not None

    def describe(self) -> str:
        """One line for ``servectl doctor``."""
        parts = []
        if self.cpu is not None:
            parts.append(f"CPU quota in cgroup v{self.cpu_version} ({self.cpu})")
        if self.memory is not None:
            parts.append(f"memory limit in cgroup v{self.memory_version} ({self.memory})")
        if not parts:
            return (
                "no cgroup limits: replicas run without CPU or memory limits ("
                + ("; ".join(self.notes) or "no cgroup hierarchy found")
                + ")"
            )
        return "; ".join(parts + list(self.notes))


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def _v2_controllers(mount: CgroupMount) -> frozenset[str]:
    try:
        text = (Path(mount.mount_point) / "cgroup.controllers").read_text(encoding="utf-8")
    except OSError:
        return frozenset()
    return frozenset(text.split())


def detect(mounts: Sequence[CgroupMount] | None = None) -> Setup:
    """Where this process can limit replicas (``mounts``: the mount table, read if None).

    Each candidate is tried for real: servectl's parent group is created and, on v2, the
    controller enabled for its subtree (a v2 hierarchy whose root holds processes refuses
    that, EBUSY). A candidate that fails is skipped with a note.
    """
    found = read_cgroup_mounts() if mounts is None else list(mounts)
    chosen: dict[str, tuple[Path, int]] = {}
    notes: list[str] = []
    unified = [m for m in found if m.version == 2]
    for resource in ("cpu", "memory"):
        v1 = [m for m in found if m.version == 1 and resource in m.controllers]
        candidates = [(m, 1) for m in v1] + [
            (m, 2) for m in unified if resource in _v2_controllers(m)
        ]
        for mount, version in candidates:
            if not _writable_dir(Path(mount.mount_point)):
                continue
            parent = Path(mount.mount_point) / PARENT
            try:
                _ensure_parent(parent, version, resource)
            except CgroupError as exc:
                notes.append(f"cgroup v{version} {resource} unusable: {exc}")
                continue
            chosen[resource] = (parent, version)
            break
        if resource in chosen:
            continue
        if v1:
            notes.append(f"the cgroup v1 {resource} hierarchy is not writable (run as root)")
        elif unified:
            notes.append(
                f"the cgroup v2 hierarchy does not offer the {resource} controller "
                "(or is not writable)"
            )
        else:
            notes.append(f"no cgroup hierarchy with the {resource} controller is mounted")
    cpu, memory = chosen.get("cpu"), chosen.get("memory")
    cpuacct = None
    if cpu is not None and cpu[1] == 1:
        cpu_mount = cpu[0].parent
        accounting = [m for m in found if m.version == 1 and "cpuacct" in m.controllers]
        if accounting and all(Path(m.mount_point) != cpu_mount for m in accounting):
            parent = Path(accounting[0].mount_point) / PARENT
            try:
                _ensure_parent(parent, 1, "cpuacct")
                cpuacct = parent
            except CgroupError as exc:
                notes.append(f"cgroup v1 cpuacct unusable (CPU usage read from /proc): {exc}")
    return Setup(
        cpu=cpu[0] if cpu else None,
        memory=memory[0] if memory else None,
        cpu_version=cpu[1] if cpu else None,
        memory_version=memory[1] if memory else None,
        notes=tuple(notes),
        cpuacct=cpuacct,
    )


def scope_for(state_dir: Path) -> str:
    """One runtime's scope: a short hash of its state directory's absolute path (12 hex
    digits: two state directories share one with a chance of 1 in 2^48)."""
    path = str(Path(state_dir).expanduser().resolve())
    return "rt-" + hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def remove_scope(setup: Setup) -> list[str]:
    """Remove a runtime's scope (``setup`` as :meth:`Setup.within` made it): its groups that
    no process holds, then the scope itself. Returns what could not be removed, in words
    (a group with a process still in it); gone already is fine."""
    if setup.scope is None:
        return []
    left: list[str] = []
    for parent in setup.parents:
        try:
            children = [c for c in parent.iterdir() if c.is_dir()]
        except FileNotFoundError:
            continue
        except OSError as exc:
            left.append(f"{parent}: {exc}")
            continue
        for child in children:
            try:
                child.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:
                left.append(f"{child} (processes still in it?): {exc.strerror or exc}")
        try:
            parent.rmdir()
        except FileNotFoundError:
            continue
        except OSError as exc:
            if not children:
                left.append(f"{parent}: {exc.strerror or exc}")
    return left


def cpu_quota_us(cores: float, period_us: int = CFS_PERIOD_US) -> int:
    """The CFS quota for ``cores`` CPUs per ``period_us`` (a kubelet's rounding: up, and
    never below the kernel's 1 ms minimum)."""
    if not math.isfinite(cores) or cores <= 0:
        raise ValueError(f"cpu: expected a positive number of cores, got {cores!r}")
    return max(MIN_QUOTA_US, math.ceil(cores * period_us))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CgroupError(
            exc.errno or errno.EIO, f"cannot write {text!r} to {path}: {exc}"
        ) from exc


def _ensure_parent(parent: Path, version: int, controller: str) -> None:
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise CgroupError(exc.errno or errno.EIO, f"cannot create {parent}: {exc}") from exc
    if version == 2:
        # Children get a controller only when their parent enables it for its subtree.
        for level in (parent.parent, parent):
            control = level / "cgroup.subtree_control"
            try:
                enabled = control.read_text(encoding="utf-8").split()
            except OSError:
                enabled = []
            if controller not in enabled:
                _write(control, f"+{controller}")


@dataclass(frozen=True)
class Group:
    """One replica's cgroup (one directory per hierarchy that limits it)."""

    name: str
    cpu_dir: Path | None  # where its CPU quota is (and its CPU usage is read)
    memory_dir: Path | None
    cpuacct_dir: Path | None = None  # v1 with cpuacct mounted apart: where usage is counted

    @property
    def dirs(self) -> tuple[Path, ...]:
        """Its directories, each once (v2 and a shared v1 mount use one for both)."""
        found = [d for d in (self.cpu_dir, self.memory_dir, self.cpuacct_dir) if d is not None]
        return tuple(dict.fromkeys(found))

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and the children it starts later) into the group."""
        for directory in self.dirs:
            _write(directory / "cgroup.procs", str(pid))

    def set_cpu(self, cores: float | None) -> bool:
        """Rewrite the group's CPU quota to ``cores`` (None: unlimited) while its processes
        run: how a standby replica is parked and unparked (docs/standby.md). False where
        the group has no CPU controller (nothing is limited)."""
        if self.cpu_dir is None:
            return False
        quota = None if cores is None else cpu_quota_us(cores)
        if (self.cpu_dir / "cpu.max").exists():  # v2
            _write(self.cpu_dir / "cpu.max", f"{'max' if quota is None else quota} {CFS_PERIOD_US}")
        else:
            _write(self.cpu_dir / "cpu.cfs_quota_us", "-1" if quota is None else str(quota))
        return True

    def remove(self) -> None:
        """Delete the group's directories (its processes must have exited); gone is fine."""
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise CgroupError(
                    exc.errno or errno.EIO,
                    f"cannot remove {directory} (processes still in it?): {exc}",
                ) from exc


def create(setup: Setup, name: str, *, cpu_cores: float | None, memory_bytes: int | None) -> Group:
    """A group named ``name`` with these limits where ``setup`` can set them (an existing
    group of that name is reused and its limits rewritten)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"cgroup name must be one path segment, got {name!r}")
    if memory_bytes is not None and memory_bytes <= 0:
        raise ValueError(f"memory: expected a positive number of bytes, got {memory_bytes!r}")
    quota = None if cpu_cores is None else cpu_quota_us(cpu_cores)
    cpu_dir = memory_dir = None

    def group_dir(parent: Path, version: int, controller: str) -> Path:
        _ensure_parent(parent, version, controller)
        directory = parent / name
        try:
            directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(exc.errno or errno.EIO, f"cannot create {directory}: {exc}") from exc
        return directory

    if setup.cpu is not None and setup.cpu_version is not None:
        directory = cpu_dir = group_dir(setup.cpu, setup.cpu_version, "cpu")
        if setup.cpu_version == 1:
            _write(directory / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(directory / "cpu.cfs_quota_us", "-1" if quota is None else str(quota))
        else:
            _write(directory / "cpu.max", f"{'max' if quota is None else quota} {CFS_PERIOD_US}")
    if setup.memory is not None and setup.memory_version is not None:
        directory = memory_dir = group_dir(setup.memory, setup.memory_version, "memory")
        if setup.memory_version == 1:
            _write(
                directory / "memory.limit_in_bytes",
                "-1" if memory_bytes is None else str(memory_bytes),
            )
        else:
            _write(directory / "memory.max", "max" if memory_bytes is None else str(memory_bytes))
    cpuacct_dir = group_dir(setup.cpuacct, 1, "cpuacct") if setup.cpuacct is not None else None
    return Group(name=name, cpu_dir=cpu_dir, memory_dir=memory_dir, cpuacct_dir=cpuacct_dir)
