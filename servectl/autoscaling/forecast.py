"""Seasonal request-rate forecast: the peak rate expected over the next cold start (and a slack).

A pure, bounded-state forecaster the engine calls once a tick (docs/forecasting.md has the
method, its knobs and its limits). Time is always an argument (``now``, in seconds).

The history is a plain dict (JSON-serialisable, persisted in the policy state): the mean
request rate of each closed bucket, oldest first, covering the longest period plus one
shortest period (8 days of 5-minute buckets by default: 2304 values), and the partly
filled current bucket as a request count and the seconds it covers. A bucket nobody
observed (the controller was down) is ``None``: skipped by the forecast, never a zero.

For a future bucket ``k`` and a period of ``L`` buckets the seasonal estimate is

    estimate(k) = rate(k - L) × level,
    level = Σ rate(recent W buckets) / Σ rate(the same W buckets one period earlier),

clipped to ``[min_level_ratio, max_level_ratio]`` (the level carries trend and
day-to-day amplitude). The forecast is the peak estimate over the look-ahead and
``timing_slack_buckets`` more (a ramp earlier than one period ago is still met). Each
period is backtested on the last ``backtest_buckets`` closed buckets, each predicted
from the data one look-ahead (and slack) before it, and scored by the relative error
Σ|predicted − actual| / Σ actual. The longest period whose error is within
``PREFER_LONGER_SLACK`` of the best one wins; over ``max_error`` the forecast is off.

Worked example (daily period, W = 3): yesterday's buckets at this hour 100, 110, 120
rps; today's 110, 121, 132 -> level 1.1. Yesterday's next bucket was 150, so the
estimate is 150 × 1.1 = 165 rps.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

#: Version of the history's layout; a stored history of another version is dropped.
HISTORY_VERSION = 1
#: A longer period wins while its recent error is within this (absolute) of the best one:
#: it knows the day of the week, which the shorter one cannot, at equal recent accuracy.
PREFER_LONGER_SLACK = 0.05
#: Rates above this are clipped (a bound so that sums of a full history stay finite).
MAX_RATE_RPS = 1e12
#: Most buckets a configuration may keep (the history must stay small enough for state).
MAX_BUCKETS = 20_000

_KNOWN_PERIODS = {86400.0: "daily", 604800.0: "weekly"}


@dataclass(frozen=True)
class ForecastConfig:
    """The forecaster's knobs; ValueError on anything unusable."""

    periods_s: tuple[float, ...] = (86400.0, 604800.0)
    buckets_per_period: int = 288
    level_window_buckets: int = 6
    backtest_buckets: int = 12
    max_level_ratio: float = 2.0
    min_level_ratio: float = 0.5
    max_error: float = 0.35
    timing_slack_buckets: int = 6
    # Derived once (the forecast runs every tick): bucket length, periods in buckets
    # (ascending) and the history's length.
    bucket_s: float = field(init=False, repr=False, compare=False)
    period_buckets: tuple[int, ...] = field(init=False, repr=False, compare=False)
    capacity: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        periods = tuple(self.periods_s)
        if not periods:
            raise ValueError("periods_s: at least one period is needed")
        for period in periods:
            if isinstance(period, bool) or not isinstance(period, int | float):
                raise ValueError(f"periods_s: {period!r} is not a number of seconds")
            if not (math.isfinite(period) and period > 0):
                raise ValueError(f"periods_s: {period!r} must be a positive number of seconds")
        if len(set(periods)) != len(periods):
            raise ValueError(f"periods_s: {periods} lists a period twice")
        for name in ("buckets_per_period", "level_window_buckets", "backtest_buckets"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r} must be a whole number >= 1")
        slack = self.timing_slack_buckets
        if isinstance(slack, bool) or not isinstance(slack, int) or slack < 0:
            raise ValueError(f"timing_slack_buckets: {slack!r} must be a whole number >= 0")
        bucket_s = min(periods) / self.buckets_per_period
        lengths = []
        for period in sorted(periods):
            buckets = period / bucket_s
            if abs(buckets - round(buckets)) > 1e-6 * buckets:
                raise ValueError(
                    f"periods_s: {period:g} s is not a whole number of {bucket_s:g} s buckets"
                    " (each period must be a multiple of min(periods_s) / buckets_per_period)"
                )
            lengths.append(round(buckets))
        capacity = lengths[-1] + lengths[0]
        if capacity > MAX_BUCKETS:
            raise ValueError(
                f"the history would keep {capacity} buckets (> {MAX_BUCKETS}): use fewer"
                " buckets_per_period or a shorter longest period"
            )
        window = self.level_window_buckets + self.backtest_buckets
        if window >= lengths[0]:
            raise ValueError(
                f"level_window_buckets + backtest_buckets ({window}) must be shorter than"
                f" the shortest period ({lengths[0]} buckets)"
            )
        if 2 * slack >= lengths[0]:
            raise ValueError(
                f"timing_slack_buckets ({slack}) must be under half the shortest period"
                f" ({lengths[0]} buckets)"
            )
        lo, hi = self.min_level_ratio, self.max_level_ratio
        if not (math.isfinite(lo) and 0 < lo <= 1):
            raise ValueError(f"min_level_ratio: {lo!r} must be in (0, 1]")
        if not (math.isfinite(hi) and hi >= 1):
            raise ValueError(f"max_level_ratio: {hi!r} must be a finite number >= 1")
        if not (math.isfinite(self.max_error) and self.max_error > 0):
            raise ValueError(f"max_error: {self.max_error!r} must be a positive fraction")
        object.__setattr__(self, "periods_s", periods)
        object.__setattr__(self, "bucket_s", bucket_s)
        object.__setattr__(self, "period_buckets", tuple(lengths))
        object.__setattr__(self, "capacity", capacity)


