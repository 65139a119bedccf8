"""Custom CEL policies: compile an expression once, evaluate it on each snapshot.

A custom policy runs after servectl's engine has combined its signals into
``recommended`` and before the shared safety rails (stabilization, rate limits,
min/max), so a five-line policy is still safe. It sees the documented snapshot
(docs/snapshot.md) as CEL variables and returns replicas, or
``{"replicas": n, "reason": "CODE", "state": {...}}``. docs/policies.md is the
user-facing guide; this module is the reference for its rules.

Compile errors carry a line and column (shown at validation time). Every runtime
failure, including a wrong return type, is a :class:`PolicyRuntimeError` whose
message names the problem and the fix; the engine then falls back to
``recommended`` with reason ``POLICY_ERROR``.

Speed: programs are compiled once and cached by source text. Each evaluation hands
CEL only the variables, and the fields of them, that the expression names (found by
a static scan of the source), because converting Python values into CEL values
dominates the cost (about 2 µs per map entry), not the evaluation itself.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import cel
import cel.stdlib

from servectl.autoscaling import cel_types, snapshot

#: The top-level variables a policy may name, in documentation order.
VARIABLES: Final = ("signals", "replicas", "time", "rollout", "recommended", "params", "state")

#: Keys a policy's map result may carry.
RESULT_KEYS: Final = ("replicas", "reason", "state")

#: Compile and evaluation costs grow with the expression; policies are a few lines.
MAX_EXPRESSION_CHARS: Final = 8192
#: A returned ``state`` is persisted in the resource status: keep it small.
MAX_STATE_BYTES: Final = 4096
#: A reason is a short code (``COST_CAP``), shown in status, events and ``explain``.
MAX_REASON_CHARS: Final = 128

# A double within this distance of an integer counts as that integer before rounding
# up, so ``double(recommended) * 1.1`` for 10 replicas gives 11, not 12.
_ROUNDING_SLACK = 1e-9

_NO_PARAMS: Mapping[str, float] = MappingProxyType({})


class PolicyCompileError(ValueError):
    """The expression does not compile, or names something that does not exist.

    ``str()`` is ``"line L, column C: <message>"`` (1-based) when the position is known.
    ``detail`` keeps the library's full diagnostic for debugging.
    """

    def __init__(
        self, message: str, line: int | None = None, column: int | None = None, detail: str = ""
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.detail = detail or message
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        if self.column is None:
            return f"line {self.line}: {self.message}"
        return f"line {self.line}, column {self.column}: {self.message}"


class PolicyResultTypeError(PolicyCompileError):
    """The expression compiles but can never return replicas (``"hello"``,
    ``{"replicas": "three"}``): found statically by :mod:`cel_types`, conservatively.

    ``problem`` says what it returns; ``fix`` how to return replicas instead.
    """

    FIX: Final = 'return an int (the replica count) or {"replicas": n, "reason": "CODE"}'

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.fix = self.FIX
        super().__init__(f"{problem}, never a replica count; {self.FIX}")


class PolicyRuntimeError(RuntimeError):
    """Evaluation failed or returned something that is not a replica count."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class PolicyResult:
    """What a policy decided: whole replicas (≥ 0), its reason code, its state to persist.

    ``state`` is the state the policy returned, or the state it was given when it
    returned none (so a policy that sets state on one branch keeps it on the others).
    """

    replicas: int
    reason: str | None = None
    state: dict[str, Any] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------- helpers


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers_or_one_list(args: tuple[Any, ...]) -> bool:
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    return len(items) > 0 and all(_is_number(item) for item in items)


def _one_number(args: tuple[Any, ...]) -> bool:
    return len(args) == 1 and _is_number(args[0])


