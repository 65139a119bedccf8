"""HPA ``behavior`` arithmetic against kubernetes/pkg/controller/podautoscaler/horizontal.go.

Each table row names the Go function (or docs section) whose rule it checks. Times are
plain numbers: ``NOW`` is the sync being computed, events and recommendations are
``(time, value)`` pairs as ``BehaviorState`` stores them.
"""

from __future__ import annotations

import json

import pytest

from servectl.autoscaling import behavior, config
from servectl.autoscaling.decision import Reason

NOW = 10_000.0
PERCENT = config.RateType.PERCENT
PODS = config.RateType.PODS
MAX = config.SelectPolicy.MAX
MIN = config.SelectPolicy.MIN
DISABLED = config.SelectPolicy.DISABLED


def rules(
    *policies: tuple[config.RateType, int, float],
    select: config.SelectPolicy = MAX,
    window: float = 0.0,
) -> config.ScalingRules:
    return config.ScalingRules(
        stabilization_s=window,
        policies=tuple(config.RatePolicy(t, v, p) for t, v, p in policies),
        select=select,
    )


def windows(up: float, down: float) -> config.Behavior:
    return config.Behavior(
        scale_up=rules((PERCENT, 100, 15.0), window=up),
        scale_down=rules((PERCENT, 100, 15.0), window=down),
    )


def test_defaults_are_the_documented_ones() -> None:
    # pkg/apis/autoscaling/v2/defaults.go (defaultHPAScaleUpRules / ScaleDownRules) and
    # docs "Horizontal Pod Autoscaling" > Default Behavior; the 300 s scale-down window is
    # the --horizontal-pod-autoscaler-downscale-stabilization default.
    defaults = config.Behavior()
    assert defaults.scale_up == rules((PERCENT, 100, 15.0), (PODS, 4, 15.0))
    assert defaults.scale_down == rules((PERCENT, 100, 15.0), window=300.0)


# ------------------------------------------------------------------ stabilization


@pytest.mark.parametrize(
    ("desired", "current", "history", "up_s", "down_s", "expected"),
    [
        # stabilizeRecommendationWithBehaviors: down bound = max over the down window.
        pytest.param(3, 6, [(NOW - 100, 6)], 0, 300, 6, id="drop-held-by-recent-high"),
        pytest.param(2, 6, [(NOW - 200, 5), (NOW - 100, 4)], 0, 300, 5, id="highest-in-window"),
        # rec.timestamp.After(cutoff) is strict: a recommendation exactly 300 s old is out.
        pytest.param(3, 6, [(NOW - 300, 6)], 0, 300, 3, id="window-edge-excluded"),
        pytest.param(3, 6, [(NOW - 299, 6)], 0, 300, 6, id="just-inside-window"),
        # Up bound = min over the up window; result = current clamped into [up, down].
        pytest.param(8, 4, [(NOW - 30, 5)], 60, 300, 5, id="up-window-takes-lowest"),
        pytest.param(8, 4, [(NOW - 30, 5)], 0, 300, 8, id="no-up-window-goes-straight"),
        pytest.param(3, 5, [(NOW - 10, 7)], 60, 300, 5, id="current-inside-bounds-stays"),
        pytest.param(9, 5, [], 0, 300, 9, id="empty-history"),
    ],
)
def test_stabilize(
    desired: int,
    current: int,
    history: list[tuple[float, int]],
    up_s: float,
    down_s: float,
    expected: int,
) -> None:
    assert behavior.stabilize(desired, current, NOW, windows(up_s, down_s), history) == expected


# ------------------------------------------------------------------ rate limits


