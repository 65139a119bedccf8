"""``mode: recommend`` in the simulator: nothing moves, status says what would have.

For servectl's engine and the hpa and kpa baselines alike, with a rollout started in the
middle of a load step: replicas and weights stay exactly as they were, while the status
written every cycle records the count the policy wanted, the rollout's progress, and
events saying what would have been done.
"""

from __future__ import annotations

import numpy as np
import pytest

from servectl.api import models
from servectl.autoscaling import config, registry
from servectl.backends.sim import rollout_bench
from servectl.backends.sim.run import run_world
from servectl.controller.backend import EventReason
from servectl.controller.decide import ServectlDecider
from servectl.controller.spec import ServiceSpec
from servectl.controller.status import ConditionReason
from servectl.rollout.machine import Op
from servectl.sim import scenario as scenario_mod
from servectl.sim import suite, traces

SVC = suite.service()
POLICIES = {
    "servectl": lambda: registry.build("servectl", suite.autoscaling_config(SVC)),
    "hpa": lambda: registry.build("hpa", suite.autoscaling_config(SVC, latency=False)),
    "kpa": lambda: registry.build("kpa", suite.kpa_config(SVC)),
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_recommend_mode_moves_nothing_and_records_why(policy: str) -> None:
    rates = np.full(600, 150.0)
    rates[200:] = 450.0  # a step: every policy wants more replicas
    scenario = scenario_mod.RolloutScenario(
        name="recommend",
        trace=traces.Trace("step", rates),
        revisions={1: scenario_mod.RevisionModel(1, SVC), 2: scenario_mod.RevisionModel(2, SVC)},
        stable_version=1,
        events=(scenario_mod.Event(100.0, Op.START, 2),),
        service_name="model",
        min_replicas=1,
        max_replicas=60,
    )
    spec = ServiceSpec(
        name="model",
        rollout=rollout_bench.bench_rollout_spec(),
        min_replicas=1,
        max_replicas=60,
        mode=config.Mode.RECOMMEND,
    )
    driven = run_world(scenario, ServectlDecider(spec, POLICIES[policy]()), record_cycles=True)
    result = driven.result

    # Nothing moved: one revision, its size and weight as at t = 0, every second.
    assert list(result.revisions) == ["model-v1"]
    v1 = result.revisions["model-v1"]
    assert (v1.desired == v1.desired[0]).all() and (v1.weight == 100).all()
    running = int(v1.desired[0])

    # What it would have done, and why, in the status of every cycle.
    statuses = [status for _, status in driven.backend.statuses]
    assert len(statuses) == len(driven.cycles)  # one status write per cycle
    wanted = [s.autoscaling.desired_replicas for s in statuses if s.autoscaling]
    assert max(wanted[-50:]) > running, (running, wanted[-50:])
    last = statuses[-1]
    assert last.autoscaling is not None and last.autoscaling.message is not None
    assert last.autoscaling.message.startswith("recommend mode, not applied")
    assert last.rollout is not None and last.rollout.phase is models.RolloutPhase.PROGRESSING
    assert last.rollout.canary_version == 2
    v2 = next(r for r in last.revisions if r.name == "model-v2")
    assert v2.desired_replicas > 0 and v2.ready_replicas == 0 and v2.weight == 0
    limited = last.condition(models.ConditionType.SCALING_LIMITED)
    assert limited is not None and limited.reason == ConditionReason.RECOMMEND_ONLY
    recommended = [e for e in driven.backend.emitted if e.reason is EventReason.RECOMMENDED]
    assert any("model-v2" in e.message for e in recommended)
    assert not any(e.reason is EventReason.SCALED for e in driven.backend.emitted)
