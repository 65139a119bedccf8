"""Load traces: the mean request rate of every simulated second, and their generators.

A trace is only the *mean* arrival rate; the simulator draws Poisson arrivals around it,
so even a flat trace carries realistic second-to-second noise. Every generator is
deterministic: the ones with randomness take a ``seed``. docs/simulator.md describes
the standard suite, the production-shaped and forecasting suites, and why each trace is
shaped the way it is.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class TraceError(ValueError):
    """A trace could not be built or read; the message names the line or argument."""


@dataclass(frozen=True, eq=False)
class Trace:
    """``rps[i]`` is the mean arrival rate during second ``i`` (requests per second).

    ``day_s`` is the length of the trace's day: 86400 for real time, less for a trace
    whose days are compressed (``diurnal_weekly(day_s=3600)``), so that a forecasting
    policy can be told the trace's own seasons, as a user would tell servectl theirs.
    """

    name: str
    rps: FloatArray
    description: str = ""
    day_s: int = 86400

    def __post_init__(self) -> None:
        if isinstance(self.day_s, bool) or not isinstance(self.day_s, int | np.integer):
            raise TraceError(f"trace {self.name!r}: day_s must be a whole number of seconds")
        if self.day_s < 24:
            raise TraceError(f"trace {self.name!r}: day_s must be >= 24, got {self.day_s}")
        rates = np.array(self.rps, dtype=np.float64)  # a private, read-only copy
        if rates.ndim != 1 or rates.size == 0:
            raise TraceError(f"trace {self.name!r}: rps must be a non-empty 1-D array")
        if not np.all(np.isfinite(rates)) or np.any(rates < 0):
            raise TraceError(f"trace {self.name!r}: rps must be finite and >= 0")
        rates.setflags(write=False)
        object.__setattr__(self, "rps", rates)

    @property
    def duration_s(self) -> int:
        return int(self.rps.size)

    @property
    def mean_rps(self) -> float:
        return float(self.rps.mean())

    @property
    def peak_rps(self) -> float:
        return float(self.rps.max())


def _check_duration(duration_s: int) -> int:
    if duration_s < 1 or int(duration_s) != duration_s:
        raise TraceError(f"duration_s must be a positive whole number of seconds, got {duration_s}")
    return int(duration_s)


def _ou_wander(rng: np.random.Generator, n: int, std: float, tau_s: float) -> FloatArray:
    """A slow mean-reverting wander (Ornstein-Uhlenbeck, 1 s steps), stationary ``std``."""
    if std <= 0 or n == 0:
        return np.zeros(n)
    keep = math.exp(-1.0 / tau_s)
    kick = std * math.sqrt(1.0 - keep * keep)
    shocks = rng.normal(0.0, kick, size=n)
    shocks[0] = rng.normal(0.0, std)
    # x[i] = keep * x[i-1] + shock[i], as a closed form over powers of ``keep``: chunked so
    # keep**-i never overflows.
    out = np.empty(n)
    carry = 0.0
    chunk = max(1, min(512, int(300 * tau_s)))  # keep**-chunk stays below e**300
    for start in range(0, n, chunk):
        part = shocks[start : start + chunk]
        powers = keep ** np.arange(part.size)
        acc = np.cumsum(part / powers) * powers
        out[start : start + part.size] = acc + carry * keep * powers
        carry = float(out[start + part.size - 1])
    return out


def steady(
    rps: float,
    duration_s: int,
    noise: float = 0.05,
    *,
    wander: float = 0.1,
    wander_tau_s: float = 600.0,
    seed: int = 0,
) -> Trace:
    """A steady load: ``rps`` x (1 + slow wander + per-second noise), both relative.

    ``wander`` is the standard deviation of a mean-reverting drift with correlation time
    ``wander_tau_s`` (users come and go); ``noise`` the per-second jitter beyond Poisson.
    """
    n = _check_duration(duration_s)
    rng = np.random.default_rng([seed, 0x57EAD])
    drift = _ou_wander(rng, n, wander, wander_tau_s)
    jitter = rng.normal(0.0, noise, size=n) if noise > 0 else np.zeros(n)
    rates = np.maximum(rps * (1.0 + drift + jitter), 0.0)
    return Trace(
        name="steady",
        rps=rates,
        description=f"{rps:g} rps, wander {wander:.0%} (tau {wander_tau_s:g} s), noise {noise:.0%}",
    )


def step(low: float, high: float, at_s: int, duration_s: int) -> Trace:
    """``low`` until ``at_s``, then ``high`` (a new client, a failover from elsewhere)."""
    n = _check_duration(duration_s)
    rates = np.full(n, float(low))
    rates[max(0, at_s) :] = high
    return Trace(name="step", rps=rates, description=f"{low:g} -> {high:g} rps at {at_s} s")


def spike(base: float, peak: float, at_s: int, length_s: int, duration_s: int) -> Trace:
    """``base``, with ``peak`` (absolute rps) during ``[at_s, at_s + length_s)``."""
    n = _check_duration(duration_s)
    rates = np.full(n, float(base))
    rates[max(0, at_s) : max(0, at_s + length_s)] = peak
    return Trace(
        name="spike",
        rps=rates,
        description=f"{base:g} rps, {peak:g} rps for {length_s} s at {at_s} s",
    )


def ramp(start: float, end: float, duration_s: int) -> Trace:
    """A linear ramp from ``start`` to ``end`` over the whole trace."""
    n = _check_duration(duration_s)
    rates = np.linspace(start, end, n) if n > 1 else np.array([float(start)])
    return Trace(name="ramp", rps=rates, description=f"{start:g} -> {end:g} rps linearly")


def diurnal(low: float, high: float, period_s: int, duration_s: int) -> Trace:
    """A day compressed into ``period_s``: ``low`` at midnight, ``high`` mid-period.

    A raised cosine: smooth, with the steepest slope ((high-low)·pi/period per second)
    in the morning rise and the evening fall.
    """
    n = _check_duration(duration_s)
    if period_s <= 0:
        raise TraceError(f"period_s must be > 0, got {period_s}")
    phase = 2.0 * np.pi * np.arange(n) / period_s
    rates = low + (high - low) * (1.0 - np.cos(phase)) / 2.0
    return Trace(
        name="diurnal",
        rps=rates,
        description=f"{low:g} <-> {high:g} rps, period {period_s} s",
    )


def bursty(
    mean: float,
    duration_s: int,
    seed: int = 0,
    *,
    base_share: float = 0.6,
    bursts_per_hour: float = 60.0,
    pareto_alpha: float = 1.5,
    burst_tau_s: float = 20.0,
    max_peak_factor: float = 2.5,
) -> Trace:
    """Heavy-tailed load: a base of ``base_share`` x mean plus Pareto-sized bursts.

    Bursts start as a Poisson process; each rises within a second and decays
    exponentially (time constant ``burst_tau_s``); sizes are Pareto(``pareto_alpha``),
    so most bursts are small and a few are large. The burst component is rescaled so the
    trace's mean is exactly ``mean``, and the total is capped at ``max_peak_factor`` x
    mean (a real upstream has finite capacity too).
    """
    n = _check_duration(duration_s)
    rng = np.random.default_rng([seed, 0xB0257])
    base = base_share * mean
    count = int(rng.poisson(bursts_per_hour * n / 3600.0))
    starts = np.sort(rng.integers(0, n, size=count))
    sizes = rng.pareto(pareto_alpha, size=count) + 1.0  # classical Pareto, minimum 1
    kernel_len = min(n, int(8 * burst_tau_s))
    kernel = np.exp(-np.arange(kernel_len) / burst_tau_s)
    impulses = np.zeros(n)
    np.add.at(impulses, starts, sizes)
    bursts = np.convolve(impulses, kernel)[:n]
    rates = np.full(n, base)
    if bursts.sum() > 0:
        target_extra = (mean - base) * n
        # Rescale, cap, and rescale again: capping removes area, so iterate briefly.
        for _ in range(8):
            scale = target_extra / max(bursts.sum(), 1e-12)
            scaled_bursts = np.minimum(bursts * scale, max_peak_factor * mean - base)
            bursts = scaled_bursts
            if abs(bursts.sum() - target_extra) <= 1e-6 * target_extra:
                break
        rates = rates + bursts
    return Trace(
        name="bursty",
        rps=rates,
        description=(
            f"mean {mean:g} rps: base {base:g} + Pareto(alpha={pareto_alpha:g}) bursts, "
            f"~{bursts_per_hour:g}/h, decay {burst_tau_s:g} s, cap {max_peak_factor:g}x mean"
        ),
    )


def _check_rate(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{name} must be finite and >= 0, got {value}")
    return float(value)


def _check_share(name: str, value: float, top: float = 1.0) -> float:
    if not math.isfinite(value) or not 0 <= value <= top:
        raise TraceError(f"{name} must be between 0 and {top:g}, got {value}")
    return float(value)


def _check_seconds(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise TraceError(f"{name} must be > 0 seconds, got {value}")
    return float(value)


def _jitter(rng: np.random.Generator, n: int, noise: float) -> FloatArray:
    return rng.normal(0.0, noise, size=n) if noise > 0 else np.zeros(n)


# A business day as (hour, share of the way from ``low`` to ``high``). Smoothed with a
# ~1 h kernel and rescaled to span exactly 0..1; see diurnal_weekly's docstring.
_BUSINESS_DAY = (
    (0.0, 0.10),
    (2.0, 0.03),
    (4.0, 0.00),
    (5.5, 0.02),
    (6.0, 0.05),
    (6.5, 0.22),
    (7.0, 0.45),
    (7.5, 0.63),
    (8.0, 0.74),
    (9.0, 0.83),
    (10.0, 0.88),
    (11.5, 0.91),
    (12.25, 0.84),
    (12.75, 0.78),
    (13.5, 0.85),
    (14.5, 0.96),
    (15.5, 1.00),
    (16.5, 0.95),
    (17.5, 0.82),
    (18.5, 0.62),
    (20.0, 0.42),
    (22.0, 0.22),
    (24.0, 0.10),
)
_WEEKDAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def _business_day_profile() -> tuple[FloatArray, FloatArray]:
    """The day's shape on a one-minute grid: (hours 0..24, share 0..1)."""
    hours = np.arange(24 * 60 + 1) / 60.0
    anchors = np.array(_BUSINESS_DAY)
    share = np.interp(hours, anchors[:, 0], anchors[:, 1])
    # Two passes of a circular 31-minute moving average (a ~1 h triangle): rounds the
    # corners of the piecewise-linear anchors without moving them much.
    day = share[:-1]
    box = np.ones(31) / 31.0
    for _ in range(2):
        padded = np.concatenate([day[-15:], day, day[:15]])
        day = np.convolve(padded, box, mode="valid")
    day = (day - day.min()) / (day.max() - day.min())
    return hours, np.append(day, day[0])