@pytest.mark.parametrize(
    ("current", "rule", "events", "expected"),
    [
        # calculateScaleUpLimitWithScalingRules with the defaults: max(ceil(2s), s + 4).
        pytest.param(3, config.hpa_default_scale_up(), [], 7, id="default-small-pods-wins"),
        pytest.param(10, config.hpa_default_scale_up(), [], 20, id="default-large-percent-wins"),
        pytest.param(3, rules((PERCENT, 100, 15), (PODS, 4, 15), select=MIN), [], 6, id="min"),
        pytest.param(3, rules((PODS, 4, 15), select=DISABLED), [], 3, id="disabled"),
        # API validation requires a policy; without one we allow no change.
        pytest.param(3, rules(), [], 3, id="no-policies"),
        # Percent rounds up so a small target still grows (comment in the Go source).
        pytest.param(1, rules((PERCENT, 10, 15)), [], 2, id="percent-ceil"),
        # getReplicasChangePerPeriod: pods added within the period come off the budget...
        pytest.param(7, config.hpa_default_scale_up(), [(NOW - 5, 4)], 7, id="budget-spent"),
        # ... strictly within it (After(cutoff)): an event exactly one period old is out.
        pytest.param(7, config.hpa_default_scale_up(), [(NOW - 15, 4)], 14, id="period-edge"),
        # periodStartReplicas = current - added + removed.
        pytest.param(5, rules((PERCENT, 100, 15)), [(NOW - 5, -5)], 20, id="removals-add-back"),
        pytest.param(9, rules((PODS, 2, 60)), [(NOW - 50, 3), (NOW - 10, 4)], 4, id="sum-period"),
    ],
)
def test_scale_up_limit(
    current: int, rule: config.ScalingRules, events: list[tuple[float, int]], expected: int
) -> None:
    assert behavior.scale_up_limit(current, NOW, rule, events) == expected


@pytest.mark.parametrize(
    ("current", "rule", "events", "expected"),
    [
        # calculateScaleDownLimitWithBehaviors: default 100 % / 15 s allows 0.
        pytest.param(10, config.hpa_default_scale_down(), [], 0, id="default-to-zero"),
        # int32(start * (1 - v/100)) truncates: 5 * 0.5 = 2.5 -> 2.
        pytest.param(5, rules((PERCENT, 50, 15)), [], 2, id="percent-truncates"),
        # select Max = most change = the lowest count; Min = the highest.
        pytest.param(10, rules((PERCENT, 50, 15), (PODS, 2, 15)), [], 5, id="max-most-change"),
        pytest.param(
            10, rules((PERCENT, 50, 15), (PODS, 2, 15), select=MIN), [], 8, id="min-least-change"
        ),
        pytest.param(10, rules((PODS, 2, 15), select=DISABLED), [], 10, id="disabled"),
        pytest.param(10, rules(), [], 10, id="no-policies"),
        pytest.param(7, rules((PODS, 4, 15)), [(NOW - 5, -3)], 6, id="removed-count-back"),
        pytest.param(7, rules((PODS, 4, 15)), [(NOW - 5, 2)], 1, id="added-come-off"),
        # Go's int32() truncates toward zero where floor would not (start -9 here).
        pytest.param(1, rules((PERCENT, 50, 15)), [(NOW - 5, 10)], -4, id="trunc-not-floor"),
    ],
)
def test_scale_down_limit(
    current: int, rule: config.ScalingRules, events: list[tuple[float, int]], expected: int
) -> None:
    assert behavior.scale_down_limit(current, NOW, rule, events) == expected


# ------------------------------------------------------------------ normalize


def state(
    recs: tuple[tuple[float, int], ...] = (), events: tuple[tuple[float, int], ...] = ()
) -> behavior.BehaviorState:
    return behavior.BehaviorState(recs, events)


@pytest.mark.parametrize(
    ("desired", "current", "lo", "hi", "history", "expected", "reason"),
    [
        # convertDesiredReplicasWithBehaviorRate: the rate limit binds below maxReplicas.
        pytest.param(20, 3, 1, 50, state(), 7, Reason.RATE_LIMITED_UP, id="up-rate"),
        # Limit (7) >= maxReplicas (7): Kubernetes reports TooManyReplicas, not ScaleUpLimit.
        pytest.param(20, 3, 1, 7, state(), 7, Reason.AT_MAX, id="up-limit-equals-max"),
        pytest.param(20, 3, 1, 5, state(), 5, Reason.AT_MAX, id="up-max-tighter"),
        pytest.param(6, 3, 1, 50, state(), 6, None, id="up-unlimited"),
        pytest.param(0, 4, 2, 50, state(), 2, Reason.AT_MIN, id="down-to-min"),
        pytest.param(
            3,
            6,
            1,
            50,
            state(((NOW - 60, 6),)),
            6,
            Reason.STABILIZING,
            id="down-stabilized",
        ),
        pytest.param(4, 4, 1, 50, state(((NOW - 60, 9),)), 4, None, id="steady"),
    ],
)
def test_normalize_defaults(
    desired: int,
    current: int,
    lo: int,
    hi: int,
    history: behavior.BehaviorState,
    expected: int,
    reason: Reason | None,
) -> None:
    # normalizeDesiredReplicasWithBehaviors with the default behavior.
    norm = behavior.normalize(desired, current, NOW, lo, hi, config.Behavior(), history)
    assert (norm.replicas, norm.reason) == (expected, reason)


