"""One simulated canary rollout under a load step, cycle by cycle: what the loop-state and
explain-record tests read (drains, analyses, holds, measured costs)."""

from __future__ import annotations

from functools import cache

from servectl.backends.sim import rollout_bench
from servectl.backends.sim.run import run_world
from servectl.controller.reconcile import Cycle
from servectl.sim import suite, traces


@cache
def canary_under_a_step() -> tuple[Cycle, ...]:
    """Every cycle of the rollout bench's canary on the first 25 minutes of step."""
    svc = suite.service()
    trace = traces.truncate(next(t for t in traces.standard_suite(0) if t.name == "step"), 1500)
    scenario = rollout_bench.scenario_for(trace, svc, with_rollout=True)
    decider = rollout_bench.controller_factories(svc, rollout_bench.bench_rollout_spec())[
        "servectl"
    ](scenario)
    driven = run_world(scenario, decider, record_cycles=True, record_plans=False)
    return tuple(driven.cycles)
