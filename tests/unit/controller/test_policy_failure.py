"""A custom CEL policy that fails (issue 25, item 9): refused at ``validate`` and
``deploy`` when it fails on a plain cycle; at run time a ``ScalingLimited=True``
condition (reason ``PolicyFailed``) and one Warning event per distinct error, not one per
cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from servectl.api import models, validation
from servectl.autoscaling import cel_policy, config, engine
from servectl.backends.local.client import LocalClient
from servectl.controller.backend import EventReason, EventType
from servectl.controller.decide import ServectlDecider
from servectl.controller.reconcile import reconcile_once
from servectl.controller.spec import ServiceSpec
from tests.unit.cli.helpers import servectl
from tests.unit.controller.fakes import FakeBackend

C, S = models.ConditionType, models.ConditionStatus
REPO = Path(__file__).resolve().parents[3]

# Compile, fail on every cycle: CEL never mixes int and double; state is empty at first.
FAILING = ["recommended * 1.5", "state.last + 1", "int(signals.rps) / 0"]
WORKING = [
    "recommended",
    "double(recommended) * 1.5",
    'has(state.last) ? {"replicas": recommended, "state": {"last": state.last + 1}}'
    ' : {"replicas": recommended, "state": {"last": 1}}',
]


def _program(expression: str) -> cel_policy.CompiledPolicy:
    return cel_policy.compile_expression(expression)


@pytest.mark.parametrize("expression", FAILING)
def test_the_probe_refuses_a_policy_that_fails_on_a_plain_cycle(expression: str) -> None:
    assert validation.probe_policy(_program(expression), {}) is not None


@pytest.mark.parametrize("expression", WORKING)
def test_the_probe_passes_a_policy_that_works(expression: str) -> None:
    assert validation.probe_policy(_program(expression), {}) is None


def test_every_ready_made_policy_and_example_passes_validate() -> None:
    files = sorted((REPO / "policies").glob("*.yaml"))
    files += sorted((REPO / "deploy" / "examples").glob("*.yaml"))
    result = servectl("validate", *files)
    assert result.exit_code == 0, result.output


def _service_yaml(path: Path, models_dir: Path, policy: str) -> Path:
    path.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata: {name: cost}\n"
        f"spec:\n  model: {{name: cost_model, basePath: {models_dir}}}\n"
        f"  autoscaling:\n    minReplicas: 1\n    maxReplicas: 4\n    policy:\n{policy}"
    )
    return path


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    base = tmp_path / "models" / "cost_model"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"")
    return base


def test_validate_and_deploy_refuse_an_inline_policy_that_fails_on_every_cycle(
    tmp_path: Path, models_dir: Path
) -> None:
    spec = _service_yaml(tmp_path / "svc.yaml", models_dir, "      cel: recommended * 1.5\n")
    checked = servectl("validate", spec)
    assert checked.exit_code == 1
    line = " ".join(checked.stderr.split())
    assert f"{spec}:10: spec.autoscaling.policy.cel: the policy fails on a plain cycle" in line
    assert "double(recommended) * 1.5" in line  # the fix
    state = tmp_path / "state"
    deployed = servectl("deploy", "-f", spec, "--state-dir", state)
    assert deployed.exit_code == 2
    assert "spec.autoscaling.policy.cel: the policy fails on a plain cycle" in deployed.stderr
    client = LocalClient(state)
    try:
        assert client.store.get_spec("default", "cost") is None  # nothing written
    finally:
        client.close()


def test_deploy_refuses_a_referenced_policy_that_the_services_params_break(
    tmp_path: Path, models_dir: Path
) -> None:
    policy = tmp_path / "halve.yaml"
    policy.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ScalingPolicy\nmetadata: {name: divide}\n"
        "spec:\n  description: divide the recommendation\n"
        "  params: {by: 2}\n  cel: recommended / int(params.by)\n"
    )
    state = tmp_path / "state"
    assert servectl("validate", policy).exit_code == 0
    assert servectl("deploy", "-f", policy, "--state-dir", state).exit_code == 2  # no service
    both = tmp_path / "both.yaml"
    service = _service_yaml(
        tmp_path / "svc.yaml", models_dir, "      ref: divide\n      params: {by: 0}\n"
    )
    both.write_text(policy.read_text() + "---\n" + service.read_text())
    result = servectl("deploy", "-f", both, "--state-dir", state)
    assert result.exit_code == 2, result.output
    line = " ".join(result.stderr.split())
    assert "spec.autoscaling.policy.ref: ScalingPolicy divide fails on a plain cycle" in line
    assert "division by zero" in line
    client = LocalClient(state)
    try:  # a refused deploy writes nothing, not even the ScalingPolicy beside it
        assert client.store.get_spec("default", "cost") is None
        assert client.policies() == {}
    finally:
        client.close()


# --------------------------------------------------------------------------- run time


def _decider(expression: str) -> ServectlDecider:
    custom = engine.CustomPolicy("mine", _program(expression))
    cfg = config.AutoscalingConfig(min_replicas=1, max_replicas=10)
    return ServectlDecider(
        ServiceSpec(name="m", min_replicas=1, max_replicas=10), engine.EnginePolicy(cfg, custom)
    )


def test_a_failing_policy_is_a_condition_and_one_warning_per_distinct_error() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = _decider("signals.rps > 150.0 ? int(signals.rps) / 0 : recommended * 1.5")
    for now in range(5):
        reconcile_once(backend, decider, float(now))
    assert backend.status is not None
    limited = backend.status.condition(C.SCALING_LIMITED)
    assert limited is not None and limited.status is S.TRUE and limited.reason == "PolicyFailed"
    assert limited.message.startswith("policy mine failed: no such overload")
    assert limited.last_transition_time is not None
    assert limited.last_transition_time.timestamp() == 0.0
    warnings = [e for e in backend.events if e.reason is EventReason.POLICY_FAILED]
    assert len(warnings) == 1, "one event for five cycles of the same error"
    assert warnings[0].type is EventType.WARNING and warnings[0].time == 0.0
    assert warnings[0].message == limited.message
    backend.rps = 200.0  # another error
    for now in range(5, 8):
        reconcile_once(backend, decider, float(now))
    warnings = [e for e in backend.events if e.reason is EventReason.POLICY_FAILED]
    assert [w.time for w in warnings] == [0.0, 5.0]
    assert "division by zero" in warnings[1].message


def test_a_policy_that_works_again_clears_the_condition() -> None:
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    decider = _decider("signals.rps > 150.0 ? recommended * 1.5 : recommended")
    backend.rps = 200.0
    reconcile_once(backend, decider, 0.0)
    backend.rps = 100.0
    reconcile_once(backend, decider, 1.0)
    assert backend.status is not None
    limited = backend.status.condition(C.SCALING_LIMITED)
    assert limited is not None and limited.reason != "PolicyFailed"
    assert len([e for e in backend.events if e.reason is EventReason.POLICY_FAILED]) == 1


def test_recommend_mode_names_the_failure_and_warns_once() -> None:
    custom = engine.CustomPolicy("mine", _program("recommended * 1.5"))
    cfg = config.AutoscalingConfig(min_replicas=1, max_replicas=10, mode=config.Mode.RECOMMEND)
    decider = ServectlDecider(
        ServiceSpec(name="m", min_replicas=1, max_replicas=10, mode=config.Mode.RECOMMEND),
        engine.EnginePolicy(cfg, custom),
    )
    backend = FakeBackend({"m-v1": (1, 3, 100)})
    for now in range(3):
        reconcile_once(backend, decider, float(now))
    assert backend.status is not None
    limited = backend.status.condition(C.SCALING_LIMITED)
    assert limited is not None and limited.reason == "RecommendOnly"
    assert "policy mine failed" in limited.message
    assert len([e for e in backend.events if e.reason is EventReason.POLICY_FAILED]) == 1


def test_the_decision_names_the_policy_error_for_explain() -> None:
    from servectl.testing import make_snapshot

    failing = engine.EnginePolicy(
        config.AutoscalingConfig(), engine.CustomPolicy("mine", _program("recommended * 1.5"))
    )
    decision, _ = failing.decide(make_snapshot(current=2, rps=20.0, cpu_utilization=50.0), {})
    assert decision.policy_error is not None and decision.policy_error.startswith("policy mine")
    assert decision.to_dict()["policyError"] == decision.policy_error
    working = engine.EnginePolicy(
        config.AutoscalingConfig(), engine.CustomPolicy("mine", _program("recommended"))
    )
    decision, _ = working.decide(make_snapshot(current=2, rps=20.0, cpu_utilization=50.0), {})
    assert decision.policy_error is None and "policyError" not in decision.to_dict()
