"""The simulated world as a :class:`~servectl.controller.backend.Backend`.

:class:`SimBackend` lets ``reconcile_once`` observe a :class:`~servectl.sim.world.World`,
hands it the scenario's user commands when they are due, and applies plans to it
exactly and at once. It keeps the decider's state, the status and the events the way a
real backend keeps them in the ModelService status: with ``persist=True`` servectl's loop
state goes through its JSON form (:mod:`servectl.controller.state`) between every two
cycles, as it would through the Kubernetes API or the local store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servectl.api import models
from servectl.controller import state as state_codec
from servectl.controller.backend import Event
from servectl.controller.decide import Command, LoopState
from servectl.planning.types import Observed, Plan
from servectl.rollout.machine import Op
from servectl.sim import scenario as scenario_mod
from servectl.sim.world import World


class SimBackend:
    """One simulated ModelService: its world, pending commands, state, status, events."""

    def __init__(
        self,
        world: World,
        events: Sequence[scenario_mod.Event] = (),
        *,
        persist: bool = False,
        keep_history: bool = False,
    ) -> None:
        self.world = world
        self._events = sorted(events, key=lambda event: event.time)
        self._next_event = 0
        self.persist = persist
        self._state: Any = None
        self._saved: str | None = None
        self._status: models.ModelServiceStatus | None = None
        self.keep_history = keep_history
        self.statuses: list[tuple[float, models.ModelServiceStatus]] = []
        self.emitted: list[Event] = []
        self.starts: list[float] = []  # times of the START commands delivered
        self._now = 0.0

    # ------------------------------------------------------------------ Backend

    def observe(self, now: float) -> Observed:
        self._now = now
        return self.world.observe(now)

    def commands(self, now: float) -> list[Command]:
        due: list[Command] = []
        events = self._events
        while self._next_event < len(events) and events[self._next_event].time <= now + 1e-9:
            event = events[self._next_event]
            self._next_event += 1
            if event.op is Op.START:
                self.starts.append(event.time)
            due.append(Command(event.op, event.version))
        return due

    def apply(self, plan: Plan, now: float) -> None:
        self.world.apply(now, plan)
        self.world.kill_due(int(now))

    def load_state(self) -> Any:
        if self._saved is not None:
            return state_codec.loads(self._saved)
        return self._state

    def save_state(self, state: Any) -> None:
        if self.persist and isinstance(state, LoopState):
            self._saved = state_codec.dumps(state)
            self._state = None
        else:
            self._saved = None
            self._state = state

    def load_status(self) -> models.ModelServiceStatus | None:
        return self._status

    def write_status(self, status: models.ModelServiceStatus) -> None:
        self._status = status
        if self.keep_history:
            self.statuses.append((self._now, status))

    def emit(self, events: Sequence[Event]) -> None:
        self.emitted.extend(events)
