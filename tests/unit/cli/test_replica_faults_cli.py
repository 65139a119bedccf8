"""What the CLI shows of the local runtime's replicas (issue 25, items 4 and 10):
``describe`` lists each replica's process, ports, restarts and last exit (``-o json``: as
``status.replicaStatuses``, a pod's containerStatuses words), ``top -o wide`` adds the
PIDs, ports, restarts and last exits per revision, and ``logs -f`` follows the replicas'
logs (``tail -f``); on a cluster ``logs -f`` names ``kubectl logs -f``. Over a store and
replica records the test writes, no process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servectl.backends import client as protocol
from servectl.backends.kubernetes import client as kc
from servectl.backends.local import replica_events, replica_launch, replica_state
from servectl.backends.local.client import LocalClient
from servectl.backends.local.log_follow import LogFollower
from tests.unit.backends.kubernetes.test_client import NS, FakeKube
from tests.unit.cli.helpers import servectl
from tests.unit.cli.test_service_verbs import T0
from tests.unit.cli.test_service_verbs import state as state


def _record(state_dir: Path, pod: str, pid: int | None, restarts: int, **kw: Any) -> None:
    """A replica record as the supervisor writes it (replica_state.Slot.record)."""
    spec = replica_launch.ReplicaSpec(
        "default", "cost", "cost-v1", pod, "cost_model", Path("/models/cost_model"), 1
    )
    slot = replica_state.Slot(spec, replica_launch.ReplicaFiles.under(state_dir, pod), 1.0)
    slot.pid, slot.rest_port, slot.grpc_port = pid, kw.get("rest"), kw.get("grpc")
    slot.restarts = restarts
    slot.phase = kw.get("phase", replica_state.Phase.READY)
    slot.last_exit = kw.get("last_exit")
    slot.files.directory.mkdir(parents=True, exist_ok=True)
    slot.files.record.write_text(json.dumps(slot.record()))


@pytest.fixture
def replicas(state: Path) -> Path:
    killed = replica_events.Exit(T0 + 30, None, 9, "killed by signal 9 (SIGKILL)")
    _record(state, "cost-v1-0", 815, 1, rest=41001, grpc=41002, last_exit=killed)
    _record(state, "cost-v1-1", 816, 0, rest=41003, grpc=41004)
    return state


def test_describe_lists_each_replica_with_its_restarts_and_last_exit(replicas: Path) -> None:
    shown = servectl("describe", "cost", "--state-dir", replicas)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("NAME") and "PID" in line))
    assert lines[header].split() == [
        "NAME", "PHASE", "PID", "REST", "GRPC", "RESTARTS", "LAST", "EXIT"
    ]  # fmt: skip
    first, second = lines[header + 2].split(), lines[header + 3].split()
    assert first[:6] == ["cost-v1-0", "READY", "815", "41001", "41002", "1"]
    assert " ".join(first[6:9]) == "signal 9 at"
    assert second == ["cost-v1-1", "READY", "816", "41003", "41004", "0", "-"]
    document = json.loads(
        servectl("describe", "cost", "--state-dir", replicas, "-o", "json").stdout
    )
    killed, fresh = document["status"]["replicaStatuses"]
    assert killed["restartCount"] == 1 and fresh["restartCount"] == 0
    assert killed["lastState"]["terminated"]["signal"] == 9
    assert killed["lastState"]["terminated"]["finishedAt"].startswith("2023-11-14T22:")
    assert "lastState" not in fresh


def test_top_wide_adds_pids_ports_restarts_and_last_exits(replicas: Path) -> None:
    narrow = servectl("top", "--state-dir", replicas)
    wide = servectl("top", "--state-dir", replicas, "-o", "wide")
    assert wide.exit_code == 0, wide.output
    assert "PIDS" not in narrow.stdout and "PIDS" in wide.stdout
    row = next(line for line in wide.stdout.splitlines() if "cost-v1" in line)
    assert "815,816" in row and "41001/41002,41003/41004" in row and "1,0" in row
    assert "signal 9 at" in row
    (record,) = [
        json.loads(line)
        for line in servectl("top", "--state-dir", replicas, "-o", "json").stdout.splitlines()
    ]
    assert [(r["name"], r["pid"], r["restartCount"]) for r in record["replicas"]] == [
        ("cost-v1-0", 815, 1),
        ("cost-v1-1", 816, 0),
    ]


def test_the_log_follower_hands_out_whole_new_lines(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("old\n")
    follower = LogFollower(tmp_path, ["a"])
    assert follower.read(["a"]) == []  # what was shown already
    with (tmp_path / "a.log").open("a") as log:
        log.write("one\ntw")
    assert follower.read(["a"]) == [protocol.LogTail("a", ["one"])]
    with (tmp_path / "a.log").open("a") as log:
        log.write("o\n")
    (tmp_path / "b.log").write_text("b started\n")  # a replica started since
    assert follower.read(["a", "b"]) == [
        protocol.LogTail("a", ["two"]),
        protocol.LogTail("b", ["b started"]),
    ]
    (tmp_path / "a.log").write_text("new\n")  # rewritten, shorter
    assert follower.read([]) == [protocol.LogTail("a", ["new"])]  # followed: still read


def test_logs_follow_goes_on_from_what_it_showed(replicas: Path) -> None:
    client = LocalClient(replicas)
    client.poll_s = 0.0
    try:
        (tail,) = client.logs("default", "cost", replica="cost-v1-0", tail=2, follow=True)
        assert tail.lines == ["line 3", "line 4"]
        batches = client.follow_logs("default", "cost", replica=None)
        assert next(batches) == []
        with (replicas / "logs" / "cost-v1-0.log").open("a") as log:
            log.write("line 5\n")
        (replicas / "logs" / "cost-v1-1.log").write_text("hello\n")
        assert next(batches) == [
            protocol.LogTail("cost-v1-0", ["line 5"]),
            protocol.LogTail("cost-v1-1", ["hello"]),
        ]
    finally:
        client.close()


def test_logs_follow_on_a_cluster_names_kubectl_logs_f() -> None:
    client = kc.KubeClient(FakeKube(), context="prod", namespace=NS)  # type: ignore[arg-type]
    with pytest.raises(protocol.Elsewhere) as raised:
        client.logs(NS, "cost", replica=None, tail=5, follow=True)
    assert raised.value.command.endswith("--prefix --tail=5 -f")
    with pytest.raises(protocol.Elsewhere):
        next(iter(client.follow_logs(NS, "cost", replica="cost-v1-0")))
    assert client.replica_statuses(NS, "cost") == []
