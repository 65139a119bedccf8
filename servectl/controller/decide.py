"""One reconcile cycle's decision, pure: autoscaler -> rollout -> planner (DESIGN §2).

Every backend runs the same :func:`decide`: the simulator, the local runtime and the
Kubernetes controller differ only in how they build the
:class:`~servectl.planning.types.Observed` and apply the :class:`Plan`. The whole state
is a value (:class:`LoopState`; its JSON form is :mod:`servectl.controller.state`) that a
backend keeps in the ModelService status or its store.

``mode: recommend`` (:attr:`ServiceSpec.mode`): the policy is asked with the replicas that
really run, and the outcome says what would be done; :func:`reconcile_once
<servectl.controller.reconcile.reconcile_once>` then records it and applies nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servectl.api import models
from servectl.autoscaling import config, snapshot
from servectl.autoscaling import policy as policy_mod
from servectl.autoscaling.decision import Decision, Reason
from servectl.controller.spec import ServiceSpec, analysis_checks
from servectl.planning import planner
from servectl.planning.types import Observed, Plan, RevisionNames
from servectl.rollout import machine

__all__ = [
    "AnalysisNeed",
    "Command",
    "CommandResult",
    "LoopState",
    "Outcome",
    "ServectlDecider",
    "decide",
    "initial_state",
]


@dataclass(frozen=True)
class Command:
    """A user's rollout operation, delivered to the next cycle."""

    op: machine.Op
    version: int | None = None  # for START
    id: str | None = None  # the backend's name for it, to say what became of it


@dataclass(frozen=True)
class CommandResult:
    """What became of one command this cycle: carried out (``error`` None) or refused."""

    command: Command
    error: str | None = None


@dataclass(frozen=True)
class AnalysisNeed:
    """The custom PromQL checks a decider's rollout analysis needs measured this tick, for
    the canary ``revision`` and the ``stable`` one."""

    revision: str
    stable: str | None
    checks: tuple[models.AnalysisCheck, ...]


@dataclass(frozen=True)
class LoopState:
    """Everything the loop carries from one cycle to the next."""

    rollout: machine.RolloutState
    planner: planner.PlannerState
    policy: policy_mod.State
    demand: int


@dataclass(frozen=True)
class Outcome:
    """One cycle's decision and what led to it.

    ``plan`` is what to apply; ``state`` the decider's state for the next cycle (a
    :class:`LoopState` for servectl's loop; emulated peers keep theirs and give None).
    ``intent``, ``names`` and ``limits`` are what the planner was given, so status, tests
    and ``servectl explain`` can show why without re-running anything.
    """

    plan: Plan
    state: Any
    demand: int  # total replicas wanted (the autoscaler's, clamped to the spec's bounds)
    decided_by: str | None
    reason: str
    errors: tuple[str, ...] = ()  # refused commands, with the fix
    commands: tuple[CommandResult, ...] = ()  # each command's result, in the order given
    requested: int | None = None  # what the policy asked for, before the bounds
    decision: Decision | None = None
    intent: machine.Intent | None = None
    names: RevisionNames | None = None
    limits: planner.Limits | None = None
    planner_before: planner.PlannerState | None = None
    applied: bool = True  # False in mode: recommend: the loop records the plan, never acts


def initial_state(stable_version: int, policy: policy_mod.Policy, replicas: int) -> LoopState:
    return LoopState(
        rollout=machine.initial(stable_version),
        planner=planner.PlannerState(),
        policy=policy.initial_state(),
        demand=replicas,
    )


