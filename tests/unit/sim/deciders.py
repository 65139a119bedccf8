"""A base for hand-written test deciders: implement ``tick(observed, commands) -> Plan``.

It gives them the rest of :class:`servectl.controller.backend.Decider` (always active, no
persisted state), so a test can script plans and run them through ``reconcile_once``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servectl.autoscaling import config
from servectl.controller.decide import Command, Outcome
from servectl.planning.types import Observed, Plan


class TickDecider:
    @property
    def mode(self) -> config.Mode:
        return config.Mode.ACTIVE

    def initial_state(self, observed: Observed) -> None:
        del observed

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome:
        del state
        plan = self.tick(observed, commands)
        return Outcome(
            plan=plan,
            state=None,
            demand=sum(r.replicas for r in plan.revisions),
            decided_by=None,
            reason="scripted",
        )

    def tick(self, observed: Observed, commands: Sequence[Command]) -> Plan:
        raise NotImplementedError
