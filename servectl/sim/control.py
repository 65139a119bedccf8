"""The contract between the multi-revision simulator and whatever controls it.

A *controller* owns every revision's replica count and the traffic weights: servectl's
coordination loop (``servectl.sim.servectl_controller``) or an emulated peer
(``servectl.sim.peers``: Argo-style, Flagger-style). Each tick the simulator hands it an
:class:`~servectl.planning.types.Observed` and the user's rollout commands that arrived
since the last tick (:class:`Event`), and applies the :class:`~servectl.planning.types.Plan`
it returns, exactly: replicas at once (new ones cold-start, removed ones leave the routes
and finish their queue), weights and the header route at once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from servectl.planning.types import Observed, Plan
from servectl.sim import model, traces


class Op(enum.StrEnum):
    """A user's rollout command (``servectl rollout <op>``)."""

    START = "start"  # a new model version: Event.version
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"  # skip to the next step
    PROMOTE_FULL = "promote-full"  # skip every remaining step
    ABORT = "abort"
    RETRY = "retry"
    UNDO = "undo"


@dataclass(frozen=True)
class Event:
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

    def revision_name(self, version: int) -> str:
        return f"{self.service_name}-v{version}"


class Controller(Protocol):
    """Decides every revision's replicas and the weights, once per ``period_s``."""

    @property
    def name(self) -> str: ...

    @property
    def period_s(self) -> float: ...

    def tick(self, observed: Observed, events: Sequence[Event]) -> Plan: ...
