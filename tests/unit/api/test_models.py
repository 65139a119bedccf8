"""The models' conversions: spec -> engine config, quantities, durations, policy lookup."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from servectl.api import models, validation
from servectl.autoscaling import config
from tests.unit.api.helpers import edited, example


def autoscaling(**fields: Any) -> models.AutoscalingSpec:
    doc = edited(example("half-plus-two-minimal.yaml"), {"spec.autoscaling": fields})
    return validation.load_model_service(doc).spec.autoscaling


def test_full_spec_to_config(resnet: dict[str, Any]) -> None:
    cfg = validation.load_model_service(resnet).spec.autoscaling.to_config()
    assert (cfg.min_replicas, cfg.max_replicas, cfg.mode) == (2, 20, config.Mode.ACTIVE)
    assert cfg.cold_start_s == 45.0
    assert cfg.signals == (
        config.SignalTarget(config.SignalType.CPU, 70.0),
        config.SignalTarget(config.SignalType.GPU, 80.0),
        config.SignalTarget(config.SignalType.LATENCY, 150.0, percentile=99.0),
        config.SignalTarget(config.SignalType.RPS, 400.0),
    )
    assert cfg.behavior == config.Behavior(
        scale_up=config.ScalingRules(
            stabilization_s=0.0,
            policies=(
                config.RatePolicy(config.RateType.PERCENT, 100, 15.0),
                config.RatePolicy(config.RateType.PODS, 4, 15.0),
            ),
            select=config.SelectPolicy.MAX,
        ),
        scale_down=config.ScalingRules(
            stabilization_s=300.0,
            policies=(config.RatePolicy(config.RateType.PODS, 1, 60.0),),
            # selectPolicy omitted: the servectl default direction's select (Max)
            select=config.SelectPolicy.MAX,
        ),
    )


def test_omitted_autoscaling_is_the_engine_default() -> None:
    spec = validation.load_model_service(example("half-plus-two-minimal.yaml")).spec
    assert spec.autoscaling.to_config() == config.AutoscalingConfig()


def test_omitted_behavior_is_servectl_default() -> None:
    cfg = autoscaling(signals=[{"type": "rps", "targetPerReplica": 10}]).to_config()
    assert cfg.behavior == config.servectl_default_behavior()


def test_partial_behavior_keeps_defaults_per_field() -> None:
    defaults = config.servectl_default_behavior()
    cfg = autoscaling(behavior={"scaleDown": {"stabilizationSeconds": 600}}).to_config()
    assert cfg.behavior.scale_up == defaults.scale_up
    assert cfg.behavior.scale_down.stabilization_s == 600.0
    assert cfg.behavior.scale_down.policies == defaults.scale_down.policies


def test_disabled_direction() -> None:
    cfg = autoscaling(behavior={"scaleDown": {"selectPolicy": "Disabled"}}).to_config()
    assert cfg.behavior.scale_down.select is config.SelectPolicy.DISABLED


@pytest.mark.parametrize(
    ("signal", "target"),
    [
        (
            {"type": "cpu", "targetUtilization": 120},
            config.SignalTarget(config.SignalType.CPU, 120.0),
        ),
        ({"type": "latency", "targetMs": 80}, config.SignalTarget(config.SignalType.LATENCY, 80.0)),
        (
            {"type": "latency", "percentile": 99.9, "targetMs": 300},
            config.SignalTarget(config.SignalType.LATENCY, 300.0, 99.9),
        ),
        (
            {"type": "concurrency", "targetPerReplica": 8},
            config.SignalTarget(config.SignalType.CONCURRENCY, 8.0),
        ),
    ],
)
def test_signal_to_target(signal: dict[str, Any], target: config.SignalTarget) -> None:
    assert autoscaling(signals=[signal]).to_config().signals == (target,)


def test_recommend_mode() -> None:
    assert autoscaling(mode="recommend").to_config().mode is config.Mode.RECOMMEND


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        ("2", Decimal(2)),
        (2, Decimal(2)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("4Gi", Decimal(4 * 2**30)),
        ("128Mi", Decimal(128 * 2**20)),
        ("1G", Decimal(10**9)),
        ("1e3", Decimal(1000)),
        ("250u", Decimal("0.00025")),
    ],
)
def test_parse_quantity(quantity: int | str, value: Decimal) -> None:
    assert models.parse_quantity(quantity) == value


def test_resources_in_units() -> None:
    resources = models.Resources(cpu="500m", memory="4Gi")
    assert resources.cpu_cores() == 0.5
    assert resources.memory_bytes() == 4 * 2**30


def test_integral_float_quantity_becomes_int() -> None:
    assert models.Resources.model_validate({"cpu": 2.0}).cpu == 2


@pytest.mark.parametrize(
    ("duration", "seconds"), [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25)]
)
def test_parse_duration(duration: str, seconds: float) -> None:
    assert models.parse_duration(duration) == seconds


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        models.parse_duration("soon")


# ----------------------------------------------------------------------------- policies


def _policy(name: str, cel: str, **params: float) -> models.ScalingPolicy:
    return validation.load_scaling_policy(
        {
            "metadata": {"name": name},
            "spec": {"description": "d", "cel": cel, "params": params},
        }
    )


def test_no_policy() -> None:
    assert autoscaling().resolve_policy({}) is None


def test_inline_policy() -> None:
    spec = autoscaling(policy={"cel": "recommended + 1"})
    assert spec.inline_cel == "recommended + 1"
    assert spec.policy_ref is None
    assert spec.resolve_policy({}) == models.ResolvedPolicy("inline", "recommended + 1", {})


def test_referenced_policy_params_are_overridden_by_the_spec() -> None:
    library = {"floor": _policy("floor", "max(recommended, int(params.floor))", floor=2, cap=9)}
    spec = autoscaling(policy={"ref": "floor", "params": {"floor": 5}})
    assert spec.policy_ref == "floor"
    resolved = spec.resolve_policy(library)
    assert resolved == models.ResolvedPolicy(
        name="floor",
        cel="max(recommended, int(params.floor))",
        params={"floor": 5.0, "cap": 9.0},
        ref="floor",
    )


def test_unknown_policy_ref() -> None:
    spec = autoscaling(policy={"ref": "business-hours"})
    with pytest.raises(models.UnknownPolicyError, match="'business-hours' not found"):
        spec.resolve_policy({"other": _policy("other", "recommended")})


# ----------------------------------------------------------------------------- defaults, status


def test_spec_defaults_follow_the_engine_config() -> None:
    spec = models.AutoscalingSpec()
    engine = config.AutoscalingConfig()
    assert (spec.min_replicas, spec.max_replicas, spec.mode) == (
        engine.min_replicas,
        engine.max_replicas,
        engine.mode,
    )
    assert tuple(signal.to_target() for signal in spec.signals) == engine.signals


def test_status_round_trips_and_ignores_unknown_fields() -> None:
    doc = edited(
        example("half-plus-two-minimal.yaml"),
        {
            "status": {
                "observedGeneration": 3,
                "revisions": [
                    {
                        "name": "half-plus-two-v1",
                        "version": 1,
                        "weight": 100,
                        "modelState": "AVAILABLE",
                    }
                ],
                "rollout": {"phase": "Idle", "verdicts": [{"step": 1, "verdict": "Inconclusive"}]},
                "autoscaling": {
                    "desiredReplicas": 3,
                    "decidedBy": "cpu",
                    "reason": "SIGNAL",
                    "lastScaleTime": "2025-01-31T12:00:00Z",
                    "policyState": {"history": [1, 2]},
                },
                "conditions": [{"type": "Ready", "status": "True", "reason": "Serving"}],
                "fieldFromANewerController": 1,
            }
        },
    )
    service = validation.load_model_service(doc)
    assert service.status is not None
    ready = service.status.condition(models.ConditionType.READY)
    assert ready is not None and ready.status is models.ConditionStatus.TRUE
    assert service.status.autoscaling is not None
    assert service.status.autoscaling.policy_state == {"history": [1, 2]}
    assert validation.load_model_service(validation.to_document(service)) == service
