"""Load traces: the mean request rate of every simulated second, and their generators.

A trace is only the *mean* arrival rate; the simulator draws Poisson arrivals around it,
so even a flat trace carries realistic second-to-second noise. Every generator is
deterministic: the ones with randomness take a ``seed``. docs/simulator.md describes
the standard suite and why each trace is shaped the way it is.
"""

from __future__ import annotations

import csv
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
    """``rps[i]`` is the mean arrival rate during second ``i`` (requests per second)."""

    name: str
    rps: FloatArray
    description: str = ""

    def __post_init__(self) -> None:
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


def truncate(trace: Trace, seconds: int) -> Trace:
    """The first ``seconds`` of ``trace`` (all of it if shorter)."""
    if seconds < 1:
        raise TraceError(f"seconds must be >= 1, got {seconds}")
    return Trace(name=trace.name, rps=trace.rps[:seconds], description=trace.description)


def scaled(trace: Trace, factor: float) -> Trace:
    """The same shape at ``factor`` x the rate."""
    if factor < 0 or not math.isfinite(factor):
        raise TraceError(f"factor must be finite and >= 0, got {factor}")
    return Trace(
        name=trace.name,
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


def standard_suite(seed: int = 0) -> list[Trace]:
    """Six one-hour traces, peaks ~300-1200 rps (see docs/simulator.md)."""
    hour = 3600

    def named(trace: Trace, name: str, description: str) -> Trace:
        return Trace(name=name, rps=trace.rps, description=description)

    return [
        named(
            steady(600, hour, noise=0.05, wander=0.1, wander_tau_s=600, seed=seed),
            "steady_noisy",
            "~600 rps, 10 % slow wander (tau 10 min) and 5 % per-second noise",
        ),
        named(step(200, 800, 20 * 60, hour), "step", "200 -> 800 rps at 20 min"),
        named(
            spike(300, 1200, 30 * 60, 120, hour),
            "spike",
            "300 rps; 1200 rps (x4) for 2 min at 30 min",
        ),
        named(ramp(100, 1000, hour), "ramp", "100 -> 1000 rps linearly over the hour"),
        named(diurnal(150, 900, hour, hour), "diurnal", "one compressed day, 150 <-> 900 rps"),
        named(
            bursty(400, hour, seed=seed),
            "bursty",
            "mean 400 rps: 240 base + ~60 Pareto(1.5) bursts an hour (20 s decay), "
            "capped at 1000 rps",
        ),
    ]