#: Mean rate per closed bucket, oldest first (None: not observed). A tuple: immutable, so
#: successive histories can share it, and JSON has none, so a tuple was made by `observe`.
Means = tuple[float | None, ...]


class History(TypedDict):
    """Rolling per-bucket mean request rates (JSON-serialisable; never mutated in place)."""

    version: int
    bucket_s: float
    #: Absolute number (``floor(t / bucket_s)``) of the bucket being filled; None: empty.
    bucket: int | None
    #: Time of the last observation.
    last_t: float | None
    #: Requests and seconds observed so far in the bucket being filled.
    requests: float
    seconds: float
    #: Mean rate of each closed bucket, oldest first; the last is ``bucket - 1``.
    #: None: not observed. Shared between successive histories until a bucket closes.
    #: json.dumps writes it as a list; from_state makes it a tuple again.
    means: Means


class ForecastStatus(enum.StrEnum):
    """READY: ``rate_rps`` is usable. LEARNING: no period has enough history (or gaps
    hide it). INACCURATE: the forecaster is off, its recent error is too large."""

    READY = "ready"
    LEARNING = "learning"
    INACCURATE = "inaccurate"


@dataclass(frozen=True)
class Candidate:
    """One period's view: its estimate, level and recent error, or why it has none."""

    period_s: float
    rate_rps: float | None
    level: float | None
    recent_error: float | None
    note: str


@dataclass(frozen=True)
class Forecast:
    """The peak rate expected over ``[now, now + horizon_s]``; None when unusable.

    ``reason`` always says why, e.g. "daily season, level 1.12, error 8 %",
    "learning: 3.2 h of 25.5 h history", "off: recent error 52 % > 35 %".
    """

    rate_rps: float | None
    reason: str
    status: ForecastStatus
    period_s: float | None = None
    level: float | None = None
    recent_error: float | None = None
    candidates: tuple[Candidate, ...] = ()


def empty_history(cfg: ForecastConfig) -> History:
    return History(
        version=HISTORY_VERSION,
        bucket_s=cfg.bucket_s,
        bucket=None,
        last_t=None,
        requests=0.0,
        seconds=0.0,
        means=(None,) * cfg.capacity,
    )


