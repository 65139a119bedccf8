"""What the coordination loop observes and what it decides: the values that cross the
boundary between a backend (sim, local, kubernetes) and the pure decision code.

A backend builds an :class:`Observed` once per reconcile cycle; the decision code
(``servectl.controller.decide``) returns a :class:`Plan`, which the backend applies: each
revision's replica count, the weights, and the header route of an A/B test.

Weights are integer percents of the traffic that no header route claims; they sum to 100
over the revisions listed (a revision not listed has weight 0 and no replicas).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from servectl.api.models import RolloutPhase
from servectl.autoscaling.snapshot import Snapshot
from servectl.rollout.counters import Counters

__all__ = ["Counters", "Observed", "ObservedRevision", "Plan", "PlanReason", "RevisionPlan"]


@dataclass(frozen=True)
class ObservedRevision:
    """One revision (one model version, its own pods) as the backend sees it now."""

    name: str
    version: int
    desired: int  # replicas last applied
    ready: int  # ready replicas that take requests
    starting: int = 0  # created, not ready yet
    draining: int = 0  # leaving: no new requests, finishing in-flight ones
    weight: int = 0  # percent applied at the router now
    available: bool = False  # TF Serving reports the version AVAILABLE on a ready replica
    snapshot: Snapshot | None = None  # its own windowed signals (None: no metrics)
    counters: Counters | None = None  # cumulative counters (None: metrics missing)
    refused: str = (
        ""  # why the cluster refuses to create its pods (admission, quota); "": it does not
    )
    standby: int = 0  # its warm standby pool (loaded, not routed): apart from the above


@dataclass(frozen=True)
class Observed:
    """The whole service, once per cycle."""

    time: float
    service: Snapshot  # all revisions together: what the autoscaler sees
    revisions: tuple[ObservedRevision, ...]
    header_revision: str | None = None  # where A/B-matched requests go now (None: no route)
    latency_bounds_us: tuple[float, ...] = ()  # finite bucket bounds of Counters.latency_buckets
    metrics_ok: bool = True  # False: scrapes stale or missing (rule 8)
    metrics_detail: str = ""  # when not ok: which signal is missing, and why
    # Custom analysis checks' values: metric -> (canary, stable); None where missing.
    custom: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)

    def revision(self, name: str) -> ObservedRevision | None:
        return next((r for r in self.revisions if r.name == name), None)


class PlanReason(enum.StrEnum):
    """Why the planner gave a revision its size and weight (``RevisionPlan.reason``)."""

    STEADY = "Steady"  # the only revision, with all the traffic: the autoscaler's demand
    SIZED = "Sized"  # sized for its share of the requests at its measured cost
    PRE_SCALING = "PreScaling"  # replicas added before its share rises (scale first)
    DRAINING = "Draining"  # lost traffic: keeps its size for the drain hold, then shrinks
    SURGE_LIMITED = "SurgeLimited"  # pre-scaling cut to the surge budget
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # a weight waits for ready replicas
    METRICS_MISSING = "MetricsMissing"  # metrics stale: holding, never shrinking (rule 8)
    ABORTED_HARD = "AbortedHard"  # failing hard: its traffic moved at once
    RETIRED = "Retired"  # no traffic, drained: removed


@dataclass(frozen=True)
class RevisionPlan:
    """What one revision should be. ``reason`` is a CamelCase code (a :class:`PlanReason`
    from servectl's planner; an emulated peer's own codes in the simulator), ``message``
    words."""

    name: str
    version: int
    replicas: int
    weight: int
    reason: str
    message: str = ""
    # Warm standby replicas to keep beside its serving ones (docs/standby.md): loaded,
    # parked, taken first by a scale-up. Apart from ``replicas`` and never routed.
    standby: int = 0


@dataclass(frozen=True)
class Plan:
    """One cycle's decision for the whole service."""

    revisions: tuple[RevisionPlan, ...]
    header_revision: str | None = None
    phase: RolloutPhase = RolloutPhase.IDLE  # the rollout phase after this cycle
    message: str = ""
    events: tuple[str, ...] = field(default_factory=tuple)  # what changed, in words
    waiting: str = ""  # what the plan holds back from the intent, and why (rule 8)

    def revision(self, name: str) -> RevisionPlan | None:
        return next((r for r in self.revisions if r.name == name), None)


class RevisionNames(Mapping[int, str]):
    """A cycle's revisions keyed both ways, once: model version -> revision name (the
    mapping itself), and :meth:`version` / :attr:`by_name` back. The rollout machine speaks
    versions; backends, metrics and the planner's output speak names."""

    def __init__(self, by_version: Mapping[int, str]) -> None:
        self._names = dict(by_version)
        self._versions = {name: version for version, name in self._names.items()}
        if len(self._versions) != len(self._names):
            raise ValueError(f"two versions share a revision name: {self._names}")

    def __getitem__(self, version: int) -> str:
        return self._names[version]

    def __iter__(self) -> Iterator[int]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"RevisionNames({self._names!r})"

    @property
    def by_name(self) -> Mapping[str, int]:
        return self._versions

    def version(self, name: str) -> int:
        return self._versions[name]
