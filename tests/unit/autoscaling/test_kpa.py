"""The ``kpa`` baseline against Knative's KPA (knative/serving pkg/autoscaler).

Each test names the Go function or the Knative docs page it checks ("About autoscaling"
> KPA: stable and panic windows, knative.dev/docs/serving/autoscaling/kpa-specific/).
Every scenario uses target 10 concurrent requests per pod, so the effective target is
10 x 0.7 = 7 (``ResolveMetricTarget``), and 2 s ticks (``scaling.tickInterval``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from servectl.autoscaling import config, kpa
from servectl.autoscaling.decision import Decision, Reason
from servectl.autoscaling.policy import State
from servectl.autoscaling.snapshot import Replicas, Signals, Snapshot

T0 = 10_000.0


def snap(t: float, concurrency: float | None, ready: int, current: int | None = None) -> Snapshot:
    return Snapshot(
        time=t,
        replicas=Replicas(current=ready if current is None else current, ready=ready),
        signals=Signals(concurrency=concurrency),
    )


def policy(**kw: Any) -> kpa.KPAPolicy:
    kw.setdefault("target", 10.0)
    kw.setdefault("max_scale", 1000)
    return kpa.KPAPolicy(kpa.KPAConfig(**kw))


Load = Callable[[float], float | None]


def run(
    p: kpa.KPAPolicy,
    load: Load,
    ticks: int,
    *,
    ready: int | Callable[[int], int],
    state: State | None = None,
    start: float = T0,
) -> tuple[list[Decision], State]:
    """Decide every tick; ``ready`` is fixed or a function of the applied count."""
    state = p.initial_state() if state is None else state
    decisions: list[Decision] = []
    current = ready if isinstance(ready, int) else 1
    for i in range(ticks):
        t = start + i * p.period_s
        now_ready = ready if isinstance(ready, int) else ready(current)
        decision, state = p.decide(snap(t, load(t), now_ready, current), state)
        current = decision.replicas
        decisions.append(decision)
    return decisions, state


def steady(value: float | None) -> Load:
    return lambda _t: value


def step(before: float, after: float, at: float) -> Load:
    return lambda t: before if t < at else after


def calm(p: kpa.KPAPolicy, value: float, ready: int) -> State:
    """A minute of steady load on ``ready`` pods, initial panic mode long gone."""
    _, state = run(p, steady(value), 40, ready=ready, start=T0 - 80)
    return state


# ------------------------------------------------------------------ stable mode


def test_steady_state() -> None:
    # Scale: ceil(28 / 7) = 4 pods for 28 in flight, every tick, in stable mode.
    p = policy()
    decisions, _ = run(p, steady(28.0), 30, ready=4, state=calm(p, 28.0, 4))
    assert {(d.replicas, d.reason, d.signal) for d in decisions} == {
        (4, Reason.SIGNAL, "concurrency")
    }


def test_start_from_one_pod_panics_up_then_settles() -> None:
    # 28 in flight on 1 ready pod: ceil(28 / 7) / 1 = 4 >= 2 -> panic to 4 at once; a
    # stable window after the last over-threshold tick it is stable mode at 4.
    decisions, _ = run(policy(), steady(28.0), 40, ready=lambda current: current)
    assert (decisions[0].replicas, decisions[0].reason) == (4, Reason.PANIC)
    assert (decisions[-1].replicas, decisions[-1].reason) == (4, Reason.SIGNAL)


def test_stable_window_is_a_plain_average() -> None:
    # collector.go builds TimedFloat64Buckets (the default, non-weighted aggregation):
    # WindowAverage = sum of 1 s buckets / 60 once the window is full.
    p = policy()
    state = calm(p, 7.0, 3)
    decisions, _ = run(p, steady(21.0), 5, ready=3, state=state)
    for k, decision in enumerate(decisions, start=1):
        average = (7.0 * (60 - 2 * k) + 21.0 * 2 * k) / 60
        assert decision.proposals["concurrency"] == pytest.approx(average / 7.0)
    # 10 s of 21 in a minute of 7: ceil(9.333 / 7) = 2 pods.
    assert decisions[-1].replicas == 2


def test_partial_window_at_start() -> None:
    # WindowAverage divides by the buckets since the first write, not the whole window.
    decisions, _ = run(policy(), steady(14.0), 1, ready=1)
    assert decisions[0].proposals["concurrency"] == pytest.approx(2.0)
    assert decisions[0].replicas == 2


# ------------------------------------------------------------------ panic mode


@pytest.mark.parametrize(
    ("burst", "panics"),
    [
        # isOverPanicThreshold := dppc / readyPodsCount >= PanicThreshold (2.0):
        # ceil(28 / 7) / 2 = 2.0 -> panic; ceil(21 / 7) / 2 = 1.5 -> no.
        pytest.param(28.0, True, id="200pct-enters"),
        pytest.param(27.9, True, id="ceil-rounds-up"),
        pytest.param(21.0, False, id="150pct-stays-stable"),
    ],
)
def test_panic_entry_threshold(burst: float, panics: bool) -> None:
    p = policy()
    state = calm(p, 7.0, 2)
    decisions, _ = run(p, steady(burst), 3, ready=2, state=state)  # fills the 6 s window
    assert (decisions[-1].reason is Reason.PANIC) is panics


def test_panic_scales_on_the_panic_window() -> None:
    # In panic, desired = max(stable, panic): the 6 s average (84) asks for 12 while the
    # stable average still says 4.
    p = policy()
    state = calm(p, 28.0, 4)
    decisions, _ = run(p, steady(84.0), 3, ready=4, state=state)
    assert (decisions[-1].replicas, decisions[-1].reason) == (12, Reason.PANIC)
    assert decisions[-1].proposals["concurrency"] < 5


def test_no_scale_down_during_panic() -> None:
    # Scale: "We do not scale down while in panic mode" (maxPanicPods only grows).
    p = policy()
    state = calm(p, 28.0, 4)
    burst, state = run(p, steady(84.0), 3, ready=4, state=state)
    assert burst[-1].replicas == 12
    after, _ = run(p, steady(7.0), 25, ready=12, state=state, start=T0 + 6)
    assert all(d.replicas == 12 and d.reason is Reason.PANIC for d in after)


def test_panic_exits_after_a_stable_window() -> None:
    # Scale: un-panic once panicTime + StableWindow is strictly before now, panicTime
    # being the last tick over the threshold.
    p = policy()
    state = calm(p, 28.0, 4)
    _, state = run(p, steady(84.0), 3, ready=4, state=state)  # last over threshold: T0+4
    last_over = T0 + 4
    tail, _ = run(p, steady(7.0), 33, ready=12, state=state, start=T0 + 6)
    by_time = {T0 + 6 + 2 * i: d for i, d in enumerate(tail)}
    assert by_time[last_over + 60].reason is Reason.PANIC
    exited = by_time[last_over + 62]
    assert exited.reason is not Reason.PANIC
    # Back in stable mode the count may fall, at most halving per decision.
    assert exited.replicas == 6


def test_fresh_autoscaler_with_several_pods_starts_in_panic() -> None:
    # newAutoscaler: created in panic mode when more than one pod is ready, so no
    # scale-down happens before the history refills.
    p = policy()
    decisions, state = run(p, steady(7.0), 31, ready=6)
    assert all(d.reason is Reason.PANIC and d.replicas == 6 for d in decisions)
    after, _ = run(p, steady(7.0), 2, ready=6, state=state, start=T0 + 62)
    assert after[-1].reason is not Reason.PANIC


# ------------------------------------------------------------------ rate limits and bounds


def test_scale_up_rate_limit() -> None:
    # maxScaleUp = ceil(MaxScaleUpRate x readyPodsCount); ready 0 counts as 1.
    p = policy(max_scale_up_rate=2.0)
    state = calm(p, 14.0, 2)
    decisions, _ = run(p, steady(70.0), 1, ready=2, state=state)
    assert decisions[0].replicas == 4  # panic wants 10, capped at 2 x 2
    none_ready, _ = run(policy(max_scale_up_rate=2.0), steady(70.0), 1, ready=0)
    assert none_ready[0].replicas == 2  # max(1, 0 ready) x 2
    # The same cap in stable mode (panic threshold raised out of the way).
    p = policy(max_scale_up_rate=2.0, panic_threshold_percentage=1000.0)
    stable_up, _ = run(p, steady(70.0), 1, ready=2, state=calm(p, 70.0, 2))
    assert (stable_up[0].replicas, stable_up[0].reason) == (4, Reason.RATE_LIMITED_UP)


def test_default_scale_up_rate_allows_huge_jumps() -> None:
    # max-scale-up-rate 1000: from 1 ready pod to 300 in one decision.
    decisions, _ = run(policy(), steady(2100.0), 1, ready=1)
    assert decisions[0].replicas == 300


def test_scale_down_rate_limit() -> None:
    # maxScaleDown = floor(readyPodsCount / MaxScaleDownRate): at most halve per decision.
    p = policy()
    state = calm(p, 70.0, 10)
    decisions, _ = run(p, steady(0.0), 1, ready=10, state=state)
    assert (decisions[0].replicas, decisions[0].reason) == (10, Reason.SIGNAL)  # avg still 70
    quiet = calm(p, 0.0, 10)
    decisions, _ = run(p, steady(0.0), 1, ready=10, state=quiet)
    assert (decisions[0].replicas, decisions[0].reason) == (5, Reason.RATE_LIMITED_DOWN)


@pytest.mark.parametrize(
    ("value", "lo", "hi", "expected", "reason"),
    [
        # kpa/scaler.go applyBounds: min-scale / max-scale after the decider.
        pytest.param(0.0, 3, 10, 3, Reason.AT_MIN, id="min"),
        pytest.param(140.0, 1, 10, 10, Reason.AT_MAX, id="max"),
        pytest.param(140.0, 1, 0, 20, Reason.PANIC, id="max-0-unbounded"),
        # No scale-to-zero: min 0 behaves as 1.
        pytest.param(0.0, 0, 10, 1, Reason.AT_MIN, id="no-scale-to-zero"),
    ],
)
def test_bounds(value: float, lo: int, hi: int, expected: int, reason: Reason) -> None:
    p = policy(min_scale=lo, max_scale=hi)
    decisions, _ = run(p, steady(value), 1, ready=1)
    assert (decisions[0].replicas, decisions[0].reason) == (expected, reason)


def test_scale_down_delay() -> None:
    # Scale: with scale-down-delay the count is the max over the delay window
    # (max.TimeWindow of ceil(10 s / 2 s) = 5 buckets: this tick and the 4 before it);
    # the default 0 s applies decisions at once.
    p = policy(scale_down_delay_s=10)
    state = calm(p, 28.0, 4)
    decisions, _ = run(p, step(28.0, 0.0, T0), 40, ready=4, state=state)
    first_drop = next(i for i, d in enumerate(decisions) if d.replicas < 4)
    assert decisions[first_drop - 1].reason is Reason.STABILIZING
    undelayed, _ = run(policy(), step(28.0, 0.0, T0), 40, ready=4, state=calm(policy(), 28.0, 4))
    undelayed_drop = next(i for i, d in enumerate(undelayed) if d.replicas < 4)
    assert first_drop - undelayed_drop == 4


@pytest.mark.parametrize("reachable", [True, False], ids=["reachable", "unreachable"])
def test_scale_down_delay_applies_whether_or_not_reachable(reachable: bool) -> None:
    # autoscaler.go Scale records into the delay window whenever ScaleDownDelay > 0;
    # reachability only lifts the max-scale-down-rate floor. Upstream's
    # TestAutoscalerScaleDownDelay (target 10, MaxScaleDownRate 10, PanicThreshold 100,
    # ScaleDownDelay 5 min) runs with Reachable unset, i.e. unreachable, and still waits.
    p = policy(
        target=10.0,
        target_utilization=1.0,
        max_scale_down_rate=10.0,
        panic_threshold_percentage=10_000.0,
        scale_down_delay_s=300,
        stable_window_s=6,
        reachable=reachable,
    )
    decisions, _ = run(p, step(40.0, 0.0, T0 + 19), 162, ready=4)
    by_time = {round(T0 + i * 2.0): d for i, d in enumerate(decisions)}
    # 4 pods up to T0+18 (the last tick whose 6 s average is 40).
    assert all(by_time[round(T0 + s)].replicas == 4 for s in range(0, 20, 2))
    # From T0+20 the decider wants 3, 2, then 0, but the 300 s window (150 two-second
    # buckets) keeps the 4 recorded at T0+18 until T0+316.
    held = [by_time[round(T0 + s)] for s in range(20, 318, 2)]
    assert {d.replicas for d in held} == {4}
    assert {d.reason for d in held} == {Reason.STABILIZING}
    # Then each lower count scrolls out in turn: 3 (T0+20), 2 (T0+22), 0 -> min 1.
    assert [by_time[round(T0 + s)].replicas for s in (318, 320, 322)] == [3, 2, 1]


@pytest.mark.parametrize(
    ("reachable", "value", "expected", "reason"),
    [
        # PodAutoscaler.ScaleBounds: min-scale is ignored for an unreachable revision.
        pytest.param(True, 0.0, 3, Reason.AT_MIN, id="reachable-idle"),
        pytest.param(False, 0.0, 1, Reason.AT_MIN, id="unreachable-idle"),
        pytest.param(True, 14.0, 3, Reason.AT_MIN, id="reachable-load"),
        # 14 in flight on 1 pod: ceil(14 / 7) = 2 pods, 2 / 1 >= 200 %: panic, no bound.
        pytest.param(False, 14.0, 2, Reason.PANIC, id="unreachable-load"),
    ],
)
def test_min_scale_only_while_reachable(
    reachable: bool, value: float, expected: int, reason: Reason
) -> None:
    p = policy(min_scale=3, max_scale=10, reachable=reachable)
    decisions, _ = run(p, steady(value), 1, ready=1)
    assert (decisions[0].replicas, decisions[0].reason) == (expected, reason)


def test_unreachable_drops_without_the_rate_limit() -> None:
    # Scale: maxScaleDown = floor(ready / 2) only when Reachable; otherwise 0.
    quiet = calm(policy(reachable=False), 0.0, 10)
    decisions, _ = run(policy(reachable=False), steady(0.0), 1, ready=10, state=quiet)
    assert (decisions[0].replicas, decisions[0].reason) == (1, Reason.AT_MIN)


def test_two_decisions_in_one_delay_bucket_keep_the_larger() -> None:
    # max.window Record, step 2b: a second record in the same bucket keeps the max.
    p = policy(scale_down_delay_s=10)
    state = calm(p, 28.0, 4)
    high, state = p.decide(snap(T0, 28.0, 4), state)
    low, _ = p.decide(snap(T0 + 1, 0.0, 4), state)  # same 2 s bucket as T0
    assert (high.replicas, low.replicas) == (4, 4)


def test_state_from_another_window_size_starts_over() -> None:
    # ResizeWindow is not modelled: buckets of a different size are dropped.
    long_window = policy(stable_window_s=120)
    state = calm(long_window, 28.0, 4)
    decisions, _ = run(policy(), steady(7.0), 1, ready=4, state=state)
    assert decisions[0].proposals["concurrency"] == pytest.approx(1.0)


def test_activation_scale() -> None:
    # Scale: with activation-scale > 1 any non-zero demand asks for at least that many.
    decisions, _ = run(policy(activation_scale=3), steady(1.0), 1, ready=1)
    assert decisions[0].replicas == 3


# ------------------------------------------------------------------ missing data


def test_no_data_holds() -> None:
    # Scale returns invalidSR on ErrNoData (no write within the stable window): the scaler
    # leaves the scale where it is.
    decisions, _ = run(policy(), steady(None), 3, ready=3)
    assert {(d.replicas, d.reason) for d in decisions} == {(3, Reason.METRICS_MISSING)}


def test_short_gap_decides_on_history_then_holds() -> None:
    # WindowAverage after the last write averages the buckets that have data; after a
    # whole stable window without data the collector reports no data.
    p = policy()
    state = calm(p, 28.0, 4)
    decisions, _ = run(p, steady(None), 32, ready=4, state=state)
    assert decisions[0].replicas == 4 and decisions[0].reason is Reason.SIGNAL
    assert decisions[0].proposals["concurrency"] == pytest.approx(4.0)
    assert decisions[-1].reason is Reason.METRICS_MISSING


def test_gap_inside_the_window_counts_as_zero() -> None:
    # Record zeroes the buckets skipped since the last write: a missed tick is 0 in flight.
    p = policy()
    state = calm(p, 14.0, 2)
    gap = {T0: None}
    decisions, _ = run(p, lambda t: gap.get(t, 14.0), 2, ready=2, state=state)
    expected = (14.0 * 58) / 60  # two of the sixty buckets are empty
    assert decisions[1].proposals["concurrency"] == pytest.approx(expected / 7.0, abs=1e-6)


# ------------------------------------------------------------------ config and state


def test_effective_target_and_windows() -> None:
    # ResolveMetricTarget: target x utilization, capped by containerConcurrency, >= 0.01.
    assert kpa.KPAConfig(target=10).target_value == pytest.approx(7.0)
    assert kpa.KPAConfig(target=10, container_concurrency=4).target_value == pytest.approx(2.8)
    assert kpa.KPAConfig(target=0.001).target_value == 0.01
    # MakeMetric: panic window = 10 % of the stable window, rounded, at least 1 s.
    assert kpa.KPAConfig(target=1).panic_window_s == 6
    assert kpa.KPAConfig(target=1, stable_window_s=6).panic_window_s == 1
    assert kpa.KPAConfig(target=1, stable_window_s=25).panic_window_s == 3  # 2.5 s -> 3 s
    defaults = kpa.KPAConfig(target=1)
    assert (defaults.max_scale_up_rate, defaults.max_scale_down_rate) == (1000.0, 2.0)
    assert (defaults.panic_threshold, defaults.stable_window_s) == (2.0, 60)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target": 0},
        {"target": 1, "target_utilization": 1.5},
        {"target": 1, "max_scale_down_rate": 1.0},
        {"target": 1, "stable_window_s": 5},
        {"target": 1, "min_scale": 5, "max_scale": 2},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="KPAConfig"):
        kpa.KPAConfig(**kwargs)


def test_from_config() -> None:
    cfg = config.AutoscalingConfig(
        min_replicas=2,
        max_replicas=40,
        signals=(
            config.SignalTarget(config.SignalType.CPU, 70.0),
            config.SignalTarget(config.SignalType.CONCURRENCY, 8.0),
        ),
        stable_window_s=30.0,  # servectl's own knob: the baseline keeps Knative's 60 s
    )
    p = kpa.from_config(cfg)
    assert p.config == kpa.KPAConfig(target=8.0, min_scale=2, max_scale=40)
    assert (p.name, p.period_s) == ("kpa", 2.0)
    with pytest.raises(ValueError, match="concurrency"):
        kpa.from_config(config.AutoscalingConfig())


def test_state_round_trips_through_json() -> None:
    loads: Sequence[float | None] = [7.0] * 20 + [84.0] * 10 + [None] * 3 + [3.0] * 60
    p = policy()

    def play(codec: bool) -> list[Decision]:
        state = p.initial_state()
        current, out = 1, []
        for i, value in enumerate(loads):
            decision, state = p.decide(snap(T0 + 2 * i, value, min(current, 6), current), state)
            if codec:
                state = json.loads(json.dumps(state))
            current = decision.replicas
            out.append(decision)
        return out

    plain, through_json = play(False), play(True)
    assert plain == through_json
    assert {d.reason for d in plain} >= {Reason.PANIC, Reason.SIGNAL}
