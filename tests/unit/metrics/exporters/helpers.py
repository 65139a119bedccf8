"""Shared helpers for the exporter tests: replicas, collecting, a fake NVML, real processes.

Reading exposition back (parse_samples, samples_named, label_set, scrape) is servectl.testing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from servectl.metrics.exporters.replicas import Replica
from servectl.metrics.exporters.serve import exposition
from servectl.testing.exposition import Samples, parse_samples


def replica(pod: str = "resnet-v2-0", pid: int = 1234, **kw: Any) -> Replica:
    values: dict[str, Any] = {
        "namespace": "default",
        "service": "resnet",
        "revision": "resnet-v2",
        "pod": pod,
        "container": "model-server",
        "pid": pid,
    }
    values.update(kw)
    return Replica(**values)


def write_replicas(path: Path, replicas: Iterable[Replica]) -> None:
    """Write the registry atomically, as the runtime does."""
    tmp = path.with_suffix(".tmp")
    body = {"replicas": [r.model_dump() for r in replicas]}
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def collect(*collectors: Collector) -> tuple[str, Samples]:
    """Register ``collectors`` in a fresh registry: its exposition text and samples."""
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)
    text = exposition(registry)
    return text, parse_samples(text)


def busy_child() -> subprocess.Popen[bytes]:
    """A process that burns one core until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def end(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait(5)


# --------------------------------------------------------------------------- fake NVML


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class NVMLError_LibraryNotFound(NVMLError):  # pynvml's names
    value = 12


class NVMLError_DriverNotLoaded(NVMLError):
    value = 9


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NotFound(NVMLError):
    value = 6


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


class NVMLError_GpuIsLost(NVMLError):
    value = 15


@dataclass
class FakeDevice:
    uuid: str | bytes
    name: str | bytes = "NVIDIA H100 80GB HBM3"
    util: int = 0
    used_bytes: int = 0
    reserved_bytes: int = 0  # the driver's; v1 counts it as used, v2 does not
    compute: list[int] = field(default_factory=list)
    graphics: list[int] = field(default_factory=list)
    # (pid, timeStamp, smUtil) samples, or the error nvmlDeviceGetProcessUtilization raises
    samples: list[tuple[int, int, int]] | NVMLError = field(default_factory=list)
    broken: NVMLError | None = None
    graphics_error: NVMLError | None = None


class FakeNVML:
    """The slice of pynvml the GPU collector uses, over in-memory devices."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    nvmlMemory_v2 = 0x2000028  # pynvml's value

    def __init__(
        self,
        devices: list[FakeDevice],
        init_error: NVMLError | None = None,
        memory_v2: bool = True,
    ) -> None:
        self.devices = devices
        self.init_error = init_error
        self.memory_v2 = memory_v2  # False: an old driver without nvmlDeviceGetMemoryInfo_v2
        self.memory_calls: list[int | None] = []
        self.initialised = 0
        self.util_calls: list[tuple[str, int]] = []

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        device = self.devices[index]
        if device.broken is not None:
            raise device.broken
        return device

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> str | bytes:
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeDevice) -> str | bytes:
        return h.name

    def nvmlDeviceGetUtilizationRates(self, h: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=h.util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: FakeDevice, version: int | None = None) -> SimpleNamespace:
        self.memory_calls.append(version)
        total = 80 * 2**30
        if version is None:
            used = h.used_bytes + h.reserved_bytes
            return SimpleNamespace(used=used, total=total, free=total - used)
        if not self.memory_v2:
            raise NVMLError_FunctionNotFound()
        assert version == self.nvmlMemory_v2
        free = total - h.used_bytes - h.reserved_bytes
        return SimpleNamespace(used=h.used_bytes, reserved=h.reserved_bytes, total=total, free=free)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in h.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeDevice) -> list[SimpleNamespace]:
        if h.graphics_error is not None:
            raise h.graphics_error
        return [SimpleNamespace(pid=p, usedGpuMemory=2**20) for p in h.graphics]

    def nvmlDeviceGetProcessUtilization(self, h: FakeDevice, ts: int) -> list[SimpleNamespace]:
        uuid = h.uuid.decode() if isinstance(h.uuid, bytes) else h.uuid
        self.util_calls.append((uuid, ts))
        if isinstance(h.samples, NVMLError):
            raise h.samples
        found = [
            SimpleNamespace(pid=p, timeStamp=t, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for p, t, sm in h.samples
            if t > ts
        ]
        if not found:
            raise NVMLError_NotFound()
        return found
