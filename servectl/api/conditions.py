"""Analysis-check helpers: CEL conditions over a metric value, and query templates.

An analysis check (``spec.rollout.analysis.checks[]``) may carry a ``condition``: a CEL
expression over two doubles that returns true when the check passes::

    value < 0.01 || value < stable * 1.2

- ``value``: the metric's value for the revision being judged (the canary, the preview,
  variant B);
- ``stable``: the same metric for the stable revision. It is bound only when known; a
  condition that needs it when it is not known raises :class:`StableUnavailableError`,
  which the analysis reports as Inconclusive. CEL's ``||`` and ``&&`` absorb an unknown
  operand when the other side decides (``value < 0.01 || value < stable * 1.2`` passes
  on ``value`` alone when it is below 0.01).

CEL never converts between int and double in arithmetic: ``value * 2`` is an error,
``value * 2.0`` is not (comparisons such as ``value < 1`` do mix them).

A check may also define its metric by a PromQL ``query``, a template whose placeholders
:func:`render_query` fills in (``{{revision}}``, ``{{service}}``, ``{{namespace}}``).

Pure: no I/O, no clock. Compiling is cached by source text.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import cel

# Compile diagnostics, the literal blanker and what the library reports as names are
# shared with custom policies, so a syntax error reads the same in a policy and in a
# condition.
from servectl.autoscaling import cel_diagnostics

#: The variables a condition may read, in documentation order.
VARIABLES: Final = ("value", "stable")

#: Placeholders a check's ``query`` may use, filled in per revision by render_query.
QUERY_PLACEHOLDERS: Final = ("revision", "service", "namespace")

#: A condition compares one or two numbers; it needs no more than this.
MAX_CONDITION_CHARS: Final = 1024

_EXAMPLE: Final = "value < 0.01 || value < stable * 1.2"

_COMPREHENSION: Final = re.compile(r"\.\s*(all|exists|exists_one|map|filter)\s*\(")
_PLACEHOLDER: Final = re.compile(r"\{\{(.*?)\}\}")
_PY_TYPES: Final = {"float": "double", "str": "string", "NoneType": "null", "dict": "map"}
_PY_TYPE_WORD: Final = re.compile(r"\b(float|str|NoneType|dict)\b")


class ConditionError(ValueError):
    """Base of the errors below."""


class ConditionCompileError(ConditionError):
    """The condition is not valid CEL, or cannot work on ``value`` and ``stable``.

    ``line``/``column`` are 1-based when the position is known; ``str()`` is
    ``"line L, column C: <message>"`` then.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        return cel_diagnostics.located(self.message, self.line, self.column)


class ConditionEvalError(ConditionError):
    """Evaluation failed, or returned something other than a bool."""


class StableUnavailableError(ConditionEvalError):
    """The condition needs ``stable`` and no stable value was given: Inconclusive."""


@dataclass(frozen=True)
class CompiledCondition:
    """A compiled condition; immutable and safe to share."""

    text: str
    reads_stable: bool  # whether the expression names ``stable`` at all
    program: Any = field(repr=False, compare=False)


# ----------------------------------------------------------------------------- compile


def compile_condition(text: str) -> CompiledCondition:
    """Compile a check's condition; raises :class:`ConditionCompileError`.

    Beyond CEL syntax, it refuses names other than ``value`` and ``stable``,
    comprehensions (``.all``, ``.map``, ...: a condition compares numbers), and an
    expression that does not type-check or return a bool on sample values
    (``value = stable = 1.0``).
    """
    if not isinstance(text, str):
        raise ConditionCompileError(
            f"expected the condition as a string, got {type(text).__name__}"
        )
    return _compile_cached(text)


@functools.lru_cache(maxsize=256)
def _compile_cached(text: str) -> CompiledCondition:
    if len(text) > MAX_CONDITION_CHARS:
        raise ConditionCompileError(
            f"the condition is {len(text)} characters; keep it under {MAX_CONDITION_CHARS}"
        )
    code = cel_diagnostics.code_only(text)
    if not cel_diagnostics.code_only(text, keep_strings=True).strip():
        raise ConditionCompileError(f"empty condition; write e.g. {_EXAMPLE}")
    try:
        program = cel.compile(text)
    except Exception as error:
        diagnostic = cel_diagnostics.from_library(error)
        raise ConditionCompileError(
            diagnostic.message, diagnostic.line, diagnostic.column
        ) from None
    except BaseException as error:  # a Rust panic surfaces as pyo3's PanicException
        if not cel_diagnostics.is_panic(error):
            raise
        raise ConditionCompileError(f"does not compile: {error}") from None
    comprehension = _COMPREHENSION.search(code)
    if comprehension is not None:
        line, column = cel_diagnostics.position(text, comprehension.start() + 1)
        raise ConditionCompileError(
            f"{comprehension.group(1)}() is not available in a condition; compare value "
            f"(and stable) directly, e.g. {_EXAMPLE}",
            line,
            column,
        )
    named = set(program.references().get("variables", ()))
    unknown = sorted(named - set(VARIABLES) - cel_diagnostics.TYPE_NAMES)
    if unknown:
        name = unknown[0]
        found = re.search(rf"(?<![\w.]){re.escape(name)}\b", code)
        where: tuple[int | None, int | None] = (
            cel_diagnostics.position(text, found.start()) if found else (None, None)
        )
        raise ConditionCompileError(
            f"unknown name {name!r}; a condition reads value and stable (doubles)", *where
        )
    compiled = CompiledCondition(text=text, reads_stable="stable" in named, program=program)
    _trial(compiled)
    return compiled


