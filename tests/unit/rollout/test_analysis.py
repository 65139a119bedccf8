"""Analysis verdicts (servectl.rollout.analysis): windows, metrics, checks, A/B comparison.

Latency fixture: bounds 1, 5, 10, 50 ms (in µs) and per-bucket counts 10, 80, 8, 2, 0
(100 observations): p50 = 1 + 4 x (50 - 10) / 80 = 3 ms, p95 = 5 + 5 x 5/8 = 8.125 ms,
p99 = 10 + 40 x 1/2 = 30 ms (Prometheus' linear interpolation inside a bucket).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from servectl.api.models import AnalysisCheck, Verdict
from servectl.rollout.analysis import (
    AnalysisResult,
    CheckResult,
    Window,
    compare_variants,
    judge,
    metric_value,
)
from servectl.rollout.counters import Counters

BOUNDS = (1_000.0, 5_000.0, 10_000.0, 50_000.0)
BUCKETS = (10.0, 80.0, 8.0, 2.0, 0.0)


def window(
    requests: float = 1000.0,
    errors: float = 0.0,
    *,
    seconds: float = 60.0,
    buckets: tuple[float, ...] = (),
    cpu: float = 0.0,
) -> Window:
    return Window(
        requests=requests, errors=errors, cpu_seconds=cpu, latency_buckets=buckets, seconds=seconds
    )


def check(metric: str, **bounds: Any) -> Any:
    """An AnalysisCheck; a stand-in with the same attributes where the model does not
    (yet) take a field or a combination (``query``/``condition`` are newer fields)."""
    try:
        return AnalysisCheck(metric=metric, **bounds)
    except (ValidationError, TypeError):
        fields = ("max", "min", "max_ratio_to_stable", "min_ratio_to_stable", "query", "condition")
        return SimpleNamespace(metric=metric, **{f: bounds.get(f) for f in fields})


def verdict_of(checks: list[Any], canary: Window, stable: Window | None = None, **kw: Any) -> str:
    kw.setdefault("min_samples", 100)
    kw.setdefault("bounds_us", BOUNDS)
    return str(judge(checks, canary, stable, **kw).verdict)


# ----------------------------------------------------------------------------- Window


def counters(t: float, requests: float, errors: float = 0.0, **kw: Any) -> Counters:
    return Counters(time=t, requests=requests, errors=errors, cpu_seconds=kw.get("cpu", 0.0),
                    latency_buckets=kw.get("buckets", ()))  # fmt: skip


def test_window_between_is_the_increase() -> None:
    start = counters(100, 1000, 10, cpu=5.0, buckets=(1, 2, 3))
    end = counters(160, 1600, 16, cpu=11.0, buckets=(4, 6, 8))
    assert Window.between(start, end) == Window(600, 6, 6.0, (3, 4, 5), 60.0)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # requests reset (a restart): the increase is the end value, like Prometheus
        (counters(0, 5000, 50), counters(30, 120, 60), (120, 10)),
        # errors reset on their own
        (counters(0, 100, 50), counters(30, 300, 4), (200, 4)),
        # both reset
        (counters(0, 100, 50), counters(30, 20, 1), (20, 1)),
    ],
)
def test_window_counter_reset(start: Counters, end: Counters, expected: tuple[int, int]) -> None:
    got = Window.between(start, end)
    assert (got.requests, got.errors) == expected


def test_window_histogram_reset_or_new_layout_takes_the_end_buckets() -> None:
    assert Window.between(counters(0, 0, buckets=(5, 5)), counters(1, 0, buckets=(1, 9))) == (
        window(0, 0, seconds=1, buckets=(1, 9))
    )
    grown = Window.between(counters(0, 0, buckets=()), counters(1, 0, buckets=(2, 3, 4)))
    assert grown.latency_buckets == (2, 3, 4)


def test_window_time_going_backwards_is_zero_seconds() -> None:
    assert Window.between(counters(50, 0), counters(40, 10)).seconds == 0.0


# ----------------------------------------------------------------------------- metric_value


@pytest.mark.parametrize(
    ("metric", "win", "expected"),
    [
        ("errorRate", window(1000, 25), 0.025),
        ("successRate", window(1000, 25), 0.975),
        ("errorRate", window(1000, 0), 0.0),
        ("errorRate", window(10, 20), 1.0),  # inconsistent counters: capped at 1
        ("errorRate", window(0, 0), None),
        ("successRate", window(0, 0), None),
        ("requestRate", window(1200, seconds=60), 20.0),
        ("requestRate", window(1200, seconds=0), None),
        ("latencyP50", window(buckets=BUCKETS), 3.0),
        ("latencyP95", window(buckets=BUCKETS), 8.125),
        ("latencyP99", window(buckets=BUCKETS), 30.0),
        ("latencyP99", window(buckets=(0.0,) * 5), None),  # empty histogram
        ("latencyP99", window(buckets=()), None),  # no histogram at all
        ("latencyP50", window(buckets=BUCKETS[:4]), 3.0),  # no +Inf bucket reported
        ("latencyP50", window(buckets=(1.0, 2.0)), None),  # layout does not match bounds
        ("latencyP99", window(buckets=(0, 0, 0, 0, 5)), 50.0),  # all in +Inf: top bound
    ],
)
def test_metric_value(metric: str, win: Window, expected: float | None) -> None:
    got = metric_value(metric, win, BOUNDS)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_model_available_is_a_probe() -> None:
    assert metric_value("modelAvailable", window(0), BOUNDS, available=True) == 1.0
    assert metric_value("modelAvailable", window(0), BOUNDS, available=False) == 0.0


def test_unknown_metric_needs_a_query() -> None:
    with pytest.raises(ValueError, match="give the check a query"):
        metric_value("gpuMemory", window(), BOUNDS)


# ----------------------------------------------------------------------------- judge: verdicts


@pytest.mark.parametrize(
    ("checks", "canary", "expected"),
    [
        ([check("errorRate", max=0.01)], window(1000, 10), "Successful"),  # at max: passes
        ([check("errorRate", max=0.01)], window(1000, 11), "Failed"),
        ([check("successRate", min=0.99)], window(1000, 10), "Successful"),  # at min: passes
        ([check("successRate", min=0.99)], window(1000, 11), "Failed"),
        ([check("requestRate", min=10)], window(600, seconds=60), "Successful"),
        ([check("requestRate", min=10)], window(599, seconds=60), "Failed"),
        ([check("latencyP99", max=30)], window(buckets=BUCKETS), "Successful"),
        ([check("latencyP99", max=29.9)], window(buckets=BUCKETS), "Failed"),
        ([check("latencyP99", max=30)], window(buckets=()), "Inconclusive"),
        ([check("modelAvailable", min=1)], window(1000), "Successful"),
        ([], window(1000), "Successful"),
    ],
)
def test_judge_builtin_checks(checks: list[Any], canary: Window, expected: str) -> None:
    assert verdict_of(checks, canary) == expected


def test_failed_message_names_the_check_its_value_and_the_bound() -> None:
    result = judge([check("errorRate", max=0.01)], window(1000, 30), None, min_samples=100,
                   bounds_us=BOUNDS)  # fmt: skip
    assert result.verdict is Verdict.FAILED
    assert result.message == "errorRate 0.03 above max 0.01"
    assert result.samples == 1000
    assert result.checks == (
        CheckResult("errorRate", Verdict.FAILED, 0.03, None, "errorRate 0.03 above max 0.01"),
    )
    assert not result.hard_failure


def test_success_message_lists_the_values() -> None:
    result = judge(
        [check("errorRate", max=0.01), check("latencyP50", max=5)],
        window(1000, 1, buckets=BUCKETS),
        None,
        min_samples=100,
        bounds_us=BOUNDS,
    )
    assert result == AnalysisResult(
        Verdict.SUCCESSFUL,
        "all 2 checks passed: errorRate 0.001, latencyP50 3",
        1000,
        result.checks,
        False,
    )


# ----------------------------------------------------------------------------- sample size


@pytest.mark.parametrize("requests", [0, 1, 12, 99])
def test_too_few_canary_requests_is_inconclusive(requests: int) -> None:
    # even when every request failed: a verdict needs samples
    result = judge([check("errorRate", max=0.01)], window(requests, requests), None,
                   min_samples=100, bounds_us=BOUNDS)  # fmt: skip
    assert result.verdict is Verdict.INCONCLUSIVE
    assert f"{requests} of 100 requests; extend the step or generate load" in result.message
    assert not result.hard_failure


def test_exactly_min_samples_is_enough() -> None:
    assert verdict_of([check("errorRate", max=0.01)], window(100, 1)) == "Successful"


def test_model_available_alone_never_passes_without_samples() -> None:
    assert verdict_of([check("modelAvailable", min=1)], window(5)) == "Inconclusive"
    assert verdict_of([], window(5)) == "Inconclusive"


def test_model_available_fails_without_samples() -> None:
    checks = [check("modelAvailable", min=1), check("errorRate", max=0.01)]
    result = judge(checks, window(0), None, min_samples=100, bounds_us=BOUNDS,
                   canary_available=False)  # fmt: skip
    assert result.verdict is Verdict.FAILED
    assert result.message == "modelAvailable 0 below min 1"


# ----------------------------------------------------------------------------- ratio checks


@pytest.mark.parametrize(
    ("bound", "canary_errors", "stable_errors", "expected"),
    [
        ({"max_ratio_to_stable": 2.0}, 20, 10, "Successful"),  # exactly 2x: passes
        ({"max_ratio_to_stable": 2.0}, 21, 10, "Failed"),
        ({"min_ratio_to_stable": 0.5}, 5, 10, "Successful"),
        ({"min_ratio_to_stable": 0.5}, 4, 10, "Failed"),
        # stable at 0: a canary at 0 passes, any canary error fails a max ratio ...
        ({"max_ratio_to_stable": 1.5}, 0, 0, "Successful"),
        ({"max_ratio_to_stable": 1.5}, 1, 0, "Failed"),
        # ... and a min ratio always passes (nothing is below r x 0)
        ({"min_ratio_to_stable": 0.9}, 0, 0, "Successful"),
    ],
)
def test_ratio_to_stable(
    bound: dict[str, float], canary_errors: int, stable_errors: int, expected: str
) -> None:
    checks = [check("errorRate", **bound)]
    assert verdict_of(checks, window(1000, canary_errors), window(1000, stable_errors)) == expected


def test_ratio_against_zero_stable_says_infinite() -> None:
    result = judge([check("errorRate", max_ratio_to_stable=1.5)], window(1000, 3),
                   window(1000, 0), min_samples=100, bounds_us=BOUNDS)  # fmt: skip
    assert result.message == "errorRate 0.003 vs stable 0 (ratio inf), above maxRatioToStable 1.5"


@pytest.mark.parametrize(
    ("stable", "why"),
    [
        (None, "no stable window"),
        (window(40, 0), "stable has 40 of 100 requests; extend the step or generate load"),
    ],
)
def test_ratio_needs_a_stable_with_enough_samples(stable: Window | None, why: str) -> None:
    result = judge([check("errorRate", max_ratio_to_stable=2.0)], window(1000, 1), stable,
                   min_samples=100, bounds_us=BOUNDS)  # fmt: skip
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.message == f"errorRate 0.001: cannot compare with stable ({why})"


def test_absolute_bound_fails_even_without_stable() -> None:
    checks = [check("errorRate", max=0.01, max_ratio_to_stable=2.0)]
    assert verdict_of(checks, window(1000, 50), None) == "Failed"


def test_ratio_on_latency_with_empty_stable_histogram() -> None:
    checks = [check("latencyP99", max_ratio_to_stable=1.2)]
    result = judge(checks, window(buckets=BUCKETS), window(buckets=()), min_samples=100,
                   bounds_us=BOUNDS)  # fmt: skip
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "no stable latencyP99" in result.message


# ----------------------------------------------------------------------------- custom checks


def test_custom_check_takes_its_values_from_the_mapping() -> None:
    checks = [check("gpuMemory", max=0.9, query="avg(gpu_mem{pod=~'{{revision}}-.*'})")]
    assert verdict_of(checks, window(), custom={"gpuMemory": (0.5, 0.4)}) == "Successful"
    assert verdict_of(checks, window(), custom={"gpuMemory": (0.95, 0.4)}) == "Failed"


def test_custom_ratio_check() -> None:
    checks = [check("gpuMemory", max_ratio_to_stable=1.1, query="q")]
    assert verdict_of(checks, window(), window(), custom={"gpuMemory": (0.5, 0.5)}) == (
        "Successful"
    )
    assert verdict_of(checks, window(), window(), custom={"gpuMemory": (0.6, 0.5)}) == "Failed"
    # stable query returned nothing: cannot compare
    assert verdict_of(checks, window(), window(), custom={"gpuMemory": (0.6, None)}) == (
        "Inconclusive"
    )
    assert verdict_of(checks, window(), window(), custom={"gpuMemory": (0.6, math.nan)}) == (
        "Inconclusive"
    )
    # stable has too few requests to be trusted
    assert verdict_of(checks, window(), window(5), custom={"gpuMemory": (0.6, 0.5)}) == (
        "Inconclusive"
    )


@pytest.mark.parametrize(
    "custom", [None, {}, {"gpuMemory": (None, 0.4)}, {"gpuMemory": (math.nan, 0.4)}]
)
def test_custom_check_without_data_is_an_error(custom: Any) -> None:
    result = judge([check("gpuMemory", max=0.9, query="q")], window(), None, min_samples=100,
                   bounds_us=BOUNDS, custom=custom)  # fmt: skip
    assert result.verdict is Verdict.ERROR
    assert result.message == "gpuMemory: query returned no data"


def test_unknown_metric_without_query_reads_the_mapping_too() -> None:
    checks = [check("gpuMemory", max=0.9)]
    assert verdict_of(checks, window(), custom={"gpuMemory": (0.1, None)}) == "Successful"
    assert verdict_of(checks, window()) == "Error"


def test_custom_check_needs_samples_too() -> None:
    checks = [check("gpuMemory", max=0.9, query="q")]
    assert verdict_of(checks, window(3), custom={"gpuMemory": (5.0, None)}) == "Inconclusive"


# ----------------------------------------------------------------------------- conditions


@pytest.mark.parametrize(
    ("condition", "canary", "stable", "expected"),
    [
        ("value < 0.01", window(1000, 5), None, "Successful"),
        ("value < 0.01", window(1000, 50), None, "Failed"),
        ("value < stable * 1.5", window(1000, 10), window(1000, 10), "Successful"),
        ("value < stable * 1.5", window(1000, 20), window(1000, 10), "Failed"),
        # needs stable, and there is none: Inconclusive
        ("value < stable * 1.5", window(1000, 10), None, "Inconclusive"),
        # `||` decides on value alone
        ("value < 0.02 || value < stable * 1.5", window(1000, 10), None, "Successful"),
        # fails to evaluate (an int divided by zero): Error
        ("1 / 0 == 1", window(1000, 10), None, "Error"),
        # not CEL at all: Error, not an exception
        ("value <", window(1000, 10), None, "Error"),
    ],
)
def test_condition(condition: str, canary: Window, stable: Window | None, expected: str) -> None:
    checks = [check("errorRate", max=1.0, condition=condition)]
    assert verdict_of(checks, canary, stable) == expected


def test_condition_and_bounds_both_apply() -> None:
    checks = [check("errorRate", max=0.01, condition="value < 0.5")]
    assert verdict_of(checks, window(1000, 20)) == "Failed"


def test_condition_false_message() -> None:
    result = judge([check("errorRate", max=1.0, condition="value < 0.01")], window(1000, 50),
                   None, min_samples=100, bounds_us=BOUNDS)  # fmt: skip
    assert result.message == "errorRate 0.05 (stable n/a): condition 'value < 0.01' is false"


# ----------------------------------------------------------------------------- combining


def test_failed_beats_error_beats_inconclusive() -> None:
    failing = check("errorRate", max=0.001)
    erroring = check("gpuMemory", max=1.0, query="q")
    unsure = check("latencyP99", max=100)  # no histogram: Inconclusive
    passing = check("successRate", min=0.5)
    canary = window(1000, 10)
    assert verdict_of([passing, unsure, erroring, failing], canary) == "Failed"
    assert verdict_of([passing, unsure, erroring], canary) == "Error"
    assert verdict_of([passing, unsure], canary) == "Inconclusive"
    assert verdict_of([passing], canary) == "Successful"


def test_hard_failure_even_without_an_error_rate_check() -> None:
    result = judge([check("latencyP99", max=100)], window(1000, 600, buckets=BUCKETS), None,
                   min_samples=100, bounds_us=BOUNDS)  # fmt: skip
    assert result.verdict is Verdict.FAILED
    assert result.hard_failure
    assert result.message == "hard failure: error rate 0.6 >= 0.5"


def test_hard_failure_threshold_is_inclusive_and_configurable() -> None:
    checks = [check("errorRate", max=0.9)]
    at = judge(checks, window(1000, 200), None, min_samples=100, bounds_us=BOUNDS,
               hard_failure_error_rate=0.2)  # fmt: skip
    assert at.hard_failure and at.verdict is Verdict.FAILED
    below = judge(checks, window(1000, 199), None, min_samples=100, bounds_us=BOUNDS,
                  hard_failure_error_rate=0.2)  # fmt: skip
    assert not below.hard_failure and below.verdict is Verdict.SUCCESSFUL


def test_hard_failure_message_keeps_the_failed_checks() -> None:
    result = judge([check("errorRate", max=0.01)], window(1000, 700), None, min_samples=100,
                   bounds_us=BOUNDS)  # fmt: skip
    assert result.message == "hard failure: error rate 0.7 >= 0.5; errorRate 0.7 above max 0.01"


# ----------------------------------------------------------------------------- A/B


@pytest.mark.parametrize(
    ("metric", "a", "b", "higher", "winner"),
    [
        ("errorRate", window(1000, 20), window(1000, 10), False, "B"),
        ("errorRate", window(1000, 10), window(1000, 20), False, "A"),
        ("errorRate", window(1000, 10), window(1000, 10), False, "A"),  # tie: incumbent
        ("successRate", window(1000, 20), window(1000, 10), True, "B"),
        ("successRate", window(1000, 10), window(1000, 20), True, "A"),
        ("latencyP50", window(buckets=BUCKETS), window(buckets=(90, 10, 0, 0, 0)), False, "B"),
    ],
)
def test_compare_variants(metric: str, a: Window, b: Window, higher: bool, winner: str) -> None:
    got, message = compare_variants(
        metric, a, b, higher_is_better=higher, min_samples=100, bounds_us=BOUNDS
    )
    assert got == winner
    assert metric in message


def test_compare_variants_messages() -> None:
    kw: dict[str, Any] = {"higher_is_better": False, "min_samples": 100, "bounds_us": BOUNDS}
    assert compare_variants("errorRate", window(1000, 20), window(1000, 10), **kw) == (
        "B",
        "B wins on errorRate: 0.01 vs A 0.02 (lower is better)",
    )
    assert compare_variants("errorRate", window(1000, 10), window(1000, 10), **kw) == (
        "A",
        "tie on errorRate at 0.01: keeping A",
    )


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (window(50), window(1000), "Inconclusive: A has 50 of 100 requests"),
        (window(1000), window(7), "Inconclusive: B has 7 of 100 requests"),
        (window(1000, buckets=()), window(1000, buckets=BUCKETS), "Inconclusive: no latencyP99"),
    ],
)
def test_compare_variants_inconclusive(a: Window, b: Window, message: str) -> None:
    got, said = compare_variants(
        "latencyP99", a, b, higher_is_better=False, min_samples=100, bounds_us=BOUNDS
    )
    assert got is None
    assert said.startswith(message)


def test_compare_variants_on_a_custom_metric_is_inconclusive() -> None:
    got, said = compare_variants(
        "gpuMemory", window(), window(), higher_is_better=False, min_samples=1, bounds_us=BOUNDS
    )
    assert got is None and "not a built-in metric" in said


# ----------------------------------------------------------------------------- properties

counts = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
bounded = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def windows(draw: st.DrawFn, max_requests: float = 1e9) -> Window:
    requests = draw(st.floats(min_value=0, max_value=max_requests, allow_nan=False))
    return Window(
        requests=requests,
        errors=draw(counts),
        cpu_seconds=draw(counts),
        latency_buckets=tuple(draw(st.lists(counts, max_size=6))),
        seconds=draw(bounded),
    )


@st.composite
def checks(draw: st.DrawFn) -> Any:
    metric = draw(st.sampled_from([
        "errorRate", "successRate", "requestRate", "latencyP99", "latencyP50", "modelAvailable",
        "gpuMemory",
    ]))  # fmt: skip
    bounds = {
        name: draw(st.one_of(st.none(), bounded.filter(lambda v: v > 0)))
        for name in ("max", "min", "max_ratio_to_stable", "min_ratio_to_stable")
    }
    if all(v is None for v in bounds.values()):
        bounds["max"] = 1.0
    if metric == "gpuMemory":
        bounds["query"] = "q"
    bounds["condition"] = draw(st.sampled_from([None, "value >= 0.0", "value < stable * 2.0"]))
    return check(metric, **bounds)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(checks(), max_size=5),
    st.integers(min_value=1, max_value=10_000),
    st.data(),
    st.booleans(),
    st.one_of(st.none(), st.tuples(st.one_of(st.none(), bounded), st.one_of(st.none(), bounded))),
)
def test_few_samples_never_successful_and_never_raises(
    checks_: list[Any],
    min_samples: int,
    data: st.DataObject,
    available: bool,
    gpu: tuple[float | None, float | None] | None,
) -> None:
    canary = data.draw(windows(max_requests=min_samples - 1e-9 if min_samples > 1 else 0.0))
    stable = data.draw(st.one_of(st.none(), windows()))
    custom = None if gpu is None else {"gpuMemory": gpu}
    result = judge(checks_, canary, stable, min_samples=min_samples, bounds_us=BOUNDS,
                   canary_available=available, custom=custom)  # fmt: skip
    assert result.verdict is not Verdict.SUCCESSFUL
    assert not result.hard_failure
    assert len(result.checks) == len(checks_)


@settings(max_examples=300, deadline=None)
@given(st.lists(checks(), max_size=5), windows(), st.one_of(st.none(), windows()), st.booleans())
def test_judge_never_raises(
    checks_: list[Any], canary: Window, stable: Window | None, available: bool
) -> None:
    result = judge(checks_, canary, stable, min_samples=100, bounds_us=BOUNDS,
                   canary_available=available, custom={"gpuMemory": (0.5, 0.5)})  # fmt: skip
    assert result.verdict in (
        Verdict.SUCCESSFUL, Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE
    )  # fmt: skip
    if result.verdict is Verdict.SUCCESSFUL:
        assert canary.requests >= 100
