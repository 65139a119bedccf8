"""servectl's own coordination loop as a simulator controller.

A thin adapter: it keeps the :class:`~servectl.planning.loop.LoopState` between ticks,
turns the simulator's events into rollout commands and calls the same pure
:func:`~servectl.planning.loop.decide` every backend runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servectl.autoscaling import policy as policy_mod
from servectl.planning import loop
from servectl.planning.types import Observed, Plan
from servectl.rollout import machine
from servectl.sim import control


@dataclass(frozen=True)
class TickRecord:
    time: float
    demand: int
    decided_by: str | None
    reason: str
    errors: tuple[str, ...]


class ServectlController:
    """The coordination loop (autoscaler + rollout + planner) driving the simulator."""

    def __init__(
        self,
        spec: loop.ServiceSpec,
        policy: policy_mod.Policy,
        stable_version: int,
        initial_replicas: int,
        *,
        name: str = "servectl",
    ) -> None:
        self._spec = spec
        self._policy = policy
        self._name = name
        self.state = loop.initial_state(stable_version, policy, initial_replicas)
        self.ticks: list[TickRecord] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def period_s(self) -> float:
        return float(self._policy.period_s)

    def tick(self, observed: Observed, events: Sequence[control.Event]) -> Plan:
        commands = [loop.Command(machine.Op(str(e.op)), e.version) for e in events]
        outcome = loop.decide(observed, commands, self.state, policy=self._policy, spec=self._spec)
        self.state = outcome.state
        self.ticks.append(
            TickRecord(
                time=observed.time,
                demand=outcome.demand,
                decided_by=outcome.decided_by,
                reason=outcome.reason,
                errors=outcome.errors,
            )
        )
        return outcome.plan