def test_normalize_down_rate_limit_vs_min() -> None:
    # convertDesiredReplicasWithBehaviorRate: ScaleDownLimit only when the limit is above
    # minReplicas, TooFewReplicas when they meet.
    halve = config.Behavior(scale_down=rules((PERCENT, 50, 60)))
    assert behavior.normalize(1, 10, NOW, 1, 50, halve, state()).reason is Reason.RATE_LIMITED_DOWN
    assert behavior.normalize(1, 10, NOW, 1, 50, halve, state()).replicas == 5
    at_min = behavior.normalize(1, 10, NOW, 5, 50, halve, state())
    assert (at_min.replicas, at_min.reason) == (5, Reason.AT_MIN)
    # Budget spent: 10 removed in the period -> start 20 -> limit 10 = current: hold.
    spent = behavior.normalize(1, 10, NOW, 1, 50, halve, state(events=((NOW - 5, -10),)))
    assert (spent.replicas, spent.reason) == (10, Reason.RATE_LIMITED_DOWN)


def test_normalize_up_stabilization_window() -> None:
    # Docs "Stabilization window" applies to scale-up too when configured: the lowest
    # recommendation of the last 60 s caps the increase.
    slow_up = config.Behavior(scale_up=rules((PERCENT, 900, 15), window=60.0))
    history = state(((NOW - 45, 5), (NOW - 30, 9)))
    norm = behavior.normalize(12, 4, NOW, 1, 50, slow_up, history)
    assert (norm.replicas, norm.reason) == (5, Reason.STABILIZING)


def test_normalize_records_recommendation_and_event() -> None:
    # The raw (pre-stabilization) recommendation is stored (stabilizeRecommendationWith
    # Behaviors); the applied change is stored as a scale event (storeScaleEvent).
    history = state(((NOW - 400, 9), (NOW - 100, 5)), ((NOW - 400, 2), (NOW - 10, 1)))
    norm = behavior.normalize(20, 5, NOW, 1, 50, config.Behavior(), history)
    # Period start 5 - 1 = 4 (1 added 10 s ago): max(ceil(4 x 2), 4 + 4) = 8.
    assert (norm.replicas, norm.reason) == (8, Reason.RATE_LIMITED_UP)
    # Only what a window or period can still see is kept (the 400 s old entries go).
    assert norm.state.recommendations == ((NOW - 100, 5), (NOW, 20))
    assert norm.state.scale_events == ((NOW - 10, 1), (NOW, 3))


def test_normalize_no_event_without_change() -> None:
    norm = behavior.normalize(4, 4, NOW, 1, 50, config.Behavior(), state())
    assert norm.state.scale_events == ()
    assert norm.state.recommendations == ((NOW, 4),)


def test_normalize_outside_bounds_still_clamps() -> None:
    # Kubernetes never normalizes with current outside [min, max] (reconcileAutoscaler
    # jumps to the bound first); normalize keeps other callers within bounds anyway.
    norm = behavior.normalize(12, 12, NOW, 1, 10, config.Behavior(), state())
    assert (norm.replicas, norm.reason) == (10, Reason.AT_MAX)
    norm = behavior.normalize(0, 0, NOW, 2, 10, config.Behavior(), state())
    assert (norm.replicas, norm.reason) == (2, Reason.AT_MIN)


def test_drop_is_held_for_the_whole_window_then_released() -> None:
    # Docs "Stabilization window": with the default 300 s, a drop takes effect only once
    # every higher recommendation of the last 300 s has aged out (15 s syncs).
    history = state()
    current = 8
    timeline = []
    for i in range(24):
        now = NOW + 15 * i
        desired = 8 if i == 0 else 2
        norm = behavior.normalize(desired, current, now, 1, 50, config.Behavior(), history)
        history, current = norm.state, norm.replicas
        timeline.append(current)
    # Recommendation 8 at NOW stays in the window through NOW + 285; out at NOW + 300.
    assert timeline[:20] == [8] * 20
    assert timeline[20:] == [2] * 4


def test_state_json_round_trip() -> None:
    original = state(((NOW - 10, 3), (NOW, 4)), ((NOW - 5, -2),))
    restored = behavior.BehaviorState.from_dict(json.loads(json.dumps(original.to_dict())))
    assert restored == original
    assert behavior.BehaviorState.from_dict(None) == behavior.BehaviorState()
