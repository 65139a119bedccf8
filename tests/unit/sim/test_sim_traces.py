"""Traces: generator shapes, determinism, the standard suite, CSV reading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.sim import traces


def test_step_spike_ramp_diurnal_shapes() -> None:
    s = traces.step(200, 800, at_s=5, duration_s=10)
    assert s.rps.tolist() == [200] * 5 + [800] * 5
    sp = traces.spike(300, 1200, at_s=3, length_s=2, duration_s=8)
    assert sp.rps.tolist() == [300, 300, 300, 1200, 1200, 300, 300, 300]
    r = traces.ramp(100, 1000, 10)
    assert r.rps[0] == 100 and r.rps[-1] == 1000 and np.all(np.diff(r.rps) > 0)
    d = traces.diurnal(150, 900, period_s=100, duration_s=100)
    assert d.rps[0] == pytest.approx(150)
    assert d.rps[50] == pytest.approx(900)
    assert d.rps.min() >= 150 - 1e-9 and d.rps.max() <= 900 + 1e-9


def test_trace_is_read_only_and_validated() -> None:
    t = traces.step(1, 2, 1, 3)
    with pytest.raises(ValueError):
        t.rps[0] = 5
    with pytest.raises(traces.TraceError):
        traces.Trace("bad", np.array([1.0, -1.0]))
    with pytest.raises(traces.TraceError):
        traces.Trace("empty", np.array([]))


def test_seeded_generators_are_deterministic() -> None:
    a = traces.steady(600, 600, noise=0.05, seed=3)
    b = traces.steady(600, 600, noise=0.05, seed=3)
    c = traces.steady(600, 600, noise=0.05, seed=4)
    assert np.array_equal(a.rps, b.rps)
    assert not np.array_equal(a.rps, c.rps)
    assert np.array_equal(traces.bursty(400, 600, seed=1).rps, traces.bursty(400, 600, seed=1).rps)


def test_steady_stays_near_its_mean() -> None:
    t = traces.steady(600, 3600, noise=0.05, seed=0)
    assert t.mean_rps == pytest.approx(600, rel=0.1)
    assert t.rps.min() > 300 and t.peak_rps < 900


def test_bursty_mean_is_exact_and_heavy_tailed() -> None:
    t = traces.bursty(400, 3600, seed=0)
    assert t.mean_rps == pytest.approx(400, rel=1e-3)
    assert t.rps.min() == pytest.approx(240)  # the base
    assert t.peak_rps <= 1000 + 1e-6
    assert t.peak_rps > 2 * 400 * 0.9  # some burst is large


def test_standard_suite() -> None:
    suite = traces.standard_suite(seed=0)
    assert [t.name for t in suite] == ["steady_noisy", "step", "spike", "ramp", "diurnal", "bursty"]
    for t in suite:
        assert t.duration_s == 3600
        assert 300 <= t.peak_rps <= 1200 + 1e-6, t.name
        assert t.description
    by_name = {t.name: t for t in suite}
    assert by_name["step"].rps[1199] == 200 and by_name["step"].rps[1200] == 800
    assert by_name["spike"].rps[1800:1920].min() == 1200 and by_name["spike"].rps[1920] == 300
    assert by_name["bursty"].mean_rps == pytest.approx(400, rel=1e-3)
    again = traces.standard_suite(seed=0)
    assert all(np.array_equal(a.rps, b.rps) for a, b in zip(suite, again, strict=True))


def test_scaled_and_truncate() -> None:
    t = traces.step(100, 200, 2, 4)
    assert traces.scaled(t, 1.5).rps.tolist() == [150, 150, 300, 300]
    assert traces.truncate(t, 3).rps.tolist() == [100, 100, 200]
    with pytest.raises(traces.TraceError):
        traces.scaled(t, -1)


def test_from_csv_interpolates_to_seconds(tmp_path: Path) -> None:
    path = tmp_path / "load.csv"
    path.write_text("t,rps\n0,100\n4,500\n# comment\n\n6,500\n")
    t = traces.from_csv(path)
    assert t.name == "load"
    assert t.rps.tolist() == [100, 200, 300, 400, 500, 500, 500]


def test_from_csv_starting_late_repeats_the_first_rate(tmp_path: Path) -> None:
    path = tmp_path / "late.csv"
    path.write_text("t,rps\n2,10\n3,20\n")
    assert traces.from_csv(path).rps.tolist() == [10, 10, 10, 20]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t,rps\n0,100\n1,abc\n", ":3: t and rps must be numbers"),
        ("t,rps\n0,100\n5,1\n5,2\n", ":4: t must increase"),
        ("t,rps\n0,100\n1,-3\n", ":3: rps must be >= 0"),
        ("t,rps\n0,100,7\n", ":2: expected 2 columns"),
        ("time,load\n0,1\n", ":1: expected the header 't,rps'"),
        ("t,rps\n-1,5\n", ":2: t must be >= 0"),
        ("t,rps\n0,inf\n", ":2: t and rps must be finite"),
        ("", "empty file"),
        ("t,rps\n", "no data rows"),
        # The request-timestamp form.
        ("timestamp\n1,2\n", ":2: expected 1 column"),
        ("timestamp\n1\nnoon\n", ":3: timestamp must be a number"),
        ("timestamp\nnan\n", ":2: timestamp must be finite"),
        ("timestamp\n", "no data rows"),
        ("timestamp\n0\n1700000000000\n", "are some in milliseconds?"),
    ],
)
def test_from_csv_errors_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(traces.TraceError) as caught:
        traces.from_csv(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_from_csv_counts_request_timestamps_per_second(tmp_path: Path) -> None:
    path = tmp_path / "access.csv"
    # Unix times from a log, out of order, with a comment and a blank line.
    path.write_text(
        "timestamp\n# from nginx\n1700000000.2\n1700000000.9\n1700000002.5\n\n"
        "1700000000.0\n1700000003.99\n1700000002.0\n"
    )
    t = traces.from_csv(path)
    assert t.rps.tolist() == [3, 0, 2, 1]
    assert t.name == "access" and "6 requests" in t.description


# ------------------------------------------------------------- production-shaped traces


def _longest_run(mask: np.ndarray) -> int:
    """The longest stretch of consecutive True values."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return int((edges[1::2] - edges[::2]).max()) if edges.size else 0


