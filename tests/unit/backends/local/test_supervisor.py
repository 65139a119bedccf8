"""The replica supervisor against a fake model server (servectl.testing.fake_model_server, a
real process that speaks the REST status API): files and flags, readiness, crash backoff,
port retries, stop and SIGKILL, adoption after the controller is killed, the exporters'
registry."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl import processes
from servectl.backends.local import cgroups
from servectl.backends.local import replica_launch as launch
from servectl.backends.local import supervisor as sv
from servectl.backends.local.replica_launch import ReplicaSpec
from servectl.backends.local.replica_state import Phase, Replica
from servectl.backends.local.supervisor import Supervisor
from servectl.metrics.exporters.cgroup import CgroupMount
from servectl.metrics.exporters.replicas import parse_replicas
from servectl.testing import fake_model_server

FAKE = Path(fake_model_server.__file__)
COMMAND = [sys.executable, str(FAKE)]
ROOT = Path(__file__).resolve().parents[4]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def model(tmp_path: Path, name: str = "m", versions: tuple[int, ...] = (1,), **fake: Any) -> Path:
    """A model base path with these version directories and fake.json behaviour."""
    base = tmp_path / "models" / name
    for version in versions:
        (base / str(version)).mkdir(parents=True, exist_ok=True)
    base.mkdir(parents=True, exist_ok=True)
    (base / "fake.json").write_text(json.dumps(fake))
    return base


def spec(base: Path, pod: str = "m-v1-0", version: int = 1, **kw: Any) -> ReplicaSpec:
    fields: dict[str, Any] = dict(
        namespace="default",
        service="m",
        revision="m-v1",
        pod=pod,
        model_name=base.name,
        base_path=base,
        version=version,
    )
    fields.update(kw)
    return ReplicaSpec(**fields)


def wait_for(
    sup: Supervisor,
    condition: Callable[[list[Replica]], bool],
    *,
    timeout_s: float = 10.0,
    clock: FakeClock | None = None,
    step_s: float = 0.25,
) -> list[Replica]:
    """poll() until ``condition`` holds (advancing the fake clock by ``step_s`` a poll)."""
    deadline = time.monotonic() + timeout_s
    while True:
        replicas = sup.poll()
        if condition(replicas):
            return replicas
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; replicas: {replicas}")
        if clock is not None:
            clock.advance(step_s)
        time.sleep(0.02)


def phase_of(pod: str, phase: Phase) -> Callable[[list[Replica]], bool]:
    return lambda replicas: any(r.spec.pod == pod and r.phase == phase for r in replicas)


def all_ready(count: int) -> Callable[[list[Replica]], bool]:
    return lambda rs: len(rs) == count and all(r.phase == Phase.READY for r in rs)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def make() -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def factory(directory: Path, **kw: Any) -> Supervisor:
        kw.setdefault("command", COMMAND)
        sup = Supervisor(directory, **kw)
        made.append(sup)
        return sup

    yield factory
    for sup in made:
        if not sup._closed:
            sup.shutdown(grace_s=0.5)


# --------------------------------------------------------------------------- files, flags


def test_writes_the_configs_and_passes_the_flags(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, "cost_model", versions=(1, 2))
    sup = make(run_dir)
    replica = sup.start(spec(base, version=2, cpu_cores=1.5, batching=(32, 1000)))
    assert replica.phase == Phase.STARTING and replica.pid is not None
    files = launch.ReplicaFiles.under(run_dir, "m-v1-0")
    assert files.model_config.read_text() == textwrap.dedent(
        f"""\
        model_config_list {{
          config {{
            name: "cost_model"
            base_path: "{base}"
            model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 2 }} }}
          }}
        }}
        """
    )
    assert files.monitoring_config.read_text() == (
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }\n'
    )
    assert files.batching_config.read_text() == (
        "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 1000 }\n"
    )
    argv = cmdline(replica.pid)
    assert argv[: len(COMMAND)] == COMMAND
    assert argv[len(COMMAND) :] == [
        f"--port={replica.grpc_port}",
        f"--rest_api_port={replica.rest_port}",
        f"--model_config_file={files.model_config}",
        f"--monitoring_config_file={files.monitoring_config}",
        "--file_system_poll_wait_seconds=0",
        "--rest_api_bind_address=127.0.0.1",
        "--grpc_bind_address=127.0.0.1",
        "--tensorflow_intra_op_parallelism=2",
        "--tensorflow_inter_op_parallelism=1",
        "--enable_batching",
        f"--batching_parameters_file={files.batching_config}",
    ]
    assert replica.rest_port != replica.grpc_port
    record = json.loads(files.record.read_text())
    assert record["pid"] == replica.pid and record["rest_port"] == replica.rest_port
    assert record["start_ticks"] == processes.start_ticks(replica.pid)
    assert ReplicaSpec.from_json(record["spec"]) == replica.spec
    (ready,) = wait_for(sup, all_ready(1))
    assert ready.url == f"http://127.0.0.1:{replica.rest_port}"
    log = files.log.read_text()
    assert log.startswith("==== servectl supervisor ") and "starting m-v1-0" in log
    assert "Exporting HTTP/REST API" in log


def test_tf_serving_gets_no_bind_flags(tmp_path: Path) -> None:
    base = model(tmp_path)
    files = launch.ReplicaFiles.under(tmp_path, "p")
    tf = launch.server_argv(["/usr/bin/tensorflow_model_server"], spec(base), files, 1, 2)
    assert not any("bind_address" in flag for flag in tf)
    assert "--tensorflow_intra_op_parallelism=1" not in tf  # no CPU limit, no pool sizes
    quarter = launch.server_argv(COMMAND, spec(base, cpu_cores=0.25), files, 1, 2)
    assert "--tensorflow_intra_op_parallelism=1" in quarter
    assert "--rest_api_bind_address=127.0.0.1" in quarter


def test_server_command_prefers_tf_serving_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert launch.default_command() == [sys.executable, "-m", "servectl", "model-server"]
    binary = tmp_path / "tensorflow_model_server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert launch.default_command() == [str(binary)]
    sup = Supervisor(tmp_path / "run")
    assert sup.server_command == [str(binary)]
    sup.close()


def test_the_default_command_runs_servectls_model_server() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servectl", "model-server", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "--rest_api_bind_address" in out.stdout


def test_bad_specs_say_which_field(tmp_path: Path) -> None:
    base = model(tmp_path)
    for kw, field in [
        ({"pod": "Bad_Name"}, "pod"),
        ({"namespace": ""}, "namespace"),
        ({"base_path": Path("relative")}, "base_path"),
        ({"version": -1}, "version"),
        ({"cpu_cores": 0.0}, "cpu_cores"),
        ({"cpu_cores": float("nan")}, "cpu_cores"),
        ({"memory_bytes": 0}, "memory_bytes"),
        ({"batching": (0, 10)}, "batching"),
    ]:
        with pytest.raises(launch.InvalidSpecError, match=f"^{field}: "):
            spec(base, **kw)


def test_start_is_idempotent_and_refuses_another_spec(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, versions=(1, 2))
    sup = make(run_dir)
    first = sup.start(spec(base))
    assert sup.start(spec(base)).pid == first.pid
    with pytest.raises(sv.ReplicaConflictError, match="stop it and wait"):
        sup.start(spec(base, version=2))
    with pytest.raises(sv.UnknownReplicaError, match="no replica named 'nope'; replicas: m-v1-0"):
        sup.kill("nope")


def test_a_missing_command_is_an_error_that_says_what_to_install(
    tmp_path: Path, run_dir: Path, make
) -> None:
    sup = make(run_dir, command=[str(tmp_path / "no-such-server")])
    with pytest.raises(launch.ServerStartError, match="install tensorflow_model_server"):
        sup.start(spec(model(tmp_path)))
    assert sup.replicas() == []


def test_a_second_supervisor_on_the_directory_is_refused(run_dir: Path, make) -> None:
    first = make(run_dir)
    with pytest.raises(sv.DirectoryBusyError, match=f"pid {os.getpid()}"):
        Supervisor(run_dir, command=COMMAND)
    first.close()
    make(run_dir).close()


# --------------------------------------------------------------------------- readiness


def test_ready_only_once_the_version_is_available(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, ready_after_s=0.8)
    sup = make(run_dir)
    started = time.monotonic()
    sup.start(spec(base))
    wait_for(sup, lambda rs: "is LOADING" in rs[0].message)
    assert sup.get("m-v1-0").phase == Phase.STARTING  # type: ignore[union-attr]
    (replica,) = wait_for(sup, all_ready(1))
    assert time.monotonic() - started >= 0.8
    assert replica.ready_at is not None and replica.started_at is not None
    assert replica.ready_at >= replica.started_at + 0.8
    assert "AVAILABLE" in replica.message


def test_a_ready_replica_that_stops_answering_is_not_ready(
    tmp_path: Path, run_dir: Path, make
) -> None:
    base = model(tmp_path)
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    sup.start(spec(base))
    wait_for(sup, all_ready(1), clock=clock)
    (base / "fake.json").write_text(json.dumps({"available": False}))
    # Two failed checks are tolerated (a throttled replica may answer one late).
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.NOT_READY), clock=clock)
    assert "HTTP 503" in replica.message and replica.ready_at is None
    (base / "fake.json").write_text("{}")
    (replica,) = wait_for(sup, all_ready(1), clock=clock)


def test_poll_stays_fast_with_20_replicas(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, ready_after_s=0.5)
    sup = make(run_dir)
    starts, start_cpu = [], []
    for i in range(20):
        t0, c0 = time.perf_counter(), time.thread_time()
        sup.start(spec(base, pod=f"m-v1-{i}"))
        starts.append(time.perf_counter() - t0)
        start_cpu.append(time.thread_time() - c0)
    durations, cpu = [], []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t0, c0 = time.perf_counter(), time.thread_time()
        replicas = sup.poll()
        durations.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        if all(r.phase == Phase.READY for r in replicas):
            break
        time.sleep(0.05)
    assert all(r.phase == Phase.READY for r in replicas), replicas
    # As in the crash-loop test below: the supervisor's own work (CPU) is bounded tightly;
    # wall time also holds waiting on fork/exec while 20 processes start on 2 shared cores
    # (CI saw a 117 ms poll there), so its median is bounded tightly and its worst loosely.
    median_start = sorted(starts)[len(starts) // 2]
    assert max(start_cpu) < 0.05 and median_start < 0.1 and max(starts) < 0.25, starts
    median = sorted(durations)[len(durations) // 2]
    assert max(cpu) < 0.03 and median < 0.1 and max(durations) < 0.25, (max(cpu), durations)


def test_poll_stays_fast_while_20_replicas_crash_loop(tmp_path: Path, run_dir: Path, make) -> None:
    """Reaping and restarting costs 5-15 ms a replica while others load (waiting, mostly):
    one poll works POLL_BUDGET_S and leaves the rest to the next."""
    base = model(tmp_path, exit_after_s=0)
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    for i in range(20):
        sup.start(spec(base, pod=f"m-v1-{i}"))
    durations, cpu = [], []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t0, c0 = time.perf_counter(), time.thread_time()
        replicas = sup.poll()
        durations.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        if all(r.restarts >= 2 for r in replicas):
            break
        clock.advance(1.0)
        time.sleep(0.02)
    assert all(r.restarts >= 2 for r in replicas), replicas
    # The supervisor's own work stays small; the rest of a poll's time is waiting on fork/exec
    # and renames while 20 processes start on a starved machine, which the budget bounds.
    # The budget is looked at before each restart, so a poll may overrun it by one restart:
    # at most 0.05 CPU-s (a start's bound in the test above). CI saw 41 ms against 30.
    median = sorted(durations)[len(durations) // 2]
    one_restart = 0.05
    assert max(cpu) < sv.POLL_BUDGET_S + one_restart and median < 0.1, (max(cpu), durations)
    assert max(durations) < 0.25, (max(cpu), durations)


# --------------------------------------------------------------------------- crashes


def test_a_crashing_server_backs_off_1_2_4_up_to_30_s(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, exit_after_s=0, exit_code=3)
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    sup.start(spec(base))
    for restarts, delay in enumerate([1, 2, 4, 8, 16, 30, 30]):
        (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF), step_s=0)
        assert replica.restarts == restarts and replica.pid is None
        assert replica.message == f"exited with code 3: told to crash; restarting in {delay} s"
        assert replica.last_error == "exited with code 3: told to crash"
        clock.advance(delay - 0.01)
        assert sup.poll()[0].phase == Phase.BACKOFF
        clock.advance(0.01)
        (replica,) = sup.poll()
        assert replica.phase == Phase.STARTING and replica.restarts == restarts + 1
    assert json.loads((run_dir / "replicas" / "m-v1-0" / "replica.json").read_text())[
        "backoff_s"
    ] == pytest.approx(30)


def test_kill_9_is_restarted_and_ready_again(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path)
    sup = make(run_dir)
    sup.start(spec(base))
    (before,) = wait_for(sup, all_ready(1))
    sup.kill("m-v1-0", signal.SIGKILL)
    (crashed,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    assert crashed.message.startswith("killed by signal 9 (SIGKILL)")
    assert crashed.message.endswith("restarting in 1 s")
    with pytest.raises(sv.NotRunningError, match="restarting in 1 s"):
        sup.kill("m-v1-0")
    (after,) = wait_for(sup, all_ready(1), timeout_s=5)
    assert after.restarts == 1 and after.pid != before.pid
    assert after.last_error is not None and "signal 9" in after.last_error
    assert launch.ReplicaFiles.under(run_dir, "m-v1-0").log.read_text().count("==== servectl") == 2


def test_backoff_resets_after_60_s_ready(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path)
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    sup.start(spec(base))
    for delay in (1, 2):
        wait_for(sup, all_ready(1), clock=clock)
        sup.kill("m-v1-0")
        (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF), step_s=0)
        assert replica.message.endswith(f"restarting in {delay} s")
    wait_for(sup, all_ready(1), clock=clock)
    clock.advance(59)
    sup.poll()
    sup.kill("m-v1-0")
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF), step_s=0)
    assert replica.message.endswith("restarting in 4 s")  # 59 s was not enough
    wait_for(sup, all_ready(1), clock=clock)
    clock.advance(60)
    sup.poll()
    sup.kill("m-v1-0")
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF), step_s=0)
    assert replica.message.endswith("restarting in 1 s") and replica.restarts == 3


def test_a_missing_version_keeps_backing_off_and_says_which(
    tmp_path: Path, run_dir: Path, make
) -> None:
    base = model(tmp_path, "cost_model", versions=(1,))
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    sup.start(spec(base, version=9))
    (replica,) = wait_for(
        sup,
        lambda rs: rs[0].restarts == 3 and rs[0].phase == Phase.BACKOFF,
        clock=clock,
        step_s=1.0,
    )
    assert replica.last_error == (
        f"exited with code 1: No versions of servable cost_model found under base path {base}. "
        "Did you forget to name your leaf directory as a number (eg. '/1/')? "
        f"(version 9 of cost_model is not on disk: {base}/9 does not exist)"
    )
    assert replica.message.endswith("restarting in 8 s")


def test_a_taken_port_is_retried_at_once_on_new_ports(
    tmp_path: Path, run_dir: Path, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = model(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    picks = iter([busy, processes.free_port()])
    real = processes.free_port
    monkeypatch.setattr(processes, "free_port", lambda: next(picks, None) or real())
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    try:
        first = sup.start(spec(base))
        assert first.rest_port == busy
        (replica,) = wait_for(sup, all_ready(1), clock=clock, step_s=0.1)
    finally:
        taken.close()
    assert replica.restarts == 0 and replica.rest_port != busy and replica.pid != first.pid
    assert replica.last_error is None
    assert "already in use" in launch.ReplicaFiles.under(run_dir, "m-v1-0").log.read_text()


# --------------------------------------------------------------------------- stop


def test_stop_sends_sigterm_and_forgets_the_replica(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path)
    sup = make(run_dir)
    sup.start(spec(base))
    wait_for(sup, all_ready(1))
    sup.stop("m-v1-0", grace_s=10)
    assert sup.get("m-v1-0").phase == Phase.STOPPING  # type: ignore[union-attr]
    wait_for(sup, lambda rs: rs == [], timeout_s=5)
    files = launch.ReplicaFiles.under(run_dir, "m-v1-0")
    assert not files.directory.exists()
    assert "Received signal 15" in files.log.read_text()  # SIGTERM, no SIGKILL needed
    assert json.loads(sup.registry_path.read_text()) == {"replicas": []}
    sup.stop("m-v1-0")  # gone: a no-op


def test_sigkill_after_the_grace_period(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, ignore_sigterm=True)
    clock = FakeClock()
    sup = make(run_dir, clock=clock)
    sup.start(spec(base))
    (replica,) = wait_for(sup, all_ready(1), clock=clock)
    sup.stop("m-v1-0", grace_s=5)
    clock.advance(4.9)
    time.sleep(0.3)
    (stopping,) = sup.poll()
    assert stopping.phase == Phase.STOPPING and "SIGTERM" in stopping.message
    assert processes.alive(replica.pid, processes.start_ticks(replica.pid))  # type: ignore[arg-type]
    clock.advance(0.1)
    assert "SIGKILL" in sup.poll()[0].message
    wait_for(sup, lambda rs: rs == [], timeout_s=5, step_s=0)


def test_stop_during_backoff_forgets_at_once(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, exit_after_s=0)
    sup = make(run_dir)
    sup.start(spec(base))
    wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    sup.stop("m-v1-0")
    assert sup.replicas() == []


def test_shutdown_stops_everything_and_waits(tmp_path: Path, run_dir: Path, make) -> None:
    polite = model(tmp_path, "polite")
    stubborn = model(tmp_path, "stubborn", ignore_sigterm=True)
    sup = make(run_dir)
    sup.start(spec(polite, pod="a"))
    sup.start(spec(stubborn, pod="b"))
    replicas = wait_for(sup, all_ready(2))
    started = time.monotonic()
    sup.shutdown(grace_s=0.5)
    took = time.monotonic() - started
    assert 0.5 <= took < 3, took
    assert all(not processes.alive(r.pid, None) for r in replicas if r.pid is not None)
    assert json.loads(sup.registry_path.read_text()) == {"replicas": []}
    with pytest.raises(sv.ClosedError, match="create a new Supervisor"):
        sup.poll()


# --------------------------------------------------------------------------- registry, cgroups


def test_the_registry_lists_live_replicas_for_the_exporters(
    tmp_path: Path, run_dir: Path, make
) -> None:
    base = model(tmp_path)
    sup = make(run_dir)
    a = sup.start(spec(base, pod="m-v1-0", cpu_cores=0.5))
    b = sup.start(spec(base, pod="m-v1-1"))
    listed = parse_replicas(sup.registry_path.read_text(), "replicas.json")
    assert [(r.pod, r.pid, r.cgroup, r.cpu_request_cores, r.container) for r in listed] == [
        ("m-v1-0", a.pid, None, 0.5, "model-server"),
        ("m-v1-1", b.pid, None, None, "model-server"),
    ]
    assert {(r.namespace, r.service, r.revision) for r in listed} == {("default", "m", "m-v1")}
    assert "not enforced: no cgroup limits" in a.limits
    sup.stop("m-v1-0")
    wait_for(sup, lambda rs: len(rs) == 1)
    assert [r.pod for r in parse_replicas(sup.registry_path.read_text())] == ["m-v1-1"]


def test_limits_go_into_a_group_per_replica(tmp_path: Path, run_dir: Path, make) -> None:
    hierarchies = [
        CgroupMount(str(tmp_path / "cg" / c), "/", 1, frozenset({c})) for c in ("cpu", "memory")
    ]
    for mount in hierarchies:
        Path(mount.mount_point).mkdir(parents=True)
    setup = cgroups.detect(hierarchies)
    sup = make(run_dir, cgroups=setup)
    replica = sup.start(spec(model(tmp_path), cpu_cores=0.5, memory_bytes=256 << 20))
    scope = cgroups.scope_for(run_dir)  # this supervisor's own (issue 25, item 7)
    cpu = tmp_path / "cg" / "cpu" / "servectl" / scope / "default.m-v1-0"
    memory = tmp_path / "cg" / "memory" / "servectl" / scope / "default.m-v1-0"
    assert replica.cgroup == str(cpu)
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000"
    assert (memory / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert (cpu / "cgroup.procs").read_text() == str(replica.pid)
    assert (memory / "cgroup.procs").read_text() == str(replica.pid)
    assert replica.limits == "cpu 0.5 cores, memory 268435456 B in cgroup default.m-v1-0"
    (listed,) = parse_replicas(sup.registry_path.read_text())
    assert listed.cgroup == str(cpu)


def test_an_oom_kill_says_so(tmp_path: Path, run_dir: Path, make) -> None:
    """The kernel counts OOM kills per memory group (v1 memory.oom_control, v2
    memory.events): a SIGKILL with the count up is the memory limit, not chaos."""
    mount = CgroupMount(str(tmp_path / "cg"), "/", 1, frozenset({"memory"}))
    group = tmp_path / "cg" / "servectl" / cgroups.scope_for(run_dir) / "default.m-v1-0"
    group.mkdir(parents=True)
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    sup = make(run_dir, cgroups=cgroups.detect([mount]))
    sup.start(spec(model(tmp_path), memory_bytes=200 << 20))
    wait_for(sup, all_ready(1))
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    sup.kill("m-v1-0")
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    assert replica.last_error == (
        "OOM-killed: the server needed more than its memory limit of 200 MiB; raise "
        "memory_bytes (servectl's server with TensorFlow uses about 260 MiB) "
        "(killed by signal 9 (SIGKILL))"
    )
    wait_for(sup, all_ready(1), timeout_s=5)
    sup.kill("m-v1-0")  # no new OOM kill: plain SIGKILL
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    assert replica.message.startswith("killed by signal 9 (SIGKILL)")


# --------------------------------------------------------------------------- adoption

CONTROLLER = """
import sys, time
from pathlib import Path
from servectl.backends.local.supervisor import Phase, ReplicaSpec, Supervisor

