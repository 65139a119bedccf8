"""The service verbs on the local runtime, over a store the test fills (no controller, no
processes): what ``get``, ``describe``, ``explain``, ``top``, ``events``, ``logs`` and
``rollout status|history`` print, their errors and exit codes, and that the reads a user
runs most import no resource model, no controller and no runtime (their start-up time).

The same verbs on a cluster: tests/unit/backends/kubernetes/test_client.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servectl.api import validation
from servectl.backends.local.client import LocalClient
from tests.unit.cli.helpers import servectl

T0 = 1_700_000_000.0

CYCLE: dict[str, Any] = {
    "time": T0,
    "applied": True,
    "metricsOk": False,
    "metricsDetail": "latency missing for cost-v1",
    "service": {"cpuUtilization": 41.0, "rps": 12.5, "latencyMs": {"p99": 42.25}},
    "replicas": {"current": 2, "ready": 2, "min": 1, "max": 4},
    "revisions": [
        {
            "name": "cost-v1",
            "version": 1,
            "desired": 2,
            "ready": 2,
            "weight": 100,
            "signals": {"cpuUsageCores": 0.82, "cpuUtilization": 41.0, "rps": 12.5},
        }
    ],
    "decision": {
        "recommended": 2,
        "reason": "SIGNAL",
        "signal": "cpu",
        "detail": "demand 0.82 cores",
        "proposals": {"cpu": 1.17},
    },
    "requested": 2,
    "demand": 2,
    "errors": ["rollout promote refused: nothing to promote"],
    "limits": {"surge_replicas": 1},
    "plan": {
        "phase": "Idle",
        "message": "",
        "revisions": [
            {"name": "cost-v1", "replicas": 2, "weight": 100, "reason": "Steady", "message": ""},
            {
                "name": "cost-v2",
                "replicas": 1,
                "weight": 0,
                "reason": "PreScaling",
                "message": "",
                "cost": 1.0,
                "costEstimate": 1.07,
            },
        ],
    },
}
STATUS: dict[str, Any] = {
    "revisions": [
        {
            "name": "cost-v1",
            "version": 1,
            "weight": 100,
            "desiredReplicas": 2,
            "readyReplicas": 2,
            "modelState": "AVAILABLE",
        }
    ],
    "rollout": {"phase": "Idle", "step": 0, "stableVersion": 1, "message": ""},
    "autoscaling": {"desiredReplicas": 2, "decidedBy": "cpu", "reason": "SIGNAL"},
}


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A store with cost (status, last cycle, endpoints, events, history) and fresh
    (nothing recorded yet), as a controller that ticked once would leave it."""
    base = tmp_path / "models" / "cost_model"
    for version in (1, 2):
        (base / str(version)).mkdir(parents=True)
        (base / str(version) / "saved_model.pb").write_bytes(b"")
    directory = tmp_path / "state"
    client = LocalClient(directory)
    try:
        for name in ("cost", "fresh"):
            doc = {
                "apiVersion": "servectl.io/v1alpha1",
                "kind": "ModelService",
                "metadata": {"name": name},
                "spec": {"model": {"name": "cost_model", "basePath": str(base), "version": 1}},
            }
            client.deploy(validation.load_model_service(doc))
        store = client.store
        store.put_status("default", "cost", STATUS)
        store.put_cycle("default", "cost", CYCLE)
        store.put_runtime("default", "cost", {"restPort": 8501, "grpcPort": 8500})
        store.append_events(
            "default",
            "cost",
            [
                {"time": T0, "type": "Normal", "reason": "Scaled", "message": "1 -> 2 [cpu]"},
                {"time": T0 + 1, "type": "Warning", "reason": "CommandRefused", "message": "no"},
            ],
        )
        store.append_rollout(
            "default", "cost", {"fromVersion": 1, "toVersion": 2, "phase": "Aborted"}, now=T0
        )
    finally:
        client.close()
    (directory / "logs").mkdir()
    (directory / "logs" / "cost-v1-0.log").write_text("".join(f"line {i}\n" for i in range(5)))
    return directory


