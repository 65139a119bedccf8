"""A controller restarted from its saved state decides exactly as if it never stopped.

A restart here is what a crash and a new leader are in the cluster: the decider is
rebuilt from scratch (a new policy object, nothing in memory) and the loop state is
read back from its JSON form (``SimBackend(persist=True)`` writes it after every cycle
and reads it before the next). The world (the fleets, the routes, the requests) goes on.
The plan timeline (every cycle's plan, in order) must equal the uninterrupted run's:
for canary, A/B and blue/green rollouts, restarting at a random tick, and restarting at
every tick (so every mid-drain and mid-analysis point is a restart point).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.api import models
from servectl.autoscaling import registry
from servectl.backends.sim.run import run_world
from servectl.controller.decide import AnalysisNeed, Command, LoopState, Outcome, ServectlDecider
from servectl.controller.spec import ServiceSpec
from servectl.planning.types import Observed, Plan
from servectl.rollout.machine import Op
from servectl.sim import model, suite, traces
from servectl.sim import scenario as scenario_mod

SVC = suite.service()
SPECS: dict[str, dict[str, Any]] = {
    "canary": {
        "strategy": "canary",
        "steps": [
            {"setWeight": 20},
            {"analysis": {}},
            {"setWeight": 50},
            {"pause": {"seconds": 20}},
            {"setWeight": 100},
        ],
        "analysis": {
            "interval": "10s",
            "minSamples": 100,
            "checks": [{"metric": "errorRate", "max": 0.05}],
        },
        "drainSeconds": 20,
    },
    "abTest": {
        "strategy": "abTest",
        "abTest": {
            "match": {"header": {"name": "x-variant", "value": "b"}},
            "durationSeconds": 90,
            "winnerMetric": "latencyP99",
        },
        "analysis": {
            "interval": "15s",
            "minSamples": 50,
            "checks": [{"metric": "errorRate", "max": 0.05}],
        },
        "drainSeconds": 15,
    },
    "blueGreen": {
        "strategy": "blueGreen",
        "blueGreen": {"scaleDownDelaySeconds": 25, "autoPromote": True},
        "steps": [{"pause": {"seconds": 20}}],
        "drainSeconds": 10,
    },
}


def make_loop(strategy: str) -> ServectlDecider:
    return ServectlDecider(
        ServiceSpec(
            name="m",
            rollout=models.RolloutSpec.model_validate(SPECS[strategy]),
            min_replicas=1,
            max_replicas=40,
        ),
        registry.build("servectl", suite.autoscaling_config(SVC)),
    )


class Restarting:
    """servectl's loop, rebuilt from scratch at the ticks ``restart(now)`` says."""

    def __init__(self, make: Callable[[], ServectlDecider], restart: Callable[[float], bool]):
        self._make = make
        self._restart = restart
        self.inner = make()
        self.restarts = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def period_s(self) -> float:
        return self.inner.period_s

    def analysis(self, state: Any) -> AnalysisNeed | None:
        return self.inner.analysis(state)

    def initial_state(self, observed: Observed) -> LoopState:
        return self.inner.initial_state(observed)

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome:
        if self._restart(observed.time):
            self.inner = self._make()
            self.restarts += 1
        return self.inner.decide(observed, commands, state)


def scenario(
    strategy: str, rps: float, canary_cost: float, seconds: int, start: float
) -> scenario_mod.RolloutScenario:
    rates = np.full(seconds, rps)
    rates[seconds // 2 :] *= 1.6  # a load step mid-rollout: scaling and drains interleave
    canary = model.ServiceModel(service_time_ms=SVC.service_time_ms * canary_cost)
    return scenario_mod.RolloutScenario(
        name=f"restart-{strategy}",
        trace=traces.Trace("step", rates),
        revisions={
            1: scenario_mod.RevisionModel(1, SVC),
            2: scenario_mod.RevisionModel(2, canary),
        },
        stable_version=1,
        events=(scenario_mod.Event(start, Op.START, 2),),
        service_name="m",
        header_share=0.2 if strategy == "abTest" else 0.0,
        min_replicas=1,
        max_replicas=40,
    )


def timeline(plans: tuple[tuple[float, Plan], ...]) -> list[tuple[float, Plan]]:
    return list(plans)


def first_difference(a: list[tuple[float, Plan]], b: list[tuple[float, Plan]]) -> str:
    for (t, x), (_, y) in zip(a, b, strict=True):
        if x != y:
            return f"t={t}:\n  uninterrupted {x}\n  restarted     {y}"
    return "same"


def check(strategy: str, rps: float, cost: float, restart: Callable[[float], bool]) -> int:
    sc = scenario(strategy, rps, cost, 400, 20.0)
    plain = run_world(sc, make_loop(strategy))
    decider = Restarting(lambda: make_loop(strategy), restart)
    restarted = run_world(sc, decider, persist=True)
    a, b = timeline(plain.result.plans), timeline(restarted.result.plans)
    assert a == b, first_difference(a, b)
    assert plain.result.phases == restarted.result.phases
    return decider.restarts


def test_restarting_at_every_tick_changes_nothing_for_every_strategy() -> None:
    for strategy in SPECS:
        sc = scenario(strategy, 150.0, 1.5, 400, 20.0)
        plain = run_world(sc, make_loop(strategy), record_cycles=True)
        states = [c.outcome.state for c in plain.cycles]
        # The run has drains and analyses to restart in the middle of.
        assert any(
            any(
                c.time < at + s.planner.hold_s.get(n, 0.0) for n, at in s.planner.lowered_at.items()
            )
            for c, s in zip(plain.cycles, states, strict=True)
        ), strategy
        if strategy != "blueGreen":  # its preview gets no traffic to analyse here
            assert any(s.rollout.next_check is not None for s in states), strategy
        assert plain.result.phases[-1][1] == "Completed", (strategy, plain.result.phases)
        assert check(strategy, 150.0, 1.5, lambda _now: True) == len(plain.cycles)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=st.sampled_from(sorted(SPECS)),
    rps=st.sampled_from([40.0, 150.0, 400.0]),
    cost=st.sampled_from([0.5, 1.0, 2.0]),
    at=st.integers(1, 398),  # the last cycle of the 400 s run is at t = 398 (2 s period)
)
def test_restarting_at_a_random_tick_changes_nothing(
    strategy: str, rps: float, cost: float, at: int
) -> None:
    done: list[bool] = []

    def once(now: float) -> bool:
        if now >= at and not done:
            done.append(True)
            return True
        return False

    assert check(strategy, rps, cost, once) == 1