def _or_default(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value


class _HelperMisuse:
    """Returned by a helper given arguments it cannot take.

    CEL turns any value it cannot convert into an evaluation error that names the
    function, which :func:`_explain` rewrites into the helper's usage. Raising instead
    would also work, but the library prints every exception raised inside a Python
    callback to stderr, and a pure package must not write anywhere.
    """


_MISUSE: Final = _HelperMisuse()


@dataclass(frozen=True)
class _Helper:
    name: str
    usage: str
    impl: Callable[..., Any]
    accepts: Callable[[tuple[Any, ...]], bool]

    def __call__(self, *args: Any) -> Any:
        if not self.accepts(args):
            return _MISUSE
        try:
            return self.impl(*args)
        except Exception:
            return _MISUSE


def _helpers() -> dict[str, _Helper]:
    std = cel.stdlib
    table = [
        ("math.greatest", "math.greatest(a, b, ...) or math.greatest([a, b, ...]): numbers",
         std.math_greatest, _numbers_or_one_list),
        ("math.least", "math.least(a, b, ...) or math.least([a, b, ...]): numbers",
         std.math_least, _numbers_or_one_list),
        ("max", "max(a, b, ...): numbers (same as math.greatest)",
         std.math_greatest, _numbers_or_one_list),
        ("min", "min(a, b, ...): numbers (same as math.least)",
         std.math_least, _numbers_or_one_list),
        ("math.ceil", "math.ceil(x): one number; returns a double",
         std.math_ceil, _one_number),
        ("math.floor", "math.floor(x): one number; returns a double",
         std.math_floor, _one_number),
        ("math.round", "math.round(x): one number; halves away from zero; returns a double",
         std.math_round, _one_number),
        ("math.trunc", "math.trunc(x): one number; returns a double",
         std.math_trunc, _one_number),
        ("math.abs", "math.abs(x): one number", std.math_abs, _one_number),
        ("math.sign", "math.sign(x): one number", std.math_sign, _one_number),
        ("math.sqrt", "math.sqrt(x): one number; returns a double", std.math_sqrt, _one_number),
        ("math.isFinite", "math.isFinite(x): one number", std.math_is_finite, _one_number),
        ("orDefault", "orDefault(value, fallback) or value.orDefault(fallback)",
         _or_default, lambda args: len(args) == 2),
    ]  # fmt: skip
    return {name: _Helper(name, usage, impl, accepts) for name, usage, impl, accepts in table}


#: Functions registered for policies, by the name a policy calls them with.
HELPERS: Final[Mapping[str, _Helper]] = MappingProxyType(_helpers())

# Program.functions() reports ``math.ceil(x)`` as the function ``ceil`` (and ``math``
# as a variable): map the reported name to the helpers it may mean.
_HELPERS_BY_LAST_NAME: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        last: tuple(name for name in HELPERS if name.rsplit(".", 1)[-1] == last)
        for last in {name.rsplit(".", 1)[-1] for name in HELPERS}
    }
)

# Namespaces of dotted function names; CEL reports them as variables.
_FUNCTION_NAMESPACES: Final = frozenset({"math", "optional"})

# Type names, as in ``type(x) == double``; CEL reports them as variables.
_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)

