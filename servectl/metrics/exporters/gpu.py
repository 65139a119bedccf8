"""GPU duty cycle and memory of local replicas under dcgm-exporter's names, from NVML.

Per GPU, on every scrape:

- ``DCGM_FI_DEV_GPU_UTIL`` (gauge, percent of the last sample period the device was busy,
  ``nvmlDeviceGetUtilizationRates().gpu``);
- ``DCGM_FI_DEV_FB_USED`` (gauge, MiB of framebuffer used by allocations, as nvidia-smi's
  ``memory.used`` and dcgm-exporter report it: ``nvmlDeviceGetMemoryInfo_v2().used`` / 2**20,
  which leaves out the memory the driver reserves; drivers without the v2 call give the v1
  ``used``, which counts it);

labelled ``gpu`` (NVML index), ``UUID``, ``modelName``, ``Hostname`` and, for each replica with
a process on the device, ``namespace, pod, container``: one series per (device, replica), each
carrying the device's value, as dcgm-exporter does when pods share a GPU; a device no replica
uses has one series without pod labels.

A process belongs to a replica when it is the replica's pid, is in the replica's cgroup
(``cgroup.procs`` of the group or a group below it), or descends from the replica's pid.

servectl's own extra, ``servectl_gpu_process_sm_util{gpu, UUID, namespace, pod, container}``,
is the replica's share of the SM (percent, summed over its processes, from
``nvmlDeviceGetProcessUtilization``); it is absent where the driver does not support it.

Without a usable GPU (no NVML library, no driver, no device) constructing the collector
raises ``NoGPU``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from servectl.metrics import names
from servectl.metrics.exporters.replicas import Replica, ReplicaSource, Warn, warn_to_stderr

PROCESS_SM_UTIL = "servectl_gpu_process_sm_util"
_MAX_ANCESTRY = 64


class NoGPU(Exception):
    """No GPU can be read through NVML; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def message(self) -> str:
        return f"no GPU: {self.reason}; GPU duty cycle will be absent — nothing to export"


