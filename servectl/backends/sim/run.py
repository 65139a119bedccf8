"""Driving the simulated world with the controller loop: every simulator entry point.

:func:`simulate_rollout` runs a scenario (several revisions, user commands) with any
:class:`~servectl.controller.backend.Decider`: servectl's loop or an emulated peer.
:func:`simulate` is the single-revision run behind ``servectl simulate`` and ``bench``:
the same world with one revision, driven by servectl's loop around the given policy.
Either way each controller tick is exactly one
:func:`~servectl.controller.reconcile.reconcile_once` against a :class:`SimBackend`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servectl.autoscaling import config as config_mod
from servectl.autoscaling import policy as policy_mod
from servectl.backends.sim.backend import SimBackend
from servectl.controller.backend import Decider
from servectl.controller.decide import ServectlDecider
from servectl.controller.reconcile import Cycle, reconcile_once
from servectl.controller.spec import ServiceSpec
from servectl.planning.types import Plan
from servectl.sim import model, results, traces
from servectl.sim import pipeline as pipeline_mod
from servectl.sim import scenario as scenario_mod
from servectl.sim.world import RolloutSimResult, World, check_scenario

_EPS = 1e-9
SERVICE = "model"
"""The service name of single-revision runs (its revision is ``model-v1``)."""

OnCycle = Callable[[Cycle, SimBackend], None]
"""Called after every cycle (tests record, or restart the loop from its saved state)."""


@dataclass(frozen=True)
class Driven:
    """A run's result and the backend it ran against (its status, events, cycles)."""

    result: RolloutSimResult
    backend: SimBackend
    cycles: tuple[Cycle, ...]


def run_world(
    scenario: scenario_mod.RolloutScenario,
    decider: Decider,
    *,
    seed: int = 0,
    pipeline: pipeline_mod.PipelineConfig | None = None,
    record_plans: bool = True,
    record_cycles: bool = False,
    persist: bool = False,
    on_cycle: OnCycle | None = None,
) -> Driven:
    """Simulate ``decider`` sizing and weighting the revisions of ``scenario``.

    Raises ValueError for an inconsistent scenario or a plan that cannot be applied
    (weights not summing to 100, a version the scenario does not define, ...).
    """
    config = pipeline if pipeline is not None else pipeline_mod.PipelineConfig()
    check_scenario(scenario)
    period_s = float(decider.period_s)
    if not period_s > 0:
        raise ValueError(f"controller {decider.name!r}: period_s must be > 0, got {period_s}")
    world = World(scenario, config, seed)
    backend = SimBackend(world, scenario.events, persist=persist, keep_history=record_cycles)
    phases: list[tuple[float, str]] = []
    plans: list[tuple[float, Plan]] = []
    cycles: list[Cycle] = []
    next_tick = 0.0
    for t in range(world.duration):
        world.begin(t)
        if t + _EPS >= next_tick:
            now = float(t)
            cycle = reconcile_once(backend, decider, now)
            plan = cycle.outcome.plan
            if not phases or phases[-1][1] != plan.phase:
                phases.append((now, plan.phase))
            if record_plans:
                plans.append((now, plan))
            if record_cycles:
                cycles.append(cycle)
            if on_cycle is not None:
                on_cycle(cycle, backend)
            while next_tick <= t + _EPS:
                next_tick += period_s
        world.end(t)
    result = world.result(
        decider.name,
        seed,
        phases=tuple(phases),
        plans=tuple(plans),
        starts=tuple(backend.starts),
    )
    return Driven(result=result, backend=backend, cycles=tuple(cycles))


def simulate_rollout(
    scenario: scenario_mod.RolloutScenario,
    decider: Decider,
    *,
    seed: int = 0,
    pipeline: pipeline_mod.PipelineConfig | None = None,
    record_plans: bool = True,
) -> RolloutSimResult:
    """:func:`run_world`'s result alone."""
    return run_world(
        scenario, decider, seed=seed, pipeline=pipeline, record_plans=record_plans
    ).result


