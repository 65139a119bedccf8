"""The spec and what serves, as Argo CD or Flux see them (issue 27 item 7; the contract:
servectl/controller/gitops.py, docs/kubernetes.md "GitOps").

On a real kube-apiserver: after an abort the ModelService stays Degraded, saying how to
agree, until the spec names the served version again (a Git revert), which settles it; a
spec reverted mid-rollout abandons the rollout.
"""

from __future__ import annotations

import json
from typing import Any

from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.kube import MODELSERVICES
from servectl.metrics.server import PrometheusServer
from tests.integration.k8s.harness import Harness, eventually, ms_doc

PAUSED = {"strategy": "canary", "steps": [{"setWeight": 25}, {"pause": {}}], "drainSeconds": 1}


def _condition(harness: Harness, name: str, kind: str) -> dict[str, Any]:
    status = harness.ms(name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def _paused_at_25(harness: Harness, name: str) -> None:
    eventually(lambda: harness.ready_pods(f"{name}-v1") == 2 or None, "stable ready")
    harness.patch_spec(name, {"model": {"version": 2}})
    eventually(lambda: harness.rollout(name).get("phase") == "Paused" or None, "paused at 25 %")


def _settled_on_v1(harness: Harness, name: str) -> None:
    eventually(lambda: harness.rollout(name).get("phase") == "Idle" or None, "settled: Idle")
    eventually(lambda: set(harness.deployments()) == {f"{name}-v1"} or None, "v2 removed")
    assert harness.weights(name) == {f"{name}-v1": 100}
    eventually(
        lambda: _condition(harness, name, "Degraded").get("status") == "False" or None,
        "Degraded=False",
    )
    rollout = harness.rollout(name)
    assert rollout.get("stableVersion") == 1 and not rollout.get("canaryVersion"), rollout


def test_after_an_abort_degraded_holds_until_the_spec_is_reverted(
    harness: Harness, prometheus: PrometheusServer
) -> None:
    harness.metrics(prometheus)
    harness.controller()
    harness.create(ms_doc("git", harness.namespace, rollout=PAUSED))
    _paused_at_25(harness, "git")
    abort = json.dumps({"op": "abort", "id": "a1"})
    harness.kube.merge_patch(
        MODELSERVICES, harness.namespace, "git", {"metadata": {"annotations": {obj.COMMAND: abort}}}
    )
    eventually(lambda: harness.rollout("git").get("phase") == "Aborted" or None, "aborted")
    eventually(lambda: set(harness.deployments()) == {"git-v1"} or None, "v2 removed")
    degraded = _condition(harness, "git", "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "RolloutAborted", degraded
    assert "spec.model.version is 2 but v1 serves" in degraded["message"], degraded
    assert "set spec.model.version to 1" in degraded["message"]
    # Nothing rolls v2 out again by itself: the abort stands while the spec names v2.
    assert harness.rollout("git").get("phase") == "Aborted"
    harness.patch_spec("git", {"model": {"version": 1}})  # the Git revert
    _settled_on_v1(harness, "git")


def test_a_spec_reverted_mid_rollout_abandons_it(
    harness: Harness, prometheus: PrometheusServer
) -> None:
    harness.metrics(prometheus)
    harness.controller()
    harness.create(ms_doc("back", harness.namespace, rollout=PAUSED))
    _paused_at_25(harness, "back")
    harness.patch_spec("back", {"model": {"version": 1}})
    _settled_on_v1(harness, "back")
