"""The CPU exporter over fake cgroup and /proc trees: sources, fallbacks, exposition."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.metrics import names
from servectl.metrics.exporters.cgroup import (
    CgroupError,
    CgroupMount,
    CpuCollector,
    ReplicaGone,
    cgroup_cpu_seconds,
    cpuacct_dir,
    parse_mountinfo,
    proc_cpu_seconds,
)
from servectl.metrics.exporters.replicas import StaticReplicas
from servectl.testing.exposition import label_set, samples_named
from tests.unit.metrics.exporters.helpers import collect, replica

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
42 31 0:39 /docker/abc /mnt/my\\040cgroups rw shared:9 - cgroup cgroup rw,cpu,cpuacct
"""


def test_parse_mountinfo() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert [m.mount_point for m in mounts] == [
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/cpuacct",
        "/sys/fs/cgroup/systemd",
        "/sys/fs/cgroup/unified",
        "/mnt/my cgroups",
    ]
    cpu, acct, systemd, unified, combined = mounts
    assert cpu == CgroupMount("/sys/fs/cgroup/cpu", "/", 1, frozenset({"cpu"}))
    assert acct.controllers == {"cpuacct"}
    assert systemd.controllers == frozenset()  # neither name=systemd nor xattr is one
    assert unified.version == 2 and unified.controllers == frozenset()
    assert combined.root == "/docker/abc" and combined.controllers == {"cpu", "cpuacct"}


# --------------------------------------------------------------------------- fake trees


def v1_tree(tmp_path: Path) -> list[CgroupMount]:
    """Separate cpu and cpuacct v1 hierarchies and a v2 one, under tmp_path."""
    for d in ("cpu", "cpuacct", "unified"):
        (tmp_path / d).mkdir()
    return [
        CgroupMount(str(tmp_path / "cpu"), "/", 1, frozenset({"cpu"})),
        CgroupMount(str(tmp_path / "cpuacct"), "/", 1, frozenset({"cpuacct"})),
        CgroupMount(str(tmp_path / "unified"), "/", 2, frozenset()),
    ]


def group(path: Path, **files: str) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name.replace("_", ".", 1)).write_text(text)
    return path


