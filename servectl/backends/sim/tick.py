"""A decider written as ``tick(observed, commands) -> Plan`` with its state in itself.

The emulated peers are such deciders, and so are the scripted ones tests write: this
base gives them the rest of :class:`servectl.controller.backend.Decider` (always active,
nothing persisted), so ``reconcile_once`` drives them like servectl's own loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servectl.controller.decide import Command, Outcome
from servectl.planning.types import Observed, Plan


class TickDecider:
    """Always active (no recommend mode), its state in itself, no custom analysis."""

    def analysis(self, state: Any) -> None:
        """Its checks, if any, read the observed signals: nothing more to measure."""
        del state

    def initial_state(self, observed: Observed) -> None:
        """Its state lives in the object (an emulation, not persisted)."""
        del observed

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome:
        """One tick as a :class:`~servectl.controller.backend.Decider`."""
        del state
        plan = self.tick(observed, commands)
        return Outcome(
            plan=plan,
            state=None,
            demand=sum(r.replicas for r in plan.revisions),
            decided_by=None,
            reason=plan.message,
        )

    def tick(self, observed: Observed, commands: Sequence[Command]) -> Plan:
        raise NotImplementedError
