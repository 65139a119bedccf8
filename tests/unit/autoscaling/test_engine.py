"""servectl's default policy: proposals, panic, rails, missing metrics, recommend mode."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from servectl.autoscaling import (
    cel_policy,
    config,
    engine,
    engine_learning,
    engine_state,
    queueing,
    signals,
)
from servectl.autoscaling.decision import Reason
from servectl.autoscaling.engine_state import EngineState
from servectl.autoscaling.snapshot import PodSample, RolloutInfo, Snapshot
from servectl.testing import drive, make_snapshot

CPU70 = config.SignalTarget(config.SignalType.CPU, 70.0)
P99 = config.SignalTarget(config.SignalType.LATENCY, 150.0, 99.0)


def cfg(**kw: object) -> config.AutoscalingConfig:
    base: dict[str, object] = {
        "min_replicas": 1,
        "max_replicas": 50,
        "signals": (CPU70,),
        "threads_per_replica": 2,
        "cold_start_s": 30.0,
    }
    base.update(kw)
    return config.AutoscalingConfig(**base)  # type: ignore[arg-type]


def test_cpu_proportional_on_demand() -> None:
    # 14 cores of demand / (2 cores x 70 %) = 10 replicas; 1 request/s per 20 ms of CPU.
    policy = engine.EnginePolicy(cfg())
    decision, _ = policy.decide(make_snapshot(current=8, rps=700.0, cpu_usage_cores=14.0), {})
    assert decision.replicas == 10
    assert decision.reason is Reason.SIGNAL
    assert decision.signal == "cpu"
    assert decision.proposals["cpu"] == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("wanted", "replicas", "reason"),
    [
        (10.5, 10, Reason.WITHIN_TOLERANCE),  # +5 %: within 10 %
        (9.0, 10, Reason.WITHIN_TOLERANCE),  # -10 %: still within
        (9.5, 10, Reason.SIGNAL),  # ceil(9.5) is what runs
        (11.5, 12, Reason.SIGNAL),
        (8.0, 8, Reason.SIGNAL),
    ],
)
def test_a_set_point_holds_within_the_tolerance_either_way(
    wanted: float, replicas: int, reason: Reason
) -> None:
    # CPU 70 % of 2 cores at 20 ms a request: `wanted` replicas is wanted x 70 req/s.
    policy = engine.EnginePolicy(cfg())
    rps = wanted * 70.0
    decision, _ = policy.decide(
        make_snapshot(current=10, rps=rps, cpu_usage_cores=rps * 0.02), {"service_s": 0.02}
    )
    assert decision.proposals["cpu"] == pytest.approx(wanted)
    assert (decision.replicas, decision.reason) == (replicas, reason)


@pytest.mark.parametrize(
    ("wanted", "replicas", "reason"),
    [
        (10.2, 10, Reason.WITHIN_TOLERANCE),  # up 2 %: within the 3 % up tolerance
        (10.5, 11, Reason.SIGNAL),  # up 5 %: past it
        (9.0, 10, Reason.WITHIN_TOLERANCE),  # 9 x 1.1 = 9.9 -> 10: no room to shrink
        (8.0, 9, Reason.SIGNAL),  # 8.8 -> 9: down to the count with 10 % headroom
        (5.0, 6, Reason.SIGNAL),  # 5.5 -> 6, not 5
    ],
)
def test_an_edge_is_tolerated_one_sided(wanted: float, replicas: int, reason: Reason) -> None:
    # The latency signal sizes to the most the SLO allows: no room above it.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    ask = signals.Proposal("latency_p99", wanted, "ask")
    desired, why, _ = policy._tolerate(ask, math.ceil(wanted), 10)
    assert (desired, why) == (replicas, reason)


def test_a_latency_ask_wandering_about_a_replica_boundary_does_not_flap() -> None:
    # The ask wanders between 7.8 and 8.3 replicas: up to 9 once it passes 8 x 1.03, then
    # it stays at 9: back to 8 would need an ask under 8 / 1.1 = 7.27.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    current, counts = 8, []
    for wanted in [7.8, 8.3, 7.9, 8.1, 7.8, 8.2, 7.9, 8.0] * 4:
        ask = signals.Proposal("latency_p99", wanted, "ask")
        current = policy._tolerate(ask, math.ceil(wanted), current)[0]
        counts.append(current)
    assert counts[0] == 8 and set(counts[1:]) == {9}


def test_overload_panics_past_the_rate_limit() -> None:
    # Demand 1000 req/s x 20 ms = 20 cores on 2 ready replicas (4 cores, saturated):
    # overloaded; the saturated CPU reading must not teach a 4 ms service time.
    # The rate limit alone would allow max(2 x 2, 2 + 4) = 6; panic goes straight to 15.
    policy = engine.EnginePolicy(cfg())
    decision, state = policy.step(
        make_snapshot(current=2, rps=1000.0, cpu_usage_cores=4.0), EngineState(service_s=0.02)
    )
    assert decision.reason is Reason.PANIC
    assert decision.replicas == math.ceil(20.0 / 1.4)
    assert state.panic_until == pytest.approx(1000.0 + 60.0)


def test_no_scale_down_during_panic() -> None:
    policy = engine.EnginePolicy(cfg())
    _, state = policy.decide(
        make_snapshot(current=2, rps=1000.0, cpu_usage_cores=4.0), {"service_s": 0.02}
    )
    # 30 s later the load vanished; still in panic (hold 60 s): keep 15.
    decision, _ = policy.decide(
        make_snapshot(1030.0, current=15, rps=10.0, cpu_usage_cores=0.2), state
    )
    assert decision.replicas == 15
    assert decision.reason is Reason.PANIC


def test_scale_down_waits_for_the_stabilization_window_then_rate_limits() -> None:
    policy = engine.EnginePolicy(cfg())

    def at(t: float, current: int) -> object:
        load = 700.0 if t < 1100 else 140.0  # 10 replicas' worth, then 2
        return make_snapshot(t, current=current, rps=load, cpu_usage_cores=load * 0.02)

    timeline = drive(policy, at, start=1000.0, ticks=200, initial=10)  # type: ignore[arg-type]
    by_time = dict(timeline)
    # The last high recommendation was at t=1098; for the 120 s after it nothing shrinks.
    assert all(d.replicas == 10 for t, d in timeline if t <= 1098 + 120 - 2)
    held = [d for t, d in timeline if 1100 <= t < 1218]
    assert held and all(d.reason is Reason.STABILIZING for d in held)
    # Then at most 50 % per 30 s: 10 -> 5 at t=1218, 5 -> 2 (the target) at t=1248.
    assert by_time[1218.0].replicas == 5
    assert by_time[1218.0].reason is Reason.RATE_LIMITED_DOWN
    assert by_time[1246.0].replicas == 5
    assert by_time[1248.0].replicas == 2
    assert timeline[-1][1].replicas == 2
    assert by_time[1000.0].replicas == 10


def test_all_metrics_missing_holds() -> None:
    policy = engine.EnginePolicy(cfg())
    decision, _ = policy.decide(make_snapshot(current=7), {})
    assert decision.replicas == 7
    assert decision.reason is Reason.METRICS_MISSING
    assert "cpu" in decision.detail


def test_partial_metrics_never_shrink_but_may_grow() -> None:
    policy = engine.EnginePolicy(
        cfg(signals=(CPU70, config.SignalTarget(config.SignalType.GPU, 80)))
    )
    low, _ = policy.decide(make_snapshot(current=8, rps=70.0, cpu_usage_cores=1.4), {})
    assert low.replicas == 8
    assert low.reason is Reason.METRICS_MISSING
    assert "gpu" in low.detail
    high, _ = policy.decide(make_snapshot(current=8, rps=800.0, cpu_usage_cores=16.0), {})
    assert high.replicas > 8


def test_cpu_over_part_of_the_ready_replicas_never_shrinks_but_may_grow() -> None:
    """Replicas settling after a scale-out serve their share, their CPU not counted yet
    (their rate window holds their model's load): CPU read over the others is a lower
    bound. A demo on a real node scaled 3 -> 2 -> 1 under a steady load that way."""
    policy = engine.EnginePolicy(cfg())

    def pods(counted: int, ready: int, each: float) -> tuple[PodSample, ...]:
        return tuple(
            PodSample(
                name=f"pod-{i}",
                ready=i < counted,  # as the controller marks them: counted or not
                cpu_usage_cores=each if i < counted else None,
                cpu_request_cores=2.0,
            )
            for i in range(ready)
        )

    # 3 ready, 1 counted at 1.4 cores: "1 replica" of CPU, but 2 replicas unheard.
    low, _ = policy.decide(
        make_snapshot(current=3, rps=70.0, cpu_usage_cores=1.4, pods=pods(1, 3, 1.4)), {}
    )
    assert low.replicas == 3 and low.reason is Reason.METRICS_MISSING
    assert "cpu counts 1 of 3 ready replicas: never shrink" in low.detail
    # The lower bound alone asks for more: it grows.
    high, _ = policy.decide(
        make_snapshot(current=3, rps=700.0, cpu_usage_cores=9.0, pods=pods(1, 3, 9.0)), {}
    )
    assert high.replicas > 3
    # Every ready replica counted: it shrinks as before.
    whole, _ = policy.decide(
        make_snapshot(current=3, rps=70.0, cpu_usage_cores=1.4, pods=pods(3, 3, 1.4 / 3)), {}
    )
    assert whole.replicas < 3


def test_stale_signals_count_as_missing() -> None:
    policy = engine.EnginePolicy(cfg())
    decision, _ = policy.decide(
        make_snapshot(current=9, rps=70.0, cpu_usage_cores=1.4, age_s=300.0), {}
    )
    assert decision.replicas == 9
    assert decision.reason is Reason.METRICS_MISSING
    assert "old" in decision.detail


def test_recommend_mode_decides_but_does_not_act() -> None:
    policy = engine.EnginePolicy(cfg(mode=config.Mode.RECOMMEND))
    snap = make_snapshot(current=4, rps=700.0, cpu_usage_cores=14.0)
    decision, state = policy.step(snap, EngineState())
    assert decision.replicas == 4
    assert decision.recommended == 10
    assert decision.reason is Reason.RECOMMEND_ONLY
    assert "would set 10" in decision.detail
    assert state.behavior.scale_events == ()


def test_latency_signal_sizes_with_erlang_c() -> None:
    policy = engine.EnginePolicy(cfg(signals=(CPU70, P99)))
    state = {"service_s": 0.02, "wait_budget_s": 0.1}
    decision, _ = policy.decide(
        make_snapshot(current=16, rps=1000.0, cpu_usage_cores=20.0, latency_ms={"p99": 120.0}),
        state,
    )
    # Budget 100 ms at 1000 req/s, 20 ms, 2 threads: 17 replicas fit, 16 do not
    # (docs/autoscaling.md); the proposal says how far between: 1000 req/s over the
    # most one replica serves within the budget.
    expected = queueing.replicas_for_latency(1000.0, 0.02, 2, 0.99, 0.1, 50)
    assert expected == 17
    one = queueing.max_rate(1, 0.02, 2, 0.99, 0.1)
    assert decision.proposals["latency_p99"] == pytest.approx(1000.0 / one)
    assert 16 < decision.proposals["latency_p99"] <= 17
    assert decision.proposals["cpu"] == pytest.approx(20 / 1.4)
    assert decision.signal == "latency_p99"


def _steady(t: float, p99: float, current: int = 12) -> Snapshot:
    return make_snapshot(
        t, current=current, rps=600.0, cpu_usage_cores=12.0, latency_ms={"p99": p99}
    )


def test_latency_over_aim_shrinks_the_budget_and_grows_the_proposal() -> None:
    # Observed p99 (200 ms) far above the aim (0.8 x 150 ms): the learnt wait budget
    # shrinks, so the latency proposal grows.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state = EngineState(service_s=0.02, wait_budget_s=0.1)
    first, state = policy.step(_steady(1000.0, 200.0), state)
    for t in range(1, 60):
        later, state = policy.step(_steady(1000.0 + 2 * t, 200.0), state)
    assert state.wait_budget_s is not None and state.wait_budget_s < 0.05
    assert later.proposals["latency_p99"] > first.proposals["latency_p99"]


def test_latency_well_under_aim_near_the_budget_grows_the_budget() -> None:
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    # 600 req/s on 12 replicas: 50 req/s each, modelled p99 wait ~70 ms, near the budget.
    state = EngineState(service_s=0.02, wait_budget_s=0.08)
    for t in range(60):
        _, state = policy.step(_steady(1000.0 + 2 * t, 60.0), state)
    assert state.wait_budget_s is not None and state.wait_budget_s > 0.08


def test_latency_transients_teach_nothing() -> None:
    # Replicas still starting (ready < current): a 5 s p99 is queueing during a cold
    # start, not the service's nature; the budget must not move, and it must not move
    # for SETTLE_S after either.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state = EngineState(service_s=0.02, wait_budget_s=0.1)
    snap = make_snapshot(
        1000.0, current=14, ready=12, rps=600.0, cpu_usage_cores=12.0, latency_ms={"p99": 5000.0}
    )
    _, state = policy.step(snap, state)
    assert state.wait_budget_s == 0.1
    settle_s = engine_learning.SETTLE_S
    _, state = policy.step(_steady(1000.0 + settle_s - 2, 5000.0, current=14), state)
    assert state.wait_budget_s == 0.1
    _, state = policy.step(_steady(1000.0 + settle_s + 2, 5000.0, current=14), state)
    assert state.wait_budget_s is not None and state.wait_budget_s < 0.1


def test_first_budget_is_calibrated_on_the_first_observation() -> None:
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    _, state = policy.step(_steady(1000.0, 65.0), EngineState(service_s=0.02))
    wait = queueing.wait_quantile_s(50.0, 0.02, 2, 0.99)
    prior = wait + 0.12 - 0.065
    # The same tick learns from it: 65 ms is under 0.9 x the 120 ms aim with the modelled
    # wait a real share of the budget, so the budget grows by the room over one tick.
    assert wait >= engine_learning.BUDGET_EVIDENCE * prior
    grown = prior + (0.9 * 0.12 - 0.065) / engine_learning.BUDGET_LEARN_S * 2.0
    assert state.wait_budget_s == pytest.approx(grown)


def test_rising_load_is_projected_one_cold_start_ahead() -> None:
    policy = engine.EnginePolicy(cfg())
    state: dict[str, object] = {"service_s": 0.02}
    for i in range(31):  # +2 req/s per second over a minute
        t = 1000.0 + 2 * i
        rate = 500.0 + 2 * (t - 1000.0)
        decision, state = policy.decide(
            make_snapshot(t, current=12, rps=rate, cpu_usage_cores=rate * 0.02), state
        )
    # Now 620 req/s rising 2/s: horizon 32 s -> 684 req/s -> 13.68 cores -> 9.8 replicas.
    assert decision.proposals["cpu"] == pytest.approx(684 * 0.02 / 1.4, rel=0.02)


def test_flat_noisy_load_has_no_trend() -> None:
    policy = engine.EnginePolicy(cfg())
    state: dict[str, object] = {"service_s": 0.02}
    noise = [0, 9, -7, 4, -3, 8, -9, 2, 6, -5, 1, -2, 7, -8, 3, -4]
    for i, n in enumerate(noise * 2):
        rate = 600.0 + n
        decision, state = policy.decide(
            make_snapshot(1000.0 + 2 * i, current=9, rps=rate, cpu_usage_cores=rate * 0.02),
            state,
        )
    assert decision.proposals["cpu"] == pytest.approx(rate * 0.02 / 1.4, rel=1e-6)


def test_custom_policy_decides_and_rails_still_apply() -> None:
    program = cel_policy.compile_expression('{"replicas": recommended + 100, "reason": "greedy"}')
    policy = engine.EnginePolicy(cfg(max_replicas=12), engine.CustomPolicy("greedy", program))
    decision, _ = policy.decide(make_snapshot(current=10, rps=700.0, cpu_usage_cores=14.0), {})
    assert decision.replicas == 12  # max still wins over the policy
    assert decision.reason is Reason.AT_MAX
    assert "greedy" in decision.detail


def test_custom_policy_error_falls_back_to_the_recommendation() -> None:
    # A string on one branch: compiles (it may never be taken), fails when it is.
    program = cel_policy.compile_expression("signals.rps / 0.0 > 1.0 ? 'many' : 1")
    policy = engine.EnginePolicy(cfg(), engine.CustomPolicy("broken", program))
    decision, _ = policy.decide(make_snapshot(current=8, rps=700.0, cpu_usage_cores=14.0), {})
    assert decision.replicas == 10
    assert decision.reason is Reason.POLICY_ERROR
    assert "broken" in decision.detail


def test_custom_policy_result_is_reported_as_policy() -> None:
    program = cel_policy.compile_expression("recommended + 1")
    policy = engine.EnginePolicy(cfg(), engine.CustomPolicy("plus-one", program))
    decision, _ = policy.decide(make_snapshot(current=10, rps=700.0, cpu_usage_cores=14.0), {})
    assert decision.replicas == 11
    assert decision.reason is Reason.POLICY


def test_state_survives_json_round_trip() -> None:
    policy = engine.EnginePolicy(cfg(signals=(CPU70, P99)))
    state_a: dict[str, object] = {}
    state_b: dict[str, object] = {}
    for i in range(40):
        t = 1000.0 + 2 * i
        rate = 300.0 + 10 * i
        snap = make_snapshot(
            t, current=8, rps=rate, cpu_usage_cores=rate * 0.02, latency_ms={"p99": 90.0}
        )
        a, state_a = policy.decide(snap, state_a)
        b, state_b = policy.decide(snap, json.loads(json.dumps(state_b)))
        assert a == b


def test_min_above_max_is_rejected() -> None:
    with pytest.raises(ValueError, match="minReplicas"):
        engine.EnginePolicy(cfg(min_replicas=5, max_replicas=3))


def test_service_time_is_learnt_from_cpu_per_request() -> None:
    policy = engine.EnginePolicy(cfg())
    state = EngineState()
    for i in range(60):
        _, state = policy.step(
            make_snapshot(1000.0 + 2 * i, current=10, rps=500.0, cpu_usage_cores=15.0), state
        )
    assert state.service_s == pytest.approx(0.03)


def test_no_ready_replicas_with_load_panics_up() -> None:
    policy = engine.EnginePolicy(cfg())
    decision, _ = policy.decide(
        make_snapshot(current=1, ready=0, rps=100.0, cpu_usage_cores=None, cpu_utilization=None),
        {"service_s": 0.02},
    )
    # No CPU signal, nothing ready: hold is all one can do without any signal.
    assert decision.replicas == 1
    assert decision.reason is Reason.METRICS_MISSING


def _overloaded(
    t: float, current: int, ready: int, inflight: float, rps: float = 400.0
) -> Snapshot:
    # `ready` 2-core replicas, CPU pinned at capacity, a queue building up.
    return make_snapshot(
        t,
        current=current,
        ready=ready,
        rps=rps,
        cpu_usage_cores=2.0 * ready,
        concurrency=inflight,
    )


def test_queue_growth_reveals_the_arrival_rate_before_the_rate_window() -> None:
    # 3 ready replicas complete 300 req/s (6 cores / 20 ms); the queue grew by 1000
    # requests in 2 s, so 800 req/s arrive, although the 10 s rate still shows 400.
    policy = engine.EnginePolicy(cfg())
    state: dict[str, object] = {"service_s": 0.02, "inflight": [998.0, 10.0]}
    decision, _ = policy.decide(_overloaded(1000.0, 3, 3, inflight=1010.0), state)
    assert decision.reason is Reason.PANIC
    assert decision.signal == "backlog"
    assert "800 req/s" in decision.detail
    # The queue found by capacity ordered now (30 s away): 1010 - 16 + 500 x 30 requests;
    # draining them in DRAIN_S plus the load would take 1.9 x 10^2 replicas. They sit on
    # the 3 ready replicas, though: the proposal is capped at those plus DRAIN_HEADROOM x
    # the load's own need, 3 + 2 x 800 x 20 ms / (2 cores x 70 %) = 25.86.
    drain = (800 * 0.02 + (1010 - 16 + 500 * 30) * 0.02 / engine.DRAIN_S) / 1.4
    capped = 3 + engine.DRAIN_HEADROOM * 800 * 0.02 / 1.4
    assert capped < drain
    assert decision.proposals["backlog"] == pytest.approx(capped, rel=1e-3)
    assert decision.replicas == 26


def test_both_routings_size_for_the_load_beside_the_backlogged_replicas() -> None:
    # The same overload as above. Behind least request the 3 ready replicas get no new
    # requests until their queue is gone; behind round robin they keep getting 1/n, so
    # more replicas help them drain, but less and less. Both size 3 + 2 x the load's need;
    # the detail says why in the routing's terms.
    lr = dataclasses.replace(cfg(), routing=config.Routing.LEAST_REQUEST)
    state: dict[str, object] = {"service_s": 0.02, "inflight": [998.0, 10.0]}
    decision, _ = engine.EnginePolicy(lr).decide(_overloaded(1000.0, 3, 3, inflight=1010.0), state)
    assert decision.reason is Reason.PANIC and decision.signal == "backlog"
    headroom = engine.DRAIN_HEADROOM
    assert decision.proposals["backlog"] == pytest.approx(3 + headroom * 800 * 0.02 / 1.4, rel=1e-3)
    assert decision.replicas == 26
    assert "least request routes new requests elsewhere" in decision.detail
    rr, _ = engine.EnginePolicy(cfg()).decide(_overloaded(1000.0, 3, 3, inflight=1010.0), state)
    assert rr.replicas == 26
    assert rr.proposals["backlog"] == decision.proposals["backlog"]
    assert "more replicas only shrink their share of new requests" in rr.detail


def test_a_standby_pool_that_covers_the_scale_up_lands_it_in_an_activation() -> None:
    # The overload above with a standby pool (docs/standby.md): capacity ordered now lands
    # in 1 s, not 30, so the queue it finds is 1010 - 16 + 500 x 1 requests, and the
    # proposal is the drain formula's, under the cap: (16 + 1494 x 20 ms / DRAIN_S) / 1.4.
    state: dict[str, object] = {"service_s": 0.02, "inflight": [998.0, 10.0]}
    snap = _overloaded(1000.0, 3, 3, inflight=1010.0)
    pooled = dataclasses.replace(cfg(), standby=20, activation_s=1.0)
    decision, _ = engine.EnginePolicy(pooled).decide(snap, dict(state))
    drain = (800 * 0.02 + (1010 - 16 + 500 * 1) * 0.02 / engine.DRAIN_S) / 1.4
    assert decision.proposals["backlog"] == pytest.approx(drain, rel=1e-3)
    assert "capacity lands in 1 s" in decision.detail
    assert decision.replicas == math.ceil(drain - 1e-9) < 26
    # A pool too small for that scale-up: the rest is a cold start away, as without one.
    small = dataclasses.replace(cfg(), standby=5, activation_s=1.0)
    without, _ = engine.EnginePolicy(cfg()).decide(snap, dict(state))
    decision, _ = engine.EnginePolicy(small).decide(snap, dict(state))
    assert decision.proposals["backlog"] == without.proposals["backlog"]
    assert decision.replicas == 26


def test_least_request_never_sizes_a_backlog_above_the_round_robin_drain() -> None:
    # A small queue: the drain formula asks for less than the ready + load bound, so
    # least request changes nothing.
    lr = dataclasses.replace(cfg(), routing=config.Routing.LEAST_REQUEST)
    # 10 ready replicas at capacity (1000 req/s x 20 ms = 20 cores), 10 requests queued:
    # (20 + 10 x 20 ms / 2 s) cores / 1.4 = 14.36, under 10 + 2 x 20 / 1.4 = 38.6.
    snap = _overloaded(1000.0, 10, 10, inflight=30.0, rps=1000.0)
    state: dict[str, object] = {"service_s": 0.02, "inflight": [998.0, 30.0]}
    a, _ = engine.EnginePolicy(lr).decide(snap, dict(state))
    b, _ = engine.EnginePolicy(cfg()).decide(snap, dict(state))
    assert a.proposals["backlog"] == pytest.approx((20 + 10 * 0.02 / engine.DRAIN_S) / 1.4)
    assert a.proposals["backlog"] == b.proposals["backlog"]
    assert a.replicas == b.replicas and a.detail == b.detail


def test_drain_overshoot_is_not_remembered_by_the_scale_down_window() -> None:
    policy = engine.EnginePolicy(cfg())
    state = EngineState(service_s=0.02, inflight=(998.0, 10.0))
    decision, state = policy.step(_overloaded(1000.0, 3, 3, inflight=1010.0), state)
    assert decision.replicas == 26
    remembered = [r for _, r in state.behavior.recommendations]
    # The load alone (800 req/s x 20 ms / 1.4 cores) asks for 12; that is what is kept.
    assert remembered == [12]


def test_panic_hold_ends_then_the_drained_service_shrinks_to_its_load() -> None:
    policy = engine.EnginePolicy(cfg())
    state: dict[str, object] = {"service_s": 0.02, "inflight": [998.0, 10.0]}
    decision, state = policy.decide(_overloaded(1000.0, 3, 3, inflight=1010.0), state)

    def calm(t: float, current: int) -> Snapshot:
        return make_snapshot(t, current=current, rps=800.0, cpu_usage_cores=16.0, concurrency=16.0)

    timeline = drive(policy, calm, start=1040.0, ticks=60, initial=decision.replicas, state=state)
    held = [d for t, d in timeline if t < 1000.0 + 60.0]
    assert held and all(d.replicas == 26 and d.reason is Reason.PANIC for d in held)
    # 800 req/s x 20 ms / 1.4 = 11.4 replicas: 12.
    assert timeline[-1][1].replicas == 12


@pytest.mark.parametrize("kind", ["panics", "surges", "regrets"])
def test_burst_memory_stands_capacity_for_the_recent_peak(kind: str) -> None:
    # Two panics, surges or re-grows in the last 10 minutes, and a peak of 700 req/s five
    # minutes ago: bursts recur faster than a cold start, so the capacity the peak asks
    # for (700 x 20 ms / (2 cores x 70 %) = 10) stands, where 140 req/s alone asks for 2.
    policy = engine.EnginePolicy(cfg())
    snap = make_snapshot(1000.0, current=10, rps=140.0, cpu_usage_cores=2.8)
    state = {"service_s": 0.02, kind: [700.0, 850.0], "peaks": [[700.0, 700.0]]}
    decision, after = policy.decide(snap, state)
    assert decision.proposals["burst"] == pytest.approx(10.0)
    assert (decision.replicas, decision.signal) == (10, "burst")
    assert "peak 700 req/s" in decision.detail
    assert (700.0, 700.0) in engine_state.from_dict(after).peaks
    # One event is no pattern: the peak does not hold (10 -> 5, the down rate limit).
    one = {"service_s": 0.02, kind: [850.0], "peaks": [[700.0, 700.0]]}
    plain, _ = policy.decide(snap, one)
    assert "burst" not in plain.proposals and plain.replicas == 5


def test_a_peak_older_than_the_window_is_forgotten() -> None:
    policy = engine.EnginePolicy(cfg())
    snap = make_snapshot(1000.0, current=10, rps=140.0, cpu_usage_cores=2.8)
    old = 1000.0 - engine.PEAK_WINDOW_S - 10.0
    state = {"service_s": 0.02, "panics": [700.0, 850.0], "peaks": [[old, 700.0], "junk"]}
    decision, after = policy.decide(snap, state)
    assert "burst" not in decision.proposals
    assert engine_state.from_dict(after).peaks == ((1000.0, 140.0),)


def test_a_surge_counts_again_only_after_the_rate_came_back_down() -> None:
    # 100 req/s, then 200 (2x within a cold start: a surge), then 400 (a staged ramp: no
    # second surge, the rate never came back down), back to 100 (re-armed), then 200
    # again: the second surge turns burst memory on.
    policy = engine.EnginePolicy(cfg())
    plan = [100.0] * 20 + [200.0] * 30 + [400.0] * 30 + [100.0] * 30 + [200.0] * 5
    state = EngineState(service_s=0.02)
    surges: list[int] = []
    for i, rps in enumerate(plan):
        t = 1000.0 + 2 * i
        _, state = policy.step(
            make_snapshot(t, current=4, rps=rps, cpu_usage_cores=rps * 0.02), state
        )
        surges.append(len(state.surges))
    assert surges[19] == 0 and surges[20] == 1
    assert surges[79] == 1  # the staged ramp to 400: still one
    assert surges[-1] == 2


def test_while_bursting_a_rise_is_not_projected_ahead() -> None:
    # A load rising 10 req/s every tick: projected a cold start ahead normally; while
    # bursting the rise is a burst's, over before capacity lands: the rate as it is.
    def run(state: dict[str, object]) -> float:
        policy = engine.EnginePolicy(cfg())
        decision = None
        for i in range(30):
            rps = 500.0 + 10.0 * i
            snap = make_snapshot(1000.0 + 2 * i, current=8, rps=rps, cpu_usage_cores=rps * 0.02)
            decision, state = policy.decide(snap, state)
        assert decision is not None
        return decision.proposals["cpu"]

    calm = run({"service_s": 0.02})
    bursting = run({"service_s": 0.02, "surges": [1050.0, 1055.0]})
    at_rate = 790.0 * 0.02 / 1.4
    assert bursting == pytest.approx(at_rate, rel=0.02)
    assert calm > 1.2 * at_rate


def test_a_rollout_splitting_the_traffic_runs_cooler() -> None:
    # Latency-led sizing with a large learnt budget runs replicas hot; while a canary
    # shares the traffic the service runs at most 75 % busy: 700 req/s x 20 ms = 14 cores
    # / (2 x 0.75) = 9.33 replicas.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state = {"service_s": 0.02, "wait_budget_s": 0.45}

    def snap(weight: int) -> Snapshot:
        base = make_snapshot(
            1000.0, current=8, rps=700.0, cpu_usage_cores=14.0, latency_ms={"p99": 90.0}
        )
        info = RolloutInfo(phase="Progressing", step=1, canary_weight=weight)
        return dataclasses.replace(base, rollout=info)

    split, _ = policy.decide(snap(25), dict(state))
    assert split.proposals["rollout"] == pytest.approx(14.0 / 1.5)
    assert split.signal == "rollout" and split.replicas == 10
    assert "25 % to the canary" in split.detail
    for weight in (0, 100):
        whole, _ = policy.decide(snap(weight), dict(state))
        assert "rollout" not in whole.proposals
        assert whole.proposals["latency_p99"] < 9.33


def test_the_budget_learns_nothing_from_a_low_latency_at_a_low_modelled_wait() -> None:
    # 120 req/s on 12 replicas (10 each): the modelled wait is ~0 against the 80 ms
    # budget, so a low observed p99 only shows spare capacity.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state = EngineState(service_s=0.02, wait_budget_s=0.08)
    for t in range(30):
        snap = make_snapshot(
            1000.0 + 2 * t, current=12, rps=120.0, cpu_usage_cores=2.4, latency_ms={"p99": 40.0}
        )
        _, state = policy.step(snap, state)
    assert state.wait_budget_s == 0.08


def test_the_budget_grows_by_the_room_under_the_aim() -> None:
    # 600 req/s on 12 replicas: the modelled wait is a real share of the 80 ms budget.
    # Observed 60 ms under 0.9 x 120 ms: the budget grows by (108 - 60) / 30 s per second.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state = EngineState(service_s=0.02, wait_budget_s=0.08)
    _, state = policy.step(_steady(1000.0, 60.0), state)
    _, state = policy.step(_steady(1002.0, 60.0), state)
    step = (0.9 * 0.12 - 0.06) / engine_learning.BUDGET_LEARN_S * 2.0
    assert state.wait_budget_s == pytest.approx(0.08 + 2 * step)
    # It stops once the modelled wait at this load (70 ms) is no longer a real share of
    # the budget: there is no evidence for more.
    for t in range(2, 400):
        _, state = policy.step(_steady(1000.0 + 2 * t, 60.0), state)
    wait = queueing.wait_quantile_s(50.0, 0.02, 2, 0.99)
    budget = state.wait_budget_s
    assert isinstance(budget, float)
    assert (
        wait / engine_learning.BUDGET_EVIDENCE
        <= budget
        <= wait / engine_learning.BUDGET_EVIDENCE + step
    )
    assert budget < engine_learning.BUDGET_MAX * 0.15


def test_a_regrow_is_recorded() -> None:
    policy = engine.EnginePolicy(cfg())
    state = EngineState(service_s=0.02, direction=-1)
    decision, state = policy.step(
        make_snapshot(1000.0, current=4, rps=700.0, cpu_usage_cores=14.0), state
    )
    assert decision.replicas == 10
    assert state.regrets == (1000.0,)
    assert state.direction == 1


def test_a_panic_for_a_step_the_load_holds_is_no_burst() -> None:
    # Two panics in the last 10 minutes, at 700 s and 850 s. The first answered a step
    # from 140 to 700 req/s that held for 3 cold starts (90 s) and more: a step, not a
    # burst, so only one panic counts and no standing capacity is kept for the peak.
    policy = engine.EnginePolicy(cfg())
    snap = make_snapshot(1000.0, current=10, rps=140.0, cpu_usage_cores=2.8)
    held = [[t, 700.0] for t in range(700, 860, 10)]
    decision, _ = policy.decide(snap, {"service_s": 0.02, "panics": [700.0, 850.0], "peaks": held})
    assert "burst" not in decision.proposals
    # The same two panics for a 20 s burst each (back to 140 req/s in between): bursting.
    bursts = [[700.0, 700.0], [710.0, 700.0], [720.0, 140.0], [850.0, 700.0], [860.0, 140.0]]
    state = {"service_s": 0.02, "panics": [700.0, 850.0], "peaks": bursts}
    decision, _ = policy.decide(snap, state)
    assert decision.proposals["burst"] == pytest.approx(10.0)
    assert decision.signal == "burst"


def test_a_panic_counts_as_a_burst_until_the_load_has_held_long_enough() -> None:
    # 60 s after the first panic the load is still up (500 req/s, above 700 / 1.5), but 3
    # cold starts (90 s) have not passed: it still counts (burst memory errs on the side
    # of capacity) and the 700 req/s peak's 10 replicas stand.
    policy = engine.EnginePolicy(cfg())
    snap = make_snapshot(760.0, current=10, rps=500.0, cpu_usage_cores=10.0)
    peaks = [[t, 700.0] for t in range(700, 760, 10)]
    state = {"service_s": 0.02, "panics": [700.0, 750.0], "peaks": peaks}
    decision, _ = policy.decide(snap, state)
    assert decision.proposals["burst"] == pytest.approx(10.0)
    assert engine._held(700.0, peaks, 760.0, 90.0) is False
    assert engine._held(700.0, [*peaks, [790.0, 700.0]], 800.0, 90.0) is True
    assert engine._held(700.0, [[700.0, 700.0], [720.0, 400.0]], 800.0, 90.0) is False
    assert engine._held(700.0, [[700.0, 700.0]], 800.0, 90.0) is False  # nothing seen after
