"""The rollout's vocabulary: the user's operations, the phases, the persisted state, what
the rollout observes each cycle (:class:`View`) and what it asks of the planner
(:class:`Intent`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from servectl.api import models
from servectl.rollout.counters import Counters

Phase = models.RolloutPhase
"""The rollout's phase: the API's ``status.rollout.phase`` enum itself (one vocabulary)."""


ACTIVE = (Phase.PROGRESSING, Phase.PAUSED, Phase.DEGRADED)


class Op(enum.StrEnum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"
    PROMOTE_FULL = "promote-full"
    ABORT = "abort"
    RETRY = "retry"
    UNDO = "undo"
    SETTLE = "settle"  # the spec names the stable version again after an abort (GitOps)


class RolloutError(ValueError):
    """A command that cannot be carried out now; ``fix`` says what to do instead."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} ({fix})")
        self.message = message
        self.fix = fix


@dataclass(frozen=True)
class VerdictRecord:
    step: int
    verdict: models.Verdict
    message: str
    samples: int
    time: float


@dataclass(frozen=True)
class RolloutState:
    """Everything the rollout needs to resume. Versions identify revisions."""

    stable: int
    phase: Phase = Phase.IDLE
    canary: int | None = None
    previous_stable: int | None = None
    step: int = 0
    step_started: float | None = None
    user_paused: bool = False
    message: str = ""
    # analysis of the current step (or the A/B guard rails)
    baseline: Mapping[int, Counters] = field(default_factory=dict)
    next_check: float | None = None
    extensions: int = 0
    verdicts: tuple[VerdictRecord, ...] = ()
    # progress deadline
    wait_since: float | None = None
    wait_ready: int = 0
    # canary scale override: ("replicas", n) or ("weight", w)
    canary_scale: tuple[str, int] | None = None
    hard_abort: bool = False
    promoting: bool = False  # all steps done (or promote-full): going to 100 %
    skip_analysis: bool = False  # undo: straight back to the previous version
    # The user's promote --full or undo: an explicit decision, carried out while metrics
    # are stale (the planner's weights move toward it; an abort moves them anyway).
    user_decided: bool = False
    winner: str | None = None
    ab_started: float | None = None  # when the header route was first applied
    switched_at: float | None = None  # blueGreen: when the switch was applied

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE


@dataclass(frozen=True)
class View:
    """What the rollout observes this cycle (versions as keys)."""

    now: float
    weights: Mapping[int, int]  # applied weights
    header: int | None  # version the header route points at, as applied
    ready: Mapping[int, int]  # ready replicas
    needed: Mapping[int, int]  # replicas the planner wants each revision to have
    available: Mapping[int, bool]
    counters: Mapping[int, Counters]
    bounds_us: tuple[float, ...] = ()
    custom: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    metrics_ok: bool = True


@dataclass(frozen=True)
class Intent:
    """What the rollout wants the planner to reach. Versions not in ``weights`` get 0."""

    stable: int
    canary: int | None
    weights: Mapping[int, int]
    header: int | None = None
    canary_scale: tuple[str, int] | None = None
    abort: bool = False
    hard: bool = False
    # A user's promote --full or undo: weights move toward the intent while metrics are
    # stale (rule 8 holds the autoscaler, not a user's explicit decision).
    explicit: bool = False
    hold_s: float = 30.0  # a revision that loses traffic keeps its size this long
    phase: Phase = Phase.IDLE
    message: str = ""
