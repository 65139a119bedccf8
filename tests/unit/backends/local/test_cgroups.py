"""cgroups for local replicas: detection from the mount table, limits written per version,
and, where this machine allows it, a real CPU quota holding a busy process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servectl.backends.local import cgroups
from servectl.metrics.exporters.cgroup import CgroupMount


def v1(path: Path, *controllers: str) -> CgroupMount:
    path.mkdir(parents=True, exist_ok=True)
    return CgroupMount(str(path), "/", 1, frozenset(controllers))


def v2(path: Path, controllers: str) -> CgroupMount:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text("")
    return CgroupMount(str(path), "/", 2, frozenset())


def test_v1_controllers_each_in_their_hierarchy(tmp_path: Path) -> None:
    setup = cgroups.detect([v1(tmp_path / "cpu", "cpu"), v1(tmp_path / "memory", "memory")])
    assert setup.cpu == tmp_path / "cpu" / "servectl" and setup.cpu_version == 1
    assert setup.memory == tmp_path / "memory" / "servectl" and setup.memory_version == 1
    assert setup.notes == ()
    assert "CPU quota in cgroup v1" in setup.describe()


def test_a_hybrid_machine_uses_v1_where_v2_lacks_the_controllers(tmp_path: Path) -> None:
    """This project's machines: v1 cpu and memory, and a v2 hierarchy with neither."""
    setup = cgroups.detect(
        [
            v1(tmp_path / "cpu", "cpu"),
            v1(tmp_path / "memory", "memory"),
            v2(tmp_path / "unified", ""),
        ]
    )
    assert (setup.cpu_version, setup.memory_version) == (1, 1)


def test_v2_with_both_controllers(tmp_path: Path) -> None:
    setup = cgroups.detect([v2(tmp_path / "unified", "cpuset cpu io memory pids")])
    assert setup.cpu == setup.memory == tmp_path / "unified" / "servectl"
    assert (setup.cpu_version, setup.memory_version) == (2, 2)


def test_nothing_usable_runs_without_limits_and_says_why(tmp_path: Path) -> None:
    setup = cgroups.detect([v2(tmp_path / "unified", "pids")])
    assert not setup.limits_cpu and not setup.limits_memory
    assert "does not offer the cpu controller" in setup.describe()
    missing = CgroupMount(str(tmp_path / "gone"), "/", 1, frozenset({"cpu"}))
    assert "not writable" in cgroups.detect([missing]).describe()
    assert "no cgroup hierarchy" in cgroups.detect([]).describe()


def test_create_writes_v1_limits(tmp_path: Path) -> None:
    setup = cgroups.detect([v1(tmp_path / "cpu", "cpu"), v1(tmp_path / "memory", "memory")])
    group = cgroups.create(setup, "m-v1-0", cpu_cores=0.5, memory_bytes=256 << 20)
    cpu = tmp_path / "cpu" / "servectl" / "m-v1-0"
    memory = tmp_path / "memory" / "servectl" / "m-v1-0"
    assert (group.cpu_dir, group.memory_dir) == (cpu, memory)
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000"
    assert (memory / "memory.limit_in_bytes").read_text() == str(256 << 20)
    unlimited = cgroups.create(setup, "m-v1-1", cpu_cores=None, memory_bytes=None)
    assert (unlimited.cpu_dir / "cpu.cfs_quota_us").read_text() == "-1"  # type: ignore[operator]


def test_create_writes_v2_limits_and_enables_the_controllers(tmp_path: Path) -> None:
    setup = cgroups.detect([v2(tmp_path / "unified", "cpu memory")])
    group = cgroups.create(setup, "m-v2-0", cpu_cores=1.5, memory_bytes=1 << 30)
    directory = tmp_path / "unified" / "servectl" / "m-v2-0"
    assert group.dirs == (directory,)
    assert (directory / "cpu.max").read_text() == "150000 100000"
    assert (directory / "memory.max").read_text() == str(1 << 30)
    # Written to the root's subtree_control (and servectl's own): +cpu, then +memory.
    assert (tmp_path / "unified" / "cgroup.subtree_control").read_text() in ("+memory", "+cpu")


def test_quota_rounding_and_bad_values() -> None:
    assert cgroups.cpu_quota_us(0.25) == 25_000
    assert cgroups.cpu_quota_us(0.000001) == cgroups.MIN_QUOTA_US
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number of cores"):
            cgroups.cpu_quota_us(bad)
    setup = cgroups.Setup(cpu=None, memory=None, cpu_version=None, memory_version=None)
    for name in ("", "a/b", ".."):
        with pytest.raises(ValueError, match="one path segment"):
            cgroups.create(setup, name, cpu_cores=None, memory_bytes=None)
    with pytest.raises(ValueError, match="positive number of bytes"):
        cgroups.create(setup, "x", cpu_cores=None, memory_bytes=0)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_real_quota_holds_a_busy_process_to_half_a_core() -> None:
    setup = cgroups.detect()
    if not setup.limits_cpu:
        pytest.skip(f"this machine cannot limit CPU here: {setup.describe()}")
    group = cgroups.create(setup, f"test-{os.getpid()}", cpu_cores=0.5, memory_bytes=None)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        group.add(child.pid)
        start_cpu, start = _cpu_seconds(child.pid), time.monotonic()
        time.sleep(2.0)
        share = (_cpu_seconds(child.pid) - start_cpu) / (time.monotonic() - start)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    group.remove()
    assert all(not d.exists() for d in group.dirs)
    # At most half a core (plus a tick of accounting); at least some of it.
    assert 0.1 < share <= 0.6, share


def test_a_hierarchy_that_refuses_the_controller_is_skipped_with_a_note(tmp_path: Path) -> None:
    """On v2 the controller must be enabled for servectl's subtree; a root that holds
    processes refuses (EBUSY). Here the write fails too (the file is a directory)."""
    mount = v2(tmp_path / "unified", "cpu memory")
    (tmp_path / "unified" / "cgroup.subtree_control").unlink()
    (tmp_path / "unified" / "cgroup.subtree_control").mkdir()
    setup = cgroups.detect([mount])
    assert not setup.limits_cpu and not setup.limits_memory
    assert "cgroup v2 cpu unusable" in setup.describe()


def test_cpuacct_mounted_apart_gets_a_group_too(tmp_path: Path) -> None:
    """This machine mounts v1 cpu and cpuacct apart: usage is counted in cpuacct, so a
    replica joins a group there as well (the exporter reads cpuacct.usage from it)."""
    mounts = [
        v1(tmp_path / "cpu", "cpu"),
        v1(tmp_path / "cpuacct", "cpuacct"),
        v1(tmp_path / "memory", "memory"),
    ]
    setup = cgroups.detect(mounts)
    assert setup.cpuacct == tmp_path / "cpuacct" / "servectl"
    group = cgroups.create(setup, "m-v1-0", cpu_cores=0.5, memory_bytes=None)
    assert group.cpuacct_dir == tmp_path / "cpuacct" / "servectl" / "m-v1-0"
    assert group.cpuacct_dir in group.dirs and group.cpuacct_dir.is_dir()
    # Together (cpu,cpuacct in one hierarchy) or on v2: nothing extra.
    shared = cgroups.detect([v1(tmp_path / "both", "cpu", "cpuacct")])
    assert shared.cpuacct is None
    assert cgroups.detect([v2(tmp_path / "unified", "cpu memory")]).cpuacct is None
