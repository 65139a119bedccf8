"""The forecast bench: servectl with and without predictive pre-scaling on multi-day traces.

Each trace of :func:`servectl.sim.traces.forecast_suite` (business days with a weekend) runs
through servectl's engine twice, forecasting off and on, beside the HPA and KPA baselines
at their defaults and the oracle, on the same arrivals. The engine is told the trace's
seasons: a day and a week of the trace's own length (one hour per "day" on the compressed
trace), as a user would set ``spec.autoscaling.forecast.periodsSeconds``.

Per run and per day: SLO attainment, replica-seconds, and the seconds whose p99 is over
the SLO during the morning ramp (the stretch of the day where the load climbs from its
night level towards its plateau). One timeline plot zooms on a morning ramp.
This module reads a clock only to time runs (``wall_s``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servectl.autoscaling import registry
from servectl.autoscaling.policy import Policy
from servectl.backends.sim.run import simulate
from servectl.sim import model, oracle, results, suite
from servectl.sim import traces as trace_mod

#: The morning ramp, as fractions of the day: from 05:00 to 11:00.
RAMP = (5 / 24, 11 / 24)
POLICIES = (
    "servectl",
    "servectl-no-forecast",
    "servectl-cpu70",
    "servectl-cpu70-no-forecast",
    "hpa",
    "kpa",
    "oracle",
)
#: The two servectl configurations: told the SLO alone (its default), and with CPU 70 %
#: beside it (the margin a user adds for headroom beyond the SLO).
PLOTS = {
    "": ("servectl-no-forecast", "servectl", "oracle"),
    "-cpu70": ("servectl-cpu70-no-forecast", "servectl-cpu70", "oracle"),
}


def _policy(
    name: str, trace: trace_mod.Trace, svc: model.ServiceModel, routing: model.Routing
) -> Policy:
    if name in POLICIES and name.startswith("servectl"):
        cpu = suite.CPU_TARGET if name.startswith("servectl-cpu70") else None
        cfg = suite.autoscaling_config(svc, cpu_target=cpu, routing=routing)
        if name.endswith("no-forecast"):
            cfg = dataclasses.replace(cfg, forecast=None)
        return registry.build("servectl", suite.with_seasons(cfg, trace))
    if name == "hpa":
        return registry.build("hpa", suite.autoscaling_config(svc, latency=False))
    if name == "kpa":
        return registry.build("kpa", suite.kpa_config(svc))
    if name == "oracle":
        return oracle.OraclePolicy(trace, svc)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


@dataclass(frozen=True)
class DayFigures:
    day: int
    slo_attainment: float
    replica_seconds: float
    ramp_seconds_over_slo: int  # seconds of the morning ramp with p99 over the SLO
    ramp_requests_missed: int


@dataclass(frozen=True)
class ForecastRecord:
    trace: str
    policy: str
    routing: str
    slo_attainment: float
    replica_seconds: float
    requests: int
    ramp_seconds_over_slo: int  # over every day but the first (nothing to learn from)
    forecast_decisions: int  # ticks the forecast's proposal won
    days: tuple[DayFigures, ...]
    wall_s: float

    def to_record(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["days"] = [dataclasses.asdict(d) for d in self.days]
        return doc


def day_figures(result: results.SimResult, day_s: int, slo_ms: float) -> list[DayFigures]:
    days: list[DayFigures] = []
    over = np.asarray(result.p99_ms) > slo_ms
    arrivals = np.asarray(result.arrivals, dtype=float)
    met = np.nan_to_num(np.asarray(result.slo_met, dtype=float)) * arrivals
    replicas = np.asarray(result.replicas, dtype=float)
    for d in range(result.duration_s // day_s):
        lo, hi = d * day_s, (d + 1) * day_s
        ramp = slice(lo + int(RAMP[0] * day_s), lo + int(RAMP[1] * day_s))
        total = arrivals[lo:hi].sum()
        days.append(
            DayFigures(
                day=d,
                slo_attainment=float(met[lo:hi].sum() / total) if total else 1.0,
                replica_seconds=float(replicas[lo:hi].sum()),
                ramp_seconds_over_slo=int(over[ramp].sum()),
                ramp_requests_missed=round(arrivals[ramp].sum() - met[ramp].sum()),
            )
        )
    return days


Progress = Callable[[str, str, int, int], None]


def run_forecast_bench(
    trace_list: Sequence[trace_mod.Trace],
    policies: Sequence[str] = POLICIES,
    *,
    seed: int = 0,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    progress: Progress | None = None,
) -> tuple[list[ForecastRecord], dict[tuple[str, str], results.SimResult]]:
    """Every (trace, policy) run; the results too, for the timeline plot."""
    svc = suite.service()
    records: list[ForecastRecord] = []
    runs: dict[tuple[str, str], results.SimResult] = {}
    total = len(trace_list) * len(policies)
    for trace in trace_list:
        day = trace.day_s
        for name in policies:
            if progress is not None:
                progress(trace.name, name, len(records) + 1, total)
            started = time.perf_counter()
            result = simulate(
                trace,
                _policy(name, trace, svc, routing),
                svc,
                seed=seed,
                min_replicas=suite.MIN_REPLICAS,
                max_replicas=100,
                routing=routing,
            )
            days = day_figures(result, day, svc.slo_ms)
            records.append(
                ForecastRecord(
                    trace=trace.name,
                    policy=name,
                    routing=routing.value,
                    slo_attainment=result.slo_attainment,
                    replica_seconds=result.replica_seconds,
                    requests=result.requests,
                    ramp_seconds_over_slo=sum(d.ramp_seconds_over_slo for d in days[1:]),
                    forecast_decisions=sum(1 for d in result.decisions if d.signal == "forecast"),
                    days=tuple(days),
                    wall_s=time.perf_counter() - started,
                )
            )
            runs[(trace.name, name)] = result
    return records, runs


def table(records: Sequence[ForecastRecord]) -> tuple[list[str], list[list[str]]]:
    header = [
        "TRACE",
        "POLICY",
        "SLO MET",
        "REPLICA·S",
        "RAMP S OVER SLO",
        "FORECAST WON",
        "PER DAY: RAMP S OVER SLO",
    ]
    rows = [
        [
            r.trace,
            r.policy,
            f"{100 * r.slo_attainment:.4f}%",
            f"{r.replica_seconds:,.0f}",
            str(r.ramp_seconds_over_slo),
            str(r.forecast_decisions),
            " ".join(str(d.ramp_seconds_over_slo) for d in r.days),
        ]
        for r in records
    ]
    return header, rows


def plot_ramp(
    runs: dict[tuple[str, str], results.SimResult],
    trace: str,
    day: int,
    path: str,
    slo_ms: float,
    policies: Sequence[str] = ("servectl-no-forecast", "servectl", "oracle"),
    *,
    day_s: int = 86400,
) -> str:
    """Load, ready replicas and p99 per second around one day's morning ramp (days of
    ``day_s`` seconds: the trace's own)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo = day * day_s + int((RAMP[0] - 1 / 24) * day_s)
    hi = day * day_s + int((RAMP[1] + 1 / 24) * day_s)
    fig, (load_ax, ready_ax, p99_ax) = plt.subplots(
        3, 1, figsize=(10, 7.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.2, 1.2]}
    )
    first = next(r for (t, _), r in runs.items() if t == trace)
    hours = (np.arange(lo, hi) - day * day_s) / day_s * 24.0
    load_ax.plot(hours, first.offered_rps[lo:hi], color="0.3", linewidth=1.0)
    load_ax.set_ylabel("requests/s")
    load_ax.set_title(f"{trace}: day {day} morning ramp (time of day, h)")
    colors = {
        "servectl": "tab:blue",
        "servectl-no-forecast": "tab:red",
        "servectl-cpu70": "tab:blue",
        "servectl-cpu70-no-forecast": "tab:red",
        "oracle": "black",
    }
    for name in policies:
        result = runs.get((trace, name))
        if result is None:
            continue
        color = colors.get(name)
        style = "--" if name.endswith("no-forecast") else "-"
        ready_ax.step(
            hours, result.ready[lo:hi], where="post", color=color, linestyle=style, label=name
        )
        p99 = np.where(np.isfinite(result.p99_ms[lo:hi]), result.p99_ms[lo:hi], np.nan)
        p99_ax.plot(hours, np.clip(p99, 1.0, None), color=color, linewidth=0.7, label=name)
    ready_ax.set_ylabel("ready replicas")
    ready_ax.legend(fontsize=8, loc="upper left")
    p99_ax.axhline(slo_ms, color="red", linestyle="--", linewidth=1.0, label=f"SLO {slo_ms:g} ms")
    p99_ax.set_yscale("log")
    p99_ax.set_ylabel("p99 per second (ms)")
    p99_ax.set_xlabel("time of day (h)")
    p99_ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
