"""Pure formatters for the CLI's tables: records in, rows of strings out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class _Scored(Protocol):
    @property
    def slo_attainment(self) -> float: ...
    @property
    def replica_seconds(self) -> float: ...
    @property
    def scale_actions(self) -> int: ...
    @property
    def direction_reversals(self) -> int: ...
    @property
    def recovery_s(self) -> float | None: ...
    @property
    def requests(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def met_slo(self) -> int: ...


SIMULATE_HEADER = [
    "policy",
    "SLO met",
    "over SLO",
    "replica·s",
    "cost",
    "scales",
    "flips",
    "recover",
]


# Extra columns of ``-o wide``.
SIMULATE_WIDE_HEADER = ["requests", "within SLO", "failed"]


def pct(value: float) -> str:
    return f"{value * 100:.3f}%"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} s"


def age(seconds: float | None) -> str:
    """kubectl's AGE: ``45s``, ``12m``, ``5h``, ``3d``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def clock_time(t: float) -> str:
    """Seconds since the epoch as this machine's ``HH:MM:SS``."""
    return dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")


def num(value: Any, fmt: str = "{:.1f}") -> str:
    """``value`` formatted, or ``-`` when there is none."""
    return "-" if value is None else fmt.format(value)


def simulate_rows(results: Mapping[str, _Scored], subject: str) -> list[list[str]]:
    """One row per policy; ``cost`` is replica-seconds relative to ``subject``."""
    base = results[subject].replica_seconds if subject in results else None
    rows = []
    for name, result in results.items():
        rel = result.replica_seconds / base if base else None
        over = round(result.requests * (1.0 - result.slo_attainment))
        rows.append(
            [
                name,
                pct(result.slo_attainment),
                f"{over:,}",
                f"{result.replica_seconds:,.0f}",
                ratio(rel),
                str(result.scale_actions),
                str(result.direction_reversals),
                seconds(result.recovery_s),
            ]
        )
    return rows


def simulate_wide_rows(results: Mapping[str, _Scored]) -> list[list[str]]:
    """The ``-o wide`` columns of :func:`simulate_rows`, in the same order."""
    return [[f"{r.requests:,}", f"{r.met_slo:,}", f"{r.failed:,}"] for r in results.values()]


def _get(record: Any, key: str) -> Any:
    return record[key] if isinstance(record, Mapping) else getattr(record, key)


def bench_rows(records: Sequence[Any]) -> tuple[list[str], list[list[str]]]:
    header = [
        "trace",
        "policy",
        "SLO met",
        "replica·s",
        "scale actions",
        "reversals/10min",
        "recovery",
        "wall",
    ]
    rows = [
        [
            _get(r, "trace"),
            _get(r, "policy"),
            pct(_get(r, "slo_attainment")),
            f"{_get(r, 'replica_seconds'):,.0f}",
            str(_get(r, "scale_actions")),
            f"{_get(r, 'reversals_per_10min'):.2f}",
            seconds(_get(r, "recovery_s")),
            f"{_get(r, 'wall_s'):.1f} s",
        ]
        for r in records
    ]
    return header, rows


def bench_wide_rows(records: Sequence[Any]) -> tuple[list[str], list[list[str]]]:
    """The ``-o wide`` columns of :func:`bench_rows`: request counts."""
    header = ["requests", "failed"]
    rows = [[f"{_get(r, 'requests'):,}", f"{_get(r, 'failed'):,}"] for r in records]
    return header, rows


def bench_summary_rows(
    records: Sequence[Any], subject: str = "servectl"
) -> tuple[list[str], list[list[str]]]:
    """Per trace: servectl's SLO lead over each other policy and its cost ratio; then totals."""
    by_trace: dict[str, dict[str, Any]] = {}
    for r in records:
        by_trace.setdefault(_get(r, "trace"), {})[_get(r, "policy")] = r
    others = sorted({_get(r, "policy") for r in records} - {subject})
    header = ["trace"] + [f"SLO Δ vs {o}" for o in others] + [f"cost vs {o}" for o in others]
    rows = []
    totals: dict[str, float] = {}
    for trace, per_policy in by_trace.items():
        if subject not in per_policy:
            continue
        mine = per_policy[subject]
        row = [trace]
        for o in others:
            theirs = per_policy.get(o)
            if theirs is None:
                row.append("—")
                continue
            lead = _get(mine, "slo_attainment") - _get(theirs, "slo_attainment")
            row.append(f"{lead * 100:+.2f} pp")
        for o in others:
            theirs = per_policy.get(o)
            row.append(
                "—"
                if theirs is None
                else ratio(_get(mine, "replica_seconds") / _get(theirs, "replica_seconds"))
            )
        rows.append(row)
        for name, rec in per_policy.items():
            totals[name] = totals.get(name, 0.0) + _get(rec, "replica_seconds")
    if subject in totals:
        total_row = (
            ["suite total"]
            + [""] * len(others)
            + [ratio(totals[subject] / totals[o]) if totals.get(o) else "—" for o in others]
        )
        rows.append(total_row)
    return header, rows