def diurnal_weekly(
    low: float,
    high: float,
    *,
    days: int,
    day_s: int = 86400,
    weekend_factor: float = 0.6,
    start_weekday: int = 0,
    noise: float = 0.05,
    wander: float = 0.05,
    day_jitter: float = 0.03,
    seed: int = 0,
) -> Trace:
    """A business-hours workload over ``days`` days, with a weekly pattern.

    Shaped like the published traces of production serverless and ML inference services
    (the Azure Functions invocation traces, the request logs of production model
    serving): a strong daily cycle that follows office hours, with weekends lower. The
    weekday shape, in hours of the (possibly compressed) day, as a share of the way from
    ``low`` to ``high``:

    - 00:00-06:00, night: falls from ~10 % to the trough (``low``) at ~04:00;
    - 06:00-07:30, the morning ramp: ~5 % -> ~60 %, by far the steepest part of the day
      (about 45 % of ``high - low`` an hour at its fastest; at a real day's length that
      is still under 0.5 % per 30 s cold start, so compress the day to make it bite);
    - 08:00-10:00, on to a plateau of ~85-90 % by 09:30-10:00;
    - 12:00-13:30, a lunch dip to ~80 %;
    - ~15:30, the afternoon peak (``high``);
    - 17:00-24:00, the evening decline back to ~10 %.

    All times scale with ``day_s / 86400``, so ``day_s=3600`` packs a day into an hour.
    A day here runs from 04:00 to 04:00 (the trough, so that changing the day's level
    causes no visible jump): Saturday and Sunday (``start_weekday`` is the first day's
    weekday, 0 = Monday) carry ``weekend_factor`` x the weekday height above ``low``.
    Each day also gets its own height (x (1 + N(0, ``day_jitter``))) and a small time
    shift (N(0, 10 min), at most 30 min), so no day repeats the one before exactly. On
    top: a slow Ornstein-Uhlenbeck wander (std ``wander``, correlation time 30 min of the
    day) and per-second noise (std ``noise``), both relative.
    """
    if not isinstance(days, int | np.integer) or days < 1:
        raise TraceError(f"days must be a positive whole number, got {days}")
    if not isinstance(day_s, int | np.integer) or day_s < 24:
        raise TraceError(f"day_s must be a whole number of seconds >= 24, got {day_s}")
    low = _check_rate("low", low)
    high = _check_rate("high", high)
    if high < low:
        raise TraceError(f"high must be >= low, got low={low:g}, high={high:g}")
    _check_share("weekend_factor", weekend_factor)
    if not isinstance(start_weekday, int | np.integer) or not 0 <= start_weekday <= 6:
        raise TraceError(f"start_weekday must be 0 (Monday) .. 6 (Sunday), got {start_weekday}")
    _check_share("noise", noise)
    _check_share("wander", wander)
    _check_share("day_jitter", day_jitter)
    n = _check_duration(days * day_s)
    rng = np.random.default_rng([seed, 0xD1A7])
    # Per day, from the one before the first (its night reaches past the first midnight).
    heights = 1.0 + rng.normal(0.0, day_jitter, size=days + 1) if day_jitter > 0 else None
    shifts_h = np.clip(rng.normal(0.0, 10.0 / 60.0, size=days + 1), -0.5, 0.5)
    hour = np.arange(n) * (24.0 / day_s)
    day = np.floor((hour - 4.0) / 24.0).astype(np.int64) + 1  # 0 = the day before
    weekday = (start_weekday - 1 + day) % 7
    level = np.where(weekday >= 5, weekend_factor, 1.0)
    if heights is not None:
        level = level * heights[day]
    grid_h, share = _business_day_profile()
    rates = low + (high - low) * level * np.interp((hour - shifts_h[day]) % 24.0, grid_h, share)
    drift = _ou_wander(rng, n, wander, max(1.0, 1800.0 * day_s / 86400.0))
    rates = np.maximum(rates * (1.0 + drift + _jitter(rng, n, noise)), 0.0)
    first = _WEEKDAY_NAMES[start_weekday]
    return Trace(
        name="diurnal_weekly",
        rps=rates,
        description=(
            f"{days} business day(s) of {day_s} s from {first}, {low:g} -> {high:g} rps, "
            f"weekends x{weekend_factor:g}, wander {wander:.0%}, noise {noise:.0%}"
        ),
        day_s=int(day_s),
    )