def _error_class(nvml: Any, name: str) -> type[BaseException] | None:
    cls = getattr(nvml, f"NVMLError_{name}", None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None


def _is(exc: BaseException, nvml: Any, name: str) -> bool:
    cls = _error_class(nvml, name)
    return cls is not None and isinstance(exc, cls)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def load_nvml() -> Any:
    """The ``pynvml`` module (nvidia-ml-py); NoGPU when it is not installed."""
    try:
        import pynvml
    except ImportError as exc:
        raise NoGPU("nvidia-ml-py (module pynvml) is not installed") from exc
    return pynvml


def init_nvml(nvml: Any) -> int:
    """Initialise NVML and return the device count; NoGPU when there is no usable GPU."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if _is(exc, nvml, "LibraryNotFound"):
            raise NoGPU("NVML library not found (libnvidia-ml.so.1)") from exc
        if _is(exc, nvml, "DriverNotLoaded"):
            raise NoGPU("the NVIDIA driver is not loaded") from exc
        raise NoGPU(f"NVML failed to initialise: {exc}") from exc
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        _shutdown(nvml)
        raise NoGPU(f"NVML cannot count devices: {exc}") from exc
    if count == 0:
        _shutdown(nvml)
        raise NoGPU("NVML sees 0 GPU devices")
    return count


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


def _ppid(proc_root: str, pid: int) -> int | None:
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="ascii") as f:
            text = f.read()
        return int(text[text.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cgroup_pids(path: str) -> set[int]:
    """Processes in the group at ``path`` and the groups below it."""
    pids: set[int] = set()
    for directory, _, files in os.walk(path):
        if "cgroup.procs" not in files:
            continue
        try:
            with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as f:
                pids.update(int(line) for line in f if line.strip())
        except (OSError, ValueError):
            continue
    return pids


class PidOwners:
    """Which replica a process belongs to: its pid, its cgroup, or an ancestor's pid."""

    def __init__(self, replicas: Sequence[Replica], proc_root: str = "/proc") -> None:
        self.replicas = replicas
        self.proc_root = proc_root
        self.by_pid = {r.pid: r for r in replicas}
        self._by_cgroup: dict[int, Replica] | None = None

    def _cgroups(self) -> dict[int, Replica]:
        if self._by_cgroup is None:
            self._by_cgroup = {}
            for replica in self.replicas:
                if replica.cgroup is not None:
                    for pid in _cgroup_pids(replica.cgroup):
                        self._by_cgroup.setdefault(pid, replica)
        return self._by_cgroup

    def owner(self, pid: int) -> Replica | None:
        if pid in self.by_pid:
            return self.by_pid[pid]
        in_cgroup = self._cgroups()
        if pid in in_cgroup:
            return in_cgroup[pid]
        seen = {pid}
        current = pid
        for _ in range(_MAX_ANCESTRY):
            parent = _ppid(self.proc_root, current)
            if parent is None or parent <= 1 or parent in seen:
                return None
            if parent in self.by_pid:
                return self.by_pid[parent]
            seen.add(parent)
            current = parent
        return None


@dataclass
class DeviceReading:
    index: int
    uuid: str
    model: str
    util_percent: float
    fb_used_mib: float
    pids: list[int] = field(default_factory=list)


class GpuCollector(Collector):
    """dcgm-exporter's device metrics from NVML, attributed to local replicas.

    ``nvml`` is the NVML binding (the ``pynvml`` module by default; tests pass a fake).
    Construction initialises NVML and raises NoGPU when there is no usable GPU; ``close``
    shuts NVML down. ``source`` may be None: device series only, without pod labels.
    """

    def __init__(
        self,
        source: ReplicaSource | None = None,
        *,
        nvml: Any = None,
        hostname: str | None = None,
        proc_root: str = "/proc",
        warn: Warn | None = None,
    ) -> None:
        self.nvml = load_nvml() if nvml is None else nvml
        self.device_count = init_nvml(self.nvml)
        self.source = source
        self.hostname = hostname or socket.gethostname()
        self.proc_root = proc_root
        self._warn = warn
        self._warned: set[str] = set()
        self._last_seen: dict[str, int] = {}  # per device UUID, for process samples
        self._memory_v2 = getattr(self.nvml, "nvmlMemory_v2", None)  # None: v1 only
        self._lock = threading.Lock()

    def close(self) -> None:
        _shutdown(self.nvml)

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> tuple[Metric, Metric, Metric]:
        return (
            Metric(
                names.DCGM_GPU_UTIL,
                "Percent of the last NVML sample period in which a kernel ran on the device "
                "(dcgm-exporter's name; servectl local runtime).",
                "gauge",
            ),
            Metric(
                names.DCGM_FB_USED,
                "Device memory in use, MiB (dcgm-exporter's name; servectl local runtime).",
                "gauge",
            ),
            Metric(
                PROCESS_SM_UTIL,
                "Share of the GPU's SMs used by the replica's processes (in %), from "
                "nvmlDeviceGetProcessUtilization (servectl's own metric).",
                "gauge",
            ),
        )

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = self._collect()
        yield from families

    def _collect(self) -> tuple[Metric, Metric, Metric]:
        nvml = self.nvml
        util, fb, process_util = self._families()
        owners = PidOwners(self.source.replicas() if self.source else (), self.proc_root)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self._warn_once(f"NVML cannot count devices: {exc}")
            count = self.device_count
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                reading = self._read_device(index, handle)
            except nvml.NVMLError as exc:
                self._warn_once(f"GPU {index}: cannot read it through NVML: {exc}")
                continue
            base = {
                "gpu": str(index),
                "UUID": reading.uuid,
                "modelName": reading.model,
                "Hostname": self.hostname,
            }
            on_device: dict[tuple[str, str], tuple[Replica, set[int]]] = {}
            for pid in reading.pids:
                replica = owners.owner(pid)
                if replica is not None:
                    key = (replica.namespace, replica.pod)
                    on_device.setdefault(key, (replica, set()))[1].add(pid)
            if not on_device:
                util.add_sample(names.DCGM_GPU_UTIL, base, reading.util_percent)
                fb.add_sample(names.DCGM_FB_USED, base, reading.fb_used_mib)
                continue
            sm = self._process_sm_util(handle, reading)
            for replica, pids in on_device.values():
                pod = {
                    "namespace": replica.namespace,
                    "pod": replica.pod,
                    "container": replica.container,
                }
                util.add_sample(names.DCGM_GPU_UTIL, base | pod, reading.util_percent)
                fb.add_sample(names.DCGM_FB_USED, base | pod, reading.fb_used_mib)
                if sm is not None:
                    share = min(100.0, float(sum(sm.get(pid, 0) for pid in pids)))
                    labels = {"gpu": base["gpu"], "UUID": base["UUID"]} | pod
                    process_util.add_sample(PROCESS_SM_UTIL, labels, share)
        return util, fb, process_util

    def _read_device(self, index: int, handle: Any) -> DeviceReading:
        nvml = self.nvml
        reading = DeviceReading(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            model=_text(nvml.nvmlDeviceGetName(handle)),
            util_percent=float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            fb_used_mib=self._fb_used_bytes(handle) / 2**20,
        )
        reading.pids = self._device_pids(index, handle)
        return reading

    def _fb_used_bytes(self, handle: Any) -> int:
        """Bytes allocated on the device, without the driver's reserve where NVML can say.

        The v1 ``nvmlDeviceGetMemoryInfo`` counts the driver's reserved memory as used (about
        615 MiB on an H200 with driver 580, with nothing running); nvidia-smi and
        dcgm-exporter read the v2 call, whose ``used`` leaves it out. A driver or binding
        without v2 falls back to v1 for good.
        """
        nvml = self.nvml
        if self._memory_v2 is not None:
            try:
                return int(nvml.nvmlDeviceGetMemoryInfo(handle, version=self._memory_v2).used)
            except nvml.NVMLError as exc:
                if not any(
                    _is(exc, nvml, name)
                    for name in ("FunctionNotFound", "NotSupported", "ArgumentVersionMismatch")
                ):
                    raise
                self._memory_v2 = None
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def _device_pids(self, index: int, handle: Any) -> list[int]:
        nvml = self.nvml
        pids: list[int] = []
        for kind, query in (
            ("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            try:
                processes: Iterable[Any] = query(handle)
            except nvml.NVMLError as exc:
                if not _is(exc, nvml, "NotSupported"):
                    self._warn_once(f"GPU {index}: cannot list {kind} processes: {exc}")
                continue
            pids.extend(int(p.pid) for p in processes if int(p.pid) not in pids)
        return pids

    def _process_sm_util(self, handle: Any, reading: DeviceReading) -> dict[int, int] | None:
        """Latest SM share per pid since the previous scrape; None when unsupported."""
        nvml = self.nvml
        last_seen = self._last_seen.get(reading.uuid, 0)
        try:
            samples = list(nvml.nvmlDeviceGetProcessUtilization(handle, last_seen))
        except nvml.NVMLError as exc:
            if _is(exc, nvml, "NotSupported"):
                return None
            if _is(exc, nvml, "NotFound") or getattr(exc, "value", None) == 0:
                return {}  # no process was busy since the last scrape
            self._warn_once(f"GPU {reading.index}: no per-process utilization: {exc}")
            return None
        latest: dict[int, tuple[int, int]] = {}
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, int(sample.smUtil))
        if latest:
            newest = max(stamp for stamp, _ in latest.values())
            self._last_seen[reading.uuid] = max(last_seen, newest)
        return {pid: value for pid, (_, value) in latest.items()}

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            (self._warn or warn_to_stderr)(message)
