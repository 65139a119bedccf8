"""Policies by name and the stable evaluate/replay API."""

from __future__ import annotations

import pytest

from servectl.autoscaling import cel_policy, config, engine, registry
from servectl.autoscaling.decision import Reason
from servectl.testing import make_snapshot

CFG = config.AutoscalingConfig(
    min_replicas=1,
    max_replicas=40,
    signals=(
        config.SignalTarget(config.SignalType.CPU, 70.0),
        config.SignalTarget(config.SignalType.CONCURRENCY, 2.0),
    ),
    threads_per_replica=2,
)


def test_names() -> None:
    assert registry.names() == ["hpa", "kpa", "servectl"]


@pytest.mark.parametrize("name", ["servectl", "hpa", "kpa"])
def test_every_policy_evaluates_one_snapshot(name: str) -> None:
    policy = registry.build(name, CFG)
    assert policy.name == name
    step = registry.evaluate(
        policy, make_snapshot(current=8, rps=700.0, cpu_usage_cores=14.0, concurrency=20.0)
    )
    assert step.decision.replicas >= 1
    assert isinstance(step.decision.reason, Reason)
    assert isinstance(step.state, dict)


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(registry.UnknownPolicyError, match="hpa, kpa, servectl"):
        registry.build("vpa", CFG)


def test_custom_policy_only_wraps_servectl() -> None:
    custom = engine.CustomPolicy("x", cel_policy.compile_expression("recommended"))
    assert registry.build("servectl", CFG, custom).name == "servectl+x"
    with pytest.raises(registry.UnknownPolicyError, match="wraps servectl"):
        registry.build("hpa", CFG, custom)


def test_replay_carries_state_and_applies_each_decision() -> None:
    policy = registry.build("servectl", CFG)
    snaps = [
        make_snapshot(1000.0 + 2 * i, current=4, rps=700.0, cpu_usage_cores=14.0) for i in range(3)
    ]
    steps = registry.replay(policy, snaps)
    assert [s.time for s in steps] == [1000.0, 1002.0, 1004.0]
    assert steps[0].decision.replicas == 10
    # The second snapshot said current=4; replay applied the first decision instead, so
    # the same load now asks for exactly what runs.
    assert steps[1].decision.reason is Reason.SIGNAL
    assert steps[1].decision.replicas == 10
    assert "x 70%) = 10.00" in steps[1].decision.detail
    assert "behavior" in steps[-1].state


def test_evaluate_does_not_mutate_the_given_state() -> None:
    policy = registry.build("servectl", CFG)
    state = {"service_s": 0.02}
    registry.evaluate(policy, make_snapshot(current=4, rps=700.0, cpu_usage_cores=14.0), state)
    assert state == {"service_s": 0.02}
