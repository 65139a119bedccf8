"""The CPU exporter against real processes and real cgroups, scraped over HTTP.

A busy-loop child burns what CPU it gets; two scrapes about a second apart must show its
counter growing by what the kernel charged the process over the same second (its
utime + stime in /proc/<pid>/stat, read independently of the exporter), within 0.1 s. Not a
fixed share of wall time: on a shared 2-core machine (CI builds Go beside the tests) the
child got 0.41 of a core.
The cgroup tests create a child group in this machine's hierarchy and skip when that is
not writable (not root, read-only /sys/fs/cgroup, no such hierarchy).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from servectl.metrics import names
from servectl.metrics.exporters import serve
from servectl.metrics.exporters.cgroup import CgroupMount, CpuCollector, read_cgroup_mounts
from servectl.metrics.exporters.replicas import Replica, ReplicaFile
from servectl.testing.exporters import scrape
from servectl.testing.exposition import label_set, samples_named
from tests.unit.metrics.exporters.helpers import busy_child, end, replica, write_replicas


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = busy_child()
    try:
        yield proc
    finally:
        end(proc)


@contextlib.contextmanager
def exporter(path: Path) -> Iterator[str]:
    registry = CollectorRegistry()
    registry.register(CpuCollector(ReplicaFile(path)))
    server, url = serve.start(registry, "127.0.0.1", 0)
    try:
        yield url
    finally:
        serve.stop(server)


def cpu_of(url: str, r: Replica) -> float | None:
    _, series = scrape(url)
    key = label_set(namespace=r.namespace, pod=r.pod, container=r.container)
    return samples_named(series, names.CADVISOR_CPU).get(key)


def charged(pid: int) -> float:
    """The CPU seconds the kernel charged ``pid`` so far (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def assert_burns_one_core(url: str, r: Replica) -> None:
    """Two scrapes ~1 s apart: the counter grows by what the kernel charged the process
    meanwhile (within 0.1 s), and by something (the loop ran)."""
    time.sleep(0.2)  # let the interpreter start and the loop spin up
    kernel0, before = charged(r.pid), cpu_of(url, r)
    time.sleep(1.0)
    after, kernel1 = cpu_of(url, r), charged(r.pid)
    assert before is not None and after is not None
    counted, spent = after - before, kernel1 - kernel0
    assert counted >= 0.1, f"{counted:.3f} CPU-s counted over a second of a busy loop"
    assert abs(counted - spent) <= 0.1, f"counted {counted:.3f} CPU-s, the kernel {spent:.3f}"


def test_proc_fallback_counts_a_busy_process(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    path = tmp_path / "replicas.json"
    r = replica("busy-0", child.pid, cpu_request_cores=1.0)
    write_replicas(path, [r])
    with exporter(path) as url:
        assert_burns_one_core(url, r)


def test_a_vanished_process_drops_its_series(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    reaped, zombie = busy_child(), busy_child()
    try:
        rs = [replica("reaped-0", reaped.pid), replica("zombie-0", zombie.pid)]
        write_replicas(path, rs)
        with exporter(path) as url:
            assert cpu_of(url, rs[0]) is not None and cpu_of(url, rs[1]) is not None
            end(reaped)  # killed and reaped: /proc/<pid> is gone
            zombie.kill()  # killed, not reaped: a zombie until end() below
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and (
                not os.path.exists(f"/proc/{zombie.pid}/stat")
                or " Z " not in Path(f"/proc/{zombie.pid}/stat").read_text()
            ):
                time.sleep(0.02)
            _, series = scrape(url)
            assert samples_named(series, names.CADVISOR_CPU) == {}
            # The pods are still listed, so their kube-state-metrics series stay.
            assert len(samples_named(series, names.KSM_POD_LABELS)) == 2
    finally:
        end(reaped)
        end(zombie)


# --------------------------------------------------------------------------- real cgroups


def _mount(version: int, controller: str | None) -> CgroupMount | None:
    for m in read_cgroup_mounts():
        if m.version == version and (controller is None or controller in m.controllers):
            return m
    return None


@contextlib.contextmanager
def real_group(mount: CgroupMount | None, name: str) -> Iterator[Path]:
    """A new child group under ``mount``; skip the test where that cannot be made."""
    if mount is None:
        pytest.skip("no such cgroup hierarchy is mounted here")
    path = Path(mount.mount_point) / name
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup under {mount.mount_point}: {exc.strerror}")
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            # Move any process still inside back to the root group, then remove the group.
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    join(Path(mount.mount_point), int(pid))
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def join(group: Path, pid: int) -> None:
    (group / "cgroup.procs").write_text(str(pid))


def test_cgroup_v1_cpu_path_is_read_from_the_cpuacct_hierarchy(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    name = f"servectl-exporter-test-{uuid.uuid4().hex[:8]}"
    with (
        real_group(_mount(1, "cpuacct"), name) as acct,
        real_group(_mount(1, "cpu"), name) as cpu,
    ):
        join(acct, child.pid)
        join(cpu, child.pid)
        path = tmp_path / "replicas.json"
        # The runtime records the cpu-hierarchy path (where the quota is); the exporter
        # finds the same group in the cpuacct hierarchy.
        r = replica("cg1-0", child.pid, cgroup=str(cpu))
        write_replicas(path, [r])
        with exporter(path) as url:
            assert_burns_one_core(url, r)
            end(child)
            assert (acct / "cgroup.procs").read_text().strip() == ""
            cpu.rmdir()  # the runtime removes the replica's groups when it stops it
            acct.rmdir()
            assert cpu_of(url, r) is None


def test_cgroup_v2_usage(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    name = f"servectl-exporter-test-{uuid.uuid4().hex[:8]}"
    with real_group(_mount(2, None), name) as group:
        join(group, child.pid)
        path = tmp_path / "replicas.json"
        r = replica("cg2-0", child.pid, cgroup=str(group))
        write_replicas(path, [r])
        with exporter(path) as url:
            assert_burns_one_core(url, r)
