"""CPU of local replicas under the names cAdvisor and kube-state-metrics use.

On every scrape, for each replica in the registry:

- ``container_cpu_usage_seconds_total{namespace, pod, container}`` (counter, seconds of CPU),
  read from the replica's cgroup, or from ``/proc/<pid>/stat`` when it has none;
- ``kube_pod_container_resource_requests{namespace, pod, container, resource="cpu",
  unit="core"}`` (gauge) when the replica has a CPU request;
- ``kube_pod_labels{namespace, pod, label_servectl_io_service, label_servectl_io_revision}``
  (gauge, always 1).

Where the CPU counter comes from, first match wins:

1. cgroup v2: ``<cgroup>/cpu.stat`` line ``usage_usec``;
2. cgroup v1 with cpuacct in the same hierarchy: ``<cgroup>/cpuacct.usage`` (ns);
3. cgroup v1 in a hierarchy without cpuacct (``/sys/fs/cgroup/cpu/...`` where ``cpu`` and
   ``cpuacct`` are mounted separately): the same group in the cpuacct hierarchy, found
   through ``/proc/self/mountinfo``;
4. no cgroup: ``/proc/<pid>/stat`` utime + stime + cutime + cstime over ``SC_CLK_TCK`` (the
   process and the children it has reaped; live children are not counted).

A replica whose cgroup or process is gone (or a zombie) has no CPU series on that scrape,
as cAdvisor drops a container's series when it goes; the request and label series stay
while the replica is listed, as kube-state-metrics keeps them while the pod exists.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from servectl.metrics import names
from servectl.metrics.exporters.replicas import Replica, ReplicaSource, Warn, warn_to_stderr

# CounterMetricFamily appends "_total" to the sample name; the exposed name is CADVISOR_CPU.
_CPU_FAMILY = names.CADVISOR_CPU.removesuffix("_total")
_CPU_LABELS = ["namespace", "pod", "container"]
_REQUEST_LABELS = ["namespace", "pod", "container", "resource", "unit"]
_POD_LABELS = ["namespace", "pod", names.KSM_LABEL_SERVICE, names.KSM_LABEL_REVISION]


# cgroup v1 super options that are not controllers (name=... and release_agent=... have "=").
_V1_OPTIONS = frozenset({"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode"})


class ReplicaGone(Exception):
    """The replica's cgroup or process no longer exists: it has no CPU series now."""


class CgroupError(Exception):
    """The replica's cgroup exists but no CPU counter can be read from it."""


@dataclass(frozen=True)
class CgroupMount:
    """One mounted cgroup hierarchy, from /proc/self/mountinfo."""

    mount_point: str
    root: str  # the hierarchy path mounted there ("/" unless in a container)
    version: int  # 1 or 2
    controllers: frozenset[str]


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \\ooo octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit() and len(field) >= i + 4:
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup (v1) and cgroup2 mounts in a /proc/<pid>/mountinfo text."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype = tail[0]
        if fstype == "cgroup2":
            version, controllers = 2, frozenset[str]()
        elif fstype == "cgroup":
            version = 1
            controllers = frozenset(
                opt for opt in tail[2].split(",") if opt not in _V1_OPTIONS and "=" not in opt
            )
        else:
            continue
        mounts.append(CgroupMount(_unescape(fields[4]), _unescape(fields[3]), version, controllers))
    return mounts