def flash_crowd(
    base: float,
    peak: float,
    *,
    at_s: int,
    rise_s: float,
    decay_s: float,
    duration_s: int,
    noise: float = 0.05,
    seed: int = 0,
) -> Trace:
    """A flash crowd: ``base``, then up to ``peak`` within ``rise_s`` from ``at_s``, then
    an exponential decay back towards ``base`` with time constant ``decay_s``.

    What a link on a busy front page or a push notification to every user does: the
    rise takes seconds (a smooth half-cosine from ``base`` at ``at_s`` to ``peak`` at
    ``at_s + rise_s``), the interest fades over minutes (``base + (peak - base) x
    exp(-t / decay_s)`` after the top). Per-second noise (std ``noise``, relative) on top.
    """
    n = _check_duration(duration_s)
    base = _check_rate("base", base)
    peak = _check_rate("peak", peak)
    if peak < base:
        raise TraceError(f"peak must be >= base, got base={base:g}, peak={peak:g}")
    if int(at_s) != at_s or not 0 <= at_s < n:
        raise TraceError(f"at_s must be a whole second in [0, duration_s), got {at_s}")
    rise = _check_seconds("rise_s", rise_s)
    decay = _check_seconds("decay_s", decay_s)
    _check_share("noise", noise)
    rng = np.random.default_rng([seed, 0xF1A5])
    since = np.arange(n) - float(at_s)
    rising = (1.0 - np.cos(np.pi * np.clip(since / rise, 0.0, 1.0))) / 2.0
    falling = np.exp(-np.maximum(since - rise, 0.0) / decay)
    share = np.where(since < 0, 0.0, np.where(since <= rise, rising, falling))
    rates = base + (peak - base) * share
    rates = np.maximum(rates * (1.0 + _jitter(rng, n, noise)), 0.0)
    return Trace(
        name="flash_crowd",
        rps=rates,
        description=(
            f"{base:g} rps; up to {peak:g} rps within {rise_s:g} s at {at_s} s, "
            f"decaying with tau {decay_s:g} s; noise {noise:.0%}"
        ),
    )


