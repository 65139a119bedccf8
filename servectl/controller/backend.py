"""The two protocols the loop is made of: a :class:`Backend` (the world it acts on) and a
:class:`Decider` (who decides: servectl's loop, or an emulated peer in the simulator).

A backend is one ModelService in one place: the simulator (``servectl.backends.sim``),
the local runtime, or a Kubernetes cluster. :func:`~servectl.controller.reconcile.
reconcile_once` calls it in this order, once per cycle, with one ``now``::

    observe(now) -> commands(now) -> load_state() -> [decide] -> apply(plan, now)
    -> save_state(state) -> load_status() -> write_status(status) -> emit(events)

``apply`` must be idempotent: the same plan applied twice changes nothing the second
time (a controller restarted mid-cycle re-applies its last plan).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from servectl.api import models
from servectl.controller.decide import AnalysisNeed, Command, Outcome
from servectl.planning.types import Observed, Plan


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.StrEnum):
    """Why an event was emitted (Kubernetes event ``reason``)."""

    SCALED = "Scaled"  # the total replica count changed
    RECOMMENDED = "Recommended"  # mode: recommend: what would have been done
    WEIGHTS_CHANGED = "WeightsChanged"  # a weight or the header route moved
    ROLLOUT_PHASE = "RolloutPhaseChanged"
    COMMAND_REFUSED = "CommandRefused"  # a user's rollout command could not be carried out
    POLICY_FAILED = "PolicyFailed"  # the custom CEL policy failed (once per distinct error)
    METRICS_UNAVAILABLE = "MetricsUnavailable"  # metrics went stale: holding (rule 8)
    METRICS_RESTORED = "MetricsRestored"
    PODS_REFUSED = "PodsRefused"  # the cluster refuses a revision's pods (admission, quota)
    CREATED = "Created"  # a new service's first revision
    STANDBY_ACTIVATED = "StandbyActivated"  # a scale-up took warm standby replicas
    # The driver's reports (also the reason of the Ready=False condition they set):
    INVALID_SPEC = "InvalidSpec"  # servectl refuses the spec (the CRD schema let it through)
    MODEL_NOT_FOUND = "ModelNotFound"  # no model version to start a new service with
    RECONCILE_FAILED = "ReconcileFailed"  # the service's cycle failed; the others went on


@dataclass(frozen=True)
class Event:
    time: float
    type: EventType
    reason: EventReason
    message: str
    command: str | None = None  # the id of the user's command it answers (CommandRefused)


class Backend(Protocol):
    """One ModelService somewhere: what is there, what the user asked, where to act."""

    def observe(self, now: float) -> Observed:
        """Revisions, replicas, routes and metrics as of ``now`` (``Observed.time == now``)."""
        ...

    def commands(self, now: float) -> Sequence[Command]:
        """The user's rollout commands that arrived since the last cycle (consumed)."""
        ...

    def apply(self, plan: Plan, now: float) -> None:
        """Make replicas, weights and the header route what ``plan`` says (idempotent)."""
        ...

    def load_state(self) -> Any:
        """The decider's state saved by the last cycle, or None on a first start."""
        ...

    def save_state(self, state: Any) -> None: ...

    def load_status(self) -> models.ModelServiceStatus | None: ...

    def write_status(self, status: models.ModelServiceStatus) -> None: ...

    def emit(self, events: Sequence[Event]) -> None: ...


class Decider(Protocol):
    """Turns what a backend observed (and the user's commands) into a plan."""

    @property
    def name(self) -> str: ...

    @property
    def period_s(self) -> float:
        """Seconds between cycles."""
        ...

    def initial_state(self, observed: Observed) -> Any:
        """The state of a first cycle, from what runs now."""
        ...

    def analysis(self, state: Any) -> AnalysisNeed | None:
        """What the next cycle's analysis needs measured (None: nothing beyond the signals)."""
        ...

    def decide(self, observed: Observed, commands: Sequence[Command], state: Any) -> Outcome: ...