def _hours(trace: traces.Trace, first: float, last: float, day_s: int = 86400) -> np.ndarray:
    """Rates between hour ``first`` and ``last`` of the first day."""
    return trace.rps[int(first * day_s / 24) : int(last * day_s / 24)]


def test_business_day_has_night_ramp_plateau_and_evening() -> None:
    low, high = 40.0, 300.0
    day = traces.diurnal_weekly(low, high, days=1, seed=0)
    assert day.duration_s == 86400
    assert _hours(day, 1, 5).mean() < 0.3 * high  # the night
    assert _hours(day, 0, 6).min() < low * 1.3  # the trough is near low
    assert np.median(_hours(day, 10, 16)) > 0.7 * high  # business hours
    clean = traces.diurnal_weekly(low, high, days=1, noise=0, wander=0, day_jitter=0)
    assert clean.peak_rps == pytest.approx(high)
    assert 15 <= np.argmax(clean.rps) / 3600 <= 16.5  # the afternoon peak
    assert _hours(clean, 9.5, 10).min() > low + 0.8 * (high - low)  # the plateau by 09:30
    assert _hours(clean, 12.25, 13).mean() < _hours(clean, 11, 11.75).mean()  # lunch dip
    assert _hours(day, 21, 23).mean() < 0.5 * high  # the evening decline
    assert _hours(day, 8, 9).mean() > 3 * _hours(day, 4, 5).mean()


def test_business_day_morning_ramp_is_steep_and_scales_with_day_s() -> None:
    low, high = 100.0, 900.0
    for day_s in (86400, 3600):
        day = traces.diurnal_weekly(low, high, days=1, day_s=day_s, noise=0, wander=0, seed=1)
        morning = day.rps[int(5 * day_s / 24) :]
        t20 = int(np.argmax(morning > low + 0.2 * (high - low)))
        t70 = int(np.argmax(morning > low + 0.7 * (high - low)))
        ramp_h = (t70 - t20) * 24 / day_s
        assert 0.75 <= ramp_h <= 1.75, (day_s, ramp_h)  # ~1-1.5 h of the day
        assert 5.5 <= 5 + t20 * 24 / day_s <= 7.0  # starting around 06:00