def _trial(compiled: CompiledCondition) -> None:
    """Evaluate once on sample values, so type errors are found before a rollout runs.

    Only failures that do not depend on the values count (wrong operand types, unknown
    functions, a non-bool result); a division by an integer zero, say, may not happen
    on real values.
    """
    try:
        result = compiled.program.execute({"value": 1.0, "stable": 1.0})
    except (TypeError, RuntimeError) as error:
        raise ConditionCompileError(_explain(error)) from None
    except Exception:
        return
    except BaseException as error:  # PanicException
        if not cel_diagnostics.is_panic(error):
            raise
        return
    if not isinstance(result, bool):
        raise ConditionCompileError(_not_bool(result))


# ----------------------------------------------------------------------------- evaluate


def evaluate_condition(
    condition: CompiledCondition | str, value: float, stable: float | None = None
) -> bool:
    """Whether the check passes: the condition's result for these values.

    ``stable`` is None (or NaN) when the stable revision's value is not known; a
    condition that then needs it raises :class:`StableUnavailableError` (report
    Inconclusive). A NaN ``value`` (no data) raises :class:`ConditionEvalError`, as does
    any evaluation failure or a result that is not a bool. A string is compiled first
    (:class:`ConditionCompileError`).
    """
    compiled = (
        condition if isinstance(condition, CompiledCondition) else compile_condition(condition)
    )
    variables: dict[str, float] = {"value": _number("value", value)}
    if math.isnan(variables["value"]):
        raise ConditionEvalError(
            "value is NaN (no data for the revision in the window?); the check cannot be judged"
        )
    # An unknown stable stays unbound, so `||` and `&&` may still decide without it.
    if stable is not None and not math.isnan(_number("stable", stable)):
        variables["stable"] = float(stable)
    try:
        result = compiled.program.execute(variables)
    except Exception as error:
        if "stable" not in variables and "'stable'" in str(error):
            raise StableUnavailableError(
                f"the condition {compiled.text!r} needs stable, and the stable revision's "
                "value is not available; the check is Inconclusive"
            ) from None
        raise ConditionEvalError(f"condition {compiled.text!r}: {_explain(error)}") from None
    except BaseException as error:  # PanicException
        if not cel_diagnostics.is_panic(error):
            raise
        raise ConditionEvalError(f"condition {compiled.text!r}: CEL failed: {error}") from None
    if not isinstance(result, bool):
        raise ConditionEvalError(f"condition {compiled.text!r}: {_not_bool(result)}")
    return result


def _number(name: str, given: object) -> float:
    if isinstance(given, bool) or not isinstance(given, int | float):
        raise TypeError(f"{name} must be a number, got {type(given).__name__}")
    return float(given)


# ----------------------------------------------------------------------------- messages


def _cel_type(value: object) -> str:
    if isinstance(value, list):
        return "list"
    name = type(value).__name__
    return _PY_TYPES.get(name, name)


def _not_bool(result: object) -> str:
    shown = "null" if result is None else f"a {_cel_type(result)} ({result!r})"
    return f"the condition returns {shown}, not a bool; compare instead, e.g. {_EXAMPLE}"


def _explain(error: BaseException) -> str:
    text = str(error).strip()
    first = _PY_TYPE_WORD.sub(lambda m: _PY_TYPES[m.group(1)], text.split(". ", 1)[0])
    if isinstance(error, ZeroDivisionError):
        return "division by zero (an int divided by 0); divide doubles or guard the divisor"
    if "Unsupported operation" in first or "No such overload" in first:
        return (
            f"type error: {first}; CEL does not mix int and double in arithmetic "
            "(write 2.0, not 2) and value and stable are doubles"
        )
    if isinstance(error, KeyError):
        return f"no key {text} in the map"
    if "Found struct" in text:
        return "`Name{...}` builds a message type, which a condition cannot use"
    undefined = re.search(r"Undefined variable or function: '([^']+)'", text)
    if undefined and undefined.group(1) in cel_diagnostics.BUILTIN_FUNCTIONS:
        # The library reports a built-in given an argument of the wrong type this way.
        return f"{undefined.group(1)}() got an argument of a type it does not take"
    if undefined:
        return f"unknown function {undefined.group(1)!r}; use CEL's built-in functions"
    return first


# ----------------------------------------------------------------------------- queries


def placeholders(query: str) -> list[str]:
    """The ``{{...}}`` placeholders a query uses, as written (``"revision"``, ...)."""
    return _PLACEHOLDER.findall(query)


def render_query(query: str, values: Mapping[str, str]) -> str:
    """The query with each ``{{name}}`` replaced by ``values[name]``.

    ``values`` holds ``revision`` (the revision's name, e.g. ``resnet-v4``), ``service``
    and ``namespace``. Raises ValueError for a placeholder it does not hold.
    """

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            known = ", ".join(f"{{{{{key}}}}}" for key in values)
            raise ValueError(f"query placeholder {{{{{name}}}}} has no value (given: {known})")
        return values[name]

    return _PLACEHOLDER.sub(fill, query)
