"""An in-memory backend for the controller's unit tests (a fake: tests only).

Replicas become ready at once and weights apply exactly; every call is logged, so a
test can check the order and count of calls in a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servectl.api import models
from servectl.autoscaling import snapshot
from servectl.controller.backend import Event
from servectl.controller.decide import Command
from servectl.planning.types import Observed, ObservedRevision, Plan


@dataclass
class FakeBackend:
    """One service with revisions ``{name: (version, replicas, weight)}``."""

    revisions: dict[str, tuple[int, int, int]]
    rps: float | None = 100.0
    cpu_utilization: float | None = 50.0
    metrics_ok: bool = True
    pending: list[Command] = field(default_factory=list)
    state: Any = None
    status: models.ModelServiceStatus | None = None
    calls: list[str] = field(default_factory=list)
    applied: list[Plan] = field(default_factory=list)
    statuses: list[models.ModelServiceStatus] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    header: str | None = None

    def observe(self, now: float) -> Observed:
        self.calls.append("observe")
        total = sum(n for _, n, _ in self.revisions.values())
        signals = snapshot.Signals(
            rps=self.rps,
            cpu_utilization=self.cpu_utilization,
            cpu_usage_cores=None
            if self.cpu_utilization is None
            else self.cpu_utilization / 100.0 * total,
        )
        service = snapshot.Snapshot(
            time=now,
            replicas=snapshot.Replicas(current=total, ready=total, min=1, max=100),
            signals=signals if self.metrics_ok else snapshot.Signals(),
        )
        return Observed(
            time=now,
            service=service,
            revisions=tuple(
                ObservedRevision(
                    name=name,
                    version=version,
                    desired=n,
                    ready=n,
                    weight=w,
                    available=n > 0,
                    snapshot=replace(service, replicas=snapshot.Replicas(n, n, 0, 100)),
                )
                for name, (version, n, w) in self.revisions.items()
            ),
            header_revision=self.header,
            metrics_ok=self.metrics_ok,
        )

    def commands(self, now: float) -> list[Command]:
        self.calls.append("commands")
        due, self.pending = self.pending, []
        return due

    def apply(self, plan: Plan, now: float) -> None:
        self.calls.append("apply")
        self.applied.append(plan)
        self.revisions = {r.name: (r.version, r.replicas, r.weight) for r in plan.revisions}
        self.header = plan.header_revision

    def load_state(self) -> Any:
        self.calls.append("load_state")
        return self.state

    def save_state(self, state: Any) -> None:
        self.calls.append("save_state")
        self.state = state

    def load_status(self) -> models.ModelServiceStatus | None:
        self.calls.append("load_status")
        return self.status

    def write_status(self, status: models.ModelServiceStatus) -> None:
        self.calls.append("write_status")
        self.status = status
        self.statuses.append(status)

    def emit(self, events: Sequence[Event]) -> None:
        self.calls.append("emit")
        self.events.extend(events)
