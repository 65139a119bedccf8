"""Run one policy over one trace, second by second, and score it.

Each simulated second ``t``, in this order:

1. replicas whose cold start ends at or before ``t`` turn ready; drained ones go;
2. on a scrape tick the counters (as of the end of second ``t - 1``) are scraped;
3. on a policy tick the policy gets the Snapshot (lagged, windowed metrics) and its
   state; its decision, clamped to [min, max], is applied at once;
4. second ``t``'s requests are routed over the ready replicas and queued.

The offered load (Poisson counts, arrival instants, service times) depends on the seed
alone, so every policy faces exactly the same requests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servectl.autoscaling import policy as policy_mod
from servectl.autoscaling import snapshot
from servectl.sim import model, traces
from servectl.sim import pipeline as pipeline_mod

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

WARM_AGE_S = 3600.0
"""Initial replicas were created this long before t = 0 (warm, past any init period)."""
INITIAL_UTILIZATION = 0.7
RECOVERY_HOLD_S = 30
"""Recovery ends when the per-second p99 has stayed under the SLO this long."""
_EMPTY = np.empty(0)


@dataclass(frozen=True)
class DecisionRecord:
    """One policy tick: ``replicas`` as applied (clamped), ``requested`` as returned."""

    time: float
    replicas: int
    requested: int
    reason: str
    signal: str | None


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-second timelines (index = second) and totals of one run."""

    trace: str
    policy: str
    seed: int
    service: model.ServiceModel
    t: IntArray
    offered_rps: FloatArray
    arrivals: IntArray
    ready: IntArray  # ready replicas taking requests
    desired: IntArray  # replica count last applied
    replicas: IntArray  # existing (starting + ready) replicas, as billed
    p99_ms: FloatArray  # of requests arriving that second (inf: some never served)
    slo_met: FloatArray  # fraction of that second's requests meeting the SLO (NaN: none)
    mean_ms: FloatArray  # mean latency of that second's served requests (NaN: none)
    cpu_cores: FloatArray  # mean cores busy
    decisions: tuple[DecisionRecord, ...]
    requests: int
    met_slo: int
    failed: int
    replica_seconds: float
    scale_actions: int
    direction_reversals: int
    recovery_s: float | None  # None: no step/spike in the trace; inf: never recovered
    change_at_s: int | None = None
    min_replicas: int = 1
    max_replicas: int = 100

    @property
    def duration_s(self) -> int:
        return int(self.t.size)

    @property
    def slo_attainment(self) -> float:
        return self.met_slo / self.requests if self.requests else 1.0

    @property
    def reversals_per_10min(self) -> float:
        return self.direction_reversals * 600.0 / self.duration_s if self.duration_s else 0.0

    def to_record(self) -> dict[str, Any]:
        """Totals and settings as JSON-compatible values (no timelines)."""
        recovery: float | None = self.recovery_s
        status = "none" if recovery is None else "recovered"
        if recovery is not None and math.isinf(recovery):
            recovery, status = None, "never"
        return {
            "trace": self.trace,
            "policy": self.policy,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "requests": self.requests,
            "met_slo": self.met_slo,
            "failed": self.failed,
            "slo_attainment": self.slo_attainment,
            "replica_seconds": self.replica_seconds,
            "scale_actions": self.scale_actions,
            "direction_reversals": self.direction_reversals,
            "reversals_per_10min": self.reversals_per_10min,
            "recovery_s": recovery,
            "recovery": status,
            "change_at_s": self.change_at_s,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "service": {
                "service_time_ms": self.service.service_time_ms,
                "service_cv": self.service.service_cv,
                "threads_per_replica": self.service.threads_per_replica,
                "cold_start_s": self.service.cold_start_s,
                "timeout_s": self.service.timeout_s,
                "slo_ms": self.service.slo_ms,
                "distribution": self.service.distribution.value,
            },
        }


def initial_replicas_for(
    trace: traces.Trace, service: model.ServiceModel, min_replicas: int, max_replicas: int
) -> int:
    """Enough replicas for the first minute's mean load at 70 % utilization."""
    first_minute = float(trace.rps[:60].mean())
    needed = math.ceil(first_minute * service.service_s / (service.threads_per_replica * 0.7))
    return min(max(needed, min_replicas), max_replicas)


def _nearest_rank(values: FloatArray, quantile: float) -> float:
    if values.size == 0:
        return math.nan
    k = max(math.ceil(quantile * values.size) - 1, 0)
    return float(np.partition(values, k)[k])