# Names bound by comprehension macros (``list.map(x, ...)``); CEL reports them as
# variables too.
_MACRO_BINDING = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_MACRO_CALL = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(")
_MATH_CALL = re.compile(r"(?<![\w.])math\s*\.\s*([A-Za-z_]\w*)")
_BARE_MATH = re.compile(r"(?<![\w.])(ceil|floor|round|trunc|greatest|least|abs|sign|sqrt)\s*\(")

# ----------------------------------------------------------------------------- compile


def _code_only(source: str, *, keep_strings: bool = False) -> str:
    """``source`` with string literals and ``//`` comments blanked, positions kept.

    The static scans below (variables, fields, function names) must not be fooled by
    a reason string such as ``"signals.rps missing"``.
    """
    out = list(source)
    i, n = 0, len(source)

    def blank(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        char = source[i]
        if char == "/" and source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif char in "'\"":
            raw = i > 0 and source[i - 1] in "rR"
            quote = source[i : i + 3] if source[i : i + 3] in ("'''", '"""') else char
            j = i + len(quote)
            while j < n and not source.startswith(quote, j):
                j += 2 if (source[j] == "\\" and not raw) else 1
            end = min(j + len(quote), n)
            if not keep_strings:
                blank(i, end)
            i = end
        else:
            i += 1
    return "".join(out)


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return line, column


_DIAGNOSTIC = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")
_EXPECTING = re.compile(r"^(Syntax error: )?(mismatched|extraneous) input '(.*)' expecting .*$")
_INNER_MSG = re.compile(r'msg: "([^"]*)"')


def _short_syntax_message(text: str) -> str:
    """The first line of a diagnostic, without ANTLR's list of expected tokens."""
    inner = _INNER_MSG.search(text)
    if inner:
        depth = re.fullmatch(r"Recursion limit of (\d+) exceeded", inner.group(1))
        if depth:
            return (
                f"the expression nests too deeply (more than {depth.group(1)} levels of "
                "parentheses, brackets, braces or calls); flatten it"
            )
        return inner.group(1)
    match = _EXPECTING.match(text)
    if match:
        token = match.group(3)
        if token == "<EOF>":
            return "syntax error: the expression ends too early (an operand or ')' is missing)"
        return f"syntax error: unexpected {token!r}"
    text = text.removeprefix("Syntax error: ")
    unrecognised = re.match(r"token recognition error at: '(.*)'$", text)
    if unrecognised:
        token = unrecognised.group(1)
        if token[:1] in ("'", '"'):
            return "syntax error: unterminated string literal"
        return f"syntax error: unexpected character {token!r}"
    return text


def _compile_error_from_library(error: Exception) -> PolicyCompileError:
    text = str(error)
    diagnostics = [
        (int(m.group(1)), int(m.group(2)), m.group(3).strip()) for m in _DIAGNOSTIC.finditer(text)
    ]
    if not diagnostics:
        return PolicyCompileError(f"does not compile: {text}", detail=text)
    # The parser sometimes reports an internal "Incomplete ExprContext" before the
    # real syntax error it caused; prefer the first diagnostic meant for people.
    useful = [d for d in diagnostics if "Incomplete `ExprContext`" not in d[2]] or diagnostics
    line, column, message = useful[0]
    return PolicyCompileError(_short_syntax_message(message), line, column, detail=text)


def _nested_comprehension(code: str) -> int | None:
    """Offset of a comprehension inside another one's arguments, or None.

    CEL has no loops, but nested macros multiply: three nested ``map`` calls over
    300-element list literals (a 3 KB expression) run 27 million steps, about 17 s, and
    the library has no cost limit. Unnested, evaluation stays linear in the sizes of
    the lists, which are bounded by the expression and the state size limits.
    """
    starts = [m.start() for m in _MACRO_CALL.finditer(code)]
    for start in starts:
        depth, i = 0, code.index("(", start)
        for j in range(i, len(code)):
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
                if depth == 0:
                    inner = [other for other in starts if i < other < j]
                    if inner:
                        return inner[0]
                    break
    return None


def _fields_read(code: str, variable: str) -> frozenset[str] | None:
    """The fields of ``variable`` the code reads as ``variable.field``, or None when it
    also uses the variable whole (``signals == x``, ``size(params)``, ``state.all(...)``,
    ``signals['rps']``), in which case evaluation hands CEL the whole map."""
    fields: set[str] = set()
    pattern = re.compile(rf"(?<![\w.]){variable}\b(\s*\.\s*([A-Za-z_]\w*)(\s*\()?)?")
    for match in pattern.finditer(code):
        if match.group(2) is None or match.group(3) is not None:
            return None
        fields.add(match.group(2))
    return frozenset(fields) if fields else None


@dataclass(frozen=True)
class _Analysis:
    variables: tuple[str, ...]  # allowed top-level variables the expression names
    fields: Mapping[str, frozenset[str] | None]  # per variable: fields read, None = whole
    helpers: Mapping[str, _Helper]  # helpers the expression may call


def _analyse(source: str, program: Any) -> _Analysis:
    code = _code_only(source)
    references = program.references()
    named = set(references.get("variables", ()))
    bound = set(_MACRO_BINDING.findall(code))
    unknown = sorted(named - set(VARIABLES) - _FUNCTION_NAMESPACES - _TYPE_NAMES - bound)
    if unknown:
        name = unknown[0]
        found = re.search(rf"(?<![\w.]){re.escape(name)}\b", code)
        line, column = _position(source, found.start()) if found else (None, None)
        raise PolicyCompileError(
            f"unknown variable {name!r}; a policy can use: {', '.join(VARIABLES)}", line, column
        )
    for match in _MATH_CALL.finditer(code):
        if f"math.{match.group(1)}" not in HELPERS:
            line, column = _position(source, match.start())
            available = ", ".join(sorted(n for n in HELPERS if n.startswith("math.")))
            raise PolicyCompileError(
                f"unknown function math.{match.group(1)}; available: {available}", line, column
            )
    for match in _BARE_MATH.finditer(code):
        line, column = _position(source, match.start())
        raise PolicyCompileError(
            f"unknown function {match.group(1)}(); write math.{match.group(1)}(...)", line, column
        )
    nested = _nested_comprehension(code)
    if nested is not None:
        line, column = _position(source, nested)
        raise PolicyCompileError(
            "comprehensions (all, exists, exists_one, map, filter) may not be nested: "
            "their cost multiplies",
            line,
            column,
        )
    functions = set(references.get("functions", ()))
    helpers = {
        name: HELPERS[name] for last in functions for name in _HELPERS_BY_LAST_NAME.get(last, ())
    }
    variables = tuple(v for v in VARIABLES if v in named)
    fields = {v: _fields_read(code, v) for v in variables if v != "recommended"}
    return _Analysis(variables, MappingProxyType(fields), MappingProxyType(helpers))


def compile_expression(expr: str) -> CompiledPolicy:
    """Compile a policy expression; raises :class:`PolicyCompileError` with the position.

    Rejects empty expressions, syntax errors, unknown top-level variables, unknown
    ``math.*`` functions and (:class:`PolicyResultTypeError`) expressions whose result
    can only be something other than replicas. Compiled policies are cached by source
    text. Raises nothing else.
    """
    if not isinstance(expr, str):
        raise PolicyCompileError(f"expected the expression as a string, got {type(expr).__name__}")
    return _compile_cached(expr)


@functools.lru_cache(maxsize=512)
def _compile_cached(expr: str) -> CompiledPolicy:
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise PolicyCompileError(
            f"the expression is {len(expr)} characters; keep it under {MAX_EXPRESSION_CHARS}"
        )
    if not _code_only(expr, keep_strings=True).strip():
        raise PolicyCompileError(
            "empty expression; return replicas, e.g. `recommended` or "
            '`{"replicas": recommended, "reason": "WHY"}`'
        )
    try:
        program = cel.compile(expr)
    except Exception as error:
        raise _compile_error_from_library(error) from None
    except BaseException as error:  # a Rust panic surfaces as pyo3's PanicException
        if type(error).__name__ != "PanicException":
            raise
        raise PolicyCompileError(f"does not compile: {error}") from None
    _reject_struct_literals(expr)
    try:
        analysis = _analyse(expr, program)
    except PolicyCompileError:
        raise
    except Exception as error:
        raise PolicyCompileError(f"could not analyse the expression: {error}") from None
    problem = cel_types.result_problem(expr)
    if problem is not None:
        raise PolicyResultTypeError(problem)
    return CompiledPolicy(expr, program, analysis)


_KEYWORDS: Final = frozenset({"in", "true", "false", "null"})
_STRUCT_LITERAL: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\{")


def _reject_struct_literals(expr: str) -> None:
    """``Name{...}`` (a CEL message literal) compiles but can never run here: no message
    types are declared, so every evaluation would fail. Refuse it at compile time."""
    match = next(
        (m for m in _STRUCT_LITERAL.finditer(_code_only(expr)) if m.group(1) not in _KEYWORDS),
        None,
    )
    if match is None:
        return
    before = expr[: match.start()]
    line = before.count("\n") + 1
    column = match.start() - (before.rfind("\n") + 1) + 1
    raise PolicyCompileError(
        f"`{match.group(1)}{{...}}` builds a message type, which policies cannot use; "
        'return a map instead, e.g. {"replicas": recommended, "reason": "WHY"}',
        line,
        column,
    )


# ----------------------------------------------------------------------------- activation

_SIGNAL_FIELDS: Final = tuple(f.name for f in dataclasses.fields(snapshot.Signals))


def _number_or_null(value: float | None) -> float | None:
    return None if value is None else float(value)


def _signals(snap: snapshot.Snapshot) -> dict[str, Any]:
    sig = snap.signals
    return {
        "cpu_utilization": _number_or_null(sig.cpu_utilization),
        "cpu_usage_cores": _number_or_null(sig.cpu_usage_cores),
        "gpu_duty_cycle": _number_or_null(sig.gpu_duty_cycle),
        "rps": _number_or_null(sig.rps),
        "concurrency": _number_or_null(sig.concurrency),
        "error_rate": _number_or_null(sig.error_rate),
        "latency_ms": {str(k): float(v) for k, v in sig.latency_ms.items()},
        "age_s": float(sig.age_s),
    }


def _replicas(snap: snapshot.Snapshot) -> dict[str, Any]:
    rep = snap.replicas
    return {
        "current": int(rep.current),
        "ready": int(rep.ready),
        "starting": int(rep.starting),
        "min": int(rep.min),
        "max": int(rep.max),
    }


def _time(snap: snapshot.Snapshot) -> dict[str, Any]:
    fields = snapshot.time_fields(float(snap.time))
    fields["now"] = float(snap.time)
    return fields


def _rollout(snap: snapshot.Snapshot) -> dict[str, Any]:
    ro = snap.rollout
    return {"phase": str(ro.phase), "step": int(ro.step), "canary_weight": int(ro.canary_weight)}


_SNAPSHOT_PARTS: Final[Mapping[str, Callable[[snapshot.Snapshot], dict[str, Any]]]] = {
    "signals": _signals,
    "replicas": _replicas,
    "time": _time,
    "rollout": _rollout,
}


def _params(params: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(params, Mapping):
        raise PolicyRuntimeError(f"params must be a map of names to numbers, got {params!r}")
    out: dict[str, float] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not _is_number(value) or not math.isfinite(value):
            raise PolicyRuntimeError(f"params.{name}: expected a finite number, got {value!r}")
        out[name] = float(value)  # always double: `150` and `150.0` in YAML mean the same
    return out


def _state(state: Mapping[str, Any] | None) -> dict[str, Any]:
    if state is None:
        return {}
    if not isinstance(state, Mapping):
        raise PolicyRuntimeError(f"state must be a map, got {type(state).__name__}")
    return dict(state)


def _recommended(recommended: int) -> int:
    if isinstance(recommended, bool) or not isinstance(recommended, int) or recommended < 0:
        raise PolicyRuntimeError(f"recommended must be an int ≥ 0, got {recommended!r}")
    return recommended


def snapshot_activation(
    snap: snapshot.Snapshot,
    recommended: int,
    params: Mapping[str, float] = _NO_PARAMS,
    state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CEL variables a policy sees (docs/snapshot.md, "In CEL").

    CEL never converts between int and double, so the types are fixed: counts and
    calendar fields are ints; signals, ``time.now`` and every ``params`` value are
    doubles (a missing signal is null; a missing latency percentile is absent);
    ``state`` is passed through as the policy returned it.
    """
    return {
        "signals": _signals(snap),
        "replicas": _replicas(snap),
        "time": _time(snap),
        "rollout": _rollout(snap),
        "recommended": _recommended(recommended),
        "params": _params(params),
        "state": _state(state),
    }


# ----------------------------------------------------------------------------- results

_CEL_TYPE_NAMES: Final = {
    "float": "double",
    "str": "string",
    "NoneType": "null",
    "None": "null",
    "dict": "map",
    "list": "list",
    "bytes": "bytes",
    "bool": "bool",
    "int": "int",
    "datetime": "timestamp",
    "timedelta": "duration",
    "OptionalValue": "optional",
}


def _cel_type(value: object) -> str:
    name = type(value).__name__
    return _CEL_TYPE_NAMES.get(name, name)


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"a bool ({'true' if value else 'false'})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string {shown!r}"
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return f"a {_cel_type(value)} value"


_SHAPE_HINT = 'return an int or {"replicas": n, "reason": "CODE"}'


def _replica_count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyRuntimeError(f"{where} {_describe(value)}; {_SHAPE_HINT}")
    if isinstance(value, float):
        if math.isnan(value):
            raise PolicyRuntimeError(f"{where} NaN (0.0 / 0.0?); replicas must be a number ≥ 0")
        if math.isinf(value):
            raise PolicyRuntimeError(
                f"{where} {'-' if value < 0 else ''}infinity (a double divided by 0.0?); "
                "replicas must be finite"
            )
    if value < 0:
        raise PolicyRuntimeError(f"{where} {value:g} replicas; replicas must be ≥ 0")
    if isinstance(value, float):
        return max(0, math.ceil(value - _ROUNDING_SLACK))
    return value


def _check_state(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PolicyRuntimeError(f"state must be a map, got {_describe(value)}")

    def walk(item: object, path: str) -> None:
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise PolicyRuntimeError(f"{path}: map keys in state must be strings")
                walk(inner, f"{path}.{key}")
        elif isinstance(item, list):
            for i, inner in enumerate(item):
                walk(inner, f"{path}[{i}]")
        elif isinstance(item, float) and not math.isfinite(item):
            raise PolicyRuntimeError(f"{path}: state values must be finite numbers")
        elif item is not None and not isinstance(item, str | int | float | bool):
            raise PolicyRuntimeError(
                f"{path}: state holds JSON values only (null, bool, int, double, string, "
                f"list, map), got {_describe(item)}"
            )

    walk(value, "state")
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_STATE_BYTES:
        raise PolicyRuntimeError(
            f"state is {size} bytes as JSON; keep it under {MAX_STATE_BYTES} "
            "(it is persisted in the resource status every cycle)"
        )
    return value


def _result(value: object, previous_state: dict[str, Any]) -> PolicyResult:
    if not isinstance(value, dict):
        return PolicyResult(_replica_count(value, "policy returned"), None, previous_state)
    unknown = sorted(str(k) for k in value if k not in RESULT_KEYS)
    if unknown:
        raise PolicyRuntimeError(
            f"policy returned a map with unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(RESULT_KEYS)}"
        )
    if "replicas" not in value:
        raise PolicyRuntimeError(f"policy returned a map without replicas; {_SHAPE_HINT}")
    replicas = _replica_count(value["replicas"], "policy returned replicas:")
    reason = value.get("reason")
    if reason is not None:
        if not isinstance(reason, str):
            raise PolicyRuntimeError(f"reason must be a string, got {_describe(reason)}")
        if len(reason) > MAX_REASON_CHARS:
            raise PolicyRuntimeError(
                f"reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS} "
                "(a short code like COST_CAP)"
            )
    state = _check_state(value["state"]) if "state" in value else previous_state
    return PolicyResult(replicas, reason or None, state)


# ----------------------------------------------------------------------------- errors

_BUILTIN_FUNCTIONS: Final = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "size", "type", "dyn", "timestamp",
     "duration", "contains", "startsWith", "endsWith", "matches"}
)  # fmt: skip
_FUNCTION_ERROR = re.compile(r"Function '([^']+)' error")
_UNDEFINED = re.compile(r"Undefined variable or function: '([^']+)'")
_UNSUPPORTED = re.compile(r"Unsupported operation: (\w+) (\S+) (\w+)")
_PY_TYPE = re.compile(r"\b(float|str|NoneType|dict)\b")


def _cel_types_in(text: str) -> str:
    return _PY_TYPE.sub(lambda m: _CEL_TYPE_NAMES[m.group(1)], text)


class CompiledPolicy:
    """A compiled, analysed policy expression; immutable and safe to share."""

    __slots__ = ("_analysis", "_code", "_functions", "_program", "expression")

    def __init__(self, expression: str, program: Any, analysis: _Analysis) -> None:
        self.expression = expression
        self._program = program
        self._analysis = analysis
        self._code = _code_only(expression)
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
        params: Mapping[str, float] = _NO_PARAMS,
        state: Mapping[str, Any] | None = None,
    ) -> PolicyResult:
        """Run the policy; raises :class:`PolicyRuntimeError` and nothing else."""
        try:
            previous_state = _state(state)
            variables = self._activation(snap, recommended, params, previous_state)
            value = self._execute(variables)
            return _result(value, previous_state)
        except PolicyRuntimeError:
            raise
        except Exception as error:
            raise PolicyRuntimeError(self._explain(error, snap)) from None
        except BaseException as error:  # a Rust panic surfaces as pyo3's PanicException
            if type(error).__name__ != "PanicException":
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
        _recommended(recommended)
        checked_params = _params(params)
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
                value = _SNAPSHOT_PARTS[name](snap)
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
        if undefined and undefined.group(1) in _BUILTIN_FUNCTIONS:
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
                    "signals": _SIGNAL_FIELDS,
                    "replicas": ("current", "ready", "starting", "min", "max"),
                    "time": ("now", "hour", "minute", "weekday", "day_of_month"),
                    "rollout": ("phase", "step", "canary_weight"),
                }[root]
                return f"{path} does not exist; {root} has: {', '.join(fields)}"
            return f"{path} does not exist"
        return f"no such key {key!r} in a map"

    def _null_signals(self, snap: snapshot.Snapshot) -> list[str]:
        read = self._analysis.fields.get("signals")
        names = read if read is not None else _SIGNAL_FIELDS
        return [
            f"signals.{name}"
            for name in _SIGNAL_FIELDS
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
