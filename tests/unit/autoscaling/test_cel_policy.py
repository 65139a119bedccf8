"""Custom CEL policies: compile errors with positions, runtime errors by name, return shapes."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.autoscaling import cel_policy, snapshot

MONDAY_NOON_UTC = 1718020800.0  # 2024-06-10 12:00:00 UTC


def make_snapshot(**signals: Any) -> snapshot.Snapshot:
    values: dict[str, Any] = {
        "cpu_utilization": 55.0,
        "cpu_usage_cores": 2.2,
        "gpu_duty_cycle": 70.0,
        "rps": 420.0,
        "concurrency": 8.0,
        "error_rate": 0.001,
        "latency_ms": {"p50": 40.0, "p99": 180.0},
        "age_s": 2.0,
    }
    values.update(signals)
    return snapshot.Snapshot(
        time=MONDAY_NOON_UTC,
        replicas=snapshot.Replicas(current=5, ready=4, min=1, max=20),
        signals=snapshot.Signals(**values),
        rollout=snapshot.RolloutInfo(phase="Progressing", step=2, canary_weight=10),
    )


def evaluate(
    expr: str,
    snap: snapshot.Snapshot | None = None,
    recommended: int = 4,
    params: dict[str, float] | None = None,
    state: dict[str, Any] | None = None,
) -> cel_policy.PolicyResult:
    policy = cel_policy.compile_expression(expr)
    return policy.evaluate(snap or make_snapshot(), recommended, params or {}, state)


def runtime_error(expr: str, **kwargs: Any) -> str:
    with pytest.raises(cel_policy.PolicyRuntimeError) as info:
        evaluate(expr, **kwargs)
    return info.value.message


# ----------------------------------------------------------------------------- compile


@pytest.mark.parametrize(
    ("expr", "line", "column", "says"),
    [
        ("1 +", 1, 4, "ends too early"),
        ("signals.rps >", 1, 14, "ends too early"),
        ("recommended &&\n  replicas.current ==", 2, 22, "ends too early"),
        ("1 + + 2", 1, 5, "unexpected '+'"),
        ("'abc", 1, 1, "unterminated string"),
        ("recommended # 2", 1, 13, "unexpected character '#'"),
        ("recommended ? 1", 1, 16, "ends too early"),
        ("{'replicas': 1", 1, 15, "ends too early"),
        ("recommended +\n\n   * 2", 3, 4, "unexpected '*'"),
        ("(" * 99 + "1" + ")" * 99, 1, 97, "nests too deeply (more than 96 levels"),
    ],
)
def test_syntax_errors_carry_line_and_column(expr: str, line: int, column: int, says: str) -> None:
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression(expr)
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.line, error.column) == (line, column)
    assert says in error.message
    assert str(error) == f"line {line}, column {column}: {error.message}"
    assert "\n" not in error.message and "^" not in error.message  # no caret art
    assert "expecting {" not in error.message  # no list of parser tokens


@pytest.mark.parametrize("expr", ["", "   \n  ", "// only a comment"])
def test_empty_expression_is_rejected(expr: str) -> None:
    with pytest.raises(cel_policy.PolicyCompileError, match="empty expression") as info:
        cel_policy.compile_expression(expr)
    assert info.value.line is None


def test_unknown_variable_is_named_with_the_allowed_ones() -> None:
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression("recommended +\n  signal.rps")
    error = info.value
    assert "'signal'" in error.message
    for allowed in cel_policy.VARIABLES:
        assert allowed in error.message
    assert (error.line, error.column) == (2, 3)


def test_comprehension_variables_and_math_namespace_are_not_unknown() -> None:
    policy = cel_policy.compile_expression(
        "[1, 2, 3].map(x, x * 2).filter(y, y > 2).size() + int(math.ceil(0.5))"
    )
    assert evaluate(policy.expression).replicas == 3


def test_nested_comprehensions_are_rejected() -> None:
    # The library has no cost limit: three nested maps over 300-element literals run
    # for seconds. Unnested (chained) comprehensions stay linear and are allowed.
    with pytest.raises(cel_policy.PolicyCompileError, match="may not be nested") as info:
        cel_policy.compile_expression("[1].all(x, [2].exists(y, y > x)) ? 1 : 0")
    assert (info.value.line, info.value.column) == (1, 15)
    assert evaluate("[1, 2].map(x, x + 1).filter(y, y > 2).size()").replicas == 1


def test_overlong_expressions_are_rejected() -> None:
    with pytest.raises(cel_policy.PolicyCompileError, match="characters"):
        cel_policy.compile_expression("1 + " * cel_policy.MAX_EXPRESSION_CHARS + "1")


def test_unknown_math_function_is_a_compile_error() -> None:
    with pytest.raises(cel_policy.PolicyCompileError, match=r"math\.cell.*math\.ceil"):
        cel_policy.compile_expression("recommended > 1 ? math.cell(1.5) : 1")


def test_bare_ceil_points_to_math_ceil() -> None:
    with pytest.raises(cel_policy.PolicyCompileError, match=r"write math\.ceil") as info:
        cel_policy.compile_expression("ceil(signals.rps / 100.0)")
    assert (info.value.line, info.value.column) == (1, 1)


def test_strings_and_comments_do_not_fool_the_static_checks() -> None:
    policy = cel_policy.compile_expression(
        '// foo.bar and params.ignored are words here\n{"replicas": 1, "reason": "foo params.x"}'
    )
    assert policy.params_read == frozenset()
    assert evaluate(policy.expression).reason == "foo params.x"


def test_params_read_lists_the_params_the_expression_uses() -> None:
    policy = cel_policy.compile_expression("params.a > 1.0 ? params.b : params.a")
    assert policy.params_read == {"a", "b"}
    assert policy.variables == ("params",)


def test_compiled_policies_are_cached() -> None:
    expr = "recommended + 0"
    assert cel_policy.compile_expression(expr) is cel_policy.compile_expression(expr)


def test_a_non_string_expression_is_a_compile_error() -> None:
    with pytest.raises(cel_policy.PolicyCompileError):
        cel_policy.compile_expression(3)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- results


@pytest.mark.parametrize(
    ("expr", "replicas"),
    [
        ("7", 7),
        ("7u", 7),
        ("0", 0),
        ("2.0", 2),
        ("2.1", 3),  # doubles round up
        ("double(recommended) * 1.1", 5),  # 4.4 -> 5
        ("double(10) * 1.1", 11),  # 11.000000000000002 is 11, not 12
        ("signals.rps / 100.0", 5),  # 4.2 -> 5
        ('{"replicas": 3}', 3),
        ('{"replicas": 2.5}', 3),
    ],
)
def test_int_and_double_results(expr: str, replicas: int) -> None:
    result = evaluate(expr)
    assert result.replicas == replicas
    assert type(result.replicas) is int


def test_reason_is_returned_and_empty_reason_is_none() -> None:
    assert evaluate('{"replicas": 3, "reason": "COST_CAP"}').reason == "COST_CAP"
    assert evaluate('{"replicas": 3, "reason": ""}').reason is None
    assert evaluate("3").reason is None


def test_state_round_trips_between_evaluations() -> None:
    policy = cel_policy.compile_expression(
        '{"replicas": recommended,'
        ' "state": {"evaluations": has(state.evaluations) ? state.evaluations + 1 : 1,'
        '           "peak": has(state.peak)'
        "                   ? math.greatest(state.peak, recommended) : recommended}}"
    )
    snap = make_snapshot()
    state: dict[str, Any] | None = None
    for recommended in (3, 9, 4):
        result = policy.evaluate(snap, recommended, {}, state)
        state = result.state
    assert state == {"evaluations": 3, "peak": 9}


def test_state_is_kept_when_the_policy_returns_none() -> None:
    result = evaluate("recommended", state={"since": 12.5})
    assert result.state == {"since": 12.5}
    cleared = evaluate('{"replicas": 1, "state": {}}', state={"since": 12.5})
    assert cleared.state == {}


def test_params_are_doubles_whatever_the_document_wrote() -> None:
    # `150` and `150.0` in YAML must mean the same, or double arithmetic would fail.
    result = evaluate(
        "type(params.targetMs) == double && type(params.ratio) == double"
        " ? signals.latency_ms.p99 / params.targetMs * params.ratio : 0.0",
        params={"targetMs": 90, "ratio": 2.0},
    )
    assert result.replicas == 4  # 180 / 90 * 2


# ----------------------------------------------------------------------------- runtime errors


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        # dyn(...) hides the type from the static check (a result only known at run
        # time, say read from state): these test the run-time check behind it.
        ("dyn('abc')", "a string 'abc'"),
        ("dyn(true)", "a bool"),
        ("dyn([1, 2])", "a list"),
        ("dyn(null)", "returned null"),
        ('{"replicas": dyn(null)}', "replicas: null"),
        ('dyn({"reason": "X"})', "without replicas"),
        ('dyn({"replicas": 2, "reson": "X"})', "unknown key(s) reson"),
        ('{"replicas": dyn("2")}', "a string '2'"),
        ("-1", "-1 replicas"),
        ("-0.5", "must be ≥ 0"),
        ("1.0 / 0.0", "infinity"),
        ("0.0 / 0.0", "NaN"),
        ("dyn(b'abc')", "bytes"),
        ("dyn(duration('1s'))", "duration"),
        ('{"replicas": 1, "reason": dyn(7)}', "reason must be a string"),
        ('{"replicas": 1, "state": dyn(3)}', "state must be a map"),
        ('{"replicas": 1, "state": {"d": duration("1s")}}', "JSON values only"),
        ('{"replicas": 1, "state": {1: 2}}', "keys in state must be strings"),
    ],
)
def test_wrong_return_shapes_are_named(expr: str, says: str) -> None:
    message = runtime_error(expr)
    assert says in message


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("'abc'", "can only return a string"),
        ("'x' + 'y'", "can only return a string"),
        ("true", "can only return a bool"),
        ("recommended > 3", "can only return a bool"),
        ("[1, 2]", "can only return a list"),
        ("null", "can only return null"),
        ('{"reason": "X"}', "a map without replicas"),
        ('{"replicas": 2, "reson": "X"}', "a map with the key(s) 'reson'"),
        ('{"replicas": "2"}', "a map whose replicas can only be a string"),
        ('{"replicas": rollout.phase}', "a map whose replicas can only be a string"),
        ("b'abc'", "can only return bytes"),
        ("duration('1s')", "can only return a duration"),
        ('{"replicas": 1, "reason": 7}', "a map whose reason can only be an int"),
        ('{"replicas": 1, "state": 3}', "a map whose state can only be an int"),
        ('recommended > 3 ? "a" : "b"', "can only return a string"),
        ('recommended > 3 ? "a" : true', "can only return a bool or a string"),
        ("string(recommended)", "can only return a string"),
    ],
)
def test_results_that_can_never_be_replicas_do_not_compile(expr: str, says: str) -> None:
    with pytest.raises(cel_policy.PolicyResultTypeError) as info:
        cel_policy.compile_expression(expr)
    assert says in str(info.value)
    assert 'return an int (the replica count) or {"replicas": n' in str(info.value)


@pytest.mark.parametrize(
    "expr",
    [
        "recommended",
        'recommended > 3 ? "a" : 1',  # wrong on one branch only: found at run time
        '{"replicas": recommended > 3 ? 1 : "x"}',
        "state.x",
        '{"replicas": state.n, "reason": state.why}',
        "signals.rps / 0.0",
        "math.greatest(recommended, 2)",
        "dyn('abc')",
        "recommended + 1",
    ],
)
def test_results_that_may_be_replicas_compile(expr: str) -> None:
    cel_policy.compile_expression(expr)


def test_integer_division_by_zero() -> None:
    assert "division by zero" in runtime_error("recommended / (replicas.current - 5)")
    assert "division by zero" in runtime_error("recommended % 0")


@pytest.mark.parametrize(
    "expr",
    ["signals.rps * 2.0", "signals.rps > 100.0 ? 5 : 1", "int(signals.rps)", "-signals.rps"],
)
def test_missing_signal_access_names_the_signal_and_the_guard(expr: str) -> None:
    message = runtime_error(expr, snap=make_snapshot(rps=None))
    assert "signals.rps" in message
    assert "null" in message


def test_missing_signal_in_a_helper_names_the_signal() -> None:
    message = runtime_error(
        "math.ceil(signals.gpu_duty_cycle)", snap=make_snapshot(gpu_duty_cycle=None)
    )
    assert "math.ceil" in message and "signals.gpu_duty_cycle" in message


def test_missing_latency_percentile_names_has() -> None:
    message = runtime_error("signals.latency_ms.p95 > 100.0 ? 5 : 1")
    assert "signals.latency_ms.p95" in message and "has(signals.latency_ms.p95)" in message


def test_missing_param_and_state_are_named() -> None:
    assert "params.targetMs is not set" in runtime_error("signals.rps / params.targetMs")
    assert "state.last" in runtime_error("state.last + 1")


def test_unknown_field_lists_the_fields() -> None:
    message = runtime_error("replicas.desired")
    assert "replicas.desired does not exist" in message and "current" in message


def test_mixing_int_and_double_suggests_a_conversion() -> None:
    message = runtime_error("recommended * 1.5")
    assert "double(recommended)" in message
    message = runtime_error("replicas.current + signals.rps")
    assert "int" in message and "double" in message and "float" not in message


def test_unknown_function_at_run_time() -> None:
    assert "unknown function or variable 'frobnicate'" in runtime_error("frobnicate(1)")


def test_helper_misuse_is_reported_without_writing_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The library prints exceptions raised inside Python callbacks to stderr; the
    # helpers must never raise, so a pure package stays silent.
    message = runtime_error("math.ceil('a')")
    assert "math.ceil" in message and "usage" in message
    assert "math.greatest" in runtime_error("math.greatest([])")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_integer_overflow_is_a_runtime_error() -> None:
    assert "overflow" in runtime_error("9223372036854775807 + recommended")


def test_bad_inputs_from_the_caller_are_runtime_errors() -> None:
    policy = cel_policy.compile_expression("recommended")
    snap = make_snapshot()
    with pytest.raises(cel_policy.PolicyRuntimeError, match="recommended"):
        policy.evaluate(snap, True)
    with pytest.raises(cel_policy.PolicyRuntimeError, match="recommended"):
        policy.evaluate(snap, -1)
    with pytest.raises(cel_policy.PolicyRuntimeError, match=r"params\.x"):
        policy.evaluate(snap, 1, {"x": "fast"})  # type: ignore[dict-item]
    with pytest.raises(cel_policy.PolicyRuntimeError, match="state must be a map"):
        policy.evaluate(snap, 1, {}, [1])  # type: ignore[arg-type]


def test_oversized_state_and_reason_are_rejected() -> None:
    big = "x" * (cel_policy.MAX_STATE_BYTES + 1)
    assert "bytes as JSON" in runtime_error(f'{{"replicas": 1, "state": {{"blob": "{big}"}}}}')
    long_reason = "R" * (cel_policy.MAX_REASON_CHARS + 1)
    assert "characters" in runtime_error(f'{{"replicas": 1, "reason": "{long_reason}"}}')


_CEL_PIECES = st.sampled_from(
    [
        "recommended", "signals.rps", "signals.latency_ms.p99", "signals.latency_ms.p42",
        "replicas.current", "params.x", "state.y", "time.hour", "rollout.phase", "1", "0",
        "2.5", "0.0", "-1", "null", "true", "'s'", "[1]", "{'replicas': 1}", "math.ceil(",
        "math.greatest(", "orDefault(", ")", "(", "+", "-", "*", "/", "%", "==", "<", "?",
        ":", "&&", "||", "!", ",", ".", "has(", "size(", "int(", "double(", "{", "}", "[",
        "]", "'replicas'", "uint(", "string(", "duration('1s')",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_CEL_PIECES, min_size=1, max_size=12), st.booleans())
def test_only_policy_errors_ever_escape(pieces: list[str], rps_missing: bool) -> None:
    expr = " ".join(pieces)
    try:
        policy = cel_policy.compile_expression(expr)
    except cel_policy.PolicyCompileError:
        return
    snap = make_snapshot(rps=None) if rps_missing else make_snapshot()
    try:
        result = policy.evaluate(snap, 3, {"x": 1.0}, {"y": 2})
    except cel_policy.PolicyRuntimeError as error:
        assert error.message
        return
    assert isinstance(result.replicas, int) and result.replicas >= 0


# ----------------------------------------------------------------------------- variables


def test_activation_types_follow_cel_int_and_double() -> None:
    snap = snapshot.Snapshot(
        time=MONDAY_NOON_UTC,
        replicas=snapshot.Replicas(current=5, ready=4, min=1, max=20),
        # Python ints for signals must still reach CEL as doubles.
        signals=snapshot.Signals(cpu_utilization=55, rps=None, latency_ms={"p99": 120}),
    )
    act = cel_policy.snapshot_activation(snap, 4, {"targetMs": 150}, None)
    assert act["signals"]["cpu_utilization"] == 55.0
    assert type(act["signals"]["cpu_utilization"]) is float
    assert act["signals"]["rps"] is None
    assert type(act["signals"]["latency_ms"]["p99"]) is float
    assert act["replicas"] == {"current": 5, "ready": 4, "starting": 1, "min": 1, "max": 20}
    assert act["time"] == {
        "now": MONDAY_NOON_UTC, "hour": 12, "minute": 0, "weekday": 0, "day_of_month": 10,
    }  # fmt: skip
    assert type(act["time"]["now"]) is float
    assert act["rollout"] == {"phase": "Idle", "step": 0, "canary_weight": 0}
    assert act["recommended"] == 4
    assert act["params"] == {"targetMs": 150.0} and type(act["params"]["targetMs"]) is float
    assert act["state"] == {}
    assert set(act) == set(cel_policy.VARIABLES)


@pytest.mark.parametrize(
    "check",
    [
        "type(replicas.current) == int && type(replicas.starting) == int",
        "type(signals.rps) == double && type(signals.age_s) == double",
        "type(time.now) == double && type(time.hour) == int && type(time.weekday) == int",
        "type(rollout.phase) == string && type(rollout.canary_weight) == int",
        "type(recommended) == int",
        "replicas.starting == 1 && rollout.step == 2 && rollout.phase == 'Progressing'",
        "time.weekday == 0 && time.hour == 12 && time.day_of_month == 10 && time.minute == 0",
    ],
)
def test_variables_reach_cel_with_their_documented_types(check: str) -> None:
    assert evaluate(f"{check} ? 1 : 0").replicas == 1


def test_whole_maps_are_passed_when_the_expression_uses_them_whole() -> None:
    # Field pruning must not change what an expression can observe.
    assert evaluate("size(signals)").replicas == 8
    assert evaluate("size(replicas) + size(time) + size(rollout)").replicas == 13
    assert evaluate("signals.all(k, k != 'nope') ? 1 : 0").replicas == 1
    assert evaluate("'rps' in signals ? 1 : 0").replicas == 1
    assert evaluate("size(signals.latency_ms)").replicas == 2


# ----------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("expr", "replicas"),
    [
        ("int(math.ceil(2.1))", 3),
        ("int(math.floor(2.9))", 2),
        ("int(math.round(2.5))", 3),
        ("int(math.round(2.4))", 2),
        ("int(math.trunc(2.9))", 2),
        ("math.greatest(recommended, 7)", 7),
        ("math.greatest([1, 9, 3])", 9),
        ("math.least(recommended, 7)", 4),
        ("math.least([5, 2.5])", 3),
        ("max(1, 6, 2)", 6),
        ("min(8, 6)", 6),
        ("int(math.abs(-3.0))", 3),
        ("int(math.sqrt(16.0))", 4),
        ("math.sign(-2) == -1 ? 1 : 0", 1),
        ("math.isFinite(1.0 / 0.0) ? 0 : 1", 1),
    ],
)
def test_math_helpers(expr: str, replicas: int) -> None:
    assert evaluate(expr).replicas == replicas


def test_missing_signal_guards() -> None:
    missing = make_snapshot(rps=None)
    present = make_snapshot(rps=420.0)
    or_default = "signals.rps.orDefault(0.0) / 100.0"
    assert evaluate(or_default, snap=missing).replicas == 0
    assert evaluate(or_default, snap=present).replicas == 5
    assert evaluate("orDefault(signals.rps, 250.0) / 100.0", snap=missing).replicas == 3
    guard = "signals.rps != null ? signals.rps / 100.0 : double(recommended)"
    assert evaluate(guard, snap=missing).replicas == 4
    assert evaluate(guard, snap=present).replicas == 5
    # has() tests presence of the key, and the key is always there: documented trap.
    assert evaluate("has(signals.rps) ? 1 : 0", snap=missing).replicas == 1
    # Latency percentiles are absent when not measured, so has() is the test there.
    assert evaluate("has(signals.latency_ms.p99) ? 1 : 0").replicas == 1
    assert evaluate("has(signals.latency_ms.p95) ? 1 : 0").replicas == 0


def test_evaluation_is_well_under_a_millisecond() -> None:
    # A coarse guard against regressions (recompiling per call, converting everything):
    # typical is ~40 µs; the bound leaves room for slow, busy machines.
    policy = cel_policy.compile_expression(
        "!has(signals.latency_ms.p99) ? recommended"
        " : signals.latency_ms.p99 > params.targetMs"
        " ? math.greatest(recommended,"
        "     int(math.ceil(double(replicas.ready) * signals.latency_ms.p99 / params.targetMs)))"
        " : recommended"
    )
    snap = make_snapshot()
    samples = []
    for _ in range(300):
        start = time.perf_counter()
        policy.evaluate(snap, 4, {"targetMs": 150.0})
        samples.append(time.perf_counter() - start)
    assert statistics.median(samples) < 0.001
