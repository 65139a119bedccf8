"""``reconcile_once``: one cycle of observe -> decide -> act, for every backend.

One ``now`` per cycle, one status write per cycle. In ``mode: recommend`` the decider
decides and the status and events record what would have been done, but nothing is
applied: not the autoscaler's count, not a weight, not a rollout step, whoever decides
(servectl's engine, the hpa and kpa baselines, or the planner alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from servectl.api import models
from servectl.controller import status as status_mod
from servectl.controller.backend import Backend, Decider, Event
from servectl.controller.decide import Command, Outcome
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
    applied = outcome.applied
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