def test_weekends_are_lower_by_the_weekend_factor() -> None:
    low, high = 40.0, 300.0
    week = traces.diurnal_weekly(low, high, days=7, day_s=3600, start_weekday=0, seed=2)
    days = week.rps.reshape(7, 3600).mean(axis=1)
    weekday, weekend = days[:5].mean(), days[5:].mean()
    assert weekend < weekday
    assert (weekend - low) / (weekday - low) == pytest.approx(0.6, abs=0.1)
    flat_weekend = traces.diurnal_weekly(low, high, days=7, day_s=3600, weekend_factor=1, seed=2)
    assert flat_weekend.rps[5 * 3600 :].mean() == pytest.approx(days[:5].mean(), rel=0.1)
    # Starting on a Saturday puts the weekend first.
    from_saturday = traces.diurnal_weekly(low, high, days=3, day_s=3600, start_weekday=5, seed=2)
    per_day = from_saturday.rps.reshape(3, 3600).mean(axis=1)
    assert per_day[0] < per_day[2] and per_day[1] < per_day[2]


def test_business_days_differ_from_one_another() -> None:
    week = traces.diurnal_weekly(40, 300, days=4, day_s=3600, noise=0, wander=0, seed=0)
    days = week.rps.reshape(4, 3600)
    assert not np.allclose(days[1], days[2], rtol=0.01)
    # ... but only by a few per cent.
    peaks = days.max(axis=1)
    assert peaks.max() / peaks.min() < 1.2


