"""``CompiledPolicy``: evaluate a compiled policy on a snapshot; explain what went wrong.

Every failure becomes a :class:`PolicyRuntimeError` whose message names the problem and
the fix, written for the policy's author rather than in the CEL library's words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import cel

from servectl.autoscaling import cel_diagnostics, snapshot
from servectl.autoscaling.cel_policy.activation import (
    NO_PARAMS,
    SIGNAL_FIELDS,
    SNAPSHOT_PARTS,
    cel_params,
    cel_recommended,
    cel_state,
)
from servectl.autoscaling.cel_policy.analysis import Analysis
from servectl.autoscaling.cel_policy.errors import PolicyRuntimeError
from servectl.autoscaling.cel_policy.helpers import HELPERS
from servectl.autoscaling.cel_policy.results import CEL_TYPE_NAMES, PolicyResult, to_result

_FUNCTION_ERROR = re.compile(r"Function '([^']+)' error")
_UNDEFINED = re.compile(r"Undefined variable or function: '([^']+)'")
_UNSUPPORTED = re.compile(r"Unsupported operation: (\w+) (\S+) (\w+)")
_PY_TYPE = re.compile(r"\b(float|str|NoneType|dict)\b")


def _cel_types_in(text: str) -> str:
    return _PY_TYPE.sub(lambda m: CEL_TYPE_NAMES[m.group(1)], text)


class CompiledPolicy:
    """A compiled, analysed policy expression; immutable and safe to share."""

    __slots__ = ("_analysis", "_code", "_functions", "_program", "expression")

    def __init__(self, expression: str, program: Any, analysis: Analysis) -> None:
        self.expression = expression
        self._program = program
        self._analysis = analysis
        self._code = cel_diagnostics.code_only(expression)
        self._functions: dict[str, Callable[..., Any]] = dict(analysis.helpers)

    def __repr__(self) -> str:
        return f"CompiledPolicy({self.expression!r})"

    @property
    def variables(self) -> tuple[str, ...]:
        """The top-level variables the expression names."""
        return self._analysis.variables

    @property
    def params_read(self) -> frozenset[str]:
        """The ``params.<name>`` the expression reads, so validation can check that a
        ScalingPolicy provides them (empty when it only uses ``params`` whole)."""
        return self._analysis.fields.get("params") or frozenset()

    def evaluate(
        self,
        snap: snapshot.Snapshot,
        recommended: int,
        params: Mapping[str, float] = NO_PARAMS,
        state: Mapping[str, Any] | None = None,
    ) -> PolicyResult:
        """Run the policy; raises :class:`PolicyRuntimeError` and nothing else."""
        try:
            previous_state = cel_state(state)
            variables = self._activation(snap, recommended, params, previous_state)
            value = self._execute(variables)
            return to_result(value, previous_state)
        except PolicyRuntimeError:
            raise
        except Exception as error:
            raise PolicyRuntimeError(self._explain(error, snap)) from None
        except BaseException as error:  # a Rust panic surfaces as pyo3's PanicException
            if not cel_diagnostics.is_panic(error):
                raise
            raise PolicyRuntimeError(f"evaluation failed inside the CEL library: {error}") from None

    def _activation(
        self,
        snap: snapshot.Snapshot,
        recommended: int,
        params: Mapping[str, float],
        state: dict[str, Any],
    ) -> dict[str, Any]:
        # Caller mistakes are reported even when the expression does not use the value.
        cel_recommended(recommended)
        checked_params = cel_params(params)
        variables: dict[str, Any] = {}
        for name in self._analysis.variables:
            value: Any
            if name == "recommended":
                value = recommended
            elif name == "params":
                value = checked_params
            elif name == "state":
                value = state
            else:
                value = SNAPSHOT_PARTS[name](snap)
            fields = self._analysis.fields.get(name)
            if fields is not None and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k in fields}
            variables[name] = value
        return variables

    def _execute(self, variables: dict[str, Any]) -> Any:
        if self._functions:
            context = cel.Context(variables=variables, functions=self._functions)
            return self._program.execute(context)
        return self._program.execute(variables)

    # -- turning library errors into messages a policy author can act on

    def _explain(self, error: Exception, snap: snapshot.Snapshot) -> str:
        text = str(error).strip()
        if isinstance(error, ZeroDivisionError):
            return "division by zero (int / 0 or int % 0): guard the divisor, `x != 0 ? ... : ...`"
        if isinstance(error, KeyError):
            key = error.args[0] if error.args else text
            return self._missing_key(str(key))
        if isinstance(error, OverflowError):
            return f"integer overflow: {text}"
        if isinstance(error, IndexError):
            return f"list index out of range: {text}"
        function = _FUNCTION_ERROR.search(text)
        if function and function.group(1) in HELPERS:
            nulls = self._null_signals(snap)
            hint = f" ({', '.join(nulls)} null: signal missing)" if nulls else ""
            usage = HELPERS[function.group(1)].usage
            return f"{function.group(1)} got arguments it does not take{hint}; usage: {usage}"
        undefined = _UNDEFINED.search(text)
        if undefined and undefined.group(1) in cel_diagnostics.BUILTIN_FUNCTIONS:
            # The library reports a built-in called with types it has no overload
            # for (``int(null)``) as an undefined function.
            nulls = self._null_signals(snap)
            if nulls:
                return self._null_message(nulls)
            return f"{undefined.group(1)}() got an argument of a type it does not take"
        if undefined:
            return f"unknown function or variable {undefined.group(1)!r}; helpers: " + ", ".join(
                sorted(HELPERS)
            )
        if isinstance(error, TypeError):
            return self._type_error(text, snap)
        if function:
            return f"{function.group(1)}() failed: {text}"
        return f"{_cel_types_in(type(error).__name__)}: {text}"

    def _missing_key(self, key: str) -> str:
        paths = re.finditer(rf"(?<![\w.])((?:[A-Za-z_]\w*\s*\.\s*)+){re.escape(key)}\b", self._code)
        for match in paths:
            path = re.sub(r"\s+", "", match.group(1)) + key
            root = path.split(".", 1)[0]
            if root == "params":
                return f"{path} is not set: add it to the policy's params, or guard: has({path})"
            if root == "state":
                return (
                    f"{path} is not set (state is empty until the policy returns one): "
                    f"guard with has({path})"
                )
            if path.startswith("signals.latency_ms."):
                return (
                    f"{path} is missing (no latency measured at that percentile): "
                    f"guard with has({path})"
                )
            if root in ("signals", "replicas", "time", "rollout") and path.count(".") == 1:
                fields = {
                    "signals": SIGNAL_FIELDS,
                    "replicas": ("current", "ready", "starting", "min", "max"),
                    "time": ("now", "hour", "minute", "weekday", "day_of_month"),
                    "rollout": ("phase", "step", "canary_weight"),
                }[root]
                return f"{path} does not exist; {root} has: {', '.join(fields)}"
            return f"{path} does not exist"
        return f"no such key {key!r} in a map"

    def _null_signals(self, snap: snapshot.Snapshot) -> list[str]:
        read = self._analysis.fields.get("signals")
        names = read if read is not None else SIGNAL_FIELDS
        return [
            f"signals.{name}"
            for name in SIGNAL_FIELDS
            if name in names
            and name not in ("latency_ms", "age_s")
            and getattr(snap.signals, name) is None
            and re.search(rf"(?<![\w.])signals\s*\.\s*{name}\b", self._code)
        ]

    @staticmethod
    def _null_message(nulls: list[str]) -> str:
        first = nulls[0]
        return (
            f"{', '.join(nulls)} {'is' if len(nulls) == 1 else 'are'} null "
            f"(signal missing): guard with `{first} != null ? ... : ...` "
            f"or use `{first}.orDefault(0.0)`"
        )

    def _type_error(self, text: str, snap: snapshot.Snapshot) -> str:
        unsupported = _UNSUPPORTED.search(text)
        operands = (
            (_cel_types_in(unsupported.group(1)), unsupported.group(2),
             _cel_types_in(unsupported.group(3)))
            if unsupported
            else None
        )  # fmt: skip
        if operands is None or "null" in (operands[0], operands[2]):
            nulls = self._null_signals(snap)
            if nulls:
                return self._null_message(nulls)
        if operands is not None:
            left, operator, right = operands
            if "null" in (left, right):
                return (
                    f"cannot apply {operator} to null ({left} {operator} {right}): "
                    "a value is missing; test it with `x != null` first"
                )
            return (
                f"cannot apply {operator} to {left} and {right}: CEL never converts between "
                "types; convert one side, e.g. double(recommended) * 1.5 or int(x)"
            )
        return (
            "no such overload: a function or operator got argument types it does not take. "
            "CEL never converts between int and double (write double(recommended) * 1.5, "
            "int(x)), and a missing signal is null"
        )
