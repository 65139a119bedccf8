"""Cumulative per-revision counters: the input of analysis windows (``increase()``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Counters:
    """One revision's cumulative counters as of a scrape (Prometheus ``increase()`` input).

    ``latency_buckets`` are per-bucket counts (not cumulative across buckets) of TF
    Serving's ``request_latency`` histogram (µs), one per bound of the bucket layout the
    backend reports in :attr:`Observed.latency_bounds_us` plus the +Inf bucket.
    """

    time: float
    requests: float
    errors: float
    cpu_seconds: float
    latency_buckets: tuple[float, ...] = ()