def test_flash_crowd_rises_within_rise_s_and_decays_to_base() -> None:
    base, peak, at, rise, decay = 300.0, 1100.0, 900, 20, 480
    t = traces.flash_crowd(
        base, peak, at_s=at, rise_s=rise, decay_s=decay, duration_s=3600, noise=0.05, seed=0
    )
    assert t.duration_s == 3600
    assert np.median(t.rps[:at]) == pytest.approx(base, rel=0.02)
    assert t.rps[at : at + rise + 1].max() >= 0.95 * peak
    assert t.rps[at + rise // 2] > base + 0.3 * (peak - base)  # steep, not gradual
    later = at + rise + 3 * decay  # three time constants: 5 % of the excess is left
    assert t.rps[later : later + 60].mean() == pytest.approx(base + 0.05 * (peak - base), rel=0.05)
    exact = traces.flash_crowd(
        base, peak, at_s=at, rise_s=rise, decay_s=decay, duration_s=3600, noise=0
    )
    assert exact.rps[at + rise] == pytest.approx(peak)
    assert np.all(np.diff(exact.rps[at + rise :]) <= 0)
    assert exact.rps[-1] < base + 0.01 * (peak - base)


def test_heavy_tailed_mean_and_long_bursts() -> None:
    for seed in range(4):
        t = traces.heavy_tailed(400, 3600, seed=seed)
        assert t.mean_rps == pytest.approx(400, rel=0.2), seed
        assert t.peak_rps <= 3 * 400 + 1e-6
        assert t.peak_rps > 2 * 400  # some burst is large
        assert np.median(t.rps) < t.mean_rps  # skewed: bursts are rare, some are huge
        clean = traces.heavy_tailed(400, 3600, noise=0, wander=0, seed=seed)
        assert _longest_run(clean.rps > 1.2 * 200) > 60, seed  # a burst lasting minutes
    # Distinct from ``bursty``, whose bursts all fade within ~20 s.
    assert not np.array_equal(traces.heavy_tailed(400, 600).rps, traces.bursty(400, 600).rps)


def test_slow_ramp_rises_along_an_s_curve_then_holds() -> None:
    t = traces.slow_ramp(150, 900, duration_s=3600, hold_s=600, noise=0, wander=0)
    assert t.rps[0] == pytest.approx(150) and t.rps[2999] == pytest.approx(900)
    assert np.all(t.rps[3000:] == pytest.approx(900))
    assert np.all(np.diff(t.rps[:3000]) >= 0)
    slopes = np.diff(t.rps[:3000])
    assert slopes[1500] > 1.4 * (900 - 150) / 3000 > 3 * slopes[100]  # S: slow, fast, slow
    noisy = traces.slow_ramp(150, 900, duration_s=3600, hold_s=600, seed=0)
    assert noisy.rps[3000:].mean() == pytest.approx(900, rel=0.1)
    assert noisy.rps.std() > 0
    down = traces.slow_ramp(900, 150, duration_s=100, hold_s=0, noise=0, wander=0)
    assert down.rps[0] == pytest.approx(900) and down.rps[-1] == pytest.approx(150)


def _new_generators(seed: int, duration_s: int) -> list[traces.Trace]:
    return [
        traces.diurnal_weekly(40, 300, days=2, day_s=max(24, duration_s // 2), seed=seed),
        traces.flash_crowd(
            300, 1100, at_s=duration_s // 3, rise_s=20, decay_s=60, duration_s=duration_s,
            seed=seed,
        ),
        traces.heavy_tailed(400, duration_s, seed=seed),
        traces.slow_ramp(150, 900, duration_s=duration_s, hold_s=duration_s // 4, seed=seed),
    ]  # fmt: skip


def test_new_generators_are_deterministic_per_seed() -> None:
    for a, b, c in zip(
        _new_generators(5, 1200), _new_generators(5, 1200), _new_generators(6, 1200), strict=True
    ):
        assert np.array_equal(a.rps, b.rps), a.name
        assert not np.array_equal(a.rps, c.rps), a.name


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    duration_s=st.integers(min_value=1, max_value=2000),
    noise=st.floats(min_value=0.0, max_value=1.0),
)
def test_new_generators_have_the_length_asked_and_no_negative_rates(
    seed: int, duration_s: int, noise: float
) -> None:
    built = [
        traces.flash_crowd(
            10, 50, at_s=duration_s // 2, rise_s=5, decay_s=30, duration_s=duration_s,
            noise=noise, seed=seed,
        ),
        traces.heavy_tailed(50, duration_s, noise=noise, wander=noise, seed=seed),
        traces.slow_ramp(
            0, 50, duration_s=duration_s, hold_s=duration_s // 2, noise=noise, wander=noise,
            seed=seed,
        ),
    ]  # fmt: skip
    for trace in built:
        assert trace.duration_s == duration_s, trace.name
        assert np.all(trace.rps >= 0), trace.name
    days = 1 + duration_s % 3
    weekly = traces.diurnal_weekly(
        0, 80, days=days, day_s=24 + duration_s % 500, start_weekday=seed % 7, noise=noise,
        wander=noise, seed=seed,
    )  # fmt: skip
    assert weekly.duration_s == days * (24 + duration_s % 500)
    assert np.all(weekly.rps >= 0)


@pytest.mark.parametrize(
    ("build", "names"),
    [
        (lambda: traces.diurnal_weekly(-1, 10, days=1), "low"),
        (lambda: traces.diurnal_weekly(50, 10, days=1), "high must be >= low"),
        (lambda: traces.diurnal_weekly(1, 10, days=0), "days"),
        (lambda: traces.diurnal_weekly(1, 10, days=1.5), "days"),  # type: ignore[arg-type]
        (lambda: traces.diurnal_weekly(1, 10, days=1, day_s=10), "day_s"),
        (lambda: traces.diurnal_weekly(1, 10, days=1, weekend_factor=1.5), "weekend_factor"),
        (lambda: traces.diurnal_weekly(1, 10, days=1, start_weekday=7), "start_weekday"),
        (lambda: traces.diurnal_weekly(1, 10, days=1, noise=-0.1), "noise"),
        (lambda: traces.diurnal_weekly(1, 10, days=1, wander=2), "wander"),
        (lambda: traces.diurnal_weekly(1, 10, days=1, day_jitter=-1), "day_jitter"),
        (
            lambda: traces.flash_crowd(10, 5, at_s=1, rise_s=1, decay_s=1, duration_s=9),
            "peak must be >= base",
        ),
        (
            lambda: traces.flash_crowd(-1, 5, at_s=1, rise_s=1, decay_s=1, duration_s=9),
            "base",
        ),
        (lambda: traces.flash_crowd(1, 5, at_s=9, rise_s=1, decay_s=1, duration_s=9), "at_s"),
        (lambda: traces.flash_crowd(1, 5, at_s=1, rise_s=0, decay_s=1, duration_s=9), "rise_s"),
        (
            lambda: traces.flash_crowd(1, 5, at_s=1, rise_s=1, decay_s=-3, duration_s=9),
            "decay_s",
        ),
        (
            lambda: traces.flash_crowd(1, 5, at_s=1, rise_s=1, decay_s=1, duration_s=0),
            "duration_s",
        ),
        (lambda: traces.heavy_tailed(-5, 60), "mean_rps"),
        (lambda: traces.heavy_tailed(5, 60, alpha=0), "alpha"),
        (lambda: traces.heavy_tailed(5, 60, base_share=1.2), "base_share"),
        (lambda: traces.heavy_tailed(5, 60, bursts_per_hour=0), "bursts_per_hour"),
        (lambda: traces.heavy_tailed(5, 60, median_burst_s=0), "median_burst_s"),
        (lambda: traces.heavy_tailed(5, 60, burst_sigma=-1), "burst_sigma"),
        (lambda: traces.heavy_tailed(5, 60, max_burst_s=float("nan")), "max_burst_s"),
        (lambda: traces.heavy_tailed(5, 60, max_peak_factor=1), "max_peak_factor"),
        (lambda: traces.heavy_tailed(5, 0), "duration_s"),
        (lambda: traces.slow_ramp(-1, 5, duration_s=10, hold_s=0), "start"),
        (lambda: traces.slow_ramp(1, float("inf"), duration_s=10, hold_s=0), "end"),
        (lambda: traces.slow_ramp(1, 5, duration_s=10, hold_s=10), "hold_s"),
        (lambda: traces.slow_ramp(1, 5, duration_s=10, hold_s=-1), "hold_s"),
        (lambda: traces.slow_ramp(1, 5, duration_s=10, hold_s=0, noise=3), "noise"),
    ],
)
def test_new_generators_name_the_bad_argument(build: Any, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        build()


def test_production_suite() -> None:
    suite = traces.production_suite(seed=0)
    assert [t.name for t in suite] == ["flash_crowd", "heavy_tailed", "slow_ramp", "business_day"]
    for t in suite:
        assert t.duration_s == 3600
        assert 300 <= t.peak_rps <= 1300, t.name  # roughly 300-1200, noise on top
        assert t.description
    by_name = {t.name: t for t in suite}
    crowd = by_name["flash_crowd"].rps
    assert np.median(crowd[:900]) == pytest.approx(300, rel=0.02) and crowd[900:921].max() > 1000
    assert by_name["heavy_tailed"].mean_rps == pytest.approx(400, rel=0.1)
    ramp = by_name["slow_ramp"].rps
    assert ramp[:60].mean() == pytest.approx(150, rel=0.15)
    assert ramp[3000:].mean() == pytest.approx(900, rel=0.1)
    day = by_name["business_day"]
    assert _hours(day, 1, 5, day_s=3600).mean() < 0.3 * 900
    assert np.median(_hours(day, 10, 16, day_s=3600)) > 0.7 * 900
    again = traces.production_suite(seed=0)
    assert all(np.array_equal(a.rps, b.rps) for a, b in zip(suite, again, strict=True))
    other = traces.production_suite(seed=1)
    assert all(not np.array_equal(a.rps, b.rps) for a, b in zip(suite, other, strict=True))
    # The standard suite is untouched by the new generators.
    assert [t.name for t in traces.standard_suite()] == [
        "steady_noisy", "step", "spike", "ramp", "diurnal", "bursty",
    ]  # fmt: skip


def test_forecast_suite() -> None:
    suite = traces.forecast_suite(seed=0)
    assert [t.name for t in suite] == ["week_business", "week_compressed"]
    week, compressed = suite
    assert week.duration_s == 4 * 86400 and compressed.duration_s == 9 * 3600
    assert 750 <= week.peak_rps <= 1350 and week.rps.min() >= 0
    # Thursday start: days 2 and 3 are the weekend, day 4 a Monday.
    per_day = compressed.rps.reshape(9, 3600).mean(axis=1)
    assert max(per_day[2], per_day[3]) < min(per_day[[0, 1, 4, 5, 6, 7, 8]])
    again = traces.forecast_suite(seed=0)
    assert all(np.array_equal(a.rps, b.rps) for a, b in zip(suite, again, strict=True))
