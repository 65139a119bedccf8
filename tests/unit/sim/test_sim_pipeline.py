"""The Prometheus-like view: scrape interval, ingestion delay, windows, quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from servectl.autoscaling import decision, snapshot
from servectl.backends.sim import run as sim_run
from servectl.sim import model, pipeline, traces

SERVICE = model.ServiceModel()


@dataclass
class Recorder:
    """Holds ``replicas`` and keeps every snapshot it is shown."""

    replicas: int
    period_s: float = 1.0
    name: str = "recorder"
    seen: list[snapshot.Snapshot] = field(default_factory=list)

    def initial_state(self) -> dict[str, Any]:
        return {}

    def decide(
        self, snap: snapshot.Snapshot, state: dict[str, Any]
    ) -> tuple[decision.Decision, dict[str, Any]]:
        self.seen.append(snap)
        return decision.Decision(self.replicas, decision.Reason.POLICY), state


def _expected_rps(arrivals: np.ndarray, now: int, cfg: pipeline.PipelineConfig) -> float | None:
    counted = np.concatenate(([0], np.cumsum(arrivals)))  # counted[s] = arrivals before s
    stamps = [
        s
        for s in range(0, now + 1, int(cfg.scrape_interval_s))
        if now - cfg.rate_window_s < s <= now - cfg.delay_s
    ]
    if len(stamps) < 2:
        return None
    return float(counted[stamps[-1]] - counted[stamps[0]]) / (stamps[-1] - stamps[0])


def test_a_load_step_shows_after_the_delay_and_fills_the_window() -> None:
    cfg = pipeline.PipelineConfig()
    trace = traces.step(100, 2000, at_s=60, duration_s=90)
    policy = Recorder(30)
    result = sim_run.simulate(trace, policy, SERVICE, initial_replicas=30, pipeline=cfg)
    rps = {int(s.time): s.signals.rps for s in policy.seen}
    for t, value in rps.items():
        expected = _expected_rps(result.arrivals, t, cfg)
        assert value == (pytest.approx(expected) if expected is not None else None), t
    # The scrape at 62 is the first to count post-step requests; visible from 63.
    assert all(rps[t] is not None and rps[t] < 150 for t in range(12, 63))
    assert rps[63] is not None and 150 < rps[63] < 1900
    # From 60 + window - scrape = 68 the window holds post-step samples only.
    assert rps[67] is not None and rps[67] < 1900
    assert all(rps[t] == pytest.approx(2000, rel=0.05) for t in range(68, 90))
    # Nothing is visible before the first sample is ingested; two are needed for a rate.
    assert rps[0] is None and rps[2] is None and rps[3] is not None


def test_age_and_missing_signals_are_never_nan() -> None:
    trace = traces.Trace(
        "idle-then-busy-then-idle", np.r_[np.zeros(20), np.full(20, 300.0), np.zeros(60)]
    )
    policy = Recorder(4)
    sim_run.simulate(trace, policy, SERVICE, initial_replicas=4)
    for snap in policy.seen:
        sig = snap.signals
        for value in (
            sig.rps,
            sig.cpu_usage_cores,
            sig.cpu_utilization,
            sig.concurrency,
            sig.error_rate,
        ):
            assert value is None or math.isfinite(value)
        assert all(math.isfinite(v) for v in sig.latency_ms.values())
        t = int(snap.time)
        if t >= 1:
            assert sig.age_s == (1.0 if t % 2 else 2.0)
    by_t = {int(s.time): s.signals for s in policy.seen}
    assert by_t[15].latency_ms == {}  # empty histogram: missing, not NaN
    assert by_t[15].rps == 0.0 and by_t[15].error_rate is None
    assert set(by_t[45].latency_ms) == {"p50", "p90", "p95", "p99"}
    assert by_t[99].latency_ms == {}  # the 30 s window has emptied again


def test_cpu_concurrency_and_latency_signals_track_the_truth() -> None:
    trace = traces.Trace("flat", np.full(200, 600.0))
    policy = Recorder(10)
    result = sim_run.simulate(trace, policy, SERVICE, initial_replicas=10)
    late = [s for s in policy.seen if s.time >= 60]
    cpu = np.mean([s.signals.cpu_usage_cores for s in late])
    assert cpu == pytest.approx(result.cpu_cores[50:].mean(), rel=0.03)
    assert cpu == pytest.approx(600 * 0.020, rel=0.05)
    for s in late:
        assert s.signals.cpu_utilization == pytest.approx(
            100 * s.signals.cpu_usage_cores / (10 * SERVICE.cpu_request_cores)
        )
    mean_latency_s = np.nanmean(result.mean_ms[50:]) / 1000
    concurrency = np.mean([s.signals.concurrency for s in late])
    assert concurrency == pytest.approx(600 * mean_latency_s, rel=0.05)
    p99 = np.mean([s.signals.latency_ms["p99"] for s in late])
    true_p99 = np.nanmean(result.p99_ms[50:])
    # Linear interpolation inside an 80 %-wide bucket: the estimate lands in the bucket
    # holding the true p99, no closer.
    bucket_of = np.searchsorted(model.LATENCY_BUCKETS_US, np.array([p99, true_p99]) * 1000)
    assert bucket_of[0] == bucket_of[1]
    p50 = np.mean([s.signals.latency_ms["p50"] for s in late])
    assert p50 < p99


def test_pods_one_sample_per_existing_replica() -> None:
    trace = traces.Trace("flat", np.full(80, 200.0))

    @dataclass
    class GrowAt20(Recorder):
        def decide(
            self, snap: snapshot.Snapshot, state: dict[str, Any]
        ) -> tuple[decision.Decision, dict[str, Any]]:
            self.seen.append(snap)
            return decision.Decision(3 if snap.time < 20 else 5, decision.Reason.POLICY), state

    policy = GrowAt20(0)
    sim_run.simulate(trace, policy, SERVICE, initial_replicas=3)
    at = {int(s.time): s for s in policy.seen}
    pods = at[30].pods
    assert len(pods) == 5
    assert [p.ready for p in pods] == [True, True, True, False, False]
    assert [p.start_time for p in pods] == [-3600.0] * 3 + [20.0, 20.0]
    assert all(p.cpu_request_cores == 2.0 for p in pods)
    assert all(p.cpu_usage_cores is not None and p.cpu_usage_cores > 0 for p in pods[:3])
    assert pods[3].cpu_usage_cores == 0.0  # scraped while starting: no work yet
    assert at[21].pods[3].cpu_usage_cores is None  # no sample yet
    assert at[30].replicas.current == 5 and at[30].replicas.ready == 3
    assert at[60].replicas.ready == 5
    total = sum(p.cpu_usage_cores or 0.0 for p in at[60].pods)
    assert total == pytest.approx(at[60].signals.cpu_usage_cores, rel=0.1)
    conc = sum(p.concurrency or 0.0 for p in at[60].pods)
    assert conc == pytest.approx(at[60].signals.concurrency)


def _scrape(time: float, requests: float, buckets: list[int] | None = None) -> pipeline.Scrape:
    hist = np.zeros(model.LATENCY_BUCKET_COUNT, dtype=np.int64)
    for i, value in enumerate(buckets or []):
        hist[i] = value
    return pipeline.Scrape(
        time=time,
        requests=requests,
        errors=requests / 10,
        cpu_seconds=2 * time,
        inflight_seconds=3 * time,
        latency_buckets=hist,
        replica_ids=np.array([0, 1]),
        replica_cpu_seconds=np.array([time, time]),
        replica_inflight_seconds=np.array([time, 2 * time]),
    )


def test_pipeline_windows_on_synthetic_counters() -> None:
    cfg = pipeline.PipelineConfig(scrape_interval_s=5, delay_s=2, rate_window_s=20)
    metrics = pipeline.MetricsPipeline(cfg, cpu_request_cores=2.0)
    for t in range(0, 60, 5):
        metrics.ingest(_scrape(float(t), requests=float(t * t)))
    sig = metrics.signals(50.0, ready_replicas=2)
    # Window (30, 48]: samples 35, 40, 45 -> (45² - 35²) / 10.
    assert sig.rps == pytest.approx((45**2 - 35**2) / 10)
    assert sig.error_rate == pytest.approx(0.1)
    assert sig.cpu_usage_cores == pytest.approx(2.0)
    assert sig.cpu_utilization == pytest.approx(50.0)
    assert sig.concurrency == pytest.approx(3.0)
    assert sig.age_s == 5.0
    with pytest.raises(ValueError, match="not after"):
        metrics.ingest(_scrape(55.0, 0.0))


@pytest.mark.parametrize(
    ("quantile", "counts", "expected"),
    [
        (0.5, [0, 10, 0], 10 + (18 - 10) * 0.5),  # interpolate inside (10, 18]
        (0.5, [10, 0, 0], 5.0),  # first bucket interpolates from 0
        (1.0, [10, 0, 0], 10.0),
        (0.99, [0, 0, 5], 18.0),  # +Inf bucket: the largest finite bound
        (0.25, [1, 1, 2], 10.0),
        (0.5, [0, 0, 0], None),  # empty: missing
    ],
)
def test_histogram_quantile_like_prometheus(
    quantile: float, counts: list[int], expected: float | None
) -> None:
    bounds = np.array([10.0, 18.0])
    got = pipeline.histogram_quantile(quantile, bounds, np.array(counts, dtype=np.int64))
    assert got == (pytest.approx(expected) if expected is not None else None)