def heavy_tailed(
    mean_rps: float,
    duration_s: int,
    *,
    alpha: float = 1.3,
    base_share: float = 0.5,
    bursts_per_hour: float = 20.0,
    median_burst_s: float = 40.0,
    burst_sigma: float = 1.0,
    max_burst_s: float = 1800.0,
    max_peak_factor: float = 3.0,
    noise: float = 0.05,
    wander: float = 0.05,
    seed: int = 0,
) -> Trace:
    """Bursts with heavy-tailed sizes *and* lengths on a base of ``base_share`` x mean.

    Bursts start as a Poisson process (``bursts_per_hour``). Each has a height drawn
    from Pareto(``alpha``) (minimum 1, relative) and a length drawn from a lognormal
    (median ``median_burst_s``, log-std ``burst_sigma``, at most ``max_burst_s``): most
    are short and a few last minutes. A burst ramps up over a tenth of its length (at
    most 10 s), holds, then fades with a time constant of a fifth of its length. Unlike
    ``bursty`` (fixed 20 s decay), a long burst here is a plateau the autoscaler has to
    hold, not just a spike to ride out.

    The bursts are rescaled so the mean (before noise) is ``mean_rps``, then a slow
    wander (std ``wander``) and per-second noise (std ``noise``) are applied, and the
    total is capped at ``max_peak_factor`` x ``mean_rps``: the mean ends up within a few
    per cent of ``mean_rps``. There is always at least one burst.
    """
    n = _check_duration(duration_s)
    mean = _check_rate("mean_rps", mean_rps)
    if not math.isfinite(alpha) or alpha <= 0:
        raise TraceError(f"alpha must be > 0, got {alpha}")
    base_share = _check_share("base_share", base_share)
    if not math.isfinite(bursts_per_hour) or bursts_per_hour <= 0:
        raise TraceError(f"bursts_per_hour must be > 0, got {bursts_per_hour}")
    median = _check_seconds("median_burst_s", median_burst_s)
    if not math.isfinite(burst_sigma) or burst_sigma < 0:
        raise TraceError(f"burst_sigma must be >= 0, got {burst_sigma}")
    longest = _check_seconds("max_burst_s", max_burst_s)
    if not math.isfinite(max_peak_factor) or max_peak_factor <= 1:
        raise TraceError(f"max_peak_factor must be > 1, got {max_peak_factor}")
    _check_share("noise", noise)
    _check_share("wander", wander)
    rng = np.random.default_rng([seed, 0x4EA7])
    base = base_share * mean
    count = max(1, int(rng.poisson(bursts_per_hour * n / 3600.0)))
    starts = rng.integers(0, n, size=count)
    heights = rng.pareto(alpha, size=count) + 1.0
    lengths = np.clip(rng.lognormal(math.log(median), burst_sigma, size=count), 1.0, longest)
    bursts = np.zeros(n)
    for start, height, length in zip(starts.tolist(), heights, lengths, strict=True):
        rise = min(10.0, max(1.0, length / 10.0))
        # Held for ``length``, then five time constants (of length / 5) of fading.
        local = np.arange(min(n - start, math.ceil(2.0 * length)), dtype=np.float64)
        shape = np.where(
            local < length,
            np.minimum(1.0, (local + 1.0) / rise),
            np.exp(-(local - length) / (length / 5.0)),
        )
        bursts[start : start + local.size] += height * shape
    cap = max_peak_factor * mean
    target_extra = (mean - base) * n
    if target_extra > 0 and bursts.sum() > 0:
        # Rescale, cap, and rescale again: capping removes area, so iterate briefly.
        for _ in range(8):
            bursts = np.minimum(bursts * target_extra / bursts.sum(), cap - base)
            if abs(bursts.sum() - target_extra) <= 1e-6 * target_extra:
                break
    else:
        bursts[:] = 0.0
    drift = _ou_wander(rng, n, wander, 600.0)
    rates = (base + bursts) * (1.0 + drift + _jitter(rng, n, noise))
    rates = np.clip(rates, 0.0, cap)
    return Trace(
        name="heavy_tailed",
        rps=rates,
        description=(
            f"mean {mean:g} rps: base {base:g} + ~{bursts_per_hour:g}/h bursts, heights "
            f"Pareto(alpha={alpha:g}), lengths lognormal (median {median_burst_s:g} s), "
            f"cap {max_peak_factor:g}x mean"
        ),
    )


