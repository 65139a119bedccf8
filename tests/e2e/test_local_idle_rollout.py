"""An idle service rolls out (issue 25, item 1), on the local runtime with real processes.

TF Serving, and servectl's model server, create their request and latency series at the
first request: a service nobody has called has none. That used to read as missing metrics,
and rule 8 held the rollout at ``step 0 ... 0 % moved`` until someone sent a request. Here
no request is ever sent (readiness is read from the status, not with a prediction):

- ``steps``: setWeight steps and a pause, no analysis: the rollout goes all the way;
- ``gated``: an analysis step needing 50 samples: it waits at 20 %, Inconclusive (rule 7),
  and its status says so in numbers.

One runtime for the module, both services deployed at once.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.api import validation
from tests.e2e.conftest import REQUIRE_ENV, LocalRuntime, service_doc

STEPS: dict[str, Any] = {
    "strategy": "canary",
    "steps": [{"setWeight": 50}, {"pause": {"seconds": 3}}, {"setWeight": 100}],
    "drainSeconds": 2,
}
GATED: dict[str, Any] = {
    "strategy": "canary",
    "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 100}],
    "analysis": {
        "interval": "2s",
        "minSamples": 50,
        "checks": [{"metric": "errorRate", "max": 0.02}],
    },
    "drainSeconds": 2,
}


def _skip_without(binary: str, hint: str) -> None:
    if shutil.which(binary) is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{binary} not found: {hint}")
        pytest.skip(f"{binary} not found: {hint}")


@pytest.fixture(scope="module")
def idle(tmp_path_factory: pytest.TempPathFactory, demo_models: Path) -> Iterator[LocalRuntime]:
    """A runtime serving ``steps`` and ``gated`` at v1, neither ever called."""
    _skip_without("haproxy", "apt-get install haproxy")
    _skip_without("prometheus", "apt-get install prometheus")
    rt = LocalRuntime(tmp_path_factory.mktemp("idle") / "state")
    rt.start()
    try:
        for name, rollout in (("steps", STEPS), ("gated", GATED)):
            doc = service_doc(demo_models, rollout=rollout)
            doc["metadata"]["name"] = name
            doc["spec"]["autoscaling"]["maxReplicas"] = 2
            rt.client.deploy(validation.load_model_service(doc))
        for name in ("steps", "gated"):
            rt.wait(lambda n=name: rt.ready(n).get(f"{n}-v1", 0) >= 1, 120, f"{name} to serve")
        yield rt
    finally:
        rt.stop()


def _rollout(rt: LocalRuntime, name: str) -> dict[str, Any]:
    return dict(rt.status(name).get("rollout") or {})


def _weights(rt: LocalRuntime, name: str) -> dict[str, int]:
    return {r["name"]: r.get("weight", 0) for r in rt.status(name).get("revisions", [])}


def test_an_idle_service_rolls_out_its_weight_steps_with_no_request(idle: LocalRuntime) -> None:
    started = idle.cli("rollout", "start", "steps", "--version", "2")
    # The plan it follows (item 2), one line per step.
    assert "plan: canary to v2" in started.stdout
    assert "  0. setWeight 50 %" in started.stdout.splitlines()
    seen: list[tuple[str, int]] = []

    def completed() -> bool:
        rollout, weights = _rollout(idle, "steps"), _weights(idle, "steps")
        seen.append((str(rollout.get("phase")), weights.get("steps-v2", 0)))
        return rollout.get("phase") == "Completed"

    idle.wait(completed, 120, "the idle service's rollout to complete")
    assert _weights(idle, "steps").get("steps-v2") == 100
    assert ("Progressing", 50) in seen, seen  # it went through the steps, not in one go
    # Metrics were there all along: an idle, scraped service is not missing metrics.
    conditions = {c["type"]: c for c in idle.status("steps").get("conditions", [])}
    metrics = conditions.get("MetricsAvailable") or {}
    assert metrics.get("status") == "True", metrics


def test_an_analysis_on_an_idle_canary_waits_for_traffic_in_numbers(idle: LocalRuntime) -> None:
    idle.cli("rollout", "start", "gated", "--version", "2")

    def waiting() -> str:
        message = str(_rollout(idle, "gated").get("message", ""))
        return message if message.startswith("waiting for traffic") else ""

    message = idle.wait(waiting, 120, "the analysis to wait for traffic")
    assert message.startswith("waiting for traffic: 0 of 50 samples at 20 %"), message
    rollout = _rollout(idle, "gated")
    assert rollout.get("phase") == "Progressing" and rollout.get("step") == 1
    assert _weights(idle, "gated") == {"gated-v1": 80, "gated-v2": 20}
    assert rollout.get("verdicts") and rollout["verdicts"][-1]["verdict"] == "Inconclusive"
