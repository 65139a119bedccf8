"""What policies see: counters scraped like Prometheus, lagged, windowed, made a Snapshot.

The simulator knows the truth every second; a real controller does not. This module
turns the model's cumulative counters into the view a controller gets from Prometheus:

* every ``scrape_interval_s`` the scraper reads every counter (service-level and per
  replica) and stamps the sample with the scrape time;
* a sample becomes queryable ``delay_s`` after its timestamp (ingestion lag);
* ``rate(x[w])`` at time ``now`` uses the samples stamped in ``(now - w, now - delay]``
  (the range selector, minus what is not ingested yet): ``(last - first) / (t_last -
  t_first)``, missing with fewer than two samples. Prometheus also extrapolates to the
  window edges; with regular scrapes that changes nothing for a steady rate, so we don't;
* latency percentiles are ``histogram_quantile`` over the bucket increases in
  ``latency_window_s``, with Prometheus' linear interpolation inside a bucket; an empty
  histogram is missing (Prometheus would return NaN), never NaN;
* concurrency is the mean number of in-flight requests over the last scrape interval
  (the increase of an in-flight-seconds counter between the two newest samples).

Worked example (defaults: scrape 2 s, delay 1 s, window 10 s): load steps at t = 60.
The sample stamped 62 is the first to count a request after the step; it is visible
from t = 63, so ``rps`` moves at 63; from t = 68 the window (58, 67] holds the samples
60..66 only, all after the step, so ``rps`` shows the new rate in full.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from servectl.autoscaling import snapshot
from servectl.sim import model

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PipelineConfig:
    """Defaults mirror a common setup: 2 s scrapes (a fast ServiceMonitor), 1 s to
    ingest, ``rate(...[10s])`` for the fast signals and 30 s for latency quantiles."""

    scrape_interval_s: float = 2.0
    delay_s: float = 1.0
    rate_window_s: float = 10.0
    latency_window_s: float = 30.0
    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)

    def __post_init__(self) -> None:
        if not self.scrape_interval_s > 0:
            raise ValueError(f"scrape_interval_s must be > 0, got {self.scrape_interval_s}")
        if self.delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {self.delay_s}")
        if not (self.rate_window_s > 0 and self.latency_window_s > 0):
            raise ValueError("rate_window_s and latency_window_s must be > 0")


@dataclass(frozen=True, eq=False)
class Scrape:
    """One scrape of every series; all values are cumulative since the start.

    ``latency_buckets`` holds per-bucket counts (not cumulative across buckets), one per
    ``model.LATENCY_BUCKETS_US`` bound plus the +Inf bucket, in observation order of the
    TF Serving ``request_latency`` histogram (µs).
    """

    time: float
    requests: float
    errors: float
    cpu_seconds: float
    inflight_seconds: float
    latency_buckets: IntArray
    replica_ids: IntArray  # sorted ascending
    replica_cpu_seconds: FloatArray
    replica_inflight_seconds: FloatArray


def histogram_quantile(quantile: float, bounds: FloatArray, counts: IntArray) -> float | None:
    """Prometheus' ``histogram_quantile`` for one histogram, or None if it is empty.

    ``bounds`` are the finite upper bounds, ``counts`` the per-bucket counts with the
    +Inf bucket last. The rank ``q x total`` is located in the cumulative counts and
    interpolated linearly inside its bucket (lower edge 0 for the first bucket); a rank
    in the +Inf bucket returns the largest finite bound, as Prometheus does.
    """
    cumulative = np.cumsum(counts)
    total = float(cumulative[-1]) if cumulative.size else 0.0
    if total <= 0:
        return None
    if quantile <= 0:
        return 0.0
    if quantile >= 1:
        quantile = 1.0
    rank = quantile * total
    bucket = int(np.searchsorted(cumulative, rank, side="left"))
    if bucket >= bounds.size:
        return float(bounds[-1])
    lower = 0.0 if bucket == 0 else float(bounds[bucket - 1])
    upper = float(bounds[bucket])
    below = 0.0 if bucket == 0 else float(cumulative[bucket - 1])
    in_bucket = float(cumulative[bucket]) - below
    if in_bucket <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / in_bucket


@dataclass(frozen=True)
class _PodRates:
    cpu_usage_cores: float | None
    concurrency: float | None


class MetricsPipeline:
    """Stores scrapes and answers queries as of ``now`` (see the module docstring)."""

    def __init__(self, config: PipelineConfig, *, cpu_request_cores: float) -> None:
        self.config = config
        self._cpu_request_cores = cpu_request_cores
        longest = max(config.rate_window_s, config.latency_window_s) + config.delay_s
        self._samples: deque[Scrape] = deque(
            maxlen=math.ceil(longest / config.scrape_interval_s) + 3
        )

    def ingest(self, scrape: Scrape) -> None:
        if self._samples and scrape.time <= self._samples[-1].time:
            raise ValueError(
                f"scrape at {scrape.time} is not after the previous one ({self._samples[-1].time})"
            )
        self._samples.append(scrape)

    def _visible(self, now: float) -> list[Scrape]:
        horizon = now - self.config.delay_s
        return [s for s in self._samples if s.time <= horizon]

    def _window(self, visible: list[Scrape], now: float, window_s: float) -> list[Scrape]:
        start = now - window_s
        return [s for s in visible if s.time > start]

    def signals(self, now: float, ready_replicas: int) -> snapshot.Signals:
        """Service-level signals as a controller would query them at ``now``."""
        visible = self._visible(now)
        if not visible:
            return snapshot.Signals()
        newest = visible[-1]
        rates = self._window(visible, now, self.config.rate_window_s)
        rps = cpu = errors = None
        if len(rates) >= 2:
            first, last = rates[0], rates[-1]
            span = last.time - first.time
            rps = (last.requests - first.requests) / span
            cpu = (last.cpu_seconds - first.cpu_seconds) / span
            errors = (last.errors - first.errors) / span
        utilization = None
        if cpu is not None and ready_replicas > 0:
            utilization = 100.0 * cpu / (ready_replicas * self._cpu_request_cores)
        error_rate = errors / rps if errors is not None and rps else None
        concurrency = None
        if len(visible) >= 2:
            before = visible[-2]
            concurrency = (newest.inflight_seconds - before.inflight_seconds) / (
                newest.time - before.time
            )
        latency: dict[str, float] = {}
        window = self._window(visible, now, self.config.latency_window_s)
        if len(window) >= 2:
            increase = window[-1].latency_buckets - window[0].latency_buckets
            for percentile in self.config.percentiles:
                value_us = histogram_quantile(
                    percentile / 100.0, model.LATENCY_BUCKETS_US, increase
                )
                if value_us is not None:
                    latency[snapshot.percentile_key(percentile)] = value_us / 1000.0
        return snapshot.Signals(
            cpu_utilization=utilization,
            cpu_usage_cores=cpu,
            rps=rps,
            concurrency=concurrency,
            latency_ms=latency,
            error_rate=error_rate,
            age_s=now - newest.time,
        )

    def _pod_rates(self, now: float, ids: IntArray) -> list[_PodRates]:
        visible = self._visible(now)
        if not visible or ids.size == 0:
            return [_PodRates(None, None)] * int(ids.size)
        window = self._window(visible, now, self.config.rate_window_s)
        cpu = _per_replica_rate(window, ids, "replica_cpu_seconds")
        concurrency = _per_replica_rate(visible[-2:], ids, "replica_inflight_seconds")
        return [
            _PodRates(None if math.isnan(c) else c, None if math.isnan(q) else q)
            for c, q in zip(cpu.tolist(), concurrency.tolist(), strict=True)
        ]

    def snapshot(
        self,
        now: float,
        replicas: snapshot.Replicas,
        pods: model.PodView,
    ) -> snapshot.Snapshot:
        """The Snapshot every policy receives at ``now``."""
        rates = self._pod_rates(now, pods.ids)
        samples = tuple(
            snapshot.PodSample(
                name=f"replica-{pod_id}",
                ready=bool(ready),
                start_time=float(start),
                cpu_usage_cores=rate.cpu_usage_cores,
                cpu_request_cores=self._cpu_request_cores,
                concurrency=rate.concurrency,
            )
            for pod_id, start, ready, rate in zip(
                pods.ids.tolist(),
                pods.start_times.tolist(),
                pods.ready.tolist(),
                rates,
                strict=True,
            )
        )
        return snapshot.Snapshot(
            time=float(now),
            replicas=replicas,
            signals=self.signals(now, replicas.ready),
            pods=samples,
        )


def _per_replica_rate(samples: Sequence[Scrape], ids: IntArray, counter: str) -> FloatArray:
    """Per-replica ``rate`` of the ``counter`` field over ``samples`` for each of ``ids``:
    from that replica's first sample to its last (NaN with fewer than two)."""
    out = np.full(ids.size, np.nan)
    if len(samples) < 2:
        return out
    first, last = samples[0], samples[-1]
    if np.array_equal(first.replica_ids, ids) and np.array_equal(last.replica_ids, ids):
        # The common case: nobody came or went inside the window.
        values: FloatArray = (getattr(last, counter) - getattr(first, counter)) / (
            last.time - first.time
        )
        return values
    first_value = np.full(ids.size, np.nan)
    first_time = np.full(ids.size, np.nan)
    last_value = np.full(ids.size, np.nan)
    last_time = np.full(ids.size, np.nan)
    for sample in samples:
        known = sample.replica_ids
        if known.size == 0:
            continue
        where = np.minimum(np.searchsorted(known, ids), known.size - 1)
        present = known[where] == ids
        sample_values = getattr(sample, counter)[where]
        fresh = present & np.isnan(first_time)
        first_value[fresh] = sample_values[fresh]
        first_time[fresh] = sample.time
        last_value[present] = sample_values[present]
        last_time[present] = sample.time
    span = last_time - first_time
    ok = span > 0
    out[ok] = (last_value[ok] - first_value[ok]) / span[ok]
    return out