class _Rows:
    """Counts booked into the future seconds in which they become observable."""

    def __init__(self, seconds: int, width: int) -> None:
        self.width = width
        self.values: IntArray = np.zeros((seconds, width), dtype=np.int64)

    def book(self, t: int, offsets: IntArray, column: IntArray | None = None) -> None:
        if offsets.size == 0:
            return
        inside = t + offsets < self.values.shape[0]
        if not inside.all():
            offsets = offsets[inside]
            column = None if column is None else column[inside]
            if offsets.size == 0:
                return
        span = int(offsets.max()) + 1
        flat = offsets * self.width if column is None else offsets * self.width + column
        self.values[t : t + span] += np.bincount(flat, minlength=span * self.width).reshape(
            span, self.width
        )


def simulate(
    trace: traces.Trace,
    policy: policy_mod.Policy,
    service: model.ServiceModel | None = None,
    *,
    min_replicas: int = 1,
    max_replicas: int = 100,
    initial_replicas: int | None = None,
    seed: int = 0,
    pipeline: pipeline_mod.PipelineConfig | None = None,
    record_decisions: bool = True,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
) -> SimResult:
    """Simulate ``policy`` serving ``trace``; ``service`` defaults to ``ServiceModel()``
    and ``pipeline`` to ``PipelineConfig()``."""
    service = service if service is not None else model.ServiceModel()
    config = pipeline if pipeline is not None else pipeline_mod.PipelineConfig()
    if min_replicas < 0 or max_replicas < max(min_replicas, 1):
        raise ValueError(
            "need 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
            f"got {min_replicas}..{max_replicas}"
        )
    period_s = float(policy.period_s)
    if not period_s > 0:
        raise ValueError(f"policy {policy.name!r}: period_s must be > 0, got {period_s}")

    duration = trace.duration_s
    stream = model.RequestStream(
        trace.rps, service, seed, with_routing=routing is model.Routing.RANDOM
    )
    fleet = model.Fleet(service, routing)
    start = (
        initial_replicas
        if initial_replicas is not None
        else initial_replicas_for(trace, service, min_replicas, max_replicas)
    )
    desired = min(max(int(start), min_replicas), max_replicas)
    fleet.add(desired, created=-WARM_AGE_S, ready_at=-WARM_AGE_S + service.cold_start_s)
    fleet.update(0.0)
    metrics = pipeline_mod.MetricsPipeline(config, cpu_request_cores=service.cpu_request_cores)
    state = policy.initial_state()

    slo_s = service.slo_ms / 1000.0
    timeout_s = service.timeout_s
    bounds_us = model.LATENCY_BUCKETS_US
    histogram = _Rows(duration, model.LATENCY_BUCKET_COUNT)  # by completion second
    errors = _Rows(duration, 1)  # by the second the client gives up
    seen_buckets = np.zeros(model.LATENCY_BUCKET_COUNT, dtype=np.int64)
    seen_errors = 0
    seen_requests = 0

    ready_tl = np.zeros(duration, dtype=np.int64)
    desired_tl = np.zeros(duration, dtype=np.int64)
    replicas_tl = np.zeros(duration, dtype=np.int64)
    p99_tl = np.full(duration, np.nan)
    met_tl = np.full(duration, np.nan)
    mean_tl = np.full(duration, np.nan)
    cpu_tl = np.zeros(duration)

    # Requests waiting at the router while no replica is ready.
    pending_at: FloatArray = _EMPTY  # absolute arrival times
    pending_service: FloatArray = _EMPTY
    pending_route: FloatArray = _EMPTY
    late_second: list[IntArray] = []
    late_latency: list[FloatArray] = []

    decisions: list[DecisionRecord] = []
    directions: list[int] = []
    requests = met = failed = 0
    replica_seconds = 0.0
    next_scrape = 0.0
    next_tick = 0.0
    eps = 1e-9

    for t in range(duration):
        fleet.refresh(t)
        if t + eps >= next_scrape:
            metrics.ingest(
                pipeline_mod.Scrape(
                    time=float(t),
                    requests=float(seen_requests),
                    errors=float(seen_errors),
                    cpu_seconds=fleet.cpu_seconds_total,
                    inflight_seconds=fleet.inflight_seconds_total,
                    latency_buckets=seen_buckets.copy(),
                    replica_ids=fleet.ids.copy(),
                    replica_cpu_seconds=fleet.cpu_total.copy(),
                    replica_inflight_seconds=fleet.inflight_total.copy(),
                )
            )
            while next_scrape <= t + eps:
                next_scrape += config.scrape_interval_s
        if t + eps >= next_tick:
            snap = metrics.snapshot(
                float(t),
                snapshot.Replicas(
                    current=desired,
                    ready=fleet.receiving_count,
                    min=min_replicas,
                    max=max_replicas,
                ),
                fleet.pods(),
            )
            decision, state = policy.decide(snap, state)
            requested = int(decision.replicas)
            applied = min(max(requested, min_replicas), max_replicas)
            if applied != desired:
                replica_seconds += fleet.scale_to(float(t), applied)
                directions.append(1 if applied > desired else -1)
                desired = applied
            if record_decisions:
                decisions.append(
                    DecisionRecord(
                        time=float(t),
                        replicas=applied,
                        requested=requested,
                        reason=str(decision.reason),
                        signal=decision.signal,
                    )
                )
            while next_tick <= t + eps:
                next_tick += period_s

        desired_tl[t] = desired
        ready_tl[t] = fleet.receiving_count
        replicas_tl[t] = fleet.active_count
        replica_seconds += fleet.active_count

        offsets, service_s, route_u = stream.second(t)
        arriving = int(offsets.size)
        if fleet.receiving_count == 0:
            outcome = fleet.step(t, _EMPTY, _EMPTY)
            if arriving:
                pending_at = np.concatenate((pending_at, t + offsets))
                pending_service = np.concatenate((pending_service, service_s))
                if route_u is not None:
                    pending_route = np.concatenate((pending_route, route_u))
            # The router gives up on requests whose deadline passes within this second.
            expired = pending_at + timeout_s <= t + 1
            if expired.any():
                given_up = pending_at[expired]
                errors.book(t, np.floor(given_up + timeout_s).astype(np.int64) - t)
                late_second.append(np.floor(given_up).astype(np.int64))
                late_latency.append(np.full(given_up.size, math.inf))
                requests += int(given_up.size)
                failed += int(given_up.size)
                keep = ~expired
                pending_at = pending_at[keep]
                pending_service = pending_service[keep]
                if pending_route.size:
                    pending_route = pending_route[keep]
        else:
            waiting = int(pending_at.size)
            if waiting:
                dispatch_offsets = np.concatenate((np.zeros(waiting), offsets))
                dispatch_service = np.concatenate((pending_service, service_s))
                dispatch_route = (
                    None if route_u is None else np.concatenate((pending_route, route_u))
                )
                lag = np.concatenate((t - pending_at, np.zeros(arriving)))
                arrived_at = np.concatenate((pending_at, t + offsets))
            else:
                dispatch_offsets, dispatch_service, dispatch_route = offsets, service_s, route_u
            outcome = fleet.step(t, dispatch_offsets, dispatch_service, dispatch_route)
            order = outcome.order
            if order.size:
                served_s = outcome.wait_s + dispatch_service[order]
                done_at = dispatch_offsets[order] + served_s
                bucket = np.searchsorted(bounds_us, served_s * 1e6, side="left")
                histogram.book(t, done_at.astype(np.int64), bucket)
                if waiting:
                    latency = served_s + lag[order]
                    arrival = arrived_at[order]
                else:
                    latency = served_s
                    arrival = t + dispatch_offsets[order]
                too_slow = latency > timeout_s
                if too_slow.any():
                    errors.book(t, np.floor(arrival[too_slow] + timeout_s).astype(np.int64) - t)
                if waiting:
                    is_late = order < waiting
                    late_second.append(np.floor(arrival[is_late]).astype(np.int64))
                    late_latency.append(np.where(too_slow[is_late], math.inf, latency[is_late]))
                    requests += int(np.count_nonzero(is_late))
                    met += int(np.count_nonzero(is_late & ~too_slow & (latency <= slo_s)))
                    failed += int(np.count_nonzero(is_late & too_slow))
                    on_time = ~is_late
                    latency, too_slow = latency[on_time], too_slow[on_time]
                    pending_at = pending_service = pending_route = _EMPTY
                ok_now = int(np.count_nonzero((latency <= slo_s) & ~too_slow))
                requests += int(latency.size)
                met += ok_now
                failed += int(np.count_nonzero(too_slow))
                if latency.size:
                    p99_tl[t] = _nearest_rank(latency, 0.99) * 1000.0
                    met_tl[t] = ok_now / latency.size
                    mean_tl[t] = float(latency.mean()) * 1000.0

        cpu_tl[t] = outcome.cpu_cores
        seen_requests += arriving
        seen_buckets += histogram.values[t]
        seen_errors += int(errors.values[t, 0])

    # Requests still at the router when the trace ends were never served.
    if pending_at.size:
        late_second.append(np.floor(pending_at).astype(np.int64))
        late_latency.append(np.full(pending_at.size, math.inf))
        requests += int(pending_at.size)
        failed += int(pending_at.size)
    if late_second:
        _fill_late(
            np.concatenate(late_second),
            np.concatenate(late_latency),
            slo_s,
            (p99_tl, met_tl, mean_tl),
        )

    offered = np.asarray(trace.rps, dtype=np.float64)
    change_at = _largest_rise(offered)
    recovery = None if change_at is None else _recovery_s(p99_tl, service.slo_ms, change_at)
    return SimResult(
        trace=trace.name,
        policy=policy.name,
        seed=seed,
        service=service,
        t=np.arange(duration, dtype=np.int64),
        offered_rps=offered,
        arrivals=stream.counts.copy(),
        ready=ready_tl,
        desired=desired_tl,
        replicas=replicas_tl,
        p99_ms=p99_tl,
        slo_met=met_tl,
        mean_ms=mean_tl,
        cpu_cores=cpu_tl,
        decisions=tuple(decisions),
        requests=requests,
        met_slo=met,
        failed=failed,
        replica_seconds=replica_seconds,
        scale_actions=len(directions),
        direction_reversals=_reversals(directions),
        recovery_s=recovery,
        change_at_s=change_at,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
    )


