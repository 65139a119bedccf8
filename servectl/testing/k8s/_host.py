"""What a real test node changes on this machine, recorded before it starts and put back
after it stops, even after a crash: sysctls, iptables rules, the pods' bridge, network
namespaces, mounts, cgroups, and the processes containerd leaves behind (its shims and the
containers, which outlive containerd by design).

The record (`HostRecord`) is a JSON file under the node's run directory, written before the
node changes anything; `restore` reads it, so a node started after a crash (the record is
still there) first puts back what the crashed one left, then records afresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from servectl import processes

# The kubelet sets the first three at start (it expects a node it owns); a pod talking to a
# Service on this machine needs forwarding and bridged traffic through iptables.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
    "net/ipv4/conf/all/route_localnet",
)
NETNS_DIR = Path("/run/netns")
# Where a kubelet and containerd write whatever their settings say (fixed paths in their
# code): each is removed after the node when it was not there before, else the entries
# made meanwhile are (log directories per pod, CNI results, shim sockets, netns files).
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd/s",
    "/run/containerd/fifo",
    "/run/containerd",
    "/run/netns",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
_RUN_TIMEOUT_S = 30.0


class HostError(RuntimeError):
    """A command that changes the host failed; the message names it and its output."""


@dataclass
class HostRecord:
    """What the host looked like before the node: put back by `restore`."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables: dict[str, str] = field(default_factory=dict)  # "iptables"|"ip6tables" -> save
    netns: list[str] = field(default_factory=list)
    bridge: str = ""
    cgroup: str = ""  # the kubelet's cgroupRoot, under every mounted controller
    paths: list[str] = field(default_factory=list)  # directories the node owns (removed)
    marker: str = ""  # a string in the command line of every process the node leaves
    fixed: dict[str, list[str] | None] = field(default_factory=dict)  # FIXED_PATHS' entries
    # Processes started for the node that name no marker (its control plane): pid and
    # start time in clock ticks, so a pid reused since is left alone.
    pids: list[list[int]] = field(default_factory=list)


def run(argv: list[str], *, input_text: str | None = None, check: bool = True) -> str:
    """Run a host command; its stdout. Raises `HostError` with its output when it fails."""
    try:
        done = subprocess.run(
            argv,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=_RUN_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HostError(f"{' '.join(argv)}: {error}") from None
    if check and done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        raise HostError(f"{' '.join(argv)} failed ({done.returncode}): {output}")
    return done.stdout


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name).write_text(value)


def record(path: Path, *, bridge: str, cgroup: str, paths: list[Path], marker: str) -> HostRecord:
    """Take the record of the host as it is now and write it to ``path``."""
    state = HostRecord(bridge=bridge, cgroup=cgroup, paths=[str(p) for p in paths], marker=marker)
    for name in SYSCTLS:
        value = read_sysctl(name)
        if value is not None:
            state.sysctls[name] = value
    for tool in ("iptables", "ip6tables"):
        with contextlib.suppress(HostError):
            state.iptables[tool] = run([f"{tool}-save"])
    state.netns = sorted(p.name for p in NETNS_DIR.glob("*")) if NETNS_DIR.is_dir() else []
    for fixed in FIXED_PATHS:
        directory = Path(fixed)
        state.fixed[fixed] = (
            sorted(p.name for p in directory.iterdir()) if directory.is_dir() else None
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(state), indent=1))
    return state


def add_pids(path: Path, pids: list[int]) -> None:
    """Add ``pids`` to the record at ``path``, for `restore` to end if they outlive the
    process that started them."""
    state = load(path)
    if state is None:
        return
    for pid in pids:
        ticks = processes.start_ticks(pid)
        if ticks is not None:
            state.pids.append([pid, ticks])
    path.write_text(json.dumps(asdict(state), indent=1))