def slow_ramp(
    start: float,
    end: float,
    *,
    duration_s: int,
    hold_s: int,
    noise: float = 0.05,
    wander: float = 0.05,
    seed: int = 0,
) -> Trace:
    """Growth, e.g. a launch: ``start`` -> ``end`` along an S-curve, then ``end`` held.

    The first ``duration_s - hold_s`` seconds follow a half-cosine from ``start`` to
    ``end`` (slow, then fastest halfway at pi/2 x the average slope, then slow again, as
    adoption goes); the last ``hold_s`` seconds stay at ``end``. ``duration_s`` is the
    whole trace's length, as elsewhere. A slow wander (std ``wander``, correlation time
    10 min) and per-second noise (std ``noise``), both relative, on top.
    """
    n = _check_duration(duration_s)
    start = _check_rate("start", start)
    end = _check_rate("end", end)
    if int(hold_s) != hold_s or not 0 <= hold_s < n:
        raise TraceError(
            f"hold_s must be a whole number of seconds in [0, duration_s), got {hold_s}"
        )
    _check_share("noise", noise)
    _check_share("wander", wander)
    rng = np.random.default_rng([seed, 0x5A3B])
    ramp_s = n - int(hold_s)
    progress = np.minimum(np.arange(n) / max(ramp_s - 1, 1), 1.0)
    rates = start + (end - start) * (1.0 - np.cos(np.pi * progress)) / 2.0
    drift = _ou_wander(rng, n, wander, 600.0)
    rates = np.maximum(rates * (1.0 + drift + _jitter(rng, n, noise)), 0.0)
    return Trace(
        name="slow_ramp",
        rps=rates,
        description=(
            f"{start:g} -> {end:g} rps along an S-curve over {ramp_s} s, then held for "
            f"{hold_s} s; wander {wander:.0%}, noise {noise:.0%}"
        ),
    )


