"""Analysis verdicts: what a revision did over a window, judged against the checks.

Pure: no I/O, no clock. The caller scrapes cumulative :class:`Counters` at the start and
the end of the analysis window; :meth:`Window.between` turns them into what Prometheus'
``increase()`` would report, and :func:`judge` applies a step's checks to the canary's
window (and the stable revision's, for ratio checks).

Built-in metrics (``servectl.api.models.BUILTIN_ANALYSIS_METRICS``):

- ``errorRate``: errors / requests (0-1); ``successRate``: 1 - errorRate;
- ``requestRate``: requests / window seconds;
- ``latencyP<N>``: Prometheus ``histogram_quantile(N/100, ...)`` over the window's
  latency buckets, in ms (bucket bounds are in µs);
- ``modelAvailable``: 1.0 when TF Serving reports the version AVAILABLE, else 0.0.

Rules, in the order they apply to one check:

1. ``modelAvailable`` is a probe: it is judged whatever the traffic.
2. Every other check needs ``min_samples`` canary requests in the window; with fewer it
   is Inconclusive ("12 of 100 requests; extend the step or generate load"), never
   Successful nor Failed.
3. A custom check (``query`` set, or a metric that is not built in) takes its values from
   ``custom[metric] = (canary, stable)``; no entry or no canary value is an Error
   ("query returned no data").
4. A built-in value that cannot be computed (an empty latency histogram) is Inconclusive.
5. Ratio bounds (``maxRatioToStable``/``minRatioToStable``) need the stable value, and a
   stable window with ``min_samples`` requests; else the check is Inconclusive. Ratios
   are compared by multiplication, never division: ``maxRatioToStable: r`` fails when
   ``value > r * stable``. So a stable value of 0 is well defined: a canary at 0 passes
   (0 <= 0), a canary above 0 fails a max ratio (any positive value is infinitely many
   times 0), and a min ratio always passes (nothing is below r * 0 = 0).
6. ``max``/``min`` are inclusive: ``value == max`` passes.
7. ``condition`` (CEL over ``value`` and ``stable``) must hold as well as the bounds; a
   condition that needs ``stable`` when it is not known is Inconclusive, one that fails
   to evaluate is an Error.

The verdict: any check Failed -> Failed; else any Error -> Error; else any Inconclusive
-> Inconclusive; else, with fewer than ``min_samples`` canary requests (a step whose only
check is ``modelAvailable``), Inconclusive; else Successful.

A *hard failure* is a canary error rate at or above ``hard_failure_error_rate`` with
``min_samples`` requests, whether or not a check looks at the error rate. It makes the
verdict Failed (the message says so) and sets ``hard_failure`` so the rollout can abort
without waiting for the step's checks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from servectl.api import conditions
from servectl.api.models import (
    AnalysisCheck,
    Verdict,
    is_builtin_metric,
    latency_metric_percentile,
)
from servectl.autoscaling.windows import histogram_quantile
from servectl.rollout.counters import Counters

__all__ = [
    "AnalysisResult",
    "CheckResult",
    "Window",
    "compare_variants",
    "judge",
    "metric_value",
]

_SEVERITY = (Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE)


# ----------------------------------------------------------------------------- windows


def _increase(start: float, end: float) -> float:
    """Prometheus ``increase()`` of one counter: a decrease is a reset, counted from 0."""
    return end - start if end >= start else end


@dataclass(frozen=True)
class Window:
    """What one revision did over the analysis window (Prometheus ``increase()``).

    ``latency_buckets`` are per-bucket counts (not cumulative), one per finite bound of
    the layout plus the +Inf bucket, like :attr:`Counters.latency_buckets`.
    """

    requests: float
    errors: float
    cpu_seconds: float
    latency_buckets: tuple[float, ...]
    seconds: float

    @classmethod
    def between(cls, start: Counters, end: Counters) -> Window:
        """The increase from ``start`` to ``end``.

        A counter that went down was reset (the server restarted): like Prometheus, the
        increase is then ``end`` itself. Each counter is checked on its own; the latency
        histogram is reset as a whole when any bucket went down or the bucket layout
        changed (a restart resets every bucket at once).
        """
        before, after = start.latency_buckets, end.latency_buckets
        if len(before) != len(after) or any(b > a for b, a in zip(before, after, strict=True)):
            buckets = tuple(after)
        else:
            buckets = tuple(a - b for b, a in zip(before, after, strict=True))
        return cls(
            requests=_increase(start.requests, end.requests),
            errors=_increase(start.errors, end.errors),
            cpu_seconds=_increase(start.cpu_seconds, end.cpu_seconds),
            latency_buckets=buckets,
            seconds=max(0.0, end.time - start.time),
        )


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: its values (None: unknown) and why."""

    metric: str
    verdict: Verdict
    value: float | None
    stable: float | None
    message: str