def load(path: Path) -> HostRecord | None:
    try:
        return HostRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def restore(path: Path) -> list[str]:
    """Put the host back as the record at ``path`` says, then delete the record. Each step
    is tried whatever the others did; returns what could not be put back (empty: all)."""
    state = load(path)
    if state is None:
        return []
    problems: list[str] = []
    kill_marked(
        state.marker,
        state.cgroup,
        [pid for pid, ticks in state.pids if processes.alive(pid, ticks)],
    )
    for mount in mounts_under([*state.paths, *_new_netns(state)]):
        try:
            run(["umount", "-l", mount])
        except HostError as error:
            problems.append(str(error))
    for name in _new_netns(state):
        with contextlib.suppress(OSError):
            (NETNS_DIR / name).unlink()
    if state.bridge and Path(f"/sys/class/net/{state.bridge}").exists():
        try:
            run(["ip", "link", "delete", state.bridge])
        except HostError as error:
            problems.append(str(error))
    for tool, saved in state.iptables.items():
        problems += restore_iptables(tool, saved)
    for name, value in state.sysctls.items():
        write_sysctl(name, value)
        if read_sysctl(name) != value:
            problems.append(f"sysctl {name} is {read_sysctl(name)}, was {value}")
    problems += remove_cgroups(state.cgroup)
    for directory in state.paths:
        subprocess.run(["rm", "-rf", "--one-file-system", directory], check=False)
        if Path(directory).exists():
            problems.append(f"{directory} is still there")
    problems += _remove_new_entries(state.fixed)
    path.unlink(missing_ok=True)
    return problems


IPTABLES_TABLES = ("filter", "nat", "mangle", "raw", "security")


def restore_iptables(tool: str, saved: str) -> list[str]:
    """The rules ``tool-save`` printed before: the tables it listed restored as they were,
    the others emptied (a table nothing used was not listed: the kubelet and kube-proxy add
    chains to mangle and nat on a machine that had no rules at all)."""
    problems: list[str] = []
    if saved.strip():
        try:
            run([f"{tool}-restore"], input_text=saved)
        except HostError as error:
            problems.append(str(error))
    for table in IPTABLES_TABLES:
        if f"*{table}\n" in saved:
            continue
        for flag in ("-F", "-X"):
            with contextlib.suppress(HostError):
                run([tool, "-t", table, flag])
    return problems


def _remove_new_entries(fixed: dict[str, list[str] | None]) -> list[str]:
    problems: list[str] = []
    for name, before in fixed.items():
        directory = Path(name)
        if not directory.is_dir():
            continue
        made = (
            [directory]
            if before is None
            else [p for p in directory.iterdir() if p.name not in set(before)]
        )
        for path in made:
            if path.is_dir() and not path.is_symlink():
                subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
            else:
                path.unlink(missing_ok=True)
            if path.exists() or path.is_symlink():
                problems.append(f"{path} is still there")
    return problems


def _new_netns(state: HostRecord) -> list[str]:
    """The network namespaces made since the record (containerd's ``cni-*`` for pods)."""
    if not NETNS_DIR.is_dir():
        return []
    before = set(state.netns)
    return [str(NETNS_DIR / p.name) for p in NETNS_DIR.glob("cni-*") if p.name not in before]


def mounts_under(prefixes: list[str]) -> list[str]:
    """Mount points at or under any of ``prefixes``, deepest first."""
    found: list[str] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes if p):
            found.append(point)
    return sorted(set(found), key=lambda p: -p.count("/"))


def cgroup_dirs(cgroup: str) -> list[Path]:
    """``cgroup`` (a path like ``/servectl-node``) under every mounted v1 controller (or
    the v2 tree), those that exist."""
    if not cgroup:
        return []
    relative = cgroup.strip("/")
    roots = [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]
    return [root / relative for root in roots if (root / relative).is_dir()]


def make_cgroup(cgroup: str) -> None:
    """``cgroup`` under every mounted v1 hierarchy (the kubelet wants its cgroupRoot in
    each); a new cpuset group gets its parent's CPUs and memory nodes, which v1 does not
    copy."""
    relative = cgroup.strip("/")
    for hierarchy in CGROUP_ROOT.iterdir():
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        group = hierarchy / relative
        with contextlib.suppress(OSError):
            group.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (group / name).exists() and not (group / name).read_text().strip():
                    (group / name).write_text((hierarchy / name).read_text())


def kill_marked(marker: str, cgroup: str, listed: list[int]) -> None:
    """SIGKILL every process in the node's cgroups (its pods' containers), every process
    whose command line holds ``marker`` (containerd, its shims, the kubelet) and the
    ``listed`` ones, each with its process group (the control plane's components)."""
    pids: set[int] = set(listed)
    for pid in listed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for top in cgroup_dirs(cgroup):
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in procs.read_text().split()}
    if marker:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.add(int(entry.name))
    pids.discard(os.getpid())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        for pid in pids:  # reap those that are our children
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def remove_cgroups(cgroup: str) -> list[str]:
    """Remove the node's cgroup trees, deepest first (a group with a task left is busy:
    retried for 5 s); what is left."""
    left: list[str] = []
    for top in cgroup_dirs(cgroup):
        groups = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for group in [*groups, top]:
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(f"cgroup {group} is busy")
                        break
                    time.sleep(0.1)
    return left