def truncate(trace: Trace, seconds: int) -> Trace:
    """The first ``seconds`` of ``trace`` (all of it if shorter)."""
    if seconds < 1:
        raise TraceError(f"seconds must be >= 1, got {seconds}")
    return dataclasses.replace(trace, rps=trace.rps[:seconds])


def scaled(trace: Trace, factor: float) -> Trace:
    """The same shape at ``factor`` x the rate."""
    if factor < 0 or not math.isfinite(factor):
        raise TraceError(f"factor must be finite and >= 0, got {factor}")
    return dataclasses.replace(
        trace,
        rps=trace.rps * factor,
        description=f"{trace.description} (x{factor:g})".strip(),
    )


def from_csv(path: str | Path, name: str | None = None) -> Trace:
    """Read a load trace from a CSV, in one of two shapes (the header says which):

    - ``t,rps``: rates, linearly interpolated to one value a second. ``t`` is seconds from
      the start, strictly increasing; the trace covers second 0 up to the last ``t``
      (values before the first row repeat the first rate).
    - ``timestamp``: one row per request, its arrival time in seconds (any origin, e.g.
      Unix time from an access log; any order). Second ``i`` of the trace holds the
      requests that arrived in ``[first + i, first + i + 1)``.
    """
    source = Path(path)
    times: list[float] = []
    rates: list[float] = []
    with source.open(newline="") as handle:
        reader = csv.reader(handle)
        header: list[str] | None = None
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [cell.strip().lower() for cell in row]
                if header == ["timestamp"]:
                    return _from_timestamps(source, reader, name)
                if header != ["t", "rps"]:
                    raise TraceError(
                        f"{source}:{line}: expected the header 't,rps' (rates) or 'timestamp' "
                        f"(one request per row), got {','.join(row)!r}"
                    )
                continue
            if len(row) != 2:
                raise TraceError(
                    f"{source}:{line}: expected 2 columns (t,rps), got {len(row)}: {row!r}"
                )
            try:
                t_value, rate = float(row[0]), float(row[1])
            except ValueError:
                raise TraceError(
                    f"{source}:{line}: t and rps must be numbers, got {row!r}"
                ) from None
            if not (math.isfinite(t_value) and math.isfinite(rate)):
                raise TraceError(f"{source}:{line}: t and rps must be finite, got {row!r}")
            if t_value < 0:
                raise TraceError(f"{source}:{line}: t must be >= 0, got {t_value:g}")
            if rate < 0:
                raise TraceError(f"{source}:{line}: rps must be >= 0, got {rate:g}")
            if times and t_value <= times[-1]:
                raise TraceError(
                    f"{source}:{line}: t must increase, got {t_value:g} after {times[-1]:g}"
                )
            times.append(t_value)
            rates.append(rate)
    if header is None:
        raise TraceError(f"{source}: empty file; expected a 't,rps' header and rows")
    if not times:
        raise TraceError(f"{source}: no data rows after the header")
    seconds = np.arange(math.floor(times[-1]) + 1, dtype=np.float64)
    values = np.interp(seconds, np.array(times), np.array(rates))
    return Trace(name=name or source.stem, rps=values, description=f"from {source.name}")