def _fill_late(
    seconds: IntArray,
    latency: FloatArray,
    slo_s: float,
    timelines: tuple[FloatArray, FloatArray, FloatArray],
) -> None:
    """Timelines for seconds whose requests waited at the router (rare: no replica ready).

    A second's requests are either all routed at once or all held at the router, so a
    held second's latencies are all known here.
    """
    p99_tl, met_tl, mean_tl = timelines
    order = np.argsort(seconds, kind="stable")
    seconds, latency = seconds[order], latency[order]
    unique, starts = np.unique(seconds, return_index=True)
    for second, lo, hi in zip(
        unique.tolist(), starts.tolist(), [*starts[1:].tolist(), seconds.size], strict=True
    ):
        values = latency[lo:hi]
        p99_tl[second] = _nearest_rank(values, 0.99) * 1000.0
        met_tl[second] = float(np.count_nonzero(values <= slo_s)) / values.size
        served = values[np.isfinite(values)]
        if served.size:
            mean_tl[second] = float(served.mean()) * 1000.0


def _reversals(directions: list[int]) -> int:
    """Changes of direction among the scale actions (holds are not actions)."""
    return sum(1 for a, b in itertools.pairwise(directions) if a != b)


def _largest_rise(offered: FloatArray, window_s: int = 10, min_rise: float = 0.5) -> int | None:
    """The second where load rises most abruptly: the largest increase of the next
    ``window_s`` mean over the previous one, if it is at least ``min_rise`` (50 %) of the
    previous mean (a step or spike, not a ramp or a day)."""
    n = offered.size
    if n < 2 * window_s + 1:
        return None
    cumulative = np.concatenate(([0.0], np.cumsum(offered)))
    at = np.arange(window_s, n - window_s + 1)
    before = (cumulative[at] - cumulative[at - window_s]) / window_s
    after = (cumulative[at + window_s] - cumulative[at]) / window_s
    rise = after - before
    best = int(np.argmax(rise))
    if rise[best] <= 0 or rise[best] < min_rise * max(before[best], 1e-9):
        return None
    return int(at[best])


def _recovery_s(p99_ms: FloatArray, slo_ms: float, change_at: int) -> float:
    """Seconds from ``change_at`` until the per-second p99 stays <= the SLO for
    ``RECOVERY_HOLD_S`` seconds (0 if it never left); inf if that never happens."""
    after = p99_ms[change_at:]
    bad = (after > slo_ms).astype(np.int64)  # NaN (no requests) counts as fine
    if after.size < RECOVERY_HOLD_S:
        return math.inf
    bad_in_window = np.convolve(bad, np.ones(RECOVERY_HOLD_S, dtype=np.int64), mode="valid")
    clean = np.flatnonzero(bad_in_window == 0)
    return float(clean[0]) if clean.size else math.inf
