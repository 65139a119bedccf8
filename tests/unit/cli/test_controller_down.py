"""After ``servectl down`` (or a crash) the reads say the controller is down (issue 25,
item 6): ``status`` exits 1 and says stopped, with no address that nothing answers on;
``get`` notes on stderr that what it shows is as last seen, and ``-o json`` stays
parseable with ``Ready=Unknown`` (``ControllerNotRunning``). Over a store the test fills
as a controller that ticked and then stopped would leave it (no processes)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from servectl.backends.local.client import LocalClient
from tests.unit.cli.helpers import servectl

STATUS: dict[str, Any] = {
    "revisions": [
        {
            "name": "cost-v1",
            "version": 1,
            "weight": 100,
            "desiredReplicas": 1,
            "readyReplicas": 1,
            "modelState": "AVAILABLE",
        }
    ],
    "rollout": {"phase": "Idle", "step": 0, "stableVersion": 1, "message": ""},
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving", "message": ""},
        {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFresh", "message": ""},
    ],
}


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _store(tmp_path: Path, *, pid: int, tick_age_s: float) -> Path:
    """cost deployed and reported READY 1/1 by a controller ``pid`` whose last tick was
    ``tick_age_s`` ago; Prometheus and HAProxy ports as it recorded them."""
    models = tmp_path / "models" / "cost_model" / "1"
    models.mkdir(parents=True)
    (models / "saved_model.pb").write_bytes(b"")
    state = tmp_path / "state"
    deployed = servectl("deploy", "cost", "--model-path", models.parent, "--state-dir", state)
    assert deployed.exit_code == 0, deployed.output
    client = LocalClient(state)
    try:
        client.store.put_status("default", "cost", STATUS)
        client.store.put_setting("ports", {"prometheus": 9090, "haproxy_stats": 9400})
        client.store.put_setting(
            "heartbeat", {"pid": pid, "time": time.time() - tick_age_s, "tickSeconds": 0.02}
        )
        client.paths.pid.write_text(f"{pid}\n")
    finally:
        client.close()
    return state


@pytest.fixture
def stopped(tmp_path: Path) -> Path:
    return _store(tmp_path, pid=_dead_pid(), tick_age_s=60.0)


def test_status_exits_1_and_says_stopped_with_no_live_address(stopped: Path) -> None:
    result = servectl("status", "--state-dir", stopped)
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("stopped: the controller is not running")
    assert "http://" not in result.stdout
    assert "start it with: servectl up" in result.stdout
    as_json = servectl("status", "--state-dir", stopped, "-o", "json")
    assert as_json.exit_code == 1
    record = json.loads(as_json.stdout)
    assert record["state"] == "stopped" and record["controller"]["running"] is False
    assert record["prometheus"] is None and record["haproxyStats"] is None


def test_get_marks_what_it_shows_as_last_seen(stopped: Path) -> None:
    table = servectl("get", "--state-dir", stopped)
    assert table.exit_code == 0
    assert "cost" in table.stdout and "1/1" in table.stdout  # what it last saw, marked:
    assert "note: the controller is not running" in table.stderr
    assert "as it last saw them" in table.stderr
    as_json = servectl("get", "--state-dir", stopped, "-o", "json")
    doc = json.loads(as_json.stdout)  # stdout stays one JSON document per service
    ready = next(c for c in doc["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "ControllerNotRunning"
    others = [c["type"] for c in doc["status"]["conditions"] if c["type"] != "Ready"]
    assert others == ["MetricsAvailable"]
    described = servectl("describe", "cost", "--state-dir", stopped)
    assert "ControllerNotRunning" in described.stdout
    client = LocalClient(stopped)
    try:
        assert client.store.get_status("default", "cost") == STATUS  # the store is untouched
    finally:
        client.close()


def test_a_running_controller_is_up_and_nothing_is_marked(tmp_path: Path) -> None:
    state = _store(tmp_path, pid=os.getpid(), tick_age_s=0.5)
    result = servectl("status", "--state-dir", state)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("controller: running")
    assert "http://127.0.0.1:9090" in result.stdout
    listed = servectl("get", "--state-dir", state, "-o", "json")
    assert "note:" not in listed.stderr
    ready = next(c for c in json.loads(listed.stdout)["status"]["conditions"])
    assert ready == STATUS["conditions"][0]


def test_a_controller_that_stopped_ticking_is_not_up(tmp_path: Path) -> None:
    state = _store(tmp_path, pid=os.getpid(), tick_age_s=120.0)
    result = servectl("status", "--state-dir", state)
    assert result.exit_code == 1
    assert "NOT TICKING" in result.stdout
    assert "has not ticked for" in servectl("get", "--state-dir", state).stderr