def test_get_lists_ready_weights_rollout_and_the_endpoint(state: Path) -> None:
    table = servectl("get", "--state-dir", state, "-o", "wide")
    assert table.exit_code == 0, table.output
    cost = next(line for line in table.stdout.splitlines() if line.startswith("cost "))
    assert cost.split()[:6] == [
        "cost",
        "2/2",
        "cost-v1:100",
        "Idle",
        "http://127.0.0.1:8501",
        "127.0.0.1:8500",
    ]
    assert cost.split()[-5:] == ["default", "1", "10", "0", "cpu"]
    records = [
        json.loads(line)
        for line in servectl("get", "--state-dir", state, "-o", "json").stdout.splitlines()
    ]
    assert [r["metadata"]["name"] for r in records] == ["cost", "fresh"]
    endpoints = {"rest": "http://127.0.0.1:8501", "grpc": "127.0.0.1:8500"}
    assert records[0]["status"] == {**STATUS, "endpoints": endpoints}
    assert records[1]["status"] == {}
    missing = servectl("get", "nope", "--state-dir", state)
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        "error: no ModelService 'nope' in namespace 'default'; services in default: cost, "
        "fresh (deploy it first)"
    )
    empty = servectl("get", "-n", "other", "--state-dir", state)
    assert empty.exit_code == 0
    assert empty.stdout.startswith("no services; deploy one with `servectl deploy NAME")


def test_describe_shows_the_stored_spec_status_endpoints_and_events(state: Path) -> None:
    described = servectl("describe", "cost", "--state-dir", state)
    assert described.exit_code == 0, described.output
    lines = described.stdout.splitlines()
    assert lines[0] == "cost  namespace default"
    assert lines[1].startswith("model:     cost_model from ") and lines[1].endswith("(version 1)")
    assert lines[2] == (
        "endpoints: REST http://127.0.0.1:8501/v1/models/cost_model   gRPC 127.0.0.1:8500"
    )
    assert lines[3] == "replicas:  min 1, max 10, mode active"
    assert any("1 -> 2 [cpu]" in line for line in lines)  # text, not markup
    doc = json.loads(servectl("describe", "cost", "--state-dir", state, "-o", "json").stdout)
    client = LocalClient(state)
    try:
        # -o json is the resource as the model writes it, though no model is built to read it
        built = client.get("default", "cost").model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    finally:
        client.close()
    # kubectl's shape: the stored metadata's empty fields left out, the generation in
    endpoints = {"rest": "http://127.0.0.1:8501", "grpc": "127.0.0.1:8500"}
    assert doc == {
        "apiVersion": built["apiVersion"],
        "kind": built["kind"],
        "metadata": {
            "name": "cost",
            "namespace": "default",
            "generation": 1,
            "creationTimestamp": built["metadata"]["creationTimestamp"],
        },
        "spec": built["spec"],
        "status": {**STATUS, "endpoints": endpoints},
    }
    fresh = servectl("describe", "fresh", "--state-dir", state)
    assert fresh.stdout.splitlines()[-1] == (
        "no status yet: the controller has not reconciled it (is it up? `servectl status`)"
    )
    assert servectl("describe", "nope", "--state-dir", state).exit_code == 2


def test_explain_prints_the_last_cycle_or_says_there_is_none(state: Path) -> None:
    explained = servectl("explain", "cost", "--state-dir", state)
    assert explained.exit_code == 0, explained.output
    out = explained.stdout
    assert "seen:      12.5 req/s, CPU 41 % of request, p99 42.2 ms" in out
    assert "metrics:   MISSING: latency missing for cost-v1 (holding: no scale-down)" in out
    assert "proposals: cpu -> 1.17" in out
    assert "decision:  2 replicas (SIGNAL, signal cpu) demand 0.82 cores" in out
    assert "bounds:    min 1, max 4 -> demand 2 (requested 2)" in out
    assert "refused:   rollout promote refused: nothing to promote" in out
    assert "1.00x (est. 1.07)" in out  # the cost sized at, held within 10 % of the estimate
    record = json.loads(servectl("explain", "cost", "--state-dir", state, "-o", "json").stdout)
    assert record == CYCLE
    none = servectl("explain", "fresh", "--state-dir", state)
    assert none.exit_code == 1
    assert none.stderr.strip() == (
        "error: no decision recorded for default/fresh yet (is the controller up?)"
    )
    assert servectl("explain", "nope", "--state-dir", state).exit_code == 2


