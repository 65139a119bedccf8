"""Pure formatters for the CLI's tables: records in, rows of strings out, and the table
itself laid out as lines of text."""

from __future__ import annotations

import datetime as dt
import re
import textwrap
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
SIMULATE_WIDE_HEADER = ["requests", "within SLO", "failed", "standby·s"]


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


def relative(seconds_from_now: float) -> str:
    """How far a moment is from now: ``in 42 s``, ``3 min ago``, ``in 2 h``, ``now``."""
    away = abs(seconds_from_now)
    if away < 1:
        return "now"
    if away < 120:
        amount = f"{away:.0f} s"
    elif away < 7200:
        amount = f"{away / 60:.0f} min"
    elif away < 172800:
        amount = f"{away / 3600:.0f} h"
    else:
        amount = f"{away / 86400:.0f} d"
    return f"in {amount}" if seconds_from_now > 0 else f"{amount} ago"


def moment(t: float, now: float) -> str:
    """``t`` as this machine's ``HH:MM:SS`` (with the date when it is another day) and
    how far from ``now``: ``14:03:12 (in 42 s)``."""
    local = dt.datetime.fromtimestamp(t)
    same_day = local.date() == dt.datetime.fromtimestamp(now).date()
    shown = local.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S")
    return f"{shown} ({relative(t - now)})"


# RFC 3339 UTC, as the controller writes a moment into a message (and Kubernetes into
# every timestamp): servectl.autoscaling.decision.instant.
_RFC3339_UTC = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b")


def readable_times(text: str, now: float) -> str:
    """``text`` with each RFC 3339 UTC time in it shown as :func:`moment` does:
    ``in panic until 2026-11-27T14:03:12Z`` reads ``in panic until 14:03:12 (in 42 s)``."""

    def local(match: re.Match[str]) -> str:
        stamp = dt.datetime.fromisoformat(match.group(0).replace("Z", "+00:00"))
        return moment(stamp.timestamp(), now)

    return _RFC3339_UTC.sub(local, text)


def num(value: Any, fmt: str = "{:.1f}") -> str:
    """``value`` formatted, or ``-`` when there is none."""
    return "-" if value is None else fmt.format(value)


def simulate_rows(results: Mapping[str, _Scored], subject: str) -> list[list[str]]:
    """One row per policy; ``cost`` is replica-seconds relative to ``subject``'s, a standby
    pool's included (``--standby``: loading whole, parked at a tenth)."""
    base = _cost(results[subject]) if subject in results else None
    rows = []
    for name, result in results.items():
        rel = _cost(result) / base if base else None
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
    return [
        [
            f"{r.requests:,}",
            f"{r.met_slo:,}",
            f"{r.failed:,}",
            f"{getattr(r, 'standby_seconds', 0.0):,.0f}",
        ]
        for r in results.values()
    ]


def _get(record: Any, key: str) -> Any:
    return record[key] if isinstance(record, Mapping) else getattr(record, key)


def _cost(record: Any) -> float:
    """Serving replica-seconds, plus the standby pool's where the record has one."""
    cost = _get(record, "cost_replica_seconds") if _has(record, "cost_replica_seconds") else None
    return float(_get(record, "replica_seconds") if cost is None else cost)


def _has(record: Any, key: str) -> bool:
    return key in record if isinstance(record, Mapping) else hasattr(record, key)


def _pooled(records: Sequence[Any]) -> bool:
    return any(_has(r, "standby") and _get(r, "standby") for r in records)


def bench_rows(records: Sequence[Any]) -> tuple[list[str], list[list[str]]]:
    """One row per record; with a standby pool in any (``--standby``), its replica-seconds
    and the cost (serving + standby, parked at a tenth) as two more columns."""
    pooled = _pooled(records)
    header = [
        "trace",
        "policy",
        "SLO met",
        "replica·s",
        *(["standby·s", "cost"] if pooled else []),
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
            *([f"{_get(r, 'standby_seconds'):,.0f}", f"{_cost(r):,.0f}"] if pooled else []),
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
    others = [p for p in dict.fromkeys(_get(r, "policy") for r in records) if p != subject]
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
            row.append("—" if theirs is None else ratio(_cost(mine) / _cost(theirs)))
        rows.append(row)
        for name, rec in per_policy.items():
            totals[name] = totals.get(name, 0.0) + _cost(rec)
    if subject in totals:
        total_row = (
            ["suite total"]
            + [""] * len(others)
            + [ratio(totals[subject] / totals[o]) if totals.get(o) else "—" for o in others]
        )
        rows.append(total_row)
    return header, rows


# --------------------------------------------------------------------------- tables

GAP = "   "
"""Between two columns (what kubectl prints)."""
RULE = "\u2500"
MIN_WRAP = 24
"""The narrowest a wrapped last column gets, however narrow the terminal."""

# A number, with a unit or a percent sign (``2``, ``0.82``, ``24,307``, ``100%``,
# ``1.00×``, ``3.5 s``, ``12m``, ``+0.12 pp``), a ratio (``2/2``), a clock time
# (``22:31:18``); ``-`` and ``—`` stand for no value.
_NUMBER = re.compile(
    r"[-+]?(\d[\d,]*(\.\d+)?|\.\d+)\s?(%|×|x|s|ms|m|h|d|pp|B|KiB|MiB|GiB)?"
    r"|\d+/\d+|\d+:\d\d(:\d\d)?"
)
_NO_VALUE = frozenset({"", "-", "—"})


def numeric(cells: Sequence[str]) -> bool:
    """A column of numbers (right-aligned), placeholders aside; text is left-aligned."""
    values = [c.strip() for c in cells if c.strip() not in _NO_VALUE]
    return bool(values) and all(_NUMBER.fullmatch(v) for v in values)


def table_lines(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, width: int | None = None
) -> list[str]:
    """A table as lines: the header, a rule as long as the header, then the rows.

    Columns are as wide as their widest cell and ``GAP`` apart; numbers are
    right-aligned, text left-aligned, and no line ends in spaces. With ``width`` (a
    terminal's), a last column of text that would run past it is wrapped onto
    continuation lines under itself (at least ``MIN_WRAP`` wide); without, rows are
    printed whole (a pipe or a file). No other cell is ever cut or wrapped: a
    number reads ``98…`` nowhere.
    """
    count = len(header)
    cells = [[str(row[i]) if i < len(row) else "" for i in range(count)] for row in rows]
    right = [i > 0 and numeric([row[i] for row in cells]) for i in range(count)]
    widths = [max([len(header[i]), *(len(row[i]) for row in cells)]) for i in range(count)]
    start = sum(widths[:-1]) + len(GAP) * (count - 1)
    last = count - 1
    wrap_at: int | None = None
    if width is not None and count and not right[last] and start + widths[last] > width:
        wrap_at = max(MIN_WRAP, width - start)
        widths[last] = max(len(header[last]), min(widths[last], wrap_at))

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if right[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return GAP.join(parts).rstrip()

    head = line(header)
    lines = [head, RULE * len(head)]
    for row in cells:
        if wrap_at is None or len(row[last]) <= wrap_at:
            lines.append(line(row))
            continue
        pieces = textwrap.wrap(row[last], wrap_at, break_on_hyphens=False) or [""]
        lines.append(line([*row[:last], pieces[0]]))
        lines.extend(" " * start + piece for piece in pieces[1:])
    return lines
