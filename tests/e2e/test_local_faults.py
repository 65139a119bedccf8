"""Faults leave traces (issue 25, item 4), with a real controller, model server, HAProxy and
Prometheus: a replica killed with SIGKILL is a Warning event naming the signal, a restart
count in ``describe -o json`` and ``top -o wide`` and a line in controller.log; HAProxy
killed is an event too; after the controller is killed and started again, its replicas are
adopted (events), and no warning speaks of a kubelet. One runtime for the module (about a
minute)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.modelserver import tf_startup
from tests.e2e.conftest import LocalRuntime, _require, deploy, service_doc, try_predict


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    _require(shutil.which("haproxy") is not None, "haproxy not found: apt-get install haproxy")
    _require(
        shutil.which("prometheus") is not None, "prometheus not found: apt-get install prometheus"
    )
    rt = LocalRuntime(tmp_path_factory.mktemp("faults") / "state")
    rt.start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(scope="module")
def port(runtime: LocalRuntime, demo_models: Path) -> int:
    doc = service_doc(demo_models)
    doc["spec"]["runtime"]["resources"]["cpu"] = "1"  # loads in about half the time
    doc["spec"]["autoscaling"].update({"minReplicas": 1, "maxReplicas": 1})
    return deploy(runtime, doc)


def _events(rt: LocalRuntime, reason: str | None = None) -> list[dict[str, Any]]:
    done = rt.cli("events", "cost", "-o", "json", "--limit", "200")
    found = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [e for e in found if reason is None or e["reason"] == reason]


def _replica(rt: LocalRuntime) -> dict[str, Any]:
    (replica,) = [r for r in rt.client.replicas() if r["spec"]["service"] == "cost"]
    return replica


def test_a_killed_replica_is_a_warning_with_its_signal_and_a_restart_count(
    runtime: LocalRuntime, port: int
) -> None:
    victim = _replica(runtime)
    os.kill(int(victim["pid"]), signal.SIGKILL)
    runtime.wait(
        lambda: _replica(runtime)["restarts"] == 1 and _replica(runtime)["pid"] != victim["pid"],
        60,
        "the replica's restart",
    )
    (crash,) = runtime.wait(lambda: _events(runtime, "ReplicaCrashed"), 10, "the crash event")
    assert crash["type"] == "Warning"
    assert f"(pid {victim['pid']}) killed by signal 9 (SIGKILL)" in crash["message"]
    assert "restart 1 in 1 s" in crash["message"]
    runtime.wait(lambda: _events(runtime, "ReplicaRestarted"), 10, "the restart event")
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 1, 60, "ready again")

    described = json.loads(runtime.cli("describe", "cost", "-o", "json").stdout)
    (status,) = described["status"]["replicaStatuses"]
    assert status["restartCount"] == 1 and status["phase"] == "READY"
    assert status["lastState"]["terminated"]["signal"] == 9
    assert status["lastState"]["terminated"]["reason"].startswith("killed by signal 9 (SIGKILL)")

    wide = runtime.cli("top", "-o", "wide").stdout
    header, row = (line for line in wide.splitlines() if "cost-v1" in line or "PIDS" in line)
    assert "PIDS" in header and "RESTARTS" in header and "LAST EXIT" in header
    new_pid = str(_replica(runtime)["pid"])
    assert new_pid in row.split() and "signal 9 at" in row, wide
    assert f"{status['restPort']}/{status['grpcPort']}" in row

    log = (runtime.state_dir / "controller.log").read_text()
    assert f"Warning ReplicaCrashed: cost-v1-0 (pid {victim['pid']}) killed by signal 9" in log
    assert "Normal ReplicaRestarted: restarted cost-v1-0 (restart 1)" in log
    # The replica's own log starts without TensorFlow's noise (issue 25, item 10).
    replica_log = (runtime.state_dir / "logs" / "cost-v1-0.log").read_text()
    assert [line for line in replica_log.splitlines() if tf_startup.is_noise(line)] == []


def test_a_killed_haproxy_is_an_event(runtime: LocalRuntime, port: int) -> None:
    pid_file = runtime.state_dir / "haproxy" / "haproxy.pid"
    old = int(pid_file.read_text().split()[0])
    os.kill(old, signal.SIGKILL)
    (restarted,) = runtime.wait(
        lambda: _events(runtime, "RouterRestarted"), 30, "the HAProxy restart event"
    )
    assert restarted["type"] == "Warning"
    assert restarted["message"].startswith(f"HAProxy (pid {old}) was not running: restarted")
    runtime.wait(lambda: try_predict(port), 30, "HAProxy to serve again")
    assert "RouterRestarted: HAProxy (pid" in (runtime.state_dir / "controller.log").read_text()


def test_a_restarted_controller_adopts_and_says_nothing_of_a_kubelet(
    runtime: LocalRuntime, port: int
) -> None:
    before = max(e["id"] for e in _events(runtime))
    pid = _replica(runtime)["pid"]
    runtime.kill_controller()
    runtime.start()
    restarted = time.time()
    runtime.wait(lambda: try_predict(port), 30, "serving after the restart")

    def metrics_back() -> bool:
        beat = runtime.client.store.get_setting("heartbeat") or {}
        conditions = runtime.status("cost").get("conditions", [])
        fresh = [c for c in conditions if c["type"] == "MetricsAvailable"]
        return bool(fresh) and fresh[0]["status"] == "True" and beat["time"] > restarted + 3

    runtime.wait(metrics_back, 30, "metrics back after the restart")
    after = [e for e in _events(runtime) if e["id"] > before]
    reasons = [e["reason"] for e in after]
    assert "ControllerStarted" in reasons, after
    (adopted,) = [e for e in after if e["reason"] == "ReplicaAdopted"]
    assert adopted["type"] == "Normal" and f"pid {pid} kept running" in adopted["message"]
    warnings = [e["message"] for e in after if e["type"] == "Warning"]
    assert not [w for w in warnings if "kubelet" in w.lower()], warnings
