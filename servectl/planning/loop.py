"""One reconcile cycle's decision, pure: autoscaler -> rollout -> planner (DESIGN §2).

Every backend runs the same :func:`decide`: the simulator (``servectl.sim``), the local
runtime and the Kubernetes controller differ only in how they build the
:class:`~servectl.planning.types.Observed` and apply the :class:`Plan`. The whole state
is a value (:class:`LoopState`, with a JSON form) kept in the ModelService status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servectl.api import models
from servectl.autoscaling import policy as policy_mod
from servectl.autoscaling import snapshot
from servectl.planning import planner
from servectl.planning.types import Observed, Plan
from servectl.rollout import machine

DEFAULT_SURGE = 0.25
"""Surge budget without ``surgeBudget``: this share of the demand (Deployment maxSurge)."""


@dataclass(frozen=True)
class Command:
    """A user's rollout operation, delivered to the next cycle."""

    op: machine.Op
    version: int | None = None


@dataclass(frozen=True)
class ServiceSpec:
    """What the loop needs of a ModelService."""

    name: str
    rollout: models.RolloutSpec = field(default_factory=models.RolloutSpec)
    min_replicas: int = 1
    max_replicas: int = 100
    gpus_per_replica: int = 0

    def revision_name(self, version: int) -> str:
        return f"{self.name}-v{version}"

    def surge_replicas(self, demand: int) -> int | None:
        """The surge budget in replicas (the tighter of its replicas and gpus bounds).

        Omitted: a quarter of the current demand (at least one replica), like a
        Deployment's default maxSurge of 25 %, so a rollout never doubles the fleet.
        Blue/green holds a full second fleet by design and has no budget.
        """
        budget = self.rollout.surge_budget
        if self.rollout.strategy is models.RolloutStrategy.BLUE_GREEN:
            return None
        if budget is None:
            return max(1, math.ceil(demand * DEFAULT_SURGE))
        bounds = []
        if budget.replicas is not None:
            bounds.append(budget.replicas)
        if budget.gpus is not None and self.gpus_per_replica > 0:
            bounds.append(budget.gpus // self.gpus_per_replica)
        return min(bounds) if bounds else None


@dataclass(frozen=True)
class LoopState:
    rollout: machine.RolloutState
    planner: planner.PlannerState
    policy: Any
    demand: int


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    state: LoopState
    demand: int
    decided_by: str | None
    reason: str
    errors: tuple[str, ...] = ()  # refused commands, with the fix


def initial_state(stable_version: int, policy: policy_mod.Policy, replicas: int) -> LoopState:
    return LoopState(
        rollout=machine.initial(stable_version),
        planner=planner.PlannerState(),
        policy=policy.initial_state(),
        demand=replicas,
    )


def _versions(observed: Observed, spec: ServiceSpec) -> dict[str, int]:
    return {r.name: r.version for r in observed.revisions}


def decide(
    observed: Observed,
    commands: Sequence[Command],
    state: LoopState,
    *,
    policy: policy_mod.Policy,
    spec: ServiceSpec,
) -> Outcome:
    now = observed.time
    errors: list[str] = []
    rollout_state = state.rollout
    for cmd in commands:
        try:
            rollout_state = machine.command(
                rollout_state, cmd.op, spec.rollout, now, version=cmd.version
            )
        except machine.RolloutError as exc:
            errors.append(f"{cmd.op}: {exc}")

    # Autoscaler: the total demand, in replicas of the current traffic mix.
    serving = [r for r in observed.revisions if r.weight > 0 or r.name == observed.header_revision]
    ready = sum(r.ready for r in serving)
    canary_weight = 0
    if rollout_state.canary is not None:
        canary_rev = observed.revision(spec.revision_name(rollout_state.canary))
        canary_weight = canary_rev.weight if canary_rev is not None else 0
    snap = replace(
        observed.service,
        replicas=snapshot.Replicas(
            current=state.demand, ready=ready, min=spec.min_replicas, max=spec.max_replicas
        ),
        rollout=snapshot.RolloutInfo(
            phase=str(rollout_state.phase), step=rollout_state.step, canary_weight=canary_weight
        ),
    )
    decision, policy_state = policy.decide(snap, state.policy)
    demand = min(max(int(decision.replicas), spec.min_replicas, 1), spec.max_replicas)

    by_name = _versions(observed, spec)
    view = machine.View(
        now=now,
        weights={v: r.weight for r in observed.revisions for v in [by_name[r.name]]},
        header=by_name.get(observed.header_revision) if observed.header_revision else None,
        ready={by_name[r.name]: r.ready for r in observed.revisions},
        needed={
            v: state.planner.replicas.get(spec.revision_name(v), 0)
            for v in {rollout_state.stable, rollout_state.canary}
            if v is not None
        },
        available={by_name[r.name]: r.available for r in observed.revisions},
        counters={
            by_name[r.name]: r.counters for r in observed.revisions if r.counters is not None
        },
        bounds_us=observed.latency_bounds_us,
        metrics_ok=observed.metrics_ok,
    )
    rollout_state, intent = machine.advance(rollout_state, spec.rollout, view)

    names: dict[int, str] = {v: spec.revision_name(v) for v in by_name.values()}
    for version in (intent.stable, intent.canary, *intent.weights):
        if version is not None:
            names[version] = spec.revision_name(version)
    new_plan, planner_state = planner.plan(
        intent,
        observed,
        demand,
        state.planner,
        names,
        planner.Limits(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            surge_replicas=spec.surge_replicas(demand),
        ),
    )
    if errors:
        new_plan = replace(new_plan, events=new_plan.events + tuple(errors))
    return Outcome(
        plan=new_plan,
        state=LoopState(
            rollout=rollout_state, planner=planner_state, policy=policy_state, demand=demand
        ),
        demand=demand,
        decided_by=decision.signal,
        reason=str(decision.reason),
        errors=tuple(errors),
    )


def versions_of(plan: Plan) -> Mapping[str, int]:
    return {r.name: r.version for r in plan.revisions}