def test_top_prints_each_revisions_last_tick(state: Path) -> None:
    top = servectl("top", "--state-dir", state, "-o", "json")
    assert top.exit_code == 0, top.output
    assert json.loads(top.stdout) == {
        "service": "cost",
        "revision": "cost-v1",
        "ready": 2,
        "desired": 2,
        "weight": 100,
        "cpuCores": 0.82,
        "cpuUtilization": 41.0,
        "gpuDutyCycle": None,
        "rps": 12.5,
        "p99Ms": None,
        "errorRate": None,
    }
    none = servectl("top", "fresh", "--state-dir", state)
    assert none.exit_code == 1 and "no metrics yet" in none.stderr


def test_events_logs_and_rollout_reads(state: Path) -> None:
    events = servectl("events", "cost", "--state-dir", state, "-o", "json")
    assert [json.loads(line)["reason"] for line in events.stdout.splitlines()] == [
        "Scaled",
        "CommandRefused",
    ]
    newest = servectl("events", "cost", "--state-dir", state, "--limit", "1")
    assert newest.stdout.split()[1:] == ["Warning", "CommandRefused", "no"]
    assert servectl("events", "nope", "--state-dir", state).exit_code == 2
    logs = servectl("logs", "cost", "--state-dir", state, "--tail", "2")
    assert logs.stdout.splitlines() == ["==> cost-v1-0 <==", "line 3", "line 4"]
    none = servectl("logs", "fresh", "--state-dir", state)
    assert none.exit_code == 1 and "no replicas of default/fresh have logs in" in none.stderr
    status = json.loads(
        servectl("rollout", "status", "cost", "--state-dir", state, "-o", "json").stdout
    )
    assert status["phase"] == "Idle" and status["weights"] == {"cost-v1": 100}
    assert servectl("rollout", "status", "nope", "--state-dir", state).exit_code == 2
    history = servectl("rollout", "history", "cost", "--state-dir", state)
    row = history.stdout.splitlines()[-1].split()
    assert (row[0], row[2:5]) == ("1", ["v1", "v2", "Aborted"])


def test_writes_say_what_they_queued_and_that_no_controller_runs(state: Path) -> None:
    # --no-wait: with no controller, a waiting command exits 1 (tests/unit/cli/
    # test_rollout_commands.py); this one only says what it queued.
    paused = servectl("rollout", "pause", "cost", "--no-wait", "--state-dir", state)
    assert paused.exit_code == 0, paused.output
    assert paused.stdout.strip() == "modelservice/cost: pause queued"
    assert paused.stderr.strip() == (
        "note: the controller is not running; start it with `servectl up`"
    )
    scaled = servectl("scale", "cost", "--max", "6", "--state-dir", state)
    assert scaled.stdout.strip() == "modelservice/cost scaled: min 1, max 6"
    deleted = servectl("delete", "fresh", "--wait", "--state-dir", state)
    assert deleted.exit_code == 0 and deleted.stdout.strip() == "modelservice/fresh deleted"
    assert servectl("delete", "fresh", "--state-dir", state).exit_code == 2


@pytest.mark.parametrize(
    "args", [["get"], ["describe", "cost"], ["explain", "cost"], ["top"], ["events", "cost"]]
)
def test_the_reads_import_no_model_controller_or_runtime(state: Path, args: list[str]) -> None:
    """What makes ``servectl get`` start fast (docs/benchmarks.md, "CLI latency")."""
    code = (
        "import sys\n"
        "from servectl.cli import main\n"
        f"sys.argv = ['servectl', *{args!r}, '--state-dir', {str(state)!r}]\n"
        "try:\n    main.app()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stderr.split()
    heavy = [
        m
        for m in loaded
        if m.startswith(
            (
                "servectl.api",
                "servectl.controller",
                "servectl.autoscaling",
                "servectl.planning",
                "servectl.rollout",
                "servectl.backends.local.runtime",
                "servectl.backends.local.supervisor",
                "servectl.backends.local.router",
                "servectl.backends.kubernetes",
                "cel",
                "prompt_toolkit",
                "numpy",
            )
        )
    ]
    assert heavy == []
