"""The forecast bench: per-day figures, and servectl with and without the forecast."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servectl.backends.sim import forecast_bench as fb
from servectl.sim import traces


def short_week() -> traces.Trace:
    """Two compressed days of week_compressed at a quarter of its rate (fast)."""
    full = next(t for t in traces.forecast_suite(0) if t.name == "week_compressed")
    two_days = traces.truncate(traces.scaled(full, 0.25), 2 * 3600)
    assert (two_days.name, two_days.day_s) == ("week_compressed", 3600)  # both kept
    return two_days


def test_day_figures_split_the_run_by_day_and_count_the_morning_ramp() -> None:
    class Fake:
        duration_s = 48
        p99_ms = np.array([10.0] * 48)
        arrivals = np.array([10] * 48)
        slo_met = np.array([1.0] * 48)
        replicas = np.array([2] * 24 + [3] * 24)

    Fake.p99_ms[24 + 6] = 500.0  # day 1, 06:00: in the ramp (05:00-11:00)
    Fake.p99_ms[24 + 20] = 500.0  # day 1, 20:00: not
    Fake.slo_met[24 + 6] = 0.5
    days = fb.day_figures(Fake(), 24, 150.0)  # type: ignore[arg-type]
    assert [d.day for d in days] == [0, 1]
    assert [d.replica_seconds for d in days] == [48.0, 72.0]
    assert [d.ramp_seconds_over_slo for d in days] == [0, 1]
    assert days[1].ramp_requests_missed == 5
    assert days[0].slo_attainment == 1.0 and days[1].slo_attainment == 1 - 5 / 240


def test_the_forecast_changes_nothing_on_day_one_and_pre_scales_on_day_two(
    tmp_path: Path,
) -> None:
    records, runs = fb.run_forecast_bench([short_week()], ("servectl", "servectl-no-forecast"))
    on, off = records
    assert (on.policy, off.policy) == ("servectl", "servectl-no-forecast")
    # Day one: nothing learnt yet, the two runs are the same second by second.
    a, b = runs[("week_compressed", "servectl")], runs[("week_compressed", "servectl-no-forecast")]
    assert np.array_equal(a.ready[:3600], b.ready[:3600])
    assert on.days[0] == off.days[0]
    # Day two: the forecast wins ticks, and only ever adds capacity.
    assert on.forecast_decisions > 0 and off.forecast_decisions == 0
    assert on.days[1].replica_seconds >= off.days[1].replica_seconds
    assert on.ramp_seconds_over_slo <= off.ramp_seconds_over_slo
    header, rows = fb.table(records)
    assert len(rows[0]) == len(header) and rows[0][1] == "servectl"
    png = tmp_path / "ramp.png"
    fb.plot_ramp(runs, "week_compressed", 1, str(png), 150.0, day_s=3600)
    assert png.stat().st_size > 10_000


def test_the_full_history_for_the_decision_benchmark_is_full_and_ready() -> None:
    from servectl.autoscaling import forecast
    from servectl.backends.sim import bench

    cfg = forecast.ForecastConfig(periods_s=(3600.0, 25200.0))
    history = bench.full_forecast_history(cfg, 100_000.0)
    assert all(m is not None for m in history["means"])
    seen = forecast.forecast(history, cfg, 100_000.0, 32.0)
    assert seen.status is forecast.ForecastStatus.READY and seen.rate_rps is not None
