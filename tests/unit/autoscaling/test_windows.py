"""Aggregation windows: mean, max, EWMA, slope, Prometheus-style histogram quantiles."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servectl.autoscaling import windows

SAMPLES = [(1.0, 10.0), (2.0, 20.0), (3.0, 30.0), (4.0, 40.0)]


@pytest.mark.parametrize(
    ("now", "window", "mean", "maximum"),
    [
        (4.0, 10.0, 25.0, 40.0),
        (4.0, 2.0, 35.0, 40.0),  # (2, 4]: 30 and 40; a sample exactly 2 s old has left
        (4.0, 0.5, 40.0, 40.0),
        (10.0, 2.0, None, None),  # all too old
        (2.0, 10.0, 15.0, 20.0),  # future samples are not seen
    ],
)
def test_mean_and_max_windows(
    now: float, window: float, mean: float | None, maximum: float | None
) -> None:
    assert windows.mean(SAMPLES, now, window) == mean
    assert windows.maximum(SAMPLES, now, window) == maximum


def test_prune_keeps_the_window() -> None:
    assert windows.prune(SAMPLES, 4.0, 2.0) == [(3.0, 30.0), (4.0, 40.0)]


@pytest.mark.parametrize(
    ("previous", "value", "dt", "half_life", "expected"),
    [
        (None, 5.0, 1.0, 10.0, 5.0),  # first sample
        (100.0, 200.0, 10.0, 10.0, 150.0),  # one half-life: half way (docstring example)
        (100.0, 200.0, 20.0, 10.0, 175.0),  # two half-lives
        (100.0, 200.0, 0.0, 10.0, 100.0),  # no time passed, no change
        (100.0, 200.0, 5.0, 0.0, 200.0),  # no smoothing
    ],
)
def test_ewma(
    previous: float | None, value: float, dt: float, half_life: float, expected: float
) -> None:
    assert windows.ewma(previous, value, dt, half_life) == pytest.approx(expected)


def test_slope_of_a_line_and_too_few_points() -> None:
    line = [(float(t), 3.0 * t + 1) for t in range(10)]
    assert windows.slope(line, 9.0, 100.0) == pytest.approx(3.0)
    assert windows.slope(line[:2], 9.0, 100.0) is None
    assert windows.slope([(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)], 1.0, 10.0) is None


BUCKETS = [(0.1, 10.0), (0.2, 60.0), (0.5, 90.0), (1.0, 100.0), (math.inf, 100.0)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 0.18),  # rank 50 in (0.1, 0.2]: 0.1 + 0.1 * 40/50
        (0.9, 0.5),  # rank 90 lands exactly on the 0.5 bound
        (0.05, 0.05),  # first bucket interpolates from 0
        (0.99, 0.95),
    ],
)
def test_histogram_quantile_interpolates_like_prometheus(q: float, expected: float) -> None:
    assert windows.histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_histogram_quantile_in_the_inf_bucket_returns_the_top_finite_bound() -> None:
    assert windows.histogram_quantile(0.99, [(1.0, 50.0), (math.inf, 100.0)]) == 1.0


def test_empty_histogram_is_missing_not_nan() -> None:
    assert windows.histogram_quantile(0.99, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert windows.histogram_quantile(0.99, []) is None
    assert windows.histogram_quantile(1.5, BUCKETS) is None


def test_bucket_delta_and_counter_reset() -> None:
    newer = [(0.1, 15.0), (math.inf, 30.0)]
    older = [(0.1, 10.0), (math.inf, 40.0)]
    assert windows.bucket_delta(newer, older) == [(0.1, 5.0), (math.inf, 30.0)]


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=20),
    st.floats(0, 1),
)
def test_quantile_is_monotone_and_bounded(counts: list[float], q: float) -> None:
    cumulative = []
    total = 0.0
    for i, c in enumerate(counts):
        total += c
        cumulative.append((float(i + 1), total))
    value = windows.histogram_quantile(q, cumulative)
    if total == 0:
        assert value is None
    else:
        assert value is not None and 0.0 <= value <= len(counts)
        higher = windows.histogram_quantile(min(1.0, q + 0.1), cumulative)
        assert higher is not None and higher >= value - 1e-9
