"""Rollout commands answer against a real controller (issue 25, item 3): what the
rollout's state refuses is refused at once (exit 2, one line, nothing queued); a start
waits until the controller has carried it out and exits 0; a pause the controller
carries out says where the rollout stands; ``down`` leaves a command queued, exit 1."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.conftest import LocalRuntime, deploy, service_doc


def test_commands_are_refused_at_once_or_waited_for(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    deploy(runtime, service_doc(demo_models))
    runtime.wait(lambda: runtime.status("cost").get("rollout"), 10, "a status with the rollout")

    began = time.monotonic()
    promote = runtime.cli("rollout", "promote", "cost", check=False)
    assert time.monotonic() - began < 10
    assert promote.returncode == 2, promote.stdout + promote.stderr
    assert promote.stdout == ""
    assert promote.stderr.strip().splitlines() == [
        "error: promote refused: no rollout is running (phase Idle); nothing to promote "
        "(start a rollout of a new version first)"
    ]
    assert runtime.client.store.pending_commands("default", "cost") == []

    start = runtime.cli("rollout", "start", "cost", "--version", "2")
    lines = start.stdout.splitlines()
    assert lines[0] == "modelservice/cost: start queued (version 2)"
    carried = [line for line in lines if "carried out" in line]
    assert carried and carried[0].startswith(
        "modelservice/cost: start carried out: Progressing step 0"
    )
    assert runtime.status("cost")["rollout"]["canaryVersion"] == 2

    pause = runtime.cli("rollout", "pause", "cost")
    assert pause.stdout.splitlines()[-1].startswith("modelservice/cost: pause carried out: Paused")

    runtime.cli("down")
    queued = runtime.cli("rollout", "resume", "cost", check=False)
    assert queued.returncode == 1
    assert "the controller is not running: resume (command" in queued.stderr
    assert "stays queued" in queued.stderr
