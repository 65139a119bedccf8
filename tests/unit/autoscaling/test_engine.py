"""servectl's default policy: proposals, panic, rails, missing metrics, recommend mode."""

from __future__ import annotations

import json
import math

import pytest

from servectl.autoscaling import cel_policy, config, engine, queueing
from servectl.autoscaling.decision import Reason
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


def test_within_tolerance_holds() -> None:
    policy = engine.EnginePolicy(cfg())
    # 10.5 wanted vs 10 current: 5 % < 10 % tolerance.
    decision, _ = policy.decide(make_snapshot(current=10, rps=735.0, cpu_usage_cores=14.7), {})
    assert decision.replicas == 10
    assert decision.reason is Reason.WITHIN_TOLERANCE


def test_overload_panics_past_the_rate_limit() -> None:
    # Demand 1000 req/s x 20 ms = 20 cores on 2 ready replicas (4 cores, saturated):
    # overloaded; the saturated CPU reading must not teach a 4 ms service time.
    # The rate limit alone would allow max(2 x 2, 2 + 4) = 6; panic goes straight to 15.
    policy = engine.EnginePolicy(cfg())
    decision, state = policy.decide(
        make_snapshot(current=2, rps=1000.0, cpu_usage_cores=4.0), {"service_s": 0.02}
    )
    assert decision.reason is Reason.PANIC
    assert decision.replicas == math.ceil(20.0 / 1.4)
    assert state["panic_until"] == pytest.approx(1000.0 + 60.0)


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
    decision, state = policy.decide(make_snapshot(current=4, rps=700.0, cpu_usage_cores=14.0), {})
    assert decision.replicas == 4
    assert decision.recommended == 10
    assert decision.reason is Reason.RECOMMEND_ONLY
    assert "would set 10" in decision.detail
    assert state["behavior"]["scale_events"] == []


def test_latency_signal_sizes_with_erlang_c() -> None:
    policy = engine.EnginePolicy(cfg(signals=(CPU70, P99)))
    state = {"service_s": 0.02, "service_quantile_s": 0.05}
    decision, _ = policy.decide(
        make_snapshot(current=16, rps=1000.0, cpu_usage_cores=20.0, latency_ms={"p99": 120.0}),
        state,
    )
    expected = queueing.replicas_for_latency(1000.0, 0.02, 2, 0.99, 0.1, 50)
    assert decision.proposals["latency_p99"] == pytest.approx(expected)
    assert decision.proposals["cpu"] == pytest.approx(20 / 1.4)


def test_latency_learns_a_slow_service_tail_and_grows() -> None:
    # Observed p99 far above the model's prediction: the learnt service quantile rises,
    # the wait budget shrinks, the latency proposal grows.
    policy = engine.EnginePolicy(cfg(signals=(P99,)))
    state: dict[str, object] = {"service_s": 0.02, "service_quantile_s": 0.05}
    first, state = policy.decide(
        make_snapshot(current=12, rps=600.0, cpu_usage_cores=12.0, latency_ms={"p99": 200.0}),
        state,
    )
    for t in range(1, 60):
        later, state = policy.decide(
            make_snapshot(
                1000.0 + 2 * t,
                current=12,
                rps=600.0,
                cpu_usage_cores=12.0,
                latency_ms={"p99": 200.0},
            ),
            state,
        )
    assert state["service_quantile_s"] > 0.1  # type: ignore[operator]
    assert later.proposals["latency_p99"] > first.proposals["latency_p99"]


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
    program = cel_policy.compile_expression("signals.rps / 0.0 > 1.0 ? 'many' : 'few'")
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
    state: dict[str, object] = {}
    for i in range(60):
        _, state = policy.decide(
            make_snapshot(1000.0 + 2 * i, current=10, rps=500.0, cpu_usage_cores=15.0), state
        )
    assert state["service_s"] == pytest.approx(0.03)


def test_no_ready_replicas_with_load_panics_up() -> None:
    policy = engine.EnginePolicy(cfg())
    decision, _ = policy.decide(
        make_snapshot(current=1, ready=0, rps=100.0, cpu_usage_cores=None, cpu_utilization=None),
        {"service_s": 0.02},
    )
    # No CPU signal, nothing ready: hold is all one can do without any signal.
    assert decision.replicas == 1
    assert decision.reason is Reason.METRICS_MISSING
