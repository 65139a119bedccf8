"""HPA v2 ``behavior``: stabilization windows and rate policies, exactly as Kubernetes.

This is the arithmetic of ``normalizeDesiredReplicasWithBehaviors`` in
kubernetes/pkg/controller/podautoscaler/horizontal.go, shared by the ``hpa`` baseline
and servectl's own rails:

1. Stabilization (``stabilizeRecommendationWithBehaviors``). Every tick's raw
   recommendation is remembered with its time. The scale-up bound is the *minimum*
   over the scale-up window, the scale-down bound the *maximum* over the scale-down
   window (both including this tick's recommendation; a window keeps what is strictly
   newer than ``now - window``); the result is the current count clamped into
   [up bound, down bound].
2. Rate policies (``convertDesiredReplicasWithBehaviorRate``). Over each policy's
   ``period_s`` the pods already added (removed) are taken back out of the budget: the
   period's start count is ``current - added + removed`` (``getReplicasChangePerPeriod``,
   events strictly newer than ``now - period``). A Pods policy allows ``start + value``
   up or ``start - value`` down; a Percent policy ``ceil(start * (1 + value/100))`` up
   or ``int(start * (1 - value/100))`` down (truncated, like Go's ``int32()``).
   ``select: Max`` takes the policy allowing the most change, ``Min`` the least,
   ``Disabled`` forbids the direction (``calculateScaleUpLimitWithScalingRules``,
   ``calculateScaleDownLimitWithBehaviors``). A limit never moves against the
   direction of the change (an "up" limit below ``current`` means "hold").
3. Min/max bounds; when both a rate limit and a bound bind, the reason is the one
   Kubernetes reports: the rate limit only if it is strictly tighter than the bound.

Worked example (defaults, scale up): current 3, no events in 15 s, desired 20 ->
Percent allows ceil(3*2)=6, Pods allows 3+4=7, select Max -> 7.

What stays with the caller (it is controller logic in ``reconcileAutoscaler``):
seeding the history with the current count the first time an HPA is seen
(``recordInitialRecommendation``), and handling a current count outside [min, max]
*before* normalizing (Kubernetes jumps straight to the bound, records a scale event
and no recommendation). ``hpa.py`` does both; ``normalize`` still clamps to the bounds
at the end so other callers are safe, a no-op whenever current is within bounds.

Scale-event storage: Kubernetes keeps scale-up and scale-down events in two lists and,
when it stores an event, reuses the slot of one event older than the longest policy
period *of that direction*. We keep every event while any policy period can still see
it. The two agree whenever a reused slot could not have been seen any more, which
always holds when the longest scale-up and scale-down periods are equal (the defaults:
15 s and 15 s); see docs/baselines.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from servectl.autoscaling import config
from servectl.autoscaling.decision import Reason


@dataclass(frozen=True)
class BehaviorState:
    """Recommendation history and scale events within the longest window/period."""

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_events: tuple[tuple[float, int], ...] = ()  # (time, +added / -removed)

    def to_dict(self) -> dict[str, list[list[float]]]:
        return {
            "recommendations": [[t, r] for t, r in self.recommendations],
            "scale_events": [[t, c] for t, c in self.scale_events],
        }

    @staticmethod
    def from_dict(doc: dict[str, list[list[float]]] | None) -> BehaviorState:
        if not doc:
            return BehaviorState()
        return BehaviorState(
            recommendations=tuple((float(t), int(r)) for t, r in doc.get("recommendations", [])),
            scale_events=tuple((float(t), int(c)) for t, c in doc.get("scale_events", [])),
        )


@dataclass(frozen=True)
class Normalized:
    replicas: int
    reason: Reason | None  # None: the raw recommendation passed unchanged
    state: BehaviorState


def _max_period(rules: config.ScalingRules) -> float:
    return max((p.period_s for p in rules.policies), default=0.0)


def stabilize(
    desired: int,
    current: int,
    now: float,
    behavior: config.Behavior,
    history: Iterable[tuple[float, int]],
) -> int:
    """Clamp ``current`` into [min over up-window, max over down-window]."""
    up_cutoff = now - behavior.scale_up.stabilization_s
    down_cutoff = now - behavior.scale_down.stabilization_s
    up_rec = desired
    down_rec = desired
    for when, rec in history:
        if when > up_cutoff:
            up_rec = min(up_rec, rec)
        if when > down_cutoff:
            down_rec = max(down_rec, rec)
    result = current
    if result < up_rec:
        result = up_rec
    if result > down_rec:
        result = down_rec
    return result


def _changes_in_period(
    events: Iterable[tuple[float, int]], now: float, period_s: float
) -> tuple[int, int]:
    added = removed = 0
    cutoff = now - period_s
    for when, change in events:
        if when > cutoff:
            if change > 0:
                added += change
            else:
                removed -= change
    return added, removed


def _period_limits(
    current: int,
    now: float,
    rules: config.ScalingRules,
    events: Iterable[tuple[float, int]],
    direction: int,
) -> list[int]:
    """Each rate policy's bound in ``direction`` (+1 up, -1 down) from its period's start.

    The period's start count is ``current - added + removed`` in both directions.
    """
    events = tuple(events)
    limits: list[int] = []
    for policy in rules.policies:
        added, removed = _changes_in_period(events, now, policy.period_s)
        start = current - added + removed
        if policy.type is config.RateType.PODS:
            limits.append(start + direction * policy.value)
        elif direction > 0:
            limits.append(math.ceil(start * (1 + policy.value / 100)))
        else:
            # int32(float64(start) * (1 - value/100)): truncation toward zero, not floor.
            limits.append(int(start * (1 - policy.value / 100)))
    return limits


def scale_up_limit(
    current: int, now: float, rules: config.ScalingRules, events: Iterable[tuple[float, int]]
) -> int:
    """Largest count the scale-up policies allow now.

    ``calculateScaleUpLimitWithScalingRules`` in horizontal.go: select Max takes the policy
    allowing the most change (the largest bound), Min the least.
    """
    if rules.select is config.SelectPolicy.DISABLED:
        return current
    limits = _period_limits(current, now, rules, events, +1)
    if not limits:
        return current
    return max(limits) if rules.select is config.SelectPolicy.MAX else min(limits)


def scale_down_limit(
    current: int, now: float, rules: config.ScalingRules, events: Iterable[tuple[float, int]]
) -> int:
    """Smallest count the scale-down policies allow now.

    ``calculateScaleDownLimitWithBehaviors`` in horizontal.go: select Max takes the policy
    allowing the most change (the smallest bound), Min the least.
    """
    if rules.select is config.SelectPolicy.DISABLED:
        return current
    limits = _period_limits(current, now, rules, events, -1)
    if not limits:
        return current
    return min(limits) if rules.select is config.SelectPolicy.MAX else max(limits)


def normalize(
    desired: int,
    current: int,
    now: float,
    min_replicas: int,
    max_replicas: int,
    behavior: config.Behavior,
    state: BehaviorState,
    remember: int | None = None,
) -> Normalized:
    """Apply stabilization, rate policies and bounds; record the recommendation.

    The returned state already holds this tick's recommendation and, if the count
    changes, the scale event (the caller applies the count). ``remember`` replaces
    ``desired`` in the history (servectl keeps a temporary queue-drain overshoot out
    of its scale-down memory); HPA leaves it None.
    """
    stabilized = stabilize(desired, current, now, behavior, state.recommendations)
    reason: Reason | None = None
    if stabilized != desired:
        reason = Reason.STABILIZING
    result = stabilized
    if result > current:
        limit = max(current, scale_up_limit(current, now, behavior.scale_up, state.scale_events))
        # Kubernetes reports ScaleUpLimit only when the rate limit is below maxReplicas.
        allowed, limited_by = (
            (limit, Reason.RATE_LIMITED_UP)
            if limit < max_replicas
            else (max_replicas, Reason.AT_MAX)
        )
        if result > allowed:
            result, reason = allowed, limited_by
    elif result < current:
        limit = min(
            current, scale_down_limit(current, now, behavior.scale_down, state.scale_events)
        )
        allowed, limited_by = (
            (limit, Reason.RATE_LIMITED_DOWN)
            if limit > min_replicas
            else (min_replicas, Reason.AT_MIN)
        )
        if result < allowed:
            result, reason = allowed, limited_by
    # Only reachable with current outside [min, max]: Kubernetes never normalizes then
    # (hpa.py jumps to the bound first), other callers still get a count within bounds.
    if result < min_replicas:
        result, reason = min_replicas, Reason.AT_MIN
    elif result > max_replicas:
        result, reason = max_replicas, Reason.AT_MAX
    # Keep only what a window or a period can still see.
    horizon = max(
        behavior.scale_up.stabilization_s,
        behavior.scale_down.stabilization_s,
        _max_period(behavior.scale_up),
        _max_period(behavior.scale_down),
    )
    keep_after = now - horizon
    recorded = desired if remember is None else remember
    recs = (*(r for r in state.recommendations if r[0] > keep_after), (now, recorded))
    events = tuple(e for e in state.scale_events if e[0] > keep_after)
    if result != current:
        events += ((now, result - current),)
    return Normalized(result, reason, BehaviorState(recs, events))
