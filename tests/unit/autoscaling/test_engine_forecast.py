"""The engine's predictive pre-scaling: a forecast floor one cold start ahead.

A day compressed to an hour (periods 3600 s and 7 x 3600 s) keeps these fast; the engine
treats any period the same way. The load: 100 req/s, stepping to 600 req/s at minute 30
of every "day" for ten minutes. Each request costs 20 ms of CPU on 2-core replicas.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest

from servectl.autoscaling import config, engine, forecast
from servectl.autoscaling.decision import Decision
from servectl.autoscaling.policy import State
from servectl.testing import make_snapshot

DAY = 3600.0
STEP_AT = 1800.0
FCFG = forecast.ForecastConfig(periods_s=(DAY, 7 * DAY))


def cfg(**kw: object) -> config.AutoscalingConfig:
    base: dict[str, object] = {
        "min_replicas": 1,
        "max_replicas": 50,
        "signals": (config.SignalTarget(config.SignalType.CPU, 70.0),),
        "threads_per_replica": 2,
        "cold_start_s": 30.0,
        "forecast": FCFG,
    }
    base.update(kw)
    return config.AutoscalingConfig(**base)  # type: ignore[arg-type]


def rate_at(t: float) -> float:
    return 600.0 if STEP_AT <= t % DAY < STEP_AT + 600.0 else 100.0


def run(
    policy: engine.EnginePolicy, start: float, end: float, state: State, current: int
) -> tuple[list[tuple[float, Decision]], State, int]:
    """Tick every 2 s with the load above; capacity follows the decision at once."""
    out: list[tuple[float, Decision]] = []
    t = start
    while t < end:
        rps = rate_at(t)
        snap = make_snapshot(
            t, current=current, rps=rps, cpu_usage_cores=min(rps * 0.02, 2.0 * current)
        )
        decision, state = policy.decide(snap, state)
        current = decision.replicas
        out.append((t, decision))
        t += policy.period_s
    return out, state, current


def test_with_too_little_history_the_engine_is_reactive_and_says_it_is_learning() -> None:
    on = engine.EnginePolicy(cfg())
    off = engine.EnginePolicy(cfg(forecast=None))
    a, _, _ = run(on, 0.0, DAY, on.initial_state(), 1)
    b, _, _ = run(off, 0.0, DAY, off.initial_state(), 1)
    assert [d.replicas for _, d in a] == [d.replicas for _, d in b]
    assert all("forecast" not in d.proposals for _, d in a)
    assert a[-1][1].forecast is not None and a[-1][1].forecast.startswith("learning")
    assert b[-1][1].forecast is None  # off: nothing to say
    assert "forecast" not in b[-1][1].to_dict()
    assert a[-1][1].to_dict()["forecast"] == a[-1][1].forecast


def test_after_a_day_it_pre_scales_one_cold_start_before_the_daily_step() -> None:
    policy = engine.EnginePolicy(cfg())
    # The forecast looks one cold start and a tick ahead, plus its timing slack (6 buckets
    # of 12.5 s): a step that came up to 75 s earlier than yesterday's is still met.
    window = 30.0 + 2.0 + FCFG.timing_slack_buckets * FCFG.bucket_s
    _, state, current = run(policy, 0.0, DAY + STEP_AT - 180.0, policy.initial_state(), 1)
    timeline, state, current = run(policy, DAY + STEP_AT - 180.0, DAY + STEP_AT, state, current)
    before = {t: d for t, d in timeline}
    # Three minutes before the step the forecast is ready but sees only the quiet load ...
    quiet = before[DAY + STEP_AT - 180.0]
    assert quiet.forecast is not None and "daily" not in quiet.forecast  # a 1 h "day"
    assert quiet.forecast.startswith("100 req/s expected"), quiet.forecast
    # ... and within its window (+ a bucket) of the step, it orders the step's capacity:
    # 600 req/s x 20 ms / (2 cores x 70 %) = 8.57 -> 9 replicas, while the load is 100 req/s.
    early = [(t, d) for t, d in timeline if d.signal == "forecast"]
    assert early, [d.detail for _, d in timeline[-20:]]
    first_t, first = early[0]
    assert window - FCFG.bucket_s <= DAY + STEP_AT - first_t <= window + FCFG.bucket_s
    # servectl's default rails (up 100 % or 4 pods per 10 s) apply: 2 -> 6, then 9.
    assert first.replicas == 6 and first.reason.value == "RATE_LIMITED_UP"
    assert first.proposals["forecast"] == pytest.approx(600 * 0.02 / 1.4, rel=0.05)
    assert first.proposals["cpu"] < 2.0  # the reactive ask: 100 req/s
    assert "forecast:" in first.detail and "req/s expected within 107 s" in first.detail
    assert "sized for 600 req/s" in first.detail  # a clean step: no error to add
    assert current == 9  # ready when the step lands


def test_the_forecast_never_goes_below_the_reactive_ask_and_never_panics() -> None:
    policy = engine.EnginePolicy(cfg())
    timeline, _, _ = run(policy, 0.0, 2 * DAY + STEP_AT + 700.0, policy.initial_state(), 1)
    off = engine.EnginePolicy(cfg(forecast=None))
    reactive, _, _ = run(off, 0.0, 2 * DAY + STEP_AT + 700.0, off.initial_state(), 1)
    for t, d in timeline:
        if "forecast" in d.proposals:
            assert d.proposals["forecast"] > max(
                v for k, v in d.proposals.items() if k != "forecast"
            )
        if d.signal == "forecast":
            assert d.reason.value != "PANIC", t
    # Over two days the forecast only ever adds capacity to the reactive run's.
    assert sum(d.replicas for _, d in timeline) >= sum(d.replicas for _, d in reactive)


def test_the_forecast_stays_inside_the_rails() -> None:
    # Scale-up limited to 2 pods per 10 s: the pre-scale climbs at that rate.
    slow_up = config.ScalingRules(
        stabilization_s=0.0,
        policies=(config.RatePolicy(config.RateType.PODS, 2, 10.0),),
    )
    rails = dataclasses.replace(config.servectl_default_behavior(), scale_up=slow_up)
    policy = engine.EnginePolicy(cfg(behavior=rails, max_replicas=6))
    _, state, current = run(policy, 0.0, DAY + STEP_AT - 40.0, policy.initial_state(), 1)
    timeline, _, _ = run(policy, DAY + STEP_AT - 40.0, DAY + STEP_AT, state, current)
    counts = [d.replicas for _, d in timeline]
    assert max(counts) <= 6  # max
    assert all(b - a <= 2 for a, b in itertools.pairwise(counts))
    assert any(d.signal == "forecast" for _, d in timeline)


def test_the_history_lives_in_the_state_and_survives_a_json_round_trip() -> None:
    policy = engine.EnginePolicy(cfg())
    _, state, current = run(policy, 0.0, DAY + STEP_AT - 60.0, policy.initial_state(), 1)
    restored = json.loads(json.dumps(state))  # a restart: the checkpoint, loaded
    a, _, _ = run(policy, DAY + STEP_AT - 60.0, DAY + STEP_AT, dict(state), current)
    b, _, _ = run(policy, DAY + STEP_AT - 60.0, DAY + STEP_AT, restored, current)
    assert [d.replicas for _, d in a] == [d.replicas for _, d in b]
    assert any(d.signal == "forecast" for _, d in b)
    assert len(json.dumps(restored["forecast"])) < 25_000


def test_a_wrong_forecast_turns_itself_off() -> None:
    # History says the step comes at minute 30; from day 3 on it never does. The backtest
    # error grows and the forecaster stops proposing (no capacity held for a ghost).
    policy = engine.EnginePolicy(cfg())
    _, state, current = run(policy, 0.0, 2 * DAY, policy.initial_state(), 1)
    t, seen = 2 * DAY, []
    while t < 3 * DAY:
        snap = make_snapshot(t, current=current, rps=100.0, cpu_usage_cores=2.0)
        decision, state = policy.decide(snap, state)
        current = decision.replicas
        seen.append((t, decision))
        t += 2.0
    late = [d for tt, d in seen if tt >= 2 * DAY + STEP_AT + 300.0]
    assert late and all("forecast" not in d.proposals for d in late)
    assert all(d.replicas <= 2 for d in late)


def test_garbage_in_the_forecast_state_is_a_fresh_history_not_an_error() -> None:
    policy = engine.EnginePolicy(cfg())
    snap = make_snapshot(1000.0, current=2, rps=100.0, cpu_usage_cores=2.0)
    for junk in ("nope", {"means": [math.nan]}, [1, 2], {"version": 99}):
        decision, state = policy.decide(snap, {"forecast": junk})
        assert decision.forecast is not None and decision.forecast.startswith("learning")
        assert forecast.from_state(state["forecast"], FCFG)["bucket"] is not None


def test_the_per_bucket_memo_gives_what_the_forecaster_gives_every_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = engine.EnginePolicy(cfg())
    _, state, current = run(policy, 0.0, DAY + STEP_AT - 120.0, policy.initial_state(), 1)
    calls = 0
    real = forecast.forecast

    def counted(*args: object) -> forecast.Forecast:
        nonlocal calls
        calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.forecast, "forecast", counted)
    t, ticks = DAY + STEP_AT - 120.0, 0
    while t < DAY + STEP_AT + 60.0:
        snap = make_snapshot(t, current=current, rps=rate_at(t), cpu_usage_cores=1.0)
        decision, state = policy.decide(snap, state)
        current = decision.replicas
        history = forecast.from_state(state["forecast"], FCFG)
        assert decision.forecast is not None
        fresh = real(history, FCFG, t, 32.0)
        assert (
            policy._forecast(policy._learner.load_history(state["forecast"], FCFG), FCFG, t, 32.0)
            == fresh
        )
        t += 2.0
        ticks += 1
    # 90 ticks over 180 s of 12.5 s buckets: the forecaster ran about once a bucket.
    assert ticks == 90 and calls <= 2 * (180 / FCFG.bucket_s + 1)


@pytest.mark.parametrize(
    ("expected", "error", "wanted"),
    [
        (600.0, 0.10, 600 * 1.10 * 0.02 / 1.4),  # a rise: sized for its high side
        (600.0, 0.0, 600 * 0.02 / 1.4),
        (100.0, 0.30, None),  # no rise over the rate seen: the error adds nothing
    ],
)
def test_the_forecast_sizes_for_its_estimate_plus_its_recent_error(
    monkeypatch: pytest.MonkeyPatch, expected: float, error: float, wanted: float | None
) -> None:
    def told(*args: object) -> forecast.Forecast:
        return forecast.Forecast(
            expected,
            f"1.0 h season, level 1.00, error {error * 100:.0f} %",
            forecast.ForecastStatus.READY,
            period_s=DAY,
            level=1.0,
            recent_error=error,
        )

    monkeypatch.setattr(engine.forecast, "forecast", told)
    policy = engine.EnginePolicy(cfg())
    state = policy.initial_state()
    for t in (0.0, 2.0):  # a history to forecast from, then a decision
        snap = make_snapshot(t, current=2, rps=100.0, cpu_usage_cores=2.0)
        decision, state = policy.decide(snap, state)
    if wanted is None:
        assert "forecast" not in decision.proposals
        assert decision.forecast is not None and decision.forecast.startswith("100 req/s")
        return
    assert decision.proposals["forecast"] == pytest.approx(wanted, rel=1e-6)
    assert f"sized for {expected * (1 + error):.0f} req/s" in decision.detail
