"""What the supervisor reports it did (issue 25, item 4): each start, crash (with its exit
code or signal), restart, stop, SIGKILL, adoption and readiness change is a happening
(``take_happenings()``, pure values the runtime turns into events and log lines), and each
replica keeps its restarts and how its last process ended, also in ``replica.json`` for the
CLI. Against the fake model server, as test_supervisor.py."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl import processes
from servectl.backends.local import cgroups
from servectl.backends.local import replica_launch as launch
from servectl.backends.local.replica_events import Happening, Kind
from servectl.backends.local.replica_state import Phase
from servectl.backends.local.supervisor import Supervisor
from servectl.metrics.exporters.cgroup import CgroupMount
from tests.unit.backends.local.test_supervisor import (
    COMMAND,
    FAKE,
    FakeClock,
    all_ready,
    model,
    phase_of,
    spec,
    wait_for,
)


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


def kinds(happenings: list[Happening]) -> list[tuple[Kind, str]]:
    return [(h.kind, h.event_type) for h in happenings]


def test_a_start_a_kill_9_and_the_restart_are_reported(tmp_path: Path, make) -> None:
    sup = make(tmp_path / "run")
    started = sup.start(spec(model(tmp_path), cpu_cores=0.5))
    (start,) = sup.take_happenings()
    assert (start.kind, start.event_type, start.pid) == (Kind.STARTED, "Normal", started.pid)
    assert start.message.startswith(f"started m-v1-0 (m version 1): pid {started.pid}, REST ")
    assert start.service_key == ("default", "m") and start.spec.revision == "m-v1"
    assert sup.take_happenings() == []  # each is handed out once
    wait_for(sup, all_ready(1))
    sup.kill("m-v1-0", signal.SIGKILL)
    wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    (crash,) = sup.take_happenings()
    assert (crash.kind, crash.event_type) == (Kind.CRASHED, "Warning")
    assert (crash.pid, crash.signal, crash.exit_code) == (started.pid, 9, None)
    assert crash.message.startswith(f"m-v1-0 (pid {started.pid}) killed by signal 9 (SIGKILL)")
    assert crash.message.endswith("restart 1 in 1 s")
    (again,) = wait_for(sup, all_ready(1), timeout_s=5)
    (restart,) = sup.take_happenings()
    assert (restart.kind, restart.event_type, restart.restarts) == (
        Kind.RESTARTED,
        "Normal",
        1,
    )
    assert restart.message.startswith(f"restarted m-v1-0 (restart 1): pid {again.pid}, REST ")
    # The replica keeps its restarts and its last exit, in its record too (for the CLI).
    assert again.restarts == 1 and again.last_exit is not None
    assert (again.last_exit.signal, again.last_exit.code) == (9, None)
    assert again.last_exit.reason.startswith("killed by signal 9 (SIGKILL)")
    record = json.loads(launch.ReplicaFiles.under(tmp_path / "run", "m-v1-0").record.read_text())
    assert record["restarts"] == 1 and record["phase"] == "READY"
    assert record["last_exit"]["signal"] == 9 and record["last_exit"]["code"] is None


def test_an_exit_code_is_reported(tmp_path: Path, make) -> None:
    clock = FakeClock()
    sup = make(tmp_path / "run", clock=clock)
    sup.start(spec(model(tmp_path, exit_after_s=0, exit_code=3)))
    (replica,) = wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF), step_s=0)
    _, crash = sup.take_happenings()
    assert (crash.kind, crash.exit_code, crash.signal) == (Kind.CRASHED, 3, None)
    assert "exited with code 3: told to crash; restart 1 in 1 s" in crash.message
    assert replica.last_exit is not None and replica.last_exit.code == 3


def test_a_stop_and_a_sigkill_after_the_grace_period(tmp_path: Path, make) -> None:
    clock = FakeClock()
    sup = make(tmp_path / "run", clock=clock)
    sup.start(spec(model(tmp_path, "polite"), pod="a"))
    stubborn = sup.start(spec(model(tmp_path, "stubborn", ignore_sigterm=True), pod="b"))
    wait_for(sup, all_ready(2), clock=clock)
    sup.take_happenings()
    sup.stop("a", grace_s=5)
    sup.stop("b", grace_s=5)
    wait_for(sup, lambda rs: [r.spec.pod for r in rs] == ["b"], step_s=0)
    (stopped,) = sup.take_happenings()
    assert (stopped.kind, stopped.event_type, stopped.exit_code) == (Kind.STOPPED, "Normal", 0)
    assert stopped.message.endswith("exited with code 0 after SIGTERM")
    clock.advance(5)
    wait_for(sup, lambda rs: rs == [], step_s=0)
    killed, gone = sup.take_happenings()
    assert (killed.kind, killed.event_type, killed.pid) == (Kind.KILLED, "Warning", stubborn.pid)
    assert "still running its grace period after SIGTERM: sent SIGKILL" in killed.message
    assert (gone.kind, gone.signal) == (Kind.STOPPED, 9)
    assert gone.message.endswith("killed by signal 9 (SIGKILL) after SIGKILL")


def test_readiness_lost_and_regained(tmp_path: Path, make) -> None:
    base = model(tmp_path)
    clock = FakeClock()
    sup = make(tmp_path / "run", clock=clock)
    sup.start(spec(base))
    wait_for(sup, all_ready(1), clock=clock)
    (base / "fake.json").write_text(json.dumps({"available": False}))
    wait_for(sup, phase_of("m-v1-0", Phase.NOT_READY), clock=clock)
    (base / "fake.json").write_text("{}")
    wait_for(sup, all_ready(1), clock=clock)
    _, lost, back = sup.take_happenings()
    assert (lost.kind, lost.event_type) == (Kind.NOT_READY, "Warning")
    assert "failed 3 readiness checks in a row" in lost.message and "HTTP 503" in lost.message
    assert (back.kind, back.event_type) == (Kind.READY_AGAIN, "Normal")


def test_a_new_supervisor_reports_what_it_adopted_and_what_had_died(tmp_path: Path, make) -> None:
    base = model(tmp_path)
    run = tmp_path / "run"
    first = make(run)
    kept = first.start(spec(base, pod="m-v1-0"))
    lost = first.start(spec(base, pod="m-v1-1"))
    wait_for(first, all_ready(2))
    first.close()  # the controller goes; its replicas stay
    os.kill(lost.pid, signal.SIGKILL)  # type: ignore[arg-type]
    while processes.alive(lost.pid, None):  # type: ignore[arg-type]
        pass
    again = make(run)
    by_kind = {h.kind: h for h in again.take_happenings()}
    adopted, crashed = by_kind[Kind.ADOPTED], by_kind[Kind.CRASHED]
    assert (adopted.kind, adopted.event_type, adopted.pid) == (Kind.ADOPTED, "Normal", kept.pid)
    assert adopted.message.startswith(f"adopted m-v1-0: pid {kept.pid} kept running")
    assert (crashed.kind, crashed.event_type, crashed.spec.pod) == (
        Kind.CRASHED,
        "Warning",
        "m-v1-1",
    )
    assert f"pid {lost.pid} was not running when the supervisor started" in crashed.message
    assert "kubelet" not in adopted.message + crashed.message


def test_an_oom_kill_is_its_own_kind(tmp_path: Path, make) -> None:
    mount = CgroupMount(str(tmp_path / "cg"), "/", 1, frozenset({"memory"}))
    run = tmp_path / "run"
    group = tmp_path / "cg" / "servectl" / cgroups.scope_for(run) / "default.m-v1-0"
    group.mkdir(parents=True)
    (group / "memory.oom_control").write_text("oom_kill 0\n")
    sup = make(run, cgroups=cgroups.detect([mount]))
    sup.start(spec(model(tmp_path), memory_bytes=200 << 20))
    wait_for(sup, all_ready(1))
    (group / "memory.oom_control").write_text("oom_kill 1\n")
    sup.kill("m-v1-0")
    wait_for(sup, phase_of("m-v1-0", Phase.BACKOFF))
    _, oom = sup.take_happenings()
    assert (oom.kind, oom.event_type, oom.signal) == (Kind.OOM_KILLED, "Warning", 9)
    assert "OOM-killed: the server needed more than its memory limit of 200 MiB" in oom.message


def test_a_restart_that_cannot_run_the_server_is_reported(tmp_path: Path, make) -> None:
    server = tmp_path / "bin" / "model-server"
    server.parent.mkdir()
    server.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    clock = FakeClock()
    sup = make(tmp_path / "run", clock=clock, command=[str(server)])
    sup.start(spec(model(tmp_path)))
    wait_for(sup, all_ready(1), clock=clock)
    server.unlink()
    sup.kill("m-v1-0")
    wait_for(sup, lambda rs: rs[0].restarts == 1 and rs[0].phase == Phase.BACKOFF, clock=clock)
    failed = sup.take_happenings()[-1]
    assert (failed.kind, failed.event_type) == (Kind.START_FAILED, "Warning")
    assert "cannot run the model server" in failed.message
