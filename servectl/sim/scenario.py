"""What a simulated world is made of: the model versions that exist, the load, and when
the user acts (:class:`RolloutScenario`).

The world (:mod:`servectl.sim.world`) runs a scenario second by second; a backend
(:class:`servectl.backends.sim.SimBackend`) lets the controller loop observe it and apply
plans to it, exactly: replicas at once (new ones cold-start, removed ones leave the
routes and finish their queue), weights and the header route at once. User commands use
the rollout's own vocabulary (:class:`servectl.rollout.machine.Op`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from servectl.api import names
from servectl.rollout.machine import Op
from servectl.sim import model, traces

__all__ = ["Event", "Op", "RevisionModel", "RolloutScenario"]


@dataclass(frozen=True)
class Event:
    """A user's rollout command (``servectl rollout <op>``) at ``time``."""

    time: float
    op: Op
    version: int | None = None  # for START


@dataclass(frozen=True)
class RevisionModel:
    """One model version as the simulator runs it: its own per-request cost and errors."""

    version: int
    service: model.ServiceModel = field(default_factory=model.ServiceModel)
    error_rate: float = 0.0  # fraction of its requests answered with an error (HTTP 500)

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {self.error_rate}")


@dataclass(frozen=True)
class RolloutScenario:
    """A load trace, the versions that exist, and when the user acts."""

    name: str
    trace: traces.Trace
    revisions: Mapping[int, RevisionModel]  # by version
    stable_version: int
    events: tuple[Event, ...] = ()
    service_name: str = "model"
    header_share: float = 0.0  # fraction of requests that carry the A/B match
    min_replicas: int = 1
    max_replicas: int = 100
    initial_replicas: int | None = None  # None: enough for the first minute at 70 %
    grace_s: float = 30.0  # a removed replica is killed this long after leaving the routes
    metrics_outages: tuple[tuple[float, float], ...] = ()  # [start, end) with no scrapes
    routing: model.Routing = model.Routing.ROUND_ROBIN  # within a revision
    # The stable revision's warm standby pool at the start, parked (docs/standby.md): the
    # world starts warm, its pool too. After that each plan's ``standby`` sets the pools.
    standby: int = 0

    def revision_name(self, version: int) -> str:
        return names.revision_name(self.service_name, version)