def single_revision_scenario(
    trace: traces.Trace,
    service: model.ServiceModel,
    *,
    min_replicas: int = 1,
    max_replicas: int = 100,
    initial_replicas: int | None = None,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    standby: int = 0,
) -> scenario_mod.RolloutScenario:
    return scenario_mod.RolloutScenario(
        name=trace.name,
        trace=trace,
        revisions={1: scenario_mod.RevisionModel(1, service)},
        stable_version=1,
        service_name=SERVICE,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        initial_replicas=initial_replicas,
        routing=routing,
        standby=standby,
    )


def simulate(
    trace: traces.Trace,
    policy: policy_mod.Policy,
    service: model.ServiceModel | None = None,
    *,
    min_replicas: int = 1,
    max_replicas: int = 100,
    initial_replicas: int | None = None,
    seed: int = 0,
    pipeline: pipeline_mod.PipelineConfig | None = None,
    record_decisions: bool = True,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    mode: config_mod.Mode = config_mod.Mode.ACTIVE,
    standby: int = 0,
) -> results.SimResult:
    """Simulate ``policy`` serving ``trace`` on one revision; ``service`` defaults to
    ``ServiceModel()`` and ``pipeline`` to ``PipelineConfig()``. ``standby``: warm standby
    replicas kept beside the serving ones (docs/standby.md)."""
    service = service if service is not None else model.ServiceModel()
    scenario = single_revision_scenario(
        trace,
        service,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        initial_replicas=initial_replicas,
        routing=routing,
        standby=standby,
    )
    check_scenario(scenario)
    period_s = float(policy.period_s)
    if not period_s > 0:
        raise ValueError(f"policy {policy.name!r}: period_s must be > 0, got {period_s}")
    spec = ServiceSpec(
        name=SERVICE,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        mode=mode,
        standby=standby,
    )
    decider = ServectlDecider(spec, policy, name=policy.name)
    decisions: list[results.DecisionRecord] = []
    directions: list[int] = []
    applied: list[int] = []

    def record(cycle: Cycle, backend: SimBackend) -> None:
        del backend
        outcome = cycle.outcome
        before = applied[-1] if applied else sum(r.desired for r in cycle.observed.revisions)
        replicas = sum(r.replicas for r in outcome.plan.revisions) if cycle.applied else before
        if replicas != before:
            directions.append(1 if replicas > before else -1)
        applied.append(replicas)
        if record_decisions:
            decisions.append(
                results.DecisionRecord(
                    time=cycle.time,
                    replicas=replicas,
                    requested=outcome.requested if outcome.requested is not None else replicas,
                    reason=outcome.reason,
                    signal=outcome.decided_by,
                )
            )

    run = run_world(
        scenario, decider, seed=seed, pipeline=pipeline, record_plans=False, on_cycle=record
    ).result
    desired = np.zeros(run.duration_s, dtype=np.int64)
    for timeline in run.revisions.values():
        desired += timeline.desired
    offered = np.asarray(trace.rps, dtype=np.float64)
    change_at = results.largest_rise(offered)
    recovery = (
        None if change_at is None else results.recovery_s(run.p99_ms, service.slo_ms, change_at)
    )
    return results.SimResult(
        trace=trace.name,
        policy=policy.name,
        seed=seed,
        service=service,
        t=run.t,
        offered_rps=offered,
        arrivals=run.arrivals,
        ready=run.total_ready,
        desired=desired,
        replicas=run.total_replicas,
        p99_ms=run.p99_ms,
        slo_met=run.slo_met,
        mean_ms=run.mean_ms,
        cpu_cores=run.cpu_cores,
        decisions=tuple(decisions),
        requests=run.requests,
        met_slo=run.met_slo,
        failed=run.failed,
        replica_seconds=run.replica_seconds,
        scale_actions=len(directions),
        direction_reversals=results.reversals(directions),
        recovery_s=recovery,
        change_at_s=change_at,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        standby_seconds=run.standby_seconds,
        parked_seconds=run.parked_seconds,
    )
