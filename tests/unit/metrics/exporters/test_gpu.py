"""The GPU exporter over a fake NVML: devices, attribution to replicas, sharing, no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.metrics import names
from servectl.metrics.exporters.gpu import PROCESS_SM_UTIL, GpuCollector, NoGPU, PidOwners
from servectl.metrics.exporters.replicas import StaticReplicas
from servectl.testing.exposition import label_set, samples_named
from tests.unit.metrics.exporters.helpers import (
    FakeDevice,
    FakeNVML,
    NVMLError,
    NVMLError_DriverNotLoaded,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    collect,
    replica,
)

H100 = "NVIDIA H100 80GB HBM3"


def dev(index: int) -> dict[str, str]:
    return {"gpu": str(index), "UUID": f"GPU-{index}", "modelName": H100, "Hostname": "node-a"}


def pod(name: str) -> dict[str, str]:
    return {"namespace": "default", "pod": name, "container": "model-server"}


def make(
    devices: list[FakeDevice], replicas: StaticReplicas | None = None, proc: Path | None = None
) -> tuple[GpuCollector, FakeNVML, list[str]]:
    nvml = FakeNVML(devices)
    warnings: list[str] = []
    collector = GpuCollector(
        replicas,
        nvml=nvml,
        hostname="node-a",
        proc_root=str(proc or "/nonexistent-proc"),
        warn=warnings.append,
    )
    return collector, nvml, warnings


def test_two_devices_one_used_by_a_replica_one_idle() -> None:
    devices = [
        FakeDevice("GPU-0", util=73, used_bytes=3 * 2**30, compute=[100]),
        FakeDevice(b"GPU-1", name=H100.encode(), util=0, used_bytes=2**19),  # bytes decode
    ]
    collector, nvml, _ = make(devices, StaticReplicas((replica("a-0", 100),)))
    assert collector.device_count == 2 and nvml.initialised == 1
    text, series = collect(collector)
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert samples_named(series, names.DCGM_GPU_UTIL) == {
        label_set(**dev(0), **pod("a-0")): 73.0,
        label_set(**dev(1)): 0.0,  # no replica on it: no pod labels at all
    }
    assert samples_named(series, names.DCGM_FB_USED) == {
        label_set(**dev(0), **pod("a-0")): 3072.0,
        label_set(**dev(1)): 0.5,
    }
    assert samples_named(series, PROCESS_SM_UTIL) == {
        label_set(gpu="0", UUID="GPU-0", **pod("a-0")): 0.0,  # no busy sample: 0
    }
    collector.close()
    assert nvml.initialised == 0


def test_memory_used_leaves_out_the_drivers_reserve_as_nvidia_smi_does() -> None:
    # On an H200 (driver 580) the v1 call said 1338 MiB used where nvidia-smi said 723: v1
    # counts the driver's ~615 MiB reserve. The v2 call's `used` is nvidia-smi's figure.
    devices = [FakeDevice("GPU-0", used_bytes=723 * 2**20, reserved_bytes=615 * 2**20)]
    collector, nvml, warnings = make(devices)
    _, series = collect(collector)
    assert samples_named(series, names.DCGM_FB_USED) == {label_set(**dev(0)): 723.0}
    assert nvml.memory_calls == [nvml.nvmlMemory_v2]
    assert warnings == []


def test_a_driver_without_the_v2_memory_call_falls_back_to_v1_once_for_all() -> None:
    devices = [FakeDevice("GPU-0", used_bytes=723 * 2**20, reserved_bytes=615 * 2**20)]
    nvml = FakeNVML(devices, memory_v2=False)
    collector = GpuCollector(None, nvml=nvml, hostname="node-a", warn=lambda m: None)
    for _ in range(2):
        _, series = collect(collector)
        assert samples_named(series, names.DCGM_FB_USED) == {label_set(**dev(0)): 1338.0}
    assert nvml.memory_calls == [nvml.nvmlMemory_v2, None, None]  # v2 asked for once


def test_a_shared_device_has_one_series_per_replica_with_the_device_value() -> None:
    devices = [
        FakeDevice(
            "GPU-0",
            util=90,
            used_bytes=10 * 2**20,
            compute=[100, 200, 999],  # 999 is no replica's
            samples=[(100, 5, 30), (200, 5, 45), (100, 7, 35), (999, 7, 20)],
        )
    ]
    replicas = StaticReplicas((replica("a-0", 100), replica("b-0", 200, revision="resnet-v3")))
    collector, nvml, _ = make(devices, replicas)
    _, series = collect(collector)
    assert samples_named(series, names.DCGM_GPU_UTIL) == {
        label_set(**dev(0), **pod("a-0")): 90.0,
        label_set(**dev(0), **pod("b-0")): 90.0,
    }
    assert set(samples_named(series, names.DCGM_FB_USED).values()) == {10.0}
    assert samples_named(series, PROCESS_SM_UTIL) == {
        label_set(gpu="0", UUID="GPU-0", **pod("a-0")): 35.0,  # the latest sample of pid 100
        label_set(gpu="0", UUID="GPU-0", **pod("b-0")): 45.0,
    }
    # The next scrape asks only for samples newer than those seen.
    devices[0].samples = [(100, 9, 10)]
    _, series = collect(collector)
    assert nvml.util_calls == [("GPU-0", 0), ("GPU-0", 7)]
    assert samples_named(series, PROCESS_SM_UTIL) == {
        label_set(gpu="0", UUID="GPU-0", **pod("a-0")): 10.0,
        label_set(gpu="0", UUID="GPU-0", **pod("b-0")): 0.0,  # idle since: no sample
    }


def proc_tree(root: Path, parents: dict[int, int]) -> Path:
    for pid, ppid in parents.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python3 (w)) S {ppid} {pid} 0 0 -1\n")
    return root


def test_processes_are_attributed_by_pid_cgroup_and_ancestry(tmp_path: Path) -> None:
    cgroup = tmp_path / "cg/r-b"
    (cgroup / "worker").mkdir(parents=True)
    (cgroup / "cgroup.procs").write_text("200\n700\n")
    (cgroup / "worker/cgroup.procs").write_text("701\n")
    proc = proc_tree(tmp_path / "proc", {500: 400, 400: 100, 600: 1, 800: 801, 801: 800})
    replicas = StaticReplicas(
        (replica("a-0", 100), replica("b-0", 200, cgroup=str(cgroup)), replica("c-0", 300))
    )
    owners = PidOwners(replicas.replicas(), str(proc))
    owner = {pid: (o.pod if (o := owners.owner(pid)) else None) for pid in (100, 500, 700, 701)}
    assert owner == {100: "a-0", 500: "a-0", 700: "b-0", 701: "b-0"}
    assert owners.owner(600) is None  # parent is init
    assert owners.owner(800) is None  # a ppid loop ends the walk
    assert owners.owner(4242) is None  # no such process

    devices = [
        FakeDevice("GPU-0", util=10, compute=[500]),  # a child of replica a-0
        FakeDevice("GPU-1", util=20, graphics=[701]),  # a graphics process in b-0's cgroup
        FakeDevice("GPU-2", util=30, compute=[600]),  # nobody's
    ]
    collector, _, _ = make(devices, replicas, proc)
    _, series = collect(collector)
    assert samples_named(series, names.DCGM_GPU_UTIL) == {
        label_set(**dev(0), **pod("a-0")): 10.0,
        label_set(**dev(1), **pod("b-0")): 20.0,
        label_set(**dev(2)): 30.0,
    }


def test_unsupported_per_process_utilization_is_omitted() -> None:
    devices = [FakeDevice("GPU-0", util=50, compute=[100], samples=NVMLError_NotSupported())]
    collector, _, warnings = make(devices, StaticReplicas((replica("a-0", 100),)))
    _, series = collect(collector)
    assert samples_named(series, PROCESS_SM_UTIL) == {}
    assert samples_named(series, names.DCGM_GPU_UTIL) == {label_set(**dev(0), **pod("a-0")): 50.0}
    assert warnings == []


def test_per_process_utilization_sums_a_replicas_processes_and_caps_at_100(
    tmp_path: Path,
) -> None:
    proc = proc_tree(tmp_path / "proc", {101: 100, 102: 100})
    devices = [FakeDevice("GPU-0", compute=[101, 102], samples=[(101, 1, 70), (102, 1, 60)])]
    collector, _, _ = make(devices, StaticReplicas((replica("a-0", 100),)), proc)
    _, series = collect(collector)
    assert samples_named(series, PROCESS_SM_UTIL) == {
        label_set(gpu="0", UUID="GPU-0", **pod("a-0")): 100.0
    }


def test_without_replicas_devices_have_no_pod_labels() -> None:
    collector, _, _ = make([FakeDevice("GPU-0", util=5, compute=[100])])
    _, series = collect(collector)
    assert samples_named(series, names.DCGM_GPU_UTIL) == {label_set(**dev(0)): 5.0}
    assert samples_named(series, PROCESS_SM_UTIL) == {}


def test_an_unreadable_device_is_skipped_with_one_warning() -> None:
    devices = [
        FakeDevice("GPU-0", util=5, broken=NVMLError_GpuIsLost()),
        FakeDevice("GPU-1", util=6, graphics_error=NVMLError_NotSupported()),
    ]
    collector, _, warnings = make(devices)
    for _ in range(2):
        _, series = collect(collector)
        assert samples_named(series, names.DCGM_GPU_UTIL) == {label_set(**dev(1)): 6.0}
    assert len(warnings) == 1 and "GPU 0" in warnings[0] and "GpuIsLost" in warnings[0]


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        (FakeNVML([], init_error=NVMLError_LibraryNotFound()), "NVML library not found"),
        (FakeNVML([], init_error=NVMLError_DriverNotLoaded()), "NVIDIA driver is not loaded"),
        (FakeNVML([], init_error=NVMLError()), "NVML failed to initialise"),
        (FakeNVML([]), "NVML sees 0 GPU devices"),
    ],
)
def test_no_gpu_raises_a_typed_error(nvml: FakeNVML, reason: str) -> None:
    with pytest.raises(NoGPU) as info:
        GpuCollector(None, nvml=nvml)
    assert reason in info.value.reason
    assert info.value.message().startswith(f"no GPU: {info.value.reason}; ")
    assert "nothing to export" in info.value.message()
    assert nvml.initialised == 0  # initialised then shut down, or never initialised


def test_real_nvml_on_a_machine_without_a_gpu_raises_no_gpu() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        if count:
            pytest.skip("this machine has a GPU")
    with pytest.raises(NoGPU) as info:
        GpuCollector(None)
    assert info.value.reason  # e.g. "NVML library not found (libnvidia-ml.so.1)"


def test_real_nvml_exports_every_device_where_there_is_a_gpu() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        collector = GpuCollector(None)
    except NoGPU as exc:
        pytest.skip(exc.message())
    try:
        uuids = {
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(collector.device_count)
        }
        _, series = collect(collector)
        util = samples_named(series, names.DCGM_GPU_UTIL)
        assert {dict(key)["UUID"] for key in util} == {
            u.decode() if isinstance(u, bytes) else u for u in uuids
        }
        assert all(0 <= v <= 100 for v in util.values())
    finally:
        collector.close()
