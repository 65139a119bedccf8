"""service_spec and policy_for: a ModelService as the loop runs it."""

from __future__ import annotations

import pytest

from servectl.api import models
from servectl.autoscaling import config, engine, hpa
from servectl.controller.spec import PolicySpecError, policy_for, service_spec


def service(**autoscaling: object) -> models.ModelService:
    return models.ModelService.model_validate(
        {
            "metadata": {"name": "resnet"},
            "spec": {
                "model": {"name": "resnet", "basePath": "/models/resnet"},
                "runtime": {"resources": {"cpu": "2", "gpu": 1}},
                "autoscaling": {"minReplicas": 2, "maxReplicas": 9, **autoscaling},
                "rollout": {"strategy": "canary", "steps": [{"setWeight": 20}]},
            },
        }
    )


LIBRARY = {
    "double": models.ScalingPolicy.model_validate(
        {
            "kind": "ScalingPolicy",
            "metadata": {"name": "double"},
            "spec": {"description": "twice", "cel": "recommended * params.k", "params": {"k": 2}},
        }
    )
}


def test_service_spec_takes_bounds_gpus_mode_and_rollout_from_the_spec() -> None:
    spec = service_spec(service(mode="recommend"))
    assert (spec.name, spec.min_replicas, spec.max_replicas) == ("resnet", 2, 9)
    assert spec.gpus_per_replica == 1
    assert spec.mode is config.Mode.RECOMMEND
    assert spec.rollout.strategy is models.RolloutStrategy.CANARY
    assert spec.revision_name(3) == "resnet-v3"


def test_policy_for_builds_the_engine_with_a_referenced_cel_policy() -> None:
    policy = policy_for(service(policy={"ref": "double", "params": {"k": 3}}), LIBRARY)
    assert isinstance(policy, engine.EnginePolicy)
    assert policy.custom is not None and policy.custom.name == "double"
    assert policy.custom.params == {"k": 3}


def test_policy_for_tells_the_engine_how_the_backend_routes() -> None:
    default = policy_for(service())
    told = policy_for(service(), routing=config.Routing.LEAST_REQUEST)
    assert isinstance(default, engine.EnginePolicy) and isinstance(told, engine.EnginePolicy)
    assert default.config.routing is config.Routing.ROUND_ROBIN
    assert told.config.routing is config.Routing.LEAST_REQUEST
    assert told.config.signals == default.config.signals  # nothing else changes


def test_policy_for_a_baseline_on_the_same_targets() -> None:
    assert isinstance(policy_for(service(), name="hpa"), hpa.HPAPolicy)


def test_an_unknown_ref_names_the_field() -> None:
    with pytest.raises(PolicySpecError, match=r"^spec\.autoscaling\.policy\.ref: .*'nope'") as e:
        policy_for(service(policy={"ref": "nope"}), LIBRARY)
    assert e.value.field == "spec.autoscaling.policy.ref"


def test_a_broken_inline_policy_names_the_field() -> None:
    with pytest.raises(PolicySpecError, match=r"^spec\.autoscaling\.policy\.cel: CEL policy"):
        policy_for(service(policy={"cel": "recommended +"}))


def test_a_custom_policy_on_a_baseline_is_refused() -> None:
    with pytest.raises(PolicySpecError, match="wraps servectl's engine"):
        policy_for(service(policy={"cel": "recommended"}), name="kpa")


def test_an_unknown_policy_name_is_refused() -> None:
    with pytest.raises(PolicySpecError, match="unknown policy 'nope'"):
        policy_for(service(), name="nope")