MAX_TIMESTAMP_SPAN_S = 31 * 24 * 3600
"""Longest span a timestamp CSV may cover (a month of seconds: 2.7 M values)."""


def _from_timestamps(source: Path, reader: Any, name: str | None) -> Trace:
    stamps: list[float] = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) != 1:
            raise TraceError(
                f"{source}:{line}: expected 1 column (timestamp), got {len(row)}: {row!r}"
            )
        try:
            value = float(row[0])
        except ValueError:
            raise TraceError(
                f"{source}:{line}: timestamp must be a number of seconds, got {row[0]!r}"
            ) from None
        if not math.isfinite(value):
            raise TraceError(f"{source}:{line}: timestamp must be finite, got {row[0]!r}")
        stamps.append(value)
    if not stamps:
        raise TraceError(f"{source}: no data rows after the header")
    arrivals = np.array(stamps, dtype=np.float64)
    first = float(arrivals.min())
    span = float(arrivals.max()) - first
    if span > MAX_TIMESTAMP_SPAN_S:
        raise TraceError(
            f"{source}: the timestamps span {span / 86400:.0f} days; at most 31 are replayed "
            "(are some in milliseconds? use seconds)"
        )
    seconds = np.floor(arrivals - first).astype(np.int64)
    counts = np.bincount(seconds, minlength=int(seconds.max()) + 1).astype(np.float64)
    return Trace(
        name=name or source.stem,
        rps=counts,
        description=f"from {source.name} ({len(stamps)} requests)",
    )


