"""Rollouts on the local runtime: an A/B test by header, a blue/green switch and rollback,
and a controller killed mid-rollout. A good canary promoted and a failing one rolled back
under load, with no failure servectl caused, is the demo's story:
tests/e2e/test_local_demo.py checks it there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servectl.rollout.machine import Op
from tests.e2e.conftest import LocalRuntime, deploy, revision_of, service_doc


def _phase(rt: LocalRuntime) -> str:
    return str((rt.status("cost").get("rollout") or {}).get("phase", "Idle"))


def _weights(rt: LocalRuntime) -> dict[str, int]:
    return {r["name"]: r.get("weight", 0) for r in rt.status("cost").get("revisions", [])}


def _start(rt: LocalRuntime, version: int) -> None:
    rt.client.rollout("default", "cost", Op.START, version)
    rt.wait(
        lambda: (rt.status("cost").get("rollout") or {}).get("canaryVersion") == version,
        30,
        f"the rollout to v{version} to start",
    )


CANARY: dict[str, Any] = {
    "strategy": "canary",
    "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 50}, {"setWeight": 100}],
    "analysis": {
        "interval": "10s",
        "minSamples": 40,
        "maxExtensions": 6,
        "checks": [{"metric": "errorRate", "max": 0.02}],
    },
    "drainSeconds": 5,
}


def test_an_ab_test_sends_only_the_header_users_to_b(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    ab = {
        "strategy": "abTest",
        "abTest": {
            "match": {"header": {"name": "x-variant", "value": "b"}},
            "durationSeconds": 600,
            "winnerMetric": "latencyP99",
            "promoteWinner": False,
        },
        "drainSeconds": 5,
    }
    port = deploy(runtime, service_doc(demo_models, rollout=ab))
    _start(runtime, 2)
    runtime.wait(
        lambda: revision_of(port, {"x-variant": "b"}) == "cost-v2", 90, "B to take its users"
    )
    with_header = [revision_of(port, {"x-variant": "b"}) for _ in range(40)]
    without = [revision_of(port) for _ in range(40)]
    other_value = [revision_of(port, {"x-variant": "a"}) for _ in range(20)]
    assert set(with_header) == {"cost-v2"}
    assert set(without) == {"cost-v1"}
    assert set(other_value) == {"cost-v1"}


def test_a_blue_green_switch_and_its_rollback(runtime: LocalRuntime, demo_models: Path) -> None:
    blue_green = {
        "strategy": "blueGreen",
        "blueGreen": {
            "autoPromote": False,
            "scaleDownDelaySeconds": 5,
            "previewHeader": {"name": "x-preview", "value": "true"},
        },
        "drainSeconds": 5,
    }
    port = deploy(runtime, service_doc(demo_models, rollout=blue_green))
    _start(runtime, 2)
    runtime.wait(lambda: _phase(runtime) == "Paused", 90, "the preview to be up")
    assert {revision_of(port) for _ in range(20)} == {"cost-v1"}
    assert {revision_of(port, {"x-preview": "true"}) for _ in range(10)} == {"cost-v2"}
    # The switch: everything at once to green.
    runtime.client.rollout("default", "cost", Op.PROMOTE)
    runtime.wait(lambda: _phase(runtime) == "Completed", 60, "the switch")
    assert {revision_of(port) for _ in range(20)} == {"cost-v2"}
    # And back: undo switches to blue at once (no preview, no analysis: a rollback).
    runtime.client.rollout("default", "cost", Op.UNDO)
    runtime.wait(
        lambda: _phase(runtime) == "Completed" and _weights(runtime).get("cost-v1") == 100,
        60,
        "the switch back to blue",
    )
    assert {revision_of(port) for _ in range(20)} == {"cost-v1"}


def test_a_controller_killed_mid_rollout_resumes_at_the_same_step_and_weights(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    paused = dict(CANARY, steps=[{"setWeight": 30}, {"pause": {}}, {"setWeight": 100}])
    port = deploy(runtime, service_doc(demo_models, rollout=paused))
    _start(runtime, 2)
    runtime.wait(lambda: _phase(runtime) == "Paused", 90, "the pause step")
    before = runtime.status("cost")["rollout"]
    weights = _weights(runtime)
    assert weights == {"cost-v1": 70, "cost-v2": 30}
    runtime.kill_controller()
    # Traffic flows on without a controller: HAProxy and the replicas outlive it.
    assert {revision_of(port) for _ in range(30)} == {"cost-v1", "cost-v2"}
    runtime.start()
    runtime.wait(lambda: _phase(runtime) == "Paused", 30, "the restarted controller")
    after = runtime.status("cost")["rollout"]
    assert (after["step"], after["canaryVersion"]) == (before["step"], before["canaryVersion"])
    assert _weights(runtime) == weights
    runtime.client.rollout("default", "cost", Op.RESUME)
    runtime.wait(lambda: _phase(runtime) == "Completed", 90, "the rollout to finish")
    assert _weights(runtime).get("cost-v2") == 100
