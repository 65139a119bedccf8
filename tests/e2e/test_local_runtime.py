"""The local runtime end to end: deploy, serve through HAProxy, scale, bad input, delete."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import LocalRuntime, predict, try_predict


def _deploy(rt: LocalRuntime, models: Path, *extra: str) -> None:
    rt.cli(
        "deploy",
        "cost",
        "--model-path",
        str(models / "cost_model"),
        "--version",
        "1",
        "--cpu",
        "500m",
        *extra,
    )


def test_deploy_serves_through_the_router_and_scales_with_its_bounds(
    runtime: LocalRuntime, demo_models: Path
) -> None:
    _deploy(runtime, demo_models, "--min", "1", "--max", "3")
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 1, 90, "cost-v1 ready")
    record = runtime.client.record("default", "cost")
    assert record is not None
    runtime.wait(lambda: try_predict(record.rest_port), 30, "a prediction through HAProxy")
    answer = predict(record.rest_port)
    assert len(answer["predictions"]) == 1

    got = json.loads(runtime.cli("get", "cost", "-o", "json").stdout)
    assert got["metadata"]["name"] == "cost"
    assert got["spec"]["model"]["version"] == 1
    assert got["status"]["revisions"][0]["name"] == "cost-v1"

    runtime.cli("scale", "cost", "--min", "2")
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 2, 90, "two ready replicas")
    described = runtime.cli("describe", "cost").stdout
    assert "cost-v1" in described and "Ready" in described

    runtime.cli("delete", "cost")
    runtime.wait(
        lambda: not [r for r in runtime.client.replicas() if r["spec"]["service"] == "cost"],
        60,
        "the replicas of the deleted service to stop",
    )


def test_bad_input_is_refused_with_the_field_and_running_services_stay(
    runtime: LocalRuntime, demo_models: Path, tmp_path: Path
) -> None:
    _deploy(runtime, demo_models, "--min", "1", "--max", "2")
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1") == 1, 90, "cost-v1 ready")
    before = runtime.client.store.get_spec("default", "cost")

    empty = tmp_path / "empty_model"
    empty.mkdir()
    done = runtime.cli("deploy", "other", "--model-path", str(empty), check=False)
    assert done.returncode != 0
    assert "spec.model.basePath: no version under" in done.stderr

    done = runtime.cli("rollout", "start", "cost", "--version", "9", check=False)
    assert done.returncode != 0
    assert "--version: version 9 is not under" in done.stderr

    done = runtime.cli(
        "deploy", "cost", "--model-path", str(demo_models / "cost_model"), "--min", "3",
        "--max", "2", check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "minReplicas" in done.stderr

    broken = tmp_path / "broken.yaml"
    broken.write_text(
        f"""apiVersion: servectl.io/v1alpha1
kind: ModelService
metadata: {{name: cost}}
spec:
  model: {{name: cost_model, basePath: {demo_models / "cost_model"}, version: 1}}
  autoscaling:
    policy:
      cel: "signals.cpu.utilization >"
"""
    )
    done = runtime.cli("deploy", "-f", str(broken), check=False)
    assert done.returncode != 0
    assert "spec.autoscaling.policy" in done.stderr

    after = runtime.client.store.get_spec("default", "cost")
    assert after is not None and before is not None
    assert after.spec == before.spec and after.generation == before.generation
    assert runtime.client.store.get_spec("default", "other") is None
    assert runtime.ready("cost").get("cost-v1") == 1