def _compact(rate: float) -> float:
    """Three significant digits, nothing finer than 0.01 rps (keeps the state small)."""
    if rate <= 0:
        return 0.0
    digits = 2 - math.floor(math.log10(rate))
    if digits <= 0:
        return int(round(rate, digits))
    return round(rate, min(digits, 2))


def observe(
    history: History, cfg: ForecastConfig, now: float, rate_rps: float, dt_s: float
) -> History:
    """A new history with ``rate_rps`` observed over the ``dt_s`` seconds before ``now``.

    The observation counts in the bucket holding ``now``, weighted by ``dt_s`` (at most
    one bucket). Buckets skipped without observations become None. Time going backwards
    by more than a bucket, or a jump past the longest period, starts an empty history;
    a smaller step back (clock jitter) counts in the current bucket. A non-finite or
    negative rate, or a non-positive ``dt_s``, is no observation. Only a closing bucket
    copies ``means``; otherwise the new history shares it (so nothing may mutate it).
    """
    if not (
        math.isfinite(now)
        and math.isfinite(rate_rps)
        and rate_rps >= 0
        and math.isfinite(dt_s)
        and dt_s > 0
    ):
        return History(**history)
    bucket_s = cfg.bucket_s
    rate = min(rate_rps, MAX_RATE_RPS)
    weight = min(dt_s, bucket_s)
    last_t = history["last_t"]
    if last_t is not None and now < last_t:
        if now < last_t - bucket_s:
            history = empty_history(cfg)
        else:
            now = last_t
    bucket = math.floor(now / bucket_s)
    current = history["bucket"]
    if current is None or bucket == current:
        return History(
            version=HISTORY_VERSION,
            bucket_s=bucket_s,
            bucket=bucket,
            last_t=now,
            requests=history["requests"] + rate * weight,
            seconds=history["seconds"] + weight,
            means=history["means"],
        )
    gap = bucket - current
    if gap > cfg.period_buckets[-1]:
        means: Means = (None,) * cfg.capacity
    else:
        seconds = history["seconds"]
        closed = _compact(history["requests"] / seconds) if seconds > 0 else None
        means = history["means"][gap:] + (closed,) + (None,) * (gap - 1)
    return History(
        version=HISTORY_VERSION,
        bucket_s=bucket_s,
        bucket=bucket,
        last_t=now,
        requests=rate * weight,
        seconds=weight,
        means=means,
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def from_state(obj: object, cfg: ForecastConfig) -> History:
    """The history stored in ``obj``, validated; anything malformed is an empty history.

    A history stored under another bucket length or count (the configuration changed) is
    dropped too. Never raises. Cheap on what ``observe`` returned (its ``means`` is a
    tuple, which JSON cannot produce): only a list, i.e. a history loaded from JSON, has
    its values checked, once, and becomes a tuple.
    """
    try:
        return _validated(obj, cfg) or empty_history(cfg)
    except (TypeError, ValueError, OverflowError, KeyError):
        return empty_history(cfg)


def _valid_means(means: object, cfg: ForecastConfig) -> Means | None:
    if isinstance(means, tuple):
        return means if len(means) == cfg.capacity else None
    if not isinstance(means, list) or len(means) != cfg.capacity:
        return None
    values = [value for value in means if value is not None]
    # Only ints and floats (no bools, strings, lists), a finite sum (no NaN, no
    # infinity), nothing negative or absurd.
    if not {type(value) for value in values} <= {int, float}:
        return None
    if values and not (math.isfinite(sum(values)) and min(values) >= 0):
        return None
    if values and max(values) > MAX_RATE_RPS:
        return None
    return tuple(means)


def _validated(obj: object, cfg: ForecastConfig) -> History | None:
    if not isinstance(obj, Mapping):
        return None
    version, bucket_s, bucket = obj["version"], obj["bucket_s"], obj["bucket"]
    last_t, requests, seconds = obj["last_t"], obj["requests"], obj["seconds"]
    if type(version) is not int or version != HISTORY_VERSION:
        return None
    if not _is_number(bucket_s) or abs(bucket_s - cfg.bucket_s) > 1e-9 * cfg.bucket_s:
        return None
    means = _valid_means(obj["means"], cfg)
    if means is None:
        return None
    if bucket is None:
        return None if means.count(None) != len(means) else empty_history(cfg)
    if type(bucket) is not int or not _is_number(last_t) or not math.isfinite(last_t):
        return None
    if math.floor(last_t / cfg.bucket_s) != bucket:
        return None
    for amount in (requests, seconds):
        if not _is_number(amount) or not (math.isfinite(amount) and amount >= 0):
            return None
    if requests > MAX_RATE_RPS * max(seconds, 1.0):
        return None
    return History(
        version=HISTORY_VERSION,
        bucket_s=cfg.bucket_s,
        bucket=bucket,
        last_t=float(last_t),
        requests=float(requests),
        seconds=float(seconds),
        means=means,
    )


def history_span_s(history: History, cfg: ForecastConfig) -> float:
    """Seconds of observed (non-None) closed buckets in the history."""
    means = history["means"]
    return (len(means) - means.count(None)) * cfg.bucket_s


class _Pairs:
    """Running sums over the pairs (rate, rate one period earlier) where both were
    observed, from position ``first`` up to ``end``: each level the backtest needs then
    costs O(1), not O(window) (the forecast runs every tick)."""

    __slots__ = ("counts", "first", "hi", "lo", "past", "recent", "window")

    def __init__(self, means: Means, first: int, end: int, lag: int, cfg: ForecastConfig):
        self.first, self.window = first, cfg.level_window_buckets
        self.lo, self.hi = cfg.min_level_ratio, cfg.max_level_ratio
        recent_sum = past_sum = 0.0
        count = 0
        self.recent, self.past, self.counts = [0.0], [0.0], [0]
        size = len(means)
        for i in range(first, end):
            if lag <= i < size:
                now_rate = means[i]
                then_rate = means[i - lag]
                if now_rate is not None and then_rate is not None:
                    recent_sum += now_rate
                    past_sum += then_rate
                    count += 1
            self.recent.append(recent_sum)
            self.past.append(past_sum)
            self.counts.append(count)

    def level(self, end: int) -> float | None:
        """The level for a forecast made knowing the positions before ``end`` (``first +
        window <= end``): the last window against the same buckets one period earlier,
        clipped; None with fewer than half the window's pairs observed."""
        hi = end - self.first
        lo = hi - self.window
        if 2 * (self.counts[hi] - self.counts[lo]) < self.window:
            return None
        recent = self.recent[hi] - self.recent[lo]
        past = self.past[hi] - self.past[lo]
        if past <= 0:
            return 1.0 if recent <= 0 else self.hi
        ratio = recent / past
        return self.lo if ratio < self.lo else self.hi if ratio > self.hi else ratio


def _candidate(means: Means, origin: int, ahead: int, lag: int, cfg: ForecastConfig) -> Candidate:
    """Period ``lag``'s estimate for ``means`` positions ``origin..origin + ahead`` (the
    positions past the end are future buckets), backtested on the buckets before them.
    A candidate without an estimate has an empty note: ``forecast`` writes it."""
    period_s = lag * cfg.bucket_s
    size = len(means)
    backtest = cfg.backtest_buckets
    # Each bucket up to `reach` ahead can set the peak: the slack covers a ramp that
    # comes a little earlier than it did one period ago.
    reach = ahead + cfg.timing_slack_buckets
    pairs = _Pairs(means, origin - backtest - reach - cfg.level_window_buckets, origin, lag, cfg)
    level = pairs.level(origin)
    if level is None:
        return Candidate(period_s, None, None, None, "")
    peak: float | None = None
    for k in range(origin - lag, min(origin + reach + 1 - lag, size)):
        base = means[k]
        if base is not None and (peak is None or base > peak):
            peak = base
    if peak is None:
        return Candidate(period_s, None, level, None, "")

    # Backtest: each recent bucket as the far end of a look-ahead made `reach` buckets
    # before it, with that moment's level.
    missed = actual_sum = 0.0
    scored = 0
    for j in range(max(origin - backtest, lag), min(origin, size)):
        actual = means[j]
        base = means[j - lag]
        if actual is None or base is None:
            continue
        then_level = pairs.level(j - reach)
        if then_level is None:
            continue
        missed += abs(base * then_level - actual)
        actual_sum += actual
        scored += 1
    if 2 * scored < backtest:
        return Candidate(period_s, None, level, None, "")
    # Nothing observed but zeros: exact if it said zero, unusable otherwise.
    error = missed / actual_sum if actual_sum > 0 else (0.0 if missed == 0 else math.inf)
    return Candidate(period_s, peak * level, level, error, "")


def _learning_note(history: History, cfg: ForecastConfig, period_s: float, ahead: int) -> str:
    span_s = history_span_s(history, cfg)
    extra = cfg.level_window_buckets + cfg.backtest_buckets + ahead + cfg.timing_slack_buckets
    need_s = period_s + extra * cfg.bucket_s
    if span_s < need_s:
        return f"learning: {_duration(span_s)} of {_duration(need_s)} history"
    return f"learning: gaps in the history {_duration(period_s)} ago"


def forecast(history: History, cfg: ForecastConfig, now: float, horizon_s: float) -> Forecast:
    """The peak bucket rate expected over ``[now, now + horizon_s]`` and
    ``cfg.timing_slack_buckets`` past it, and why.

    ``rate_rps`` is None (with status LEARNING or INACCURATE) when no period has enough
    history or the best one's recent relative error exceeds ``cfg.max_error``.
    """
    if not math.isfinite(now):
        return Forecast(None, f"off: now is {now}", ForecastStatus.INACCURATE)
    current = history["bucket"]
    if current is None:
        note = _learning_note(history, cfg, min(cfg.periods_s), 0)
        return Forecast(None, note, ForecastStatus.LEARNING)
    bucket_s = cfg.bucket_s
    horizon = horizon_s if math.isfinite(horizon_s) and horizon_s > 0 else 0.0
    # A `now` behind the history (the clock stepped back) forecasts from the history's end.
    start = max(math.floor(now / bucket_s), current)
    ahead = max(0, math.floor((now + horizon) / bucket_s) - start)
    means = history["means"]
    origin = len(means) + (start - current)  # `start`'s position past the closed buckets
    candidates = tuple(_candidate(means, origin, ahead, lag, cfg) for lag in cfg.period_buckets)
    if any(c.recent_error is None for c in candidates):
        candidates = tuple(
            c
            if c.recent_error is not None
            else dataclasses.replace(c, note=_learning_note(history, cfg, c.period_s, ahead))
            for c in candidates
        )
    ready = [c for c in candidates if c.rate_rps is not None and c.recent_error is not None]
    if not ready:
        return Forecast(None, candidates[0].note, ForecastStatus.LEARNING, candidates=candidates)
    accurate = [c for c in ready if c.recent_error is not None and c.recent_error <= cfg.max_error]
    if not accurate:
        best = min(ready, key=lambda c: c.recent_error or 0.0)
        error = best.recent_error or 0.0
        return Forecast(
            None,
            f"off: recent error {_percent(error)} > {_percent(cfg.max_error)}",
            ForecastStatus.INACCURATE,
            period_s=best.period_s,
            level=best.level,
            recent_error=error,
            candidates=candidates,
        )
    best_error = min(c.recent_error or 0.0 for c in accurate)
    chosen = max(
        (c for c in accurate if (c.recent_error or 0.0) <= best_error + PREFER_LONGER_SLACK),
        key=lambda c: c.period_s,
    )
    level = chosen.level or 1.0
    error = chosen.recent_error or 0.0
    return Forecast(
        chosen.rate_rps,
        f"{_season(chosen.period_s)}, level {level:.2f}, error {_percent(error)}",
        ForecastStatus.READY,
        period_s=chosen.period_s,
        level=level,
        recent_error=error,
        candidates=candidates,
    )


def _season(period_s: float) -> str:
    name = _KNOWN_PERIODS.get(period_s)
    return f"{name} season" if name else f"{_duration(period_s)} season"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 4 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"