def _renamed(trace: Trace, name: str, description: str) -> Trace:
    """A suite's copy of a generated trace, under the suite's name and words."""
    return dataclasses.replace(trace, name=name, description=description)


def standard_suite(seed: int = 0) -> list[Trace]:
    """Six one-hour traces, peaks ~300-1200 rps (see docs/simulator.md)."""
    hour = 3600

    return [
        _renamed(
            steady(600, hour, noise=0.05, wander=0.1, wander_tau_s=600, seed=seed),
            "steady_noisy",
            "~600 rps, 10 % slow wander (tau 10 min) and 5 % per-second noise",
        ),
        _renamed(step(200, 800, 20 * 60, hour), "step", "200 -> 800 rps at 20 min"),
        _renamed(
            spike(300, 1200, 30 * 60, 120, hour),
            "spike",
            "300 rps; 1200 rps (x4) for 2 min at 30 min",
        ),
        _renamed(ramp(100, 1000, hour), "ramp", "100 -> 1000 rps linearly over the hour"),
        _renamed(diurnal(150, 900, hour, hour), "diurnal", "one compressed day, 150 <-> 900 rps"),
        _renamed(
            bursty(400, hour, seed=seed),
            "bursty",
            "mean 400 rps: 240 base + ~60 Pareto(1.5) bursts an hour (20 s decay), "
            "capped at 1000 rps",
        ),
    ]


def production_suite(seed: int = 0) -> list[Trace]:
    """Four one-hour traces shaped like production inference load, peaks ~300-1200 rps.

    The companions of ``standard_suite`` built with the newer generators (see
    docs/simulator.md): a flash crowd, heavy-tailed bursts, a launch's growth and a
    business day compressed into the hour.
    """
    hour = 3600

    return [
        _renamed(
            flash_crowd(
                300, 1100, at_s=15 * 60, rise_s=20, decay_s=8 * 60, duration_s=hour, seed=seed
            ),
            "flash_crowd",
            "300 rps; a flash crowd at 15 min reaches 1100 rps in 20 s, then decays "
            "(tau 8 min); 5 % noise",
        ),
        _renamed(
            heavy_tailed(400, hour, seed=seed),
            "heavy_tailed",
            "mean ~400 rps: 200 base + ~20 bursts an hour, Pareto(1.3) heights, lognormal "
            "lengths (median 40 s, some minutes long), capped at 1200 rps",
        ),
        _renamed(
            slow_ramp(150, 900, duration_s=hour, hold_s=10 * 60, seed=seed),
            "slow_ramp",
            "150 -> 900 rps along an S-curve over 50 min, then held; 5 % wander and noise",
        ),
        _renamed(
            diurnal_weekly(120, 900, days=1, day_s=hour, seed=seed),
            "business_day",
            "one weekday compressed into the hour, 120 <-> ~900 rps: night, a steep morning "
            "ramp, lunch dip, afternoon peak, evening decline",
        ),
    ]


def forecast_suite(seed: int = 0) -> list[Trace]:
    """Multi-day business-hours traces for forecasting policies (see docs/simulator.md).

    ``week_business``: Monday to Thursday in real time (4 x 86400 s, 120 <-> ~900 rps,
    ~170 M requests). ``week_compressed``: nine days of 3600 s from a Thursday, so it
    holds a weekend and the Monday after.
    """

    return [
        _renamed(
            diurnal_weekly(120, 900, days=4, day_s=86400, start_weekday=0, seed=seed),
            "week_business",
            "Monday-Thursday in real time, 120 <-> ~900 rps business days, 3 % day-to-day "
            "jitter, 5 % wander and noise",
        ),
        _renamed(
            diurnal_weekly(120, 900, days=9, day_s=3600, start_weekday=3, seed=seed),
            "week_compressed",
            "nine days of one hour each from a Thursday (weekend at x0.6), 120 <-> ~900 rps",
        ),
    ]
