"""``servectl status`` and ``get`` after ``servectl down`` (issue 25, item 6), with a real
controller and a real replica: status exits 1 and says stopped; get marks what it shows
as last seen (a note on stderr, ``Ready=Unknown`` in ``-o json``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import LocalRuntime, deploy, service_doc


def test_after_down_status_says_stopped_and_get_marks_the_last_seen(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    deploy(runtime, service_doc(demo_models))
    up = runtime.cli("status")
    assert up.returncode == 0 and up.stdout.startswith("controller: running")
    assert "http://127.0.0.1:" in up.stdout

    runtime.cli("down")
    assert runtime.process is not None and runtime.process.wait(timeout=30) == 0

    down = runtime.cli("status", check=False)
    assert down.returncode == 1, down.stdout + down.stderr
    assert down.stdout.startswith("stopped: the controller is not running")
    assert "http://" not in down.stdout and "replicas: 0" in down.stdout

    listed = runtime.cli("get")
    assert "cost" in listed.stdout
    assert "note: the controller is not running" in listed.stderr
    as_json = runtime.cli("get", "-o", "json")
    (doc,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    ready = next(c for c in doc["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "ControllerNotRunning")
