"""A canary whose spec gives no steps is not an instant switch (issue 25, item 2): it gets
setWeight 20, analysis, setWeight 50, analysis, setWeight 100 with the default analysis,
and ``servectl rollout start`` prints the plan it will follow (servectl.rollout.plan)."""

from __future__ import annotations

from typing import Any

import pytest

from servectl.api import models, validation
from servectl.rollout import machine, plan
from servectl.rollout.counters import Counters
from servectl.rollout.machine import Op, Phase

DEFAULT_WEIGHTS = [20, None, 50, None, 100]  # None: an analysis step


def steps_of(rollout: models.RolloutSpec) -> list[int | None]:
    return [s.set_weight for s in rollout.steps]


@pytest.mark.parametrize("given", [{}, {"strategy": "canary"}, {"steps": []}, {"steps": None}])
def test_a_canary_with_no_steps_gets_the_default_steps(given: dict[str, Any]) -> None:
    rollout = models.RolloutSpec.model_validate(given)
    assert steps_of(rollout) == DEFAULT_WEIGHTS
    for step in rollout.steps[1::2]:
        assert step.analysis is not None and step.analysis.checks is not None
        assert [(c.metric, c.max) for c in step.analysis.checks] == [("errorRate", 0.01)]
    # Every default analysis uses the shared defaults (interval 30s, minSamples 100).
    assert all(s.analysis.interval is None for s in rollout.steps[1::2] if s.analysis)


def test_a_service_with_no_rollout_block_rolls_out_the_default_canary() -> None:
    doc = {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "cost"},
        "spec": {"model": {"name": "cost_model", "basePath": "/models/cost", "version": 1}},
    }
    from servectl.controller.spec import service_spec

    service = validation.load_model_service(doc)
    assert steps_of(service_spec(service).rollout) == DEFAULT_WEIGHTS


def test_shared_checks_are_the_default_analyses_checks() -> None:
    rollout = models.RolloutSpec.model_validate(
        {"analysis": {"minSamples": 20, "checks": [{"metric": "latencyP99", "max": 200}]}}
    )
    assert steps_of(rollout) == DEFAULT_WEIGHTS
    assert all(s.analysis == models.StepAnalysis() for s in rollout.steps[1::2])


def test_explicit_steps_blue_green_and_ab_test_are_unchanged() -> None:
    explicit = models.RolloutSpec.model_validate({"steps": [{"setWeight": 100}]})
    assert steps_of(explicit) == [100]
    assert models.RolloutSpec.model_validate({"strategy": "blueGreen"}).steps == []
    ab = {"strategy": "abTest", "abTest": {"match": {"header": {"name": "x-v", "value": "b"}}}}
    assert models.RolloutSpec.model_validate(ab).steps == []


def test_the_defaults_survive_the_stored_document() -> None:
    # The local runtime stores the model's own dump: read back, it is the same spec.
    rollout = models.RolloutSpec()
    again = models.RolloutSpec.model_validate(
        rollout.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    assert again == rollout


def _view(now: float, canary_weight: int) -> machine.View:
    counters = Counters(time=now, requests=0.0, errors=0.0, cpu_seconds=0.0)
    return machine.View(
        now=now,
        weights={1: 100 - canary_weight, 2: canary_weight},
        header=None,
        ready={1: 2, 2: 2},
        needed={1: 2, 2: 2},
        available={1: True, 2: True},
        counters={1: counters, 2: counters},
    )


def test_a_default_canary_moves_to_20_percent_first_not_to_100() -> None:
    rollout = models.RolloutSpec()
    state = machine.command(machine.initial(1), Op.START, rollout, 0.0, version=2)
    state, intent = machine.advance(state, rollout, _view(1.0, 0))
    assert intent.weights == {1: 80, 2: 20}
    assert state.phase is Phase.PROGRESSING and not state.promoting
    # At 20 % it analyses, and with no traffic it waits there (rule 7), never promoting.
    state, intent = machine.advance(state, rollout, _view(2.0, 20))
    assert state.step == 1
    for now in (40.0, 80.0, 120.0):
        state, intent = machine.advance(state, rollout, _view(now, 20))
    assert state.step == 1 and intent.weights == {1: 80, 2: 20}
    assert state.message.startswith("waiting for traffic: 0 of 100 samples at 20 %")


# ----------------------------------------------------------------------------- the plan


def test_the_plan_of_the_default_canary() -> None:
    assert plan.describe(models.RolloutSpec(), 2) == [
        "plan: canary to v2 (the default steps)",
        "  0. setWeight 20 %",
        "  1. analysis: errorRate <= 0.01; every 30s, on at least 100 requests (waits for them)",
        "  2. setWeight 50 %",
        "  3. analysis: errorRate <= 0.01; every 30s, on at least 100 requests (waits for them)",
        "  4. setWeight 100 %",
        "  then v2 is promoted: it serves 100 %",
    ]


def test_the_plan_names_every_step_kind_and_each_analysis() -> None:
    rollout = models.RolloutSpec.model_validate(
        {
            "steps": [
                {"setCanaryScale": {"replicas": 2}},
                {"setWeight": 10},
                {"pause": {"seconds": 60}},
                {"analysis": {"minSamples": 500, "interval": "1m"}},
                {"pause": {}},
                {"setCanaryScale": {"matchTrafficWeight": True}},
            ],
            "analysis": {
                "maxExtensions": 3,
                "checks": [
                    {"metric": "latencyP99", "maxRatioToStable": 1.5},
                    {
                        "metric": "flagged",
                        "query": 'sum(x{revision="{{revision}}"})',
                        "condition": "value < 0.1",
                    },
                ],
            },
        }
    )
    assert plan.describe(rollout, 7) == [
        "plan: canary to v7",
        "  0. setCanaryScale 2 replicas",
        "  1. setWeight 10 %",
        "  2. pause 60 s",
        "  3. analysis: latencyP99 <= 1.5x stable, flagged (query): value < 0.1; every 1m, on"
        " at least 500 requests (pauses after 3 extensions short of them)",
        "  4. pause until `servectl rollout resume`",
        "  5. setCanaryScale back to its weight",
        "  then v7 is promoted: it serves 100 %",
    ]


def test_the_plan_of_a_blue_green_and_an_ab_test() -> None:
    green = models.RolloutSpec.model_validate(
        {"strategy": "blueGreen", "steps": [{"pause": {"seconds": 30}}]}
    )
    assert plan.describe(green, 3) == [
        "plan: blue/green to v3: v3 comes up at full size with no traffic (the preview)",
        "  0. pause 30 s",
        "  then all traffic switches at once; the old revision keeps its size for 30 s",
    ]
    ab = models.RolloutSpec.model_validate(
        {
            "strategy": "abTest",
            "abTest": {"match": {"cookie": {"name": "variant", "value": "b"}}},
            "analysis": {"checks": [{"metric": "errorRate", "max": 0.05}]},
        }
    )
    assert plan.describe(ab, 3) == [
        "plan: A/B test of v3",
        "  requests with cookie variant: b go to v3 for 600 s",
        "  guard rails: errorRate <= 0.05; every 30s, on at least 100 requests (waits for them)",
        "  then the better errorRate (lower is better) wins; B is promoted to 100 %",
    ]
