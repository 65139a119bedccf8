"""The bench harness: every trace x every policy, the same seed, and the comparisons.

Formatting stays out of here except the pure ``format_table``; the CLI prints.
This is the one sim module allowed to read a clock, to time runs (``wall_s``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servectl.autoscaling import decision, forecast, policy, snapshot
from servectl.backends.sim.run import simulate
from servectl.sim import model
from servectl.sim import traces as trace_mod

PolicyFactory = Callable[[trace_mod.Trace], policy.Policy]
Progress = Callable[[str, str, int, int], None]
"""``progress(trace, policy, index, total)`` before each run; ``index`` counts from 1."""
ORACLE = "oracle"


@dataclass(frozen=True)
class BenchRecord:
    trace: str
    policy: str
    slo_attainment: float
    replica_seconds: float
    scale_actions: int
    direction_reversals: int
    reversals_per_10min: float
    recovery_s: float | None
    requests: int
    failed: int
    wall_s: float
    routing: str = model.Routing.ROUND_ROBIN.value  # within a revision
    standby: int = 0  # warm standby replicas kept (docs/standby.md)
    standby_seconds: float = 0.0  # theirs, apart from replica_seconds
    cost_replica_seconds: float | None = None  # serving + standby (parked at PARKED_COST)

    def to_record(self) -> dict[str, Any]:
        """JSON-compatible; ``recovery_s`` is null when there was no step/spike and
        ``recovery`` says ``none``, ``recovered`` or ``never``."""
        recovery: float | None = self.recovery_s
        status = "none" if recovery is None else "recovered"
        if recovery is not None and math.isinf(recovery):
            recovery, status = None, "never"
        return {**dataclasses.asdict(self), "recovery_s": recovery, "recovery": status}


@dataclass(frozen=True)
class Versus:
    """The subject against one other policy on one trace (or the suite)."""

    policy: str
    replica_seconds_ratio: float  # subject / other: < 1 means the subject is cheaper
    slo_attainment_diff: float  # subject - other, as a fraction (0.01 = one point)


@dataclass(frozen=True)
class Comparison:
    """``trace`` is a trace name, or ``SUITE`` for the totals over every trace."""

    trace: str
    subject: str
    slo_attainment: float
    replica_seconds: float
    versus: tuple[Versus, ...]


SUITE = "(suite)"


@dataclass(frozen=True)
class FixedReplicas:
    """A policy that always asks for ``replicas`` (a baseline and the speed check's load)."""

    replicas: int
    tick_s: float = 2.0

    @property
    def name(self) -> str:
        return f"fixed-{self.replicas}"

    @property
    def period_s(self) -> float:
        return self.tick_s

    def initial_state(self) -> policy.State:
        return {}

    def decide(
        self, snap: snapshot.Snapshot, state: policy.State
    ) -> tuple[decision.Decision, policy.State]:
        return decision.Decision(replicas=self.replicas, reason=decision.Reason.POLICY), state


def run_bench(
    traces: Sequence[trace_mod.Trace],
    policies: Mapping[str, PolicyFactory],
    service: model.ServiceModel,
    seed: int,
    progress: Progress | None = None,
    *,
    min_replicas: int = 1,
    max_replicas: int = 100,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    standby: Mapping[str, int] | None = None,
) -> list[BenchRecord]:
    """Simulate every (trace, policy) pair; ``policies`` maps a display name to a factory
    that gets the trace (the oracle needs it). ``routing``: within the revision.
    ``standby``: a policy's warm standby pool, by display name (none when not named)."""
    records: list[BenchRecord] = []
    total = len(traces) * len(policies)
    for trace in traces:
        for name, factory in policies.items():
            if progress is not None:
                progress(trace.name, name, len(records) + 1, total)
            started = time.perf_counter()
            pool = (standby or {}).get(name, 0)
            result = simulate(
                trace,
                factory(trace),
                service,
                seed=seed,
                min_replicas=min_replicas,
                max_replicas=max_replicas,
                record_decisions=False,
                routing=routing,
                standby=pool,
            )
            record = BenchRecord(
                trace=trace.name,
                policy=name,
                slo_attainment=result.slo_attainment,
                replica_seconds=result.replica_seconds,
                scale_actions=result.scale_actions,
                direction_reversals=result.direction_reversals,
                reversals_per_10min=result.reversals_per_10min,
                recovery_s=result.recovery_s,
                requests=result.requests,
                failed=result.failed,
                wall_s=time.perf_counter() - started,
                routing=routing.value,
                standby=pool,
                standby_seconds=result.standby_seconds,
                cost_replica_seconds=result.cost_replica_seconds,
            )
            records.append(record)
    return records


def _versus(subject: BenchRecord | _Totals, other: BenchRecord | _Totals, name: str) -> Versus:
    ratio = (
        subject.replica_seconds / other.replica_seconds if other.replica_seconds > 0 else math.inf
    )
    return Versus(
        policy=name,
        replica_seconds_ratio=ratio,
        slo_attainment_diff=subject.slo_attainment - other.slo_attainment,
    )


@dataclass(frozen=True)
class _Totals:
    replica_seconds: float
    slo_attainment: float


def _totals(records: Iterable[BenchRecord]) -> _Totals:
    rows = list(records)
    requests = sum(r.requests for r in rows)
    met = sum(r.slo_attainment * r.requests for r in rows)
    return _Totals(
        replica_seconds=sum(r.replica_seconds for r in rows),
        slo_attainment=met / requests if requests else 1.0,
    )


def summarize(records: Sequence[BenchRecord], subject: str = "servectl") -> list[Comparison]:
    """Per trace, ``subject`` against every other policy (the oracle included), then the
    suite totals over the traces where both ran (replica-seconds summed, SLO attainment
    weighted by requests)."""
    by_trace: dict[str, dict[str, BenchRecord]] = {}
    for record in records:
        by_trace.setdefault(record.trace, {})[record.policy] = record
    if not any(subject in runs for runs in by_trace.values()):
        raise ValueError(f"no records for subject policy {subject!r}")
    out: list[Comparison] = []
    others: list[str] = []
    for runs in by_trace.values():
        others.extend(name for name in runs if name != subject and name not in others)
    for trace_name, runs in by_trace.items():
        mine = runs.get(subject)
        if mine is None:
            continue
        out.append(
            Comparison(
                trace=trace_name,
                subject=subject,
                slo_attainment=mine.slo_attainment,
                replica_seconds=mine.replica_seconds,
                versus=tuple(_versus(mine, runs[name], name) for name in others if name in runs),
            )
        )
    mine_total = _totals(runs[subject] for runs in by_trace.values() if subject in runs)
    suite_versus = []
    for name in others:
        shared = [runs for runs in by_trace.values() if subject in runs and name in runs]
        if shared:
            suite_versus.append(
                _versus(
                    _totals(runs[subject] for runs in shared),
                    _totals(runs[name] for runs in shared),
                    name,
                )
            )
    out.append(
        Comparison(
            trace=SUITE,
            subject=subject,
            slo_attainment=mine_total.slo_attainment,
            replica_seconds=mine_total.replica_seconds,
            versus=tuple(suite_versus),
        )
    )
    return out


def _recovery_text(recovery_s: float | None) -> str:
    if recovery_s is None:
        return "-"
    if math.isinf(recovery_s):
        return "never"
    return f"{recovery_s:.0f}"


def format_table(records: Sequence[BenchRecord]) -> list[list[str]]:
    """Rows of strings (header first): one per record, with replica-seconds relative to
    the oracle on the same trace when the oracle ran."""
    oracle_rs = {r.trace: r.replica_seconds for r in records if r.policy == ORACLE}
    rows = [
        [
            "trace",
            "policy",
            "SLO %",
            "replica-s",
            "x oracle",
            "actions",
            "reversals/10min",
            "recovery s",
            "failed",
            "wall s",
        ]
    ]
    for r in records:
        base = oracle_rs.get(r.trace)
        rows.append(
            [
                r.trace,
                r.policy,
                f"{100.0 * r.slo_attainment:.2f}",
                f"{r.replica_seconds:.0f}",
                f"{r.replica_seconds / base:.2f}" if base else "-",
                str(r.scale_actions),
                f"{r.reversals_per_10min:.2f}",
                _recovery_text(r.recovery_s),
                str(r.failed),
                f"{r.wall_s:.2f}",
            ]
        )
    return rows


def speed_check(seconds: int = 3600, rps: float = 1000.0, *, seed: int = 0) -> float:
    """Wall seconds to simulate ``seconds`` at a flat ``rps`` with a fixed-replica policy
    (the performance goal: one hour at 1000 rps in under 10 s)."""
    service = model.ServiceModel()
    replicas = max(1, math.ceil(rps * service.service_s / (service.threads_per_replica * 0.7)))
    trace = trace_mod.Trace(name="speed", rps=np.full(seconds, float(rps)))
    started = time.perf_counter()
    simulate(
        trace,
        FixedReplicas(replicas),
        service,
        seed=seed,
        max_replicas=max(100, replicas),
        record_decisions=False,
    )
    return time.perf_counter() - started


@dataclass
class _Capture:
    """Wraps a policy and keeps the snapshots and states it was given."""

    inner: policy.Policy
    seen: list[tuple[snapshot.Snapshot, policy.State]]

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def period_s(self) -> float:
        return self.inner.period_s

    def initial_state(self) -> policy.State:
        return self.inner.initial_state()

    def decide(
        self, snap: snapshot.Snapshot, state: policy.State
    ) -> tuple[decision.Decision, policy.State]:
        self.seen.append((snap, state))
        return self.inner.decide(snap, state)


def decision_us(subject: policy.Policy, *, seconds: int = 600, seed: int = 0) -> float:
    """Median microseconds per ``decide`` call of ``subject`` over the snapshots it
    meets on the first ``seconds`` of the diurnal trace, replayed outside the loop in
    order, each call given the state the previous one returned (as a controller does)."""
    trace = trace_mod.truncate(trace_mod.standard_suite(seed)[4], seconds)
    capture = _Capture(subject, [])
    simulate(trace, capture, model.ServiceModel(), seed=seed, record_decisions=False)
    if not capture.seen:
        return math.nan
    timings = []
    state = capture.seen[0][1]
    for snap, _ in capture.seen:
        started = time.perf_counter()
        _, state = subject.decide(snap, state)
        timings.append(time.perf_counter() - started)
    return 1e6 * statistics.median(timings)


def full_forecast_history(cfg: forecast.ForecastConfig, until: float) -> forecast.History:
    """A history with every bucket observed (a daily wave), ending at ``until``: the
    forecaster's most expensive case (every period ready, every backtest run)."""
    history = forecast.empty_history(cfg)
    start = until - cfg.capacity * cfg.bucket_s
    for k in range(cfg.capacity + 1):
        t = start + k * cfg.bucket_s
        phase = 2 * math.pi * t / min(cfg.periods_s)
        history = forecast.observe(history, cfg, t, 300.0 + 200.0 * math.sin(phase), cfg.bucket_s)
    return history


def decision_us_full_forecast(
    subject: policy.Policy, cfg: forecast.ForecastConfig, *, seconds: int = 600, seed: int = 0
) -> float:
    """As :func:`decision_us`, but each decision is handed a full forecast history as
    loaded from a checkpoint (JSON): the most a decision pays for the forecast (the
    history validated, every period forecast and backtested), as on a controller's first
    tick after a restart. In a running loop the engine does that once per bucket."""
    trace = trace_mod.truncate(trace_mod.standard_suite(seed)[4], seconds)
    capture = _Capture(subject, [])
    simulate(trace, capture, model.ServiceModel(), seed=seed, record_decisions=False)
    if not capture.seen:
        return math.nan
    history = full_forecast_history(cfg, capture.seen[0][0].time)
    stored = json.loads(json.dumps(history))
    timings = []
    for snap, state in capture.seen:
        given = {**state, "forecast": json.loads(json.dumps(stored))}
        started = time.perf_counter()
        subject.decide(snap, given)
        timings.append(time.perf_counter() - started)
    return 1e6 * statistics.median(timings)


def micro_benchmarks(subject: policy.Policy | None = None, repeats: int = 3) -> dict[str, float]:
    """Medians over ``repeats``: one simulated hour at 1000 rps with a fixed-replica
    policy, and (when ``subject`` is given) one ``decide`` call of that policy."""
    hour = statistics.median(speed_check(3600, 1000.0, seed=i) for i in range(repeats))
    figures = {
        "simulate_1h_1000rps_fixed_s": round(hour, 3),
        "simulated_seconds_per_wall_second": round(3600 / hour, 1),
        "simulated_requests_per_wall_second": round(3.6e6 / hour),
    }
    if subject is not None:
        figures[f"decide_{subject.name}_us"] = round(decision_us(subject), 1)
    return figures
