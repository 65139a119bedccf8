"""``reconcile_once``: one cycle of observe -> decide -> act, for every backend.

One ``now`` per cycle, one status write per cycle. In ``mode: recommend`` the decider
decides and the status and events record what would have been done, but nothing is
applied: not the autoscaler's count, not a weight, not a rollout step, whoever decides
(servectl's engine, the hpa and kpa baselines, or the planner alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servectl.api import models
from servectl.autoscaling import config
from servectl.autoscaling import policy as policy_mod
from servectl.controller import status as status_mod
from servectl.controller.backend import Backend, Decider, Event
from servectl.controller.decide import Command, LoopState, Outcome, decide, initial_state
from servectl.controller.spec import ServiceSpec
from servectl.planning.types import Observed


@dataclass(frozen=True)
class Cycle:
    """What one cycle saw, decided and did."""

    time: float
    observed: Observed
    commands: tuple[Command, ...]
    outcome: Outcome
    applied: bool  # False in mode: recommend
    status: models.ModelServiceStatus
    events: tuple[Event, ...]


class ServectlLoop:
    """servectl's decider: its autoscaling policy, the rollout machine and the planner."""

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

    @property
    def mode(self) -> config.Mode:
        return self.spec.mode

    def initial_state(self, observed: Observed) -> LoopState:
        """A first start: the revision with the most traffic is stable, at its size."""
        if not observed.revisions:
            raise ValueError(f"{self.spec.name}: no revision to start from")
        stable = max(observed.revisions, key=lambda r: (r.weight, r.desired, r.version))
        replicas = sum(r.desired for r in observed.revisions) or self.spec.min_replicas
        return initial_state(stable.version, self.policy, replicas)

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome:
        if not isinstance(state, LoopState):
            raise TypeError(f"servectl's loop needs a LoopState, got {type(state).__name__}")
        return decide(observed, commands, state, policy=self.policy, spec=self.spec)


def reconcile_once(backend: Backend, decider: Decider, now: float) -> Cycle:
    """Observe, decide, act, record: one cycle at ``now``."""
    observed = backend.observe(now)
    if observed.time != now:
        raise ValueError(f"backend observed at {observed.time}, the cycle is at {now}")
    commands = tuple(backend.commands(now))
    state = backend.load_state()
    if state is None:
        state = decider.initial_state(observed)
    outcome = decider.decide(observed, commands, state)
    applied = decider.mode is not config.Mode.RECOMMEND
    if applied:
        backend.apply(outcome.plan, now)
    backend.save_state(outcome.state)
    status, events = status_mod.build(
        observed, outcome, backend.load_status(), now=now, applied=applied
    )
    backend.write_status(status)
    backend.emit(events)
    return Cycle(
        time=now,
        observed=observed,
        commands=commands,
        outcome=outcome,
        applied=applied,
        status=status,
        events=tuple(events),
    )
