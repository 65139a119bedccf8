"""The seasonal forecaster on synthetic days compressed to an hour (12.5 s buckets).

A compressed "day" is 3600 s and a "week" 25200 s, so two days of 2.5 s ticks replay in
milliseconds; the default config's real days give the same bucket counts.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.autoscaling import forecast
from servectl.autoscaling.forecast import ForecastConfig, ForecastStatus, History

DAY = 3600.0
WEEK = 7 * DAY
CFG = ForecastConfig(periods_s=(DAY, WEEK))
TICK = 2.5
RATE = Callable[[float], float]


def bump(phase: float, centre: float, width: float = 0.06) -> float:
    return math.exp(-(((phase - centre) / width) ** 2))


def weekday_day(t: float) -> float:
    """Night 100 rps, a morning peak of 500 rps at 40 % of the day."""
    return 100.0 + 400.0 * bump((t % DAY) / DAY, 0.4)


def replay(
    rate: RATE,
    until: float,
    history: History | None = None,
    start: float = 0.0,
    skip: Callable[[float], bool] = lambda t: False,
) -> History:
    """Observe ``rate`` every TICK from ``start`` (exclusive) up to ``until``."""
    history = history if history is not None else forecast.empty_history(CFG)
    steps = round((until - start) / TICK)
    for step in range(1, steps + 1):
        t = start + step * TICK
        if not skip(t):
            history = forecast.observe(history, CFG, t, rate(t), TICK)
    return history


def true_peak(rate: RATE, now: float, horizon_s: float) -> float:
    return max(rate(now + x) for x in range(0, int(horizon_s) + 1))


# -- configuration ---------------------------------------------------------------------


def test_config_derives_bucket_length_and_history_size() -> None:
    default = ForecastConfig()
    assert default.bucket_s == 300.0
    assert default.period_buckets == (288, 2016)
    assert default.capacity == 2304  # a week and a day of 5-minute buckets
    assert CFG.bucket_s == 12.5
    assert CFG.capacity == 2304
    assert default.timing_slack_buckets == 6  # 30 min of a real day


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"periods_s": ()}, "at least one period"),
        ({"periods_s": (0.0,)}, "positive"),
        ({"periods_s": (math.nan,)}, "positive"),
        ({"periods_s": ("3600",)}, "not a number"),
        ({"periods_s": (DAY, DAY)}, "twice"),
        ({"periods_s": (DAY, 5010.0)}, "whole number of 12.5 s buckets"),
        ({"buckets_per_period": 0}, "buckets_per_period"),
        ({"buckets_per_period": 2.5}, "buckets_per_period"),
        ({"level_window_buckets": 0}, "level_window_buckets"),
        ({"backtest_buckets": -1}, "backtest_buckets"),
        ({"buckets_per_period": 10}, "shorter than the shortest period"),
        ({"periods_s": (60.0, 86400.0 * 365)}, "buckets"),
        ({"min_level_ratio": 0.0}, "min_level_ratio"),
        ({"min_level_ratio": 1.5}, "min_level_ratio"),
        ({"max_level_ratio": 0.9}, "max_level_ratio"),
        ({"max_level_ratio": math.inf}, "max_level_ratio"),
        ({"max_error": 0.0}, "max_error"),
        ({"max_error": math.nan}, "max_error"),
        ({"timing_slack_buckets": -1}, "timing_slack_buckets"),
        ({"timing_slack_buckets": 1.5}, "timing_slack_buckets"),
        ({"timing_slack_buckets": True}, "timing_slack_buckets"),
        ({"buckets_per_period": 40, "timing_slack_buckets": 20}, "under half the shortest"),
    ],
)
def test_config_rejects_unusable_knobs(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ForecastConfig(**kwargs)  # type: ignore[arg-type]


# -- forecasts -------------------------------------------------------------------------


def test_daily_pattern_forecasts_the_next_morning_peak_within_10_percent() -> None:
    noise = random.Random(7)

    def rate(t: float) -> float:
        return weekday_day(t) * noise.uniform(0.95, 1.05)

    now = 2 * DAY + 0.25 * DAY  # day 3, before the morning ramp
    history = replay(rate, now)
    horizon = 0.25 * DAY  # through the ramp and its peak
    result = forecast.forecast(history, CFG, now, horizon)

    assert result.status is ForecastStatus.READY
    assert result.period_s == DAY
    assert result.rate_rps == pytest.approx(true_peak(weekday_day, now, horizon), rel=0.10)
    assert result.level == pytest.approx(1.0, abs=0.05)
    assert result.recent_error is not None and result.recent_error < 0.1
    assert result.reason.startswith("1.0 h season, level 1.0")
    # The weekly candidate is still learning, and says how far along it is.
    weekly = result.candidates[1]
    assert weekly.rate_rps is None
    assert weekly.note == "learning: 2.2 h of 7.3 h history"


def test_the_timing_slack_meets_a_ramp_that_comes_earlier_than_yesterdays() -> None:
    # 100 rps, then 600 from ~40 % of the day (a bucket's start); today (day 2) the step
    # comes 60 s early.
    step = 115 * CFG.bucket_s

    def rate(t: float) -> float:
        early = 60.0 if t >= 2 * DAY else 0.0
        return 600.0 if t % DAY >= step - early else 100.0

    now = 2 * DAY + step - 60.0 - 40.0  # 40 s before today's step
    history = replay(rate, now)
    horizon = 32.0  # a cold start and a tick
    exact = dataclasses.replace(CFG, timing_slack_buckets=0)
    # Yesterday's next 32 s were quiet: without slack the step is not seen coming.
    assert forecast.forecast(history, exact, now, horizon).rate_rps == pytest.approx(100.0)
    # The default slack (6 buckets, 75 s here) reaches yesterday's step.
    seen = forecast.forecast(history, CFG, now, horizon)
    assert seen.status is ForecastStatus.READY
    assert seen.rate_rps == pytest.approx(600.0)
    assert seen.recent_error == pytest.approx(0.0)


def weekly_shape(t: float) -> float:
    """Weekdays peak at 500 rps at 40 % of the day; weekends (days 5, 6) at 220 rps at
    55 %: the same nights, a different shape, which only the week can know."""
    day = int(t // DAY) % 7
    phase = (t % DAY) / DAY
    if day >= 5:
        return 100.0 + 120.0 * bump(phase, 0.55)
    return weekday_day(t)


def test_weekly_pattern_is_used_once_a_week_is_known_and_beats_daily_on_saturday() -> None:
    horizon = 0.4 * DAY
    first_saturday = 5 * DAY + 0.25 * DAY
    history = replay(weekly_shape, first_saturday)
    before = forecast.forecast(history, CFG, first_saturday, horizon)
    # Six days in: only the daily season, which expects Friday's peak.
    assert before.period_s == DAY
    assert before.rate_rps == pytest.approx(500.0, rel=0.05)
    assert before.candidates[1].note == "learning: 5.2 h of 7.5 h history"  # compressed days

    second_saturday = 12 * DAY + 0.25 * DAY
    history = replay(weekly_shape, second_saturday, history, start=first_saturday)
    result = forecast.forecast(history, CFG, second_saturday, horizon)
    truth = true_peak(weekly_shape, second_saturday, horizon)
    assert truth == pytest.approx(220.0, rel=0.01)
    assert result.status is ForecastStatus.READY
    assert result.period_s == WEEK
    assert result.rate_rps is not None
    assert result.rate_rps == pytest.approx(truth, rel=0.05)
    daily = result.candidates[0]
    assert daily.period_s == DAY and daily.rate_rps is not None
    assert abs(result.rate_rps - truth) < abs(daily.rate_rps - truth)
    assert daily.rate_rps == pytest.approx(500.0, rel=0.05)  # Friday's peak


def test_a_trend_is_followed_through_the_level() -> None:
    def growing(t: float) -> float:  # each day 10 % busier than the one before
        return weekday_day(t) * math.pow(1.1, t / DAY)

    now = 3 * DAY + 0.25 * DAY
    history = replay(growing, now)
    horizon = 0.25 * DAY
    result = forecast.forecast(history, CFG, now, horizon)
    truth = true_peak(growing, now, horizon)
    yesterday = true_peak(growing, now - DAY, horizon)

    assert result.level == pytest.approx(1.1, abs=0.01)
    assert result.rate_rps == pytest.approx(truth, rel=0.03)
    assert result.rate_rps is not None and result.rate_rps > 1.08 * yesterday


def test_the_level_is_clipped() -> None:
    def jump(t: float) -> float:  # 100 rps for two days, then 5x
        return 100.0 if t < 2 * DAY + 0.2 * DAY else 500.0

    now = 2 * DAY + 0.25 * DAY
    history = replay(jump, now)
    candidate = forecast.forecast(history, CFG, now, 0.0).candidates[0]
    assert candidate.level == CFG.max_level_ratio
    assert candidate.rate_rps == pytest.approx(200.0)


def test_too_little_history_is_learning() -> None:
    history = replay(weekday_day, 0.5 * DAY)
    result = forecast.forecast(history, CFG, 0.5 * DAY, 60.0)
    assert result.rate_rps is None
    assert result.status is ForecastStatus.LEARNING
    assert result.reason == "learning: 30 min of 1.1 h history"
    assert result.candidates[0].note == result.reason

    empty = forecast.forecast(forecast.empty_history(CFG), CFG, 100.0, 60.0)
    assert empty.rate_rps is None
    assert empty.reason.startswith("learning: 0 s of")


def test_an_erratic_series_turns_the_forecast_off() -> None:
    noise = random.Random(3)
    levels = [noise.uniform(0.0, 400.0) for _ in range(1000)]

    def erratic(t: float) -> float:  # a new random rate every bucket
        return levels[int(t // CFG.bucket_s)]

    now = 2.5 * DAY
    history = replay(erratic, now)
    result = forecast.forecast(history, CFG, now, 60.0)
    assert result.rate_rps is None
    assert result.status is ForecastStatus.INACCURATE
    assert result.recent_error is not None and result.recent_error > CFG.max_error
    assert result.reason == f"off: recent error {result.recent_error * 100:.0f} % > 35 %"


def test_observe_leaves_unobserved_buckets_none() -> None:
    history = forecast.observe(forecast.empty_history(CFG), CFG, 1.0, 10.0, 1.0)
    history = forecast.observe(history, CFG, 6.0, 20.0, 3.0)  # same bucket: 0..12.5 s
    assert history["bucket"] == 0
    assert history["requests"] == pytest.approx(70.0)
    assert history["seconds"] == pytest.approx(4.0)
    # Down for four buckets: bucket 0 closes at its mean, 1..4 were never observed.
    history = forecast.observe(history, CFG, 64.0, 30.0, 2.0)
    assert history["bucket"] == 5
    assert history["means"][-5:] == (17.5, None, None, None, None)
    assert forecast.history_span_s(history, CFG) == CFG.bucket_s


def test_gaps_are_skipped_not_counted_as_zero() -> None:
    # Steady 200 rps; the controller was down for three buckets on day 1 (432..434).
    gap_start = DAY + 0.5 * DAY

    def down(t: float) -> bool:
        return gap_start <= t < gap_start + 3 * CFG.bucket_s

    now = (288 + 435) * CFG.bucket_s  # one day after the gap ended
    history = replay(lambda t: 200.0, now, skip=down)
    position = len(history["means"]) - (723 - 432)
    assert history["means"][position : position + 3] == (None, None, None)
    assert history["means"][position - 1] == 200.0
    assert history["means"][position + 3] == 200.0

    # The level's window one day earlier holds the gap: three pairs of 200 vs 200 give
    # 1.0 (zeros would double it).
    result = forecast.forecast(history, CFG, now, 0.0)
    assert result.status is ForecastStatus.READY
    assert result.level == 1.0
    assert result.rate_rps == 200.0

    # Nothing observed one day before the whole look-ahead (no timing slack here): no
    # estimate, not zero; a look-ahead reaching past the gap's day-old buckets uses the
    # observed ones, and so does the default slack (6 buckets past a 3-bucket gap).
    exact = dataclasses.replace(CFG, timing_slack_buckets=0)
    earlier = (288 + 432) * CFG.bucket_s
    history = replay(lambda t: 200.0, earlier, skip=down)
    inside = forecast.forecast(history, exact, earlier, 0.0)
    assert inside.rate_rps is None
    assert inside.status is ForecastStatus.LEARNING
    assert inside.reason == "learning: gaps in the history 1.0 h ago"
    across = forecast.forecast(history, exact, earlier, 5 * CFG.bucket_s)
    assert across.rate_rps == 200.0
    assert forecast.forecast(history, CFG, earlier, 0.0).rate_rps == 200.0


def test_time_going_backwards_resets_and_jitter_does_not() -> None:
    history = replay(lambda t: 100.0, 1000.0)
    jitter = forecast.observe(history, CFG, 995.0, 50.0, TICK)  # NTP step < one bucket
    assert jitter["bucket"] == history["bucket"]
    assert jitter["means"] == history["means"]
    assert jitter["last_t"] == 1000.0

    back = forecast.observe(history, CFG, 500.0, 50.0, TICK)
    assert forecast.history_span_s(back, CFG) == 0.0
    assert back["bucket"] == 40
    assert back["requests"] == pytest.approx(125.0)


def test_a_jump_past_the_longest_period_resets_and_a_shorter_one_does_not() -> None:
    history = replay(lambda t: 100.0, 1000.0)
    span = forecast.history_span_s(history, CFG)
    assert span == 80 * CFG.bucket_s

    later = forecast.observe(history, CFG, 1000.0 + DAY, 100.0, TICK)
    assert forecast.history_span_s(later, CFG) == span + CFG.bucket_s  # the open bucket
    assert later["means"][-1] is None

    gone = forecast.observe(history, CFG, 1000.0 + WEEK + 100.0, 100.0, TICK)
    assert forecast.history_span_s(gone, CFG) == 0.0
    assert gone["means"] == forecast.empty_history(CFG)["means"]


@pytest.mark.parametrize(
    ("rate", "dt"), [(math.nan, TICK), (-1.0, TICK), (math.inf, TICK), (10.0, 0.0), (10.0, -2.0)]
)
def test_unusable_observations_are_ignored(rate: float, dt: float) -> None:
    history = replay(lambda t: 100.0, 100.0)
    assert forecast.observe(history, CFG, 105.0, rate, dt) == history


def test_bucket_means_are_stored_compactly() -> None:
    def closed(rate: float) -> float | None:
        history = forecast.observe(forecast.empty_history(CFG), CFG, 1.0, rate, 1.0)
        return forecast.observe(history, CFG, 13.0, rate, 1.0)["means"][-1]

    assert closed(123456.7) == 123000
    assert closed(1234.567) == 1230
    assert closed(56.789) == 56.8
    assert closed(5.6789) == 5.68
    assert closed(0.01234) == 0.01
    assert closed(0.001) == 0.0


# -- state -----------------------------------------------------------------------------


def test_a_full_history_round_trips_through_json_and_stays_small() -> None:
    cfg = ForecastConfig()  # real days: 5-minute buckets
    noise = random.Random(11)
    history = forecast.empty_history(cfg)
    t = 0.0
    while t < 9 * 86400.0:
        t += 300.0
        daily = 1.2 + math.sin(2 * math.pi * t / 86400.0)
        history = forecast.observe(history, cfg, t, 1000.0 * daily * noise.uniform(0.9, 1.1), 2)
    assert forecast.history_span_s(history, cfg) == 2304 * 300.0

    text = json.dumps(history)
    assert len(text) < 25_000
    loaded = forecast.from_state(json.loads(text), cfg)
    assert loaded == history
    assert forecast.forecast(loaded, cfg, t, 120.0) == forecast.forecast(history, cfg, t, 120.0)
    # The history observe returns is taken as it is (no copy, no second check).
    assert forecast.from_state(history, cfg)["means"] is history["means"]


def valid_json_history() -> dict[str, object]:
    history = replay(lambda t: 100.0, 200.0)
    loaded: dict[str, object] = json.loads(json.dumps(history))
    return loaded


def _with(**changes: object) -> dict[str, object]:
    return {**valid_json_history(), **changes}


def _means_with(value: object) -> dict[str, object]:
    state = valid_json_history()
    means = list(state["means"])  # type: ignore[call-overload]
    means[-1] = value
    return {**state, "means": means}


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        42,
        "history",
        [1, 2, 3],
        {},
        {"means": []},
        _with(version=2),
        _with(version=True),
        _with(bucket_s=300.0),
        _with(bucket_s="12.5"),
        _with(means=[1.0] * 10),
        _with(means="1,2,3"),
        _with(means={"0": 1.0}),
        _means_with("100"),
        _means_with(math.nan),
        _means_with(math.inf),
        _means_with(-5.0),
        _means_with(True),
        _means_with([1.0]),
        _means_with(1e300),
        _with(bucket="16"),
        _with(bucket=True),
        _with(bucket=3),  # not last_t's bucket
        _with(bucket=None),  # empty, yet values
        _with(last_t=math.nan),
        _with(last_t=None),
        _with(requests=-1.0),
        _with(requests=math.inf),
        _with(seconds="2"),
        _with(seconds=math.nan),
        {k: v for k, v in valid_json_history().items() if k != "requests"},
    ],
)
def test_malformed_state_gives_an_empty_history(garbage: object) -> None:
    assert forecast.from_state(garbage, CFG) == forecast.empty_history(CFG)


def test_a_valid_state_loads_as_it_was() -> None:
    state = valid_json_history()
    loaded = forecast.from_state(state, CFG)
    assert loaded["bucket"] == 16
    assert loaded["means"][-1] == 100.0
    assert json.loads(json.dumps(loaded)) == state


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    garbage=JSON,
    key=st.sampled_from(["version", "bucket_s", "bucket", "last_t", "requests", "seconds"]),
)
def test_from_state_never_raises(garbage: object, key: str) -> None:
    for obj in (garbage, _with(**{key: garbage}), _means_with(garbage)):
        history = forecast.from_state(obj, CFG)
        assert forecast.from_state(history, CFG) == history
        forecast.forecast(history, CFG, 300.0, 60.0)


STEPS = st.lists(
    st.tuples(
        st.floats(min_value=-50.0, max_value=400.0),  # time step, sometimes backwards
        st.one_of(st.floats(min_value=0.0, max_value=1e6), st.just(math.nan), st.just(-1.0)),
        st.sampled_from([0.0, 0.5, 2.0, 30.0]),
    ),
    max_size=60,
)


# Shared by the examples below: safe, since nothing may mutate a history.
A_DAY_AND_A_BIT = replay(weekday_day, 1.2 * DAY)


@settings(max_examples=100, deadline=None)
@given(steps=STEPS, horizon=st.floats(min_value=0.0, max_value=2 * DAY))
def test_observe_never_mutates_its_input_and_stays_valid(
    steps: list[tuple[float, float, float]], horizon: float
) -> None:
    history = A_DAY_AND_A_BIT
    t = 1.2 * DAY
    for step, rate, dt in steps:
        t += step
        before = copy.deepcopy(history)
        after = forecast.observe(history, CFG, t, rate, dt)
        assert history == before
        assert len(after["means"]) == CFG.capacity
        assert forecast.from_state(json.loads(json.dumps(after)), CFG) == after
        result = forecast.forecast(after, CFG, t, horizon)
        if result.rate_rps is not None:
            assert math.isfinite(result.rate_rps) and result.rate_rps >= 0
        history = after