def read_cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[CgroupMount]:
    try:
        with open(mountinfo, encoding="utf-8") as f:
            return parse_mountinfo(f.read())
    except OSError:
        return []


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _read(path: str) -> str:
    """A cgroup/proc file's text; a missing file or group means the replica is gone."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ReplicaGone(path) from exc
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # the group was removed while we read it
            raise ReplicaGone(path) from exc
        raise CgroupError(f"cannot read {path}: {exc.strerror}") from exc


def _v2_usage_seconds(cpu_stat: str) -> float | None:
    for line in cpu_stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    return None


def cpuacct_dir(path: str, mounts: Sequence[CgroupMount]) -> str:
    """The cpuacct-hierarchy directory of the group at ``path`` in another v1 hierarchy."""
    real = os.path.realpath(path)
    candidates = [
        (m, os.path.realpath(m.mount_point))
        for m in mounts
        if _under(real, os.path.realpath(m.mount_point))
    ]
    if not candidates:
        raise CgroupError(f"{path} is not under a mounted cgroup hierarchy")
    mount, point = max(candidates, key=lambda c: len(c[1]))
    if mount.version != 1:
        raise CgroupError(f"{path}: cgroup v2 group without usage_usec in cpu.stat")
    hierarchy_path = os.path.normpath(os.path.join(mount.root, os.path.relpath(real, point)))
    acct = [m for m in mounts if m.version == 1 and "cpuacct" in m.controllers]
    for m in acct:
        if _under(hierarchy_path, m.root):
            rel = os.path.relpath(hierarchy_path, m.root)
            return os.path.normpath(os.path.join(m.mount_point, rel))
    if not acct:
        raise CgroupError(f"{path}: no cpuacct hierarchy is mounted (cgroup v1)")
    raise CgroupError(f"{path}: group {hierarchy_path} is outside the mounted cpuacct hierarchy")


def cgroup_cpu_seconds(path: str, mounts: Sequence[CgroupMount]) -> float:
    """CPU seconds used by every process ever in the group at ``path`` (v2 or v1).

    Raises ReplicaGone when the group does not exist, CgroupError when it exists but has
    no CPU accounting reachable from it.
    """
    if not os.path.isdir(path):
        raise ReplicaGone(path)
    cpu_stat = os.path.join(path, "cpu.stat")
    if os.path.exists(cpu_stat):
        seconds = _v2_usage_seconds(_read(cpu_stat))
        if seconds is not None:
            return seconds
    usage = os.path.join(path, "cpuacct.usage")
    if not os.path.exists(usage):
        acct_dir = cpuacct_dir(path, mounts)
        if not os.path.isdir(acct_dir):
            raise CgroupError(
                f"{path}: its cpuacct group {acct_dir} does not exist (create the group in "
                "the cpuacct hierarchy too and add the process to it)"
            )
        usage = os.path.join(acct_dir, "cpuacct.usage")
    text = _read(usage).strip()
    try:
        return int(text) / 1e9
    except ValueError as exc:
        raise CgroupError(f"{usage}: not a number: {text!r}") from exc


def proc_cpu_seconds(pid: int, proc_root: str = "/proc", clk_tck: int | None = None) -> float:
    """CPU seconds of a process and its reaped children, from /proc/<pid>/stat.

    Raises ReplicaGone when the process does not exist or is a zombie.
    """
    text = _read(os.path.join(proc_root, str(pid), "stat"))
    # The command name (field 2) is in parentheses and may contain spaces and ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 15:
        raise CgroupError(f"{proc_root}/{pid}/stat: too few fields")
    if fields[0] in {"Z", "X", "x"}:
        raise ReplicaGone(f"pid {pid} has exited")
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / (clk_tck or os.sysconf("SC_CLK_TCK"))


class CpuCollector(Collector):
    """cAdvisor's CPU counter and kube-state-metrics' requests and labels, for local replicas.

    ``mounts`` defaults to this process's cgroup mounts, ``proc_root`` to ``/proc`` and
    ``clk_tck`` to ``os.sysconf("SC_CLK_TCK")`` (tests pass fake trees). A
    replica whose CPU cannot be read for another reason than being gone is skipped with a
    warning (once per distinct problem).
    """

    def __init__(
        self,
        source: ReplicaSource,
        *,
        mounts: Sequence[CgroupMount] | None = None,
        proc_root: str = "/proc",
        clk_tck: int | None = None,
        warn: Warn | None = None,
    ) -> None:
        self.source = source
        self.mounts = list(read_cgroup_mounts() if mounts is None else mounts)
        self.proc_root = proc_root
        self._warn = warn
        self._warned: set[str] = set()
        self._clk_tck = clk_tck or os.sysconf("SC_CLK_TCK")

    def cpu_seconds(self, replica: Replica) -> float:
        """The replica's CPU counter; ReplicaGone / CgroupError when there is none."""
        if replica.cgroup is not None:
            return cgroup_cpu_seconds(replica.cgroup, self.mounts)
        return proc_cpu_seconds(replica.pid, self.proc_root, self._clk_tck)

    def describe(self) -> Iterator[Metric]:
        yield from self._families(())

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.source.replicas())

    def _families(self, replicas: Sequence[Replica]) -> Iterator[Metric]:
        cpu = CounterMetricFamily(
            _CPU_FAMILY,
            "Cumulative CPU time consumed by the replica's container, in seconds "
            "(cAdvisor's name; servectl local runtime).",
            labels=_CPU_LABELS,
        )
        requests = GaugeMetricFamily(
            names.KSM_REQUESTS,
            "CPU the replica's container asked for, in cores (kube-state-metrics' name; "
            "servectl local runtime).",
            labels=_REQUEST_LABELS,
        )
        pod_labels = GaugeMetricFamily(
            names.KSM_POD_LABELS,
            "Always 1; the replica's servectl.io pod labels as label_* (kube-state-metrics' "
            "name; servectl local runtime).",
            labels=_POD_LABELS,
        )
        for replica in replicas:
            ns, pod, container = replica.namespace, replica.pod, replica.container
            try:
                cpu.add_metric([ns, pod, container], self.cpu_seconds(replica))
            except ReplicaGone:
                pass
            except (CgroupError, ValueError) as exc:
                self._warn_once(f"{ns}/{pod}: no CPU series: {exc}")
            if replica.cpu_request_cores is not None:
                requests.add_metric([ns, pod, container, "cpu", "core"], replica.cpu_request_cores)
            pod_labels.add_metric([ns, pod, replica.service, replica.revision], 1.0)
        yield cpu
        yield requests
        yield pod_labels

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            (self._warn or warn_to_stderr)(message)