@dataclass(frozen=True)
class AnalysisResult:
    """The outcome of judging one window: the verdict, which checks decided, and why."""

    verdict: Verdict
    message: str
    samples: int  # canary requests in the window
    checks: tuple[CheckResult, ...]
    hard_failure: bool
    # The canary requests the verdict needed (minSamples); 0 when it was not judged on
    # samples (metrics missing). The status says "waiting for traffic: samples of needed".
    needed: int = field(default=0, compare=False)

    @property
    def short_of_samples(self) -> bool:
        """Inconclusive because the canary has served too few requests."""
        return self.verdict is Verdict.INCONCLUSIVE and self.samples < self.needed


# ----------------------------------------------------------------------------- metrics


def _latency_ms(percentile: float, buckets: Sequence[float], bounds_us: Sequence[float]) -> float:
    """NaN when the histogram is empty or its layout does not match the bounds."""
    if len(buckets) not in (len(bounds_us), len(bounds_us) + 1):
        return math.nan
    cumulative: list[tuple[float, float]] = []
    total = 0.0
    for index, count in enumerate(buckets):
        total += count
        bound = bounds_us[index] if index < len(bounds_us) else math.inf
        cumulative.append((bound, total))
    value = histogram_quantile(percentile / 100.0, cumulative)
    return math.nan if value is None else value / 1000.0


def metric_value(
    metric: str, window: Window, bounds_us: Sequence[float], *, available: bool = True
) -> float | None:
    """A built-in metric over ``window``; None when it cannot be computed (no requests
    for a rate, an empty latency histogram, a window of zero seconds).

    Raises ValueError for a metric that is not built in (those need a ``query``).
    """
    if metric == "modelAvailable":
        return 1.0 if available else 0.0
    if metric in ("errorRate", "successRate"):
        if not window.requests > 0:
            return None
        error_rate = min(1.0, max(0.0, window.errors / window.requests))
        return error_rate if metric == "errorRate" else 1.0 - error_rate
    if metric == "requestRate":
        return window.requests / window.seconds if window.seconds > 0 else None
    percentile = latency_metric_percentile(metric)
    if percentile is None:
        raise ValueError(f"{metric!r} is not a built-in metric; give the check a query")
    value = _latency_ms(percentile, window.latency_buckets, bounds_us)
    return None if math.isnan(value) else value


# ----------------------------------------------------------------------------- judging


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _count(requests: float) -> int:
    return int(requests) if math.isfinite(requests) else 0


def _samples_note(what: str, requests: float, min_samples: int) -> str:
    return f"{what}{_count(requests)} of {min_samples} requests; extend the step or generate load"


@dataclass(frozen=True)
class _Values:
    value: float | None
    stable: float | None  # None: unknown, or not trusted (too few stable samples)
    stable_note: str  # why ``stable`` is None (for ratio checks)


def _bounds_failure(check: AnalysisCheck, value: float, stable: float | None) -> str | None:
    """The first violated bound, in words; None if every bound holds (ratio bounds are
    skipped when ``stable`` is None: the caller has made them Inconclusive first)."""
    name = check.metric
    if check.max is not None and value > check.max:
        return f"{name} {_fmt(value)} above max {_fmt(check.max)}"
    if check.min is not None and value < check.min:
        return f"{name} {_fmt(value)} below min {_fmt(check.min)}"
    if stable is None:
        return None
    ratio = _ratio(value, stable)
    if check.max_ratio_to_stable is not None and value > check.max_ratio_to_stable * stable:
        return (
            f"{name} {_fmt(value)} vs stable {_fmt(stable)} (ratio {_fmt(ratio)}),"
            f" above maxRatioToStable {_fmt(check.max_ratio_to_stable)}"
        )
    if check.min_ratio_to_stable is not None and value < check.min_ratio_to_stable * stable:
        return (
            f"{name} {_fmt(value)} vs stable {_fmt(stable)} (ratio {_fmt(ratio)}),"
            f" below minRatioToStable {_fmt(check.min_ratio_to_stable)}"
        )
    return None