def _wanted(decision: Decision) -> int:
    """What the policy wants: the engine in recommend mode keeps the current count and
    puts its recommendation aside; the loop needs the recommendation."""
    if decision.reason is Reason.RECOMMEND_ONLY and decision.recommended is not None:
        return int(decision.recommended)
    return int(decision.replicas)


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
    results: list[CommandResult] = []
    rollout_state = state.rollout
    for cmd in commands:
        try:
            rollout_state = machine.command(
                rollout_state, cmd.op, spec.rollout, now, version=cmd.version
            )
        except machine.RolloutError as exc:
            errors.append(f"{cmd.op}: {exc}")
            results.append(CommandResult(cmd, errors[-1]))
        else:
            results.append(CommandResult(cmd))

    # Autoscaler: the total demand, in replicas of the current traffic mix.
    serving = [r for r in observed.revisions if r.weight > 0 or r.name == observed.header_revision]
    ready = sum(r.ready for r in serving)
    canary_weight = 0
    if rollout_state.canary is not None:
        canary_rev = observed.revision(spec.revision_name(rollout_state.canary))
        canary_weight = canary_rev.weight if canary_rev is not None else 0
    recommend = spec.mode is config.Mode.RECOMMEND
    # Recommend mode applies nothing, so the policy is told what really runs.
    current = sum(r.desired for r in serving) if recommend else state.demand
    snap = replace(
        observed.service,
        replicas=snapshot.Replicas(
            current=current, ready=ready, min=spec.min_replicas, max=spec.max_replicas
        ),
        rollout=snapshot.RolloutInfo(
            phase=str(rollout_state.phase), step=rollout_state.step, canary_weight=canary_weight
        ),
    )
    decision, policy_state = policy.decide(snap, state.policy)
    requested = _wanted(decision)
    demand = min(max(requested, spec.min_replicas, 1), spec.max_replicas)

    # The rollout machine speaks versions (each observed revision carries its own).
    header = observed.revision(observed.header_revision) if observed.header_revision else None
    view = machine.View(
        now=now,
        weights={r.version: r.weight for r in observed.revisions},
        header=header.version if header is not None else None,
        ready={r.version: r.ready for r in observed.revisions},
        needed={
            v: state.planner.replicas.get(spec.revision_name(v), 0)
            for v in {rollout_state.stable, rollout_state.canary}
            if v is not None
        },
        available={r.version: r.available for r in observed.revisions},
        counters={r.version: r.counters for r in observed.revisions if r.counters is not None},
        bounds_us=observed.latency_bounds_us,
        metrics_ok=observed.metrics_ok,
        custom=dict(observed.custom),
    )
    rollout_state, intent = machine.advance(rollout_state, spec.rollout, view)

    # The planner speaks names: every revision of the cycle, keyed once.
    versions = {r.version for r in observed.revisions}
    versions |= {v for v in (intent.stable, intent.canary, *intent.weights) if v is not None}
    names = RevisionNames({v: spec.revision_name(v) for v in sorted(versions)})
    limits = planner.Limits(
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        surge_replicas=spec.surge_replicas(demand),
        standby=spec.standby,
    )
    new_plan, planner_state = planner.plan(intent, observed, demand, state.planner, names, limits)
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
        commands=tuple(results),
        requested=requested,
        decision=decision,
        intent=intent,
        names=names,
        limits=limits,
        planner_before=state.planner,
        applied=not recommend,
    )


class ServectlDecider:
    """servectl's decider: its autoscaling policy, the rollout machine and the planner
    around :func:`decide` (a :class:`~servectl.controller.backend.Decider`)."""

    def __init__(
        self, spec: ServiceSpec, policy: policy_mod.Policy, *, name: str = "servectl"
    ) -> None:
        self.spec = spec
        self.policy = policy
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def period_s(self) -> float:
        return float(self.policy.period_s)

    def initial_state(self, observed: Observed) -> LoopState:
        """A first start: the revision with the most traffic is stable, at its size."""
        if not observed.revisions:
            raise ValueError(f"{self.spec.name}: no revision to start from")
        stable = max(observed.revisions, key=lambda r: (r.weight, r.desired, r.version))
        replicas = sum(r.desired for r in observed.revisions) or self.spec.min_replicas
        return initial_state(stable.version, self.policy, replicas)

    def analysis(self, state: Any) -> AnalysisNeed | None:
        """The rollout's custom PromQL checks, for the canary and the stable revision, while
        a canary runs (the built-in checks need only the tick's signals)."""
        if not isinstance(state, LoopState) or state.rollout.canary is None:
            return None
        checks = tuple(c for c in analysis_checks(self.spec.rollout) if c.query is not None)
        if not checks:
            return None
        stable = state.rollout.stable
        return AnalysisNeed(
            revision=self.spec.revision_name(state.rollout.canary),
            stable=None if stable is None else self.spec.revision_name(stable),
            checks=checks,
        )

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome:
        if not isinstance(state, LoopState):
            raise TypeError(f"servectl's loop needs a LoopState, got {type(state).__name__}")
        return decide(observed, commands, state, policy=self.policy, spec=self.spec)