run, base, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
sup = Supervisor(run, command=command)
for pod in ("m-v1-0", "m-v1-1"):
    sup.start(ReplicaSpec("default", "m", "m-v1", pod, "m", base, 1))
while not all(r.phase == Phase.READY for r in sup.poll()):
    time.sleep(0.05)
print(" ".join(str(r.pid) for r in sup.replicas()), flush=True)
time.sleep(60)
"""


def test_a_new_supervisor_adopts_what_a_killed_controller_left(
    tmp_path: Path, run_dir: Path, make
) -> None:
    base = model(tmp_path)
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER)
    controller = subprocess.Popen(
        [sys.executable, str(script), str(run_dir), str(base), *COMMAND],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert controller.stdout is not None
        pids = [int(p) for p in controller.stdout.readline().split()]
    finally:
        os.killpg(controller.pid, signal.SIGKILL)  # the controller and its whole group
        controller.wait()
    assert len(pids) == 2
    # One replica dies while no controller runs; the other keeps serving.
    os.kill(pids[1], signal.SIGKILL)
    while processes.alive(pids[1], None):
        time.sleep(0.01)
    sup = make(run_dir)
    adopted, dead = sup.replicas()
    assert (adopted.pid, adopted.phase, adopted.adopted, adopted.restarts) == (
        pids[0],
        Phase.READY,
        True,
        0,
    )
    assert dead.phase == Phase.BACKOFF and dead.pid is None
    assert dead.message.startswith(f"pid {pids[1]} was not running when the supervisor started")
    assert [r.pid for r in parse_replicas(sup.registry_path.read_text())] == [pids[0]]
    # The dead one is restarted as this supervisor's child.
    (_, restarted) = wait_for(sup, all_ready(2), timeout_s=5)
    assert restarted.restarts == 1 and not restarted.adopted
    # An adopted process is not our child: /proc says it died, its exit code is unknown.
    sup.kill("m-v1-0")
    (crashed, _) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    assert crashed.message.startswith(
        f"exited (exit code unknown: pid {pids[0]} was adopted, not this supervisor's child)"
    )
    wait_for(sup, all_ready(2), timeout_s=5)


def test_adoption_checks_the_start_time_against_pid_reuse(
    tmp_path: Path, run_dir: Path, make
) -> None:
    base = model(tmp_path)
    sup = make(run_dir)
    replica = sup.start(spec(base))
    wait_for(sup, all_ready(1))
    sup.close()
    record_path = launch.ReplicaFiles.under(run_dir, "m-v1-0").record
    record = json.loads(record_path.read_text())
    record["start_ticks"] -= 1  # the pid now names "another" process
    record_path.write_text(json.dumps(record))
    again = make(run_dir)
    (seen,) = again.replicas()
    assert seen.phase == Phase.BACKOFF and seen.pid is None
    os.kill(replica.pid, signal.SIGKILL)  # type: ignore[arg-type]


def test_a_stop_in_progress_survives_the_controller(tmp_path: Path, run_dir: Path, make) -> None:
    base = model(tmp_path, ignore_sigterm=True)
    sup = make(run_dir)
    replica = sup.start(spec(base))
    wait_for(sup, all_ready(1))
    sup.stop("m-v1-0", grace_s=0.3)
    sup.close()
    again = make(run_dir)
    assert again.get("m-v1-0").phase == Phase.STOPPING  # type: ignore[union-attr]
    wait_for(again, lambda rs: rs == [], timeout_s=5)
    assert not processes.alive(replica.pid, None)  # type: ignore[arg-type]