def _ratio(value: float, stable: float) -> float:
    """For messages only: value / stable, with 0/0 = 1 and x/0 = inf."""
    if stable == 0:
        return 1.0 if value == 0 else math.inf
    return value / stable


def _judge_check(
    check: AnalysisCheck,
    canary: Window,
    stable: Window | None,
    *,
    min_samples: int,
    bounds_us: Sequence[float],
    canary_available: bool,
    custom: Mapping[str, tuple[float | None, float | None]],
) -> CheckResult:
    metric = check.metric
    query = check.query or None
    is_custom = query is not None or not is_builtin_metric(metric)
    if metric == "modelAvailable" and not is_custom:
        values = _Values(1.0 if canary_available else 0.0, None, "no stable value for a probe")
    else:
        if canary.requests < min_samples:
            note = _samples_note("", canary.requests, min_samples)
            return CheckResult(metric, Verdict.INCONCLUSIVE, None, None, f"{metric}: {note}")
        if is_custom:
            values_or_error = _custom_values(metric, stable, min_samples, custom)
            if isinstance(values_or_error, str):
                return CheckResult(metric, Verdict.ERROR, None, None, values_or_error)
            values = values_or_error
        else:
            values = _builtin_values(metric, canary, stable, min_samples, bounds_us)
            if values.value is None:
                why = "no latency observations" if metric.startswith("latency") else "no data"
                return CheckResult(
                    metric, Verdict.INCONCLUSIVE, None, values.stable, f"{metric}: {why}"
                )
    value = values.value
    assert value is not None
    uses_ratio = check.max_ratio_to_stable is not None or check.min_ratio_to_stable is not None
    failure = _bounds_failure(check, value, values.stable)
    if failure is not None:
        return CheckResult(metric, Verdict.FAILED, value, values.stable, failure)
    if uses_ratio and values.stable is None:
        return CheckResult(
            metric,
            Verdict.INCONCLUSIVE,
            value,
            None,
            f"{metric} {_fmt(value)}: cannot compare with stable ({values.stable_note})",
        )
    condition = check.condition or None
    if condition is not None:
        try:
            holds = conditions.evaluate_condition(condition, value, values.stable)
        except conditions.StableUnavailableError:
            return CheckResult(
                metric,
                Verdict.INCONCLUSIVE,
                value,
                None,
                f"{metric} {_fmt(value)}: condition {condition!r} needs stable"
                f" ({values.stable_note})",
            )
        except conditions.ConditionError as error:
            return CheckResult(metric, Verdict.ERROR, value, values.stable, f"{metric}: {error}")
        if not holds:
            return CheckResult(
                metric,
                Verdict.FAILED,
                value,
                values.stable,
                f"{metric} {_fmt(value)} (stable {_fmt(values.stable)}):"
                f" condition {condition!r} is false",
            )
    return CheckResult(
        metric, Verdict.SUCCESSFUL, value, values.stable, f"{metric} {_fmt(value)} ok"
    )


def _builtin_values(
    metric: str,
    canary: Window,
    stable: Window | None,
    min_samples: int,
    bounds_us: Sequence[float],
) -> _Values:
    value = metric_value(metric, canary, bounds_us)
    if stable is None:
        return _Values(value, None, "no stable window")
    if stable.requests < min_samples:
        return _Values(value, None, _samples_note("stable has ", stable.requests, min_samples))
    stable_value = metric_value(metric, stable, bounds_us)
    note = "" if stable_value is not None else f"no stable {metric}"
    return _Values(value, stable_value, note)


