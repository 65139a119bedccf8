"""``WeightsChanged`` events are coalesced (issue 25, item 5): one where a shift toward a
rollout's target begins and one where it gets there, not one per percentage point as
ready capacity carries the weights step by step; a move away from the target has its
own, with the planner's reason. Through the simulator: the loop, status and events as
every backend runs them."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

from servectl.api import models
from servectl.autoscaling import registry
from servectl.backends.sim.run import run_world
from servectl.controller.backend import EventReason
from servectl.controller.decide import ServectlDecider
from servectl.controller.spec import ServiceSpec
from servectl.rollout.machine import Op
from servectl.sim import model, suite, traces
from servectl.sim import scenario as scenario_mod

SVC = suite.service()
STEPS: list[dict[str, Any]] = [
    {"setWeight": 20},
    {"pause": {"seconds": 20}},
    {"setWeight": 50},
    {"setWeight": 100},
]


def run(rps: float, cost: float, steps: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """A canary of a version at ``cost`` x the stable's, at ``rps``: its WeightsChanged
    messages, and the canary's weight plan by plan."""
    spec = ServiceSpec(
        name="m",
        rollout=models.RolloutSpec.model_validate({"steps": steps, "drainSeconds": 5}),
        min_replicas=1,
        max_replicas=60,
    )
    decider = ServectlDecider(spec, registry.build("servectl", suite.autoscaling_config(SVC)))
    canary = model.ServiceModel(service_time_ms=SVC.service_time_ms * cost)
    scenario = scenario_mod.RolloutScenario(
        name="events",
        trace=traces.Trace("flat", np.full(300, rps)),
        revisions={1: scenario_mod.RevisionModel(1, SVC), 2: scenario_mod.RevisionModel(2, canary)},
        stable_version=1,
        events=(scenario_mod.Event(10.0, Op.START, 2),),
        service_name="m",
        min_replicas=1,
        max_replicas=60,
    )
    driven = run_world(scenario, decider)
    assert driven.result.phases[-1][1] == "Completed", driven.result.phases
    messages = [
        e.message for e in driven.backend.emitted if e.reason is EventReason.WEIGHTS_CHANGED
    ]
    weights = [
        next((r.weight for r in plan.revisions if r.name == "m-v2"), 0)
        for _, plan in driven.result.plans
    ]
    return messages, weights


def test_one_event_where_a_shift_begins_and_one_where_it_ends() -> None:
    messages, weights = run(300.0, 1.3, STEPS)
    # The canary needs several replicas a step: its weight moves over many cycles, as
    # each replica becomes ready (one event per revision per move, before).
    assert sum(1 for a, b in pairwise(weights) if a != b) >= 8, weights
    assert [m.split(": at ")[0] for m in messages] == [
        "m-v1 100 -> 80 %, m-v2 0 -> 20 % (step 0)",
        "m-v1 80 %, m-v2 20 % reached (step 0)",
        "m-v1 80 -> 50 %, m-v2 20 -> 50 % (step 2)",
        "m-v1 50 %, m-v2 50 % reached (step 2)",
        "m-v1 50 -> 0 %, m-v2 50 -> 100 % (step 3)",
        "m-v1 0 %, m-v2 100 % reached (step 3)",
    ], messages
    assert messages[2].endswith("now, the rest as ready replicas carry it"), messages


def test_a_shift_done_in_one_cycle_is_one_event() -> None:
    messages, _ = run(20.0, 1.0, STEPS)  # one replica carries any share at 20 req/s
    assert messages[2] == "m-v1 80 -> 50 %, m-v2 20 -> 50 % (step 2)", messages


def test_a_move_away_from_the_target_has_its_own_event_with_the_reason() -> None:
    # A canary at 0.3x the cost: the demand, in replicas of the old mix, reads as more
    # work once weight moved onto it, and the planner gives some back (docs/rollouts.md,
    # "The mix a demand is in").
    messages, weights = run(260.0, 0.3, [{"setWeight": 100}])
    assert any(b < a for a, b in pairwise(weights)), weights
    back = [m for m in messages if "away from m-v1 0 %, m-v2 100 %" in m]
    assert back and all("gave" in m and "back to m-v1" in m for m in back), messages
    assert len(messages) == 2 + len(back), messages
