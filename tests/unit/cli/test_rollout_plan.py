"""``servectl rollout start`` prints the plan it will follow: one line per step with the
analysis each runs (issue 25, item 2), on the local runtime over a store the test fills
(no controller: the start is queued, the plan comes from the stored spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from servectl.api import validation
from servectl.backends.local.client import LocalClient
from tests.unit.cli.helpers import servectl


def _deploy(state: Path, models: Path, name: str, rollout: dict[str, Any] | None) -> None:
    spec: dict[str, Any] = {"model": {"name": "cost_model", "basePath": str(models), "version": 1}}
    if rollout is not None:
        spec["rollout"] = rollout
    doc = {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name},
        "spec": spec,
    }
    client = LocalClient(state)
    try:
        client.deploy(validation.load_model_service(doc))
    finally:
        client.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    models = tmp_path / "models" / "cost_model"
    for version in (1, 2):
        (models / str(version)).mkdir(parents=True)
        (models / str(version) / "saved_model.pb").write_bytes(b"")
    directory = tmp_path / "state"
    _deploy(directory, models, "cost", None)  # `servectl deploy cost --model-path ...`
    _deploy(
        directory,
        models,
        "green",
        {"strategy": "blueGreen", "steps": [{"pause": {"seconds": 30}}]},
    )
    return directory


def rollout_start(state: Path, name: str, version: int = 2) -> Result:
    args = ["rollout", "start", name, "--version", str(version), "--state-dir", str(state)]
    # --no-wait where rollout commands wait for the controller to carry them out (issue 25,
    # item 3): no controller runs here (a waiting start would exit 1: it stays queued).
    if "--no-wait" in servectl("rollout", "start", "--help").stdout:
        args.append("--no-wait")
    return servectl(*args)


def test_rollout_start_prints_the_default_canary_plan(state: Path) -> None:
    done = rollout_start(state, "cost")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    start = lines.index("plan: canary to v2 (the default steps)")
    assert lines[start + 1 :] == [
        "  0. setWeight 20 %",
        "  1. analysis: errorRate <= 0.01; every 30s, on at least 100 requests (waits for them)",
        "  2. setWeight 50 %",
        "  3. analysis: errorRate <= 0.01; every 30s, on at least 100 requests (waits for them)",
        "  4. setWeight 100 %",
        "  then v2 is promoted: it serves 100 %",
    ]


def test_rollout_start_prints_a_blue_green_plan(state: Path) -> None:
    done = rollout_start(state, "green")
    assert done.exit_code == 0, done.output
    assert "plan: blue/green to v2" in done.stdout
    assert "  0. pause 30 s" in done.stdout.splitlines()


def test_a_refused_start_prints_no_plan(state: Path) -> None:
    done = rollout_start(state, "cost", 9)
    assert done.exit_code != 0
    assert "plan:" not in done.output