def _custom_values(
    metric: str,
    stable: Window | None,
    min_samples: int,
    custom: Mapping[str, tuple[float | None, float | None]],
) -> _Values | str:
    found = custom.get(metric)
    if found is None or found[0] is None or math.isnan(found[0]):
        return f"{metric}: query returned no data"
    value, stable_value = found
    if stable_value is not None and math.isnan(stable_value):
        stable_value = None
    if stable_value is None:
        return _Values(value, None, "stable query returned no data")
    if stable is not None and stable.requests < min_samples:
        return _Values(value, None, _samples_note("stable has ", stable.requests, min_samples))
    return _Values(value, stable_value, "")


def judge(
    checks: Sequence[AnalysisCheck],
    canary: Window,
    stable: Window | None,
    *,
    min_samples: int,
    bounds_us: Sequence[float],
    canary_available: bool = True,
    custom: Mapping[str, tuple[float | None, float | None]] | None = None,
    hard_failure_error_rate: float = 0.5,
) -> AnalysisResult:
    """Apply ``checks`` to the canary's window (see the module doc for the rules)."""
    custom = custom or {}
    results = tuple(
        _judge_check(
            check,
            canary,
            stable,
            min_samples=min_samples,
            bounds_us=bounds_us,
            canary_available=canary_available,
            custom=custom,
        )
        for check in checks
    )
    samples = _count(canary.requests)
    enough = canary.requests >= min_samples
    error_rate = metric_value("errorRate", canary, bounds_us) if enough else None
    hard = error_rate is not None and error_rate >= hard_failure_error_rate
    needed = min_samples
    for verdict in _SEVERITY:
        decided = [r for r in results if r.verdict is verdict]
        if verdict is Verdict.FAILED and hard:
            note = f"hard failure: error rate {_fmt(error_rate)} >= {_fmt(hard_failure_error_rate)}"
            message = "; ".join([note, *(r.message for r in decided)])
            return AnalysisResult(Verdict.FAILED, message, samples, results, True, needed)
        if decided:
            message = "; ".join(dict.fromkeys(r.message for r in decided))
            return AnalysisResult(verdict, message, samples, results, False, needed)
    if not enough:
        note = _samples_note("", canary.requests, min_samples)
        return AnalysisResult(Verdict.INCONCLUSIVE, note, samples, results, False, needed)
    if not results:
        message = f"no checks; {samples} requests"
    else:
        message = f"all {len(results)} checks passed: " + ", ".join(
            f"{r.metric} {_fmt(r.value)}" for r in results
        )
    return AnalysisResult(Verdict.SUCCESSFUL, message, samples, results, False, needed)


# ----------------------------------------------------------------------------- A/B


def compare_variants(
    metric: str,
    a: Window,
    b: Window,
    *,
    higher_is_better: bool,
    min_samples: int,
    bounds_us: Sequence[float],
) -> tuple[str | None, str]:
    """Which variant wins on a built-in ``metric``: ("A" | "B" | None, message).

    Both variants need ``min_samples`` requests and a value, else (None, "Inconclusive:
    ..."). The better value wins; a tie keeps the incumbent, A.
    """
    if not is_builtin_metric(metric):
        return None, f"Inconclusive: {metric} is not a built-in metric; compare on one"
    short = [
        f"{name} has {_samples_note('', window.requests, min_samples)}"
        for name, window in (("A", a), ("B", b))
        if window.requests < min_samples
    ]
    if short:
        return None, "Inconclusive: " + "; ".join(short)
    value_a = metric_value(metric, a, bounds_us)
    value_b = metric_value(metric, b, bounds_us)
    if value_a is None or value_b is None:
        missing = " and ".join(n for n, v in (("A", value_a), ("B", value_b)) if v is None)
        return None, f"Inconclusive: no {metric} for {missing}"
    direction = "higher is better" if higher_is_better else "lower is better"
    b_better = value_b > value_a if higher_is_better else value_b < value_a
    if b_better:
        return "B", f"B wins on {metric}: {_fmt(value_b)} vs A {_fmt(value_a)} ({direction})"
    if value_a == value_b:
        return "A", f"tie on {metric} at {_fmt(value_a)}: keeping A"
    return "A", f"A wins on {metric}: {_fmt(value_a)} vs B {_fmt(value_b)} ({direction})"
