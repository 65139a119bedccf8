"""A policy's output: the replica count, the signal that won, and a reason code.

Every decision carries a reason code that ends up in status, events and the output of
``servectl policy eval``; ``detail`` is the human sentence behind it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class Reason(enum.StrEnum):
    """Why the replica count is what it is (the last rail that shaped it wins)."""

    SIGNAL = "SIGNAL"  # a signal's proposal, unmodified
    WITHIN_TOLERANCE = "WITHIN_TOLERANCE"  # proposal too close to current to act on
    PANIC = "PANIC"  # burst detected: scale up on the short window, never down
    STABILIZING = "STABILIZING"  # scale-down held by the stabilization window
    RATE_LIMITED_UP = "RATE_LIMITED_UP"
    RATE_LIMITED_DOWN = "RATE_LIMITED_DOWN"
    COLD_START = "COLD_START"  # replicas still starting: don't count their absence as demand
    AT_MIN = "AT_MIN"
    AT_MAX = "AT_MAX"
    METRICS_MISSING = "METRICS_MISSING"  # no usable signal: hold (never shrink)
    POLICY = "POLICY"  # a custom (CEL) policy decided
    POLICY_ERROR = "POLICY_ERROR"  # the custom policy failed; fell back to the recommendation
    RECOMMEND_ONLY = "RECOMMEND_ONLY"  # mode: recommend; decided and recorded, not applied
    ORACLE = "ORACLE"  # the simulator's perfect-foresight lower bound


@dataclass(frozen=True)
class Decision:
    """``replicas`` is what to apply; ``recommended`` what the policy wanted before
    ``mode: recommend`` kept the current count. ``proposals`` holds each signal's raw
    proposal (replicas, possibly fractional), to explain the decision."""

    replicas: int
    reason: Reason
    signal: str | None = None
    detail: str = ""
    recommended: int | None = None
    proposals: Mapping[str, float] = field(default_factory=dict)
    forecast: str | None = None  # the forecaster's state in words, when it is on
    policy_error: str | None = None  # the custom policy failed: why (the loop fell back)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "replicas": self.replicas,
            "recommended": self.replicas if self.recommended is None else self.recommended,
            "reason": self.reason.value,
            "signal": self.signal,
            "detail": self.detail,
            "proposals": {k: round(v, 4) for k, v in self.proposals.items()},
        }
        if self.forecast is not None:
            doc["forecast"] = self.forecast
        if self.policy_error is not None:
            doc["policyError"] = self.policy_error
        return doc


def instant(t: float) -> str:
    """A moment in a detail: ``t`` (seconds since the epoch) as an RFC 3339 UTC time to
    the second, ``2026-11-27T14:03:12Z``, as Kubernetes writes times, never a raw
    ``t=1795805059``. A time rather than "in 42 s": the text stays true while it sits in
    status, and a status that did not change is not written again. The CLI shows it in
    local time with how far it is from now (``servectl.cli.format.readable_times``).
    Past what a calendar date can say (a snapshot at the end of year 9999, plus a hold),
    the last or first second one can."""
    try:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        if math.isnan(t):
            return "an unknown time"
        return "9999-12-31T23:59:59Z" if t > 0 else "0001-01-01T00:00:00Z"
