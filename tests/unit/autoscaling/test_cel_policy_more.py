"""CEL policies: the rarer failures still come back as a PolicyCompileError or a
PolicyRuntimeError whose message names the problem, never as a crash."""

from __future__ import annotations

import itertools
from typing import Any

import cel
import pytest

from servectl.autoscaling import cel_policy
from servectl.testing import make_snapshot

SNAP = make_snapshot(rps=420.0, cpu_utilization=55.0, latency_ms={"p99": 180.0})
_unique = itertools.count()


def runtime_error(expr: str) -> str:
    policy = cel_policy.compile_expression(expr)
    with pytest.raises(cel_policy.PolicyRuntimeError) as info:
        policy.evaluate(SNAP, 4)
    return info.value.message


def fresh(expr: str) -> str:
    """``expr`` made unique, so the compile cache cannot answer for the library."""
    return f"{expr} + 0 * {next(_unique)}"


# ----------------------------------------------------------------------------- run time


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("[1, 2][5]", "list index out of range"),
        ("int([1])", "int() got an argument of a type it does not take"),
        ("size(1)", "size() got an argument of a type it does not take"),
        ("int('abc')", "int() failed: "),
        ("'abc'.matches('[') ? 1 : 0", "matches() failed: "),
        ("null + 1", "cannot apply + to null (null + int)"),
        ("dyn('a') + 1", "cannot apply + to string and int: CEL never converts between types"),
        ("{'a': 1}['b']", "no such key 'b' in a map"),
        ("[{'a': 1}].map(m, m.b).size()", "m.b does not exist"),
    ],
)
def test_runtime_errors_name_the_problem(expr: str, says: str) -> None:
    assert says in runtime_error(expr)


def test_struct_syntax_is_refused_naming_the_type() -> None:
    # CEL's message construction (`Foo{}`) is not supported: whether that is caught when
    # compiling or when running, the message must say which name was used.
    with pytest.raises(
        (cel_policy.PolicyCompileError, cel_policy.PolicyRuntimeError), match="Replicas"
    ):
        cel_policy.compile_expression("Replicas{}").evaluate(SNAP, 4)


def test_struct_syntax_is_a_compile_error() -> None:
    # `Foo{}` compiles in the library but fails every evaluation: refused up front.
    with pytest.raises(cel_policy.PolicyCompileError, match="line 1, column 1: `Replicas"):
        cel_policy.compile_expression("Replicas{}")
    # `in {map}` is not a message literal.
    assert cel_policy.compile_expression('"a" in {"a": 1} ? 2 : 3') is not None


def test_params_must_be_a_map() -> None:
    policy = cel_policy.compile_expression("recommended")
    with pytest.raises(cel_policy.PolicyRuntimeError, match="params must be a map of names"):
        policy.evaluate(SNAP, 4, [("targetMs", 150.0)])  # type: ignore[arg-type]


def test_lists_in_state_round_trip() -> None:
    policy = cel_policy.compile_expression(
        '{"replicas": recommended, "state": {"history": [recommended, 2.5, "x", null, [true]]}}'
    )
    result = policy.evaluate(SNAP, 4)
    assert result.state == {"history": [4, 2.5, "x", None, [True]]}


@pytest.mark.parametrize(
    ("state", "path"),
    [
        ('{"ratio": 1.0 / 0.0}', "state.ratio"),
        ('{"history": [1.0, 0.0 / 0.0]}', "state.history[1]"),
        ('{"nested": {"peaks": [[1.0, -1.0 / 0.0]]}}', "state.nested.peaks[0][1]"),
    ],
)
def test_state_with_a_non_finite_number_names_its_path(state: str, path: str) -> None:
    # JSON cannot hold inf or NaN, and the state is persisted as JSON in the status.
    message = runtime_error(f'{{"replicas": 1, "state": {state}}}')
    assert message == f"{path}: state values must be finite numbers"


def test_a_compiled_policy_shows_its_expression() -> None:
    policy = cel_policy.compile_expression("recommended + 1")
    assert repr(policy) == "CompiledPolicy('recommended + 1')"


# ----------------------------------------------------------------------------- library faults


class PanicException(BaseException):
    """Stands in for pyo3's PanicException: a Rust panic inside the CEL library."""


def raising(error: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    return fail


def test_a_library_panic_while_compiling_is_a_compile_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cel, "compile", raising(PanicException("index out of bounds")))
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression(fresh("recommended"))
    assert info.value.message == "does not compile: index out of bounds"
    assert info.value.line is None


def test_a_library_error_without_a_position_keeps_its_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cel, "compile", raising(ValueError("parser gave up")))
    with pytest.raises(cel_policy.PolicyCompileError) as info:
        cel_policy.compile_expression(fresh("recommended"))
    assert info.value.message == "does not compile: parser gave up"
    assert (info.value.line, info.value.column) == (None, None)
    assert str(info.value) == "does not compile: parser gave up"


def test_a_program_the_analysis_cannot_read_is_a_compile_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Unreadable:
        def references(self) -> dict[str, Any]:
            raise RuntimeError("no references")

    monkeypatch.setattr(cel, "compile", lambda expr: Unreadable())
    with pytest.raises(
        cel_policy.PolicyCompileError, match="could not analyse the expression: no references"
    ):
        cel_policy.compile_expression(fresh("recommended"))


def test_a_library_panic_while_evaluating_is_a_runtime_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A policy calling a helper runs through cel.Context.
    policy = cel_policy.compile_expression("int(math.ceil(double(recommended) * 1.5))")
    monkeypatch.setattr(cel, "Context", raising(PanicException("attempt to overflow")))
    with pytest.raises(cel_policy.PolicyRuntimeError) as info:
        policy.evaluate(SNAP, 4)
    assert info.value.message == ("evaluation failed inside the CEL library: attempt to overflow")


def test_an_interrupt_is_never_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = cel_policy.compile_expression("int(math.floor(double(recommended) / 2.0))")
    monkeypatch.setattr(cel, "Context", raising(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        policy.evaluate(SNAP, 4)
    monkeypatch.setattr(cel, "compile", raising(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        cel_policy.compile_expression(fresh("recommended"))
