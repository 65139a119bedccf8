"""Aggregation windows over timestamped samples: mean, EWMA, max, trend, histogram quantiles.

Samples are ``(time, value)`` pairs kept in a policy's persisted state, oldest first.
Windows are half-open ``(now - window, now]`` like Prometheus range selectors, so a
sample exactly ``window`` old has left the window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

Sample = tuple[float, float]


def within(samples: Iterable[Sample], now: float, window_s: float) -> list[Sample]:
    cutoff = now - window_s
    return [(t, v) for t, v in samples if cutoff < t <= now]


def prune(samples: Sequence[Sample], now: float, keep_s: float) -> list[Sample]:
    """Drop samples older than ``keep_s`` (state must stay bounded)."""
    return within(samples, now, keep_s)


def mean(samples: Iterable[Sample], now: float, window_s: float) -> float | None:
    values = [v for _, v in within(samples, now, window_s)]
    return sum(values) / len(values) if values else None


def maximum(samples: Iterable[Sample], now: float, window_s: float) -> float | None:
    values = [v for _, v in within(samples, now, window_s)]
    return max(values) if values else None


def ewma(previous: float | None, value: float, dt_s: float, half_life_s: float) -> float:
    """Exponentially weighted mean with a half-life in seconds (robust to uneven ticks).

    Worked example: previous 100, value 200, dt 10 s, half-life 10 s -> 150.
    """
    if previous is None or half_life_s <= 0:
        return value
    weight: float = 1.0 - 0.5 ** (max(dt_s, 0.0) / half_life_s)
    return previous + weight * (value - previous)


def slope(samples: Iterable[Sample], now: float, window_s: float) -> float | None:
    """Least-squares slope (value per second) over the window; None with < 3 samples."""
    points = within(samples, now, window_s)
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t


def histogram_quantile(quantile: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus ``histogram_quantile``: ``buckets`` are cumulative ``(le, count)`` pairs.

    Linear interpolation inside the bucket that holds the rank; the first bucket's
    lower bound is 0; a rank in the ``+Inf`` bucket returns the highest finite bound.
    Returns None (never NaN) when there are no observations, so an idle service does
    not feed NaN into a decision.
    """
    if not buckets or not 0.0 <= quantile <= 1.0:
        return None
    ordered = sorted(buckets, key=lambda b: b[0])
    total = ordered[-1][1]
    if total <= 0 or math.isnan(total):
        return None
    rank = quantile * total
    lower_bound = 0.0
    lower_count = 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            in_bucket = count - lower_count
            if in_bucket <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / in_bucket
        lower_bound, lower_count = bound, count
    return lower_bound


def bucket_delta(
    newer: Sequence[tuple[float, float]], older: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Per-bucket increase between two cumulative histograms (a counter reset counts from 0)."""
    old = dict(older)
    out = []
    for bound, count in newer:
        before = old.get(bound, 0.0)
        out.append((bound, count - before if count >= before else count))
    return out