def test_v2_reads_usage_usec(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    g = group(tmp_path / "unified/servectl/r0", cpu_stat="usage_usec 2500000\nuser_usec 2\n")
    assert cgroup_cpu_seconds(str(g), mounts) == 2.5


def test_v1_cpuacct_group_reads_cpuacct_usage(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    g = group(tmp_path / "cpuacct/servectl/r0", cpuacct_usage="1500000000\n")
    assert cgroup_cpu_seconds(str(g), mounts) == 1.5


def test_v1_cpu_group_is_mapped_to_its_cpuacct_group(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    # The v1 cpu controller has its own cpu.stat, without usage_usec.
    cpu = group(tmp_path / "cpu/servectl/r0", cpu_stat="nr_periods 0\nnr_throttled 0\n")
    group(tmp_path / "cpuacct/servectl/r0", cpuacct_usage="3000000000\n")
    assert cpuacct_dir(str(cpu), mounts) == str(tmp_path / "cpuacct/servectl/r0")
    assert cgroup_cpu_seconds(str(cpu), mounts) == 3.0


def test_v1_mapping_honours_mount_roots(tmp_path: Path) -> None:
    # In a container both hierarchies are mounted from /kubepods/x, but cpuacct from /kubepods.
    (tmp_path / "cpu").mkdir()
    (tmp_path / "acct").mkdir()
    mounts = [
        CgroupMount(str(tmp_path / "cpu"), "/kubepods/x", 1, frozenset({"cpu"})),
        CgroupMount(str(tmp_path / "acct"), "/kubepods", 1, frozenset({"cpuacct"})),
    ]
    cpu = group(tmp_path / "cpu/r0")
    group(tmp_path / "acct/x/r0", cpuacct_usage="1000000000")
    assert cgroup_cpu_seconds(str(cpu), mounts) == 1.0


def test_v1_errors(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    cpu = group(tmp_path / "cpu/servectl/r0")
    with pytest.raises(CgroupError, match=r"cpuacct group .* does not exist"):
        cgroup_cpu_seconds(str(cpu), mounts)
    with pytest.raises(CgroupError, match="no cpuacct hierarchy is mounted"):
        cgroup_cpu_seconds(str(cpu), mounts[:1])
    elsewhere = group(tmp_path / "not-a-cgroup")
    with pytest.raises(CgroupError, match="not under a mounted cgroup hierarchy"):
        cgroup_cpu_seconds(str(elsewhere), mounts)
    bad = group(tmp_path / "cpuacct/bad", cpuacct_usage="garbage")
    with pytest.raises(CgroupError, match="not a number"):
        cgroup_cpu_seconds(str(bad), mounts)


def test_a_removed_group_is_gone(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    with pytest.raises(ReplicaGone):
        cgroup_cpu_seconds(str(tmp_path / "unified/servectl/gone"), mounts)
    with pytest.raises(ReplicaGone):
        cgroup_cpu_seconds(str(tmp_path / "cpu/servectl/gone"), mounts)


def proc_stat(root: Path, pid: int, state: str, utime: int, stime: int, cut: int, cst: int) -> None:
    # Fields 3.. after a command name with spaces and a ")" in it.
    rest = [state, "1", str(pid), str(pid), "0", "-1", "4194560", "0", "0", "0", "0"]
    rest += [str(utime), str(stime), str(cut), str(cst), "20", "0", "1", "0", "100"]
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "stat").write_text(f"{pid} (tf serving) x) " + " ".join(rest) + "\n")


def test_proc_fallback_counts_the_process_and_its_reaped_children(tmp_path: Path) -> None:
    proc_stat(tmp_path, 42, "R", 300, 100, 50, 50)
    assert proc_cpu_seconds(42, str(tmp_path), clk_tck=100) == 5.0
    proc_stat(tmp_path, 43, "Z", 300, 100, 0, 0)
    with pytest.raises(ReplicaGone):
        proc_cpu_seconds(43, str(tmp_path), clk_tck=100)
    with pytest.raises(ReplicaGone):
        proc_cpu_seconds(44, str(tmp_path), clk_tck=100)


def test_collector_exposes_cluster_names_and_drops_gone_replicas(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    proc = tmp_path / "proc"
    g2 = group(tmp_path / "unified/r-v2", cpu_stat="usage_usec 4000000\n")
    group(tmp_path / "cpu/r-v1")
    group(tmp_path / "cpuacct/r-v1", cpuacct_usage="2000000000")
    proc_stat(proc, 300, "S", 100, 0, 0, 0)
    replicas = StaticReplicas(
        (
            replica("r-v2", 100, cgroup=str(g2), cpu_request_cores=2.0),
            replica("r-v1", 200, cgroup=str(tmp_path / "cpu/r-v1"), cpu_request_cores=0.5),
            replica("r-proc", 300, revision="resnet-v3"),
            replica("r-gone", 400, cpu_request_cores=1.0),
            replica("r-gone-cg", 500, cgroup=str(tmp_path / "unified/removed")),
        )
    )
    warnings: list[str] = []
    collector = CpuCollector(
        replicas, mounts=mounts, proc_root=str(proc), clk_tck=100, warn=warnings.append
    )
    text, series = collect(collector)

    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert "container_cpu_usage_seconds_total_total" not in text
    assert "container_cpu_usage_seconds_created" not in text
    cpu = samples_named(series, names.CADVISOR_CPU)
    base = {"namespace": "default", "container": "model-server"}
    assert cpu == {
        label_set(pod="r-v2", **base): 4.0,
        label_set(pod="r-v1", **base): 2.0,
        label_set(pod="r-proc", **base): 1.0,
    }
    assert samples_named(series, names.KSM_REQUESTS) == {
        label_set(pod="r-v2", resource="cpu", unit="core", **base): 2.0,
        label_set(pod="r-v1", resource="cpu", unit="core", **base): 0.5,
        label_set(pod="r-gone", resource="cpu", unit="core", **base): 1.0,
    }
    pod_labels = samples_named(series, names.KSM_POD_LABELS)
    assert len(pod_labels) == 5 and set(pod_labels.values()) == {1.0}
    assert (
        label_set(
            namespace="default",
            pod="r-proc",
            label_servectl_io_service="resnet",
            label_servectl_io_revision="resnet-v3",
        )
        in pod_labels
    )
    assert warnings == []


def test_collector_warns_once_about_an_unreadable_cgroup(tmp_path: Path) -> None:
    mounts = v1_tree(tmp_path)
    cpu_only = group(tmp_path / "cpu/r0")  # no matching cpuacct group
    warnings: list[str] = []
    collector = CpuCollector(
        StaticReplicas((replica("r0", 1, cgroup=str(cpu_only)),)),
        mounts=mounts,
        warn=warnings.append,
    )
    for _ in range(3):
        _, series = collect(collector)
        assert samples_named(series, names.CADVISOR_CPU) == {}
        assert len(samples_named(series, names.KSM_POD_LABELS)) == 1
    assert len(warnings) == 1 and "default/r0: no CPU series" in warnings[0]


def test_describe_names_the_families_without_reading_anything() -> None:
    collector = CpuCollector(StaticReplicas(), mounts=[])
    assert [f.name for f in collector.describe()] == [
        "container_cpu_usage_seconds",  # exposed with "_total"
        names.KSM_REQUESTS,
        names.KSM_POD_LABELS,
    ]
