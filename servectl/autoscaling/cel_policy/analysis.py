"""The static scan of a compiled policy: which variables, fields and helpers it uses.

It also refuses what compiles but cannot work here: unknown variables, unknown
``math.*`` functions and nested comprehensions (their cost multiplies).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from servectl.autoscaling import cel_diagnostics
from servectl.autoscaling.cel_policy.activation import VARIABLES
from servectl.autoscaling.cel_policy.errors import PolicyCompileError
from servectl.autoscaling.cel_policy.helpers import HELPERS, HELPERS_BY_LAST_NAME, Helper

# Namespaces of dotted function names; CEL reports them as variables.
_FUNCTION_NAMESPACES: Final = frozenset({"math", "optional"})

# Names bound by comprehension macros (``list.map(x, ...)``); CEL reports them as
# variables too.
_MACRO_BINDING = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_MACRO_CALL = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(")
_MATH_CALL = re.compile(r"(?<![\w.])math\s*\.\s*([A-Za-z_]\w*)")
_BARE_MATH = re.compile(r"(?<![\w.])(ceil|floor|round|trunc|greatest|least|abs|sign|sqrt)\s*\(")


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
class Analysis:
    variables: tuple[str, ...]  # allowed top-level variables the expression names
    fields: Mapping[str, frozenset[str] | None]  # per variable: fields read, None = whole
    helpers: Mapping[str, Helper]  # helpers the expression may call


def analyse(source: str, program: Any) -> Analysis:
    code = cel_diagnostics.code_only(source)
    references = program.references()
    named = set(references.get("variables", ()))
    bound = set(_MACRO_BINDING.findall(code))
    unknown = sorted(
        named - set(VARIABLES) - _FUNCTION_NAMESPACES - cel_diagnostics.TYPE_NAMES - bound
    )
    if unknown:
        name = unknown[0]
        found = re.search(rf"(?<![\w.]){re.escape(name)}\b", code)
        line, column = cel_diagnostics.position(source, found.start()) if found else (None, None)
        raise PolicyCompileError(
            f"unknown variable {name!r}; a policy can use: {', '.join(VARIABLES)}", line, column
        )
    for match in _MATH_CALL.finditer(code):
        if f"math.{match.group(1)}" not in HELPERS:
            line, column = cel_diagnostics.position(source, match.start())
            available = ", ".join(sorted(n for n in HELPERS if n.startswith("math.")))
            raise PolicyCompileError(
                f"unknown function math.{match.group(1)}; available: {available}", line, column
            )
    for match in _BARE_MATH.finditer(code):
        line, column = cel_diagnostics.position(source, match.start())
        raise PolicyCompileError(
            f"unknown function {match.group(1)}(); write math.{match.group(1)}(...)", line, column
        )
    nested = _nested_comprehension(code)
    if nested is not None:
        line, column = cel_diagnostics.position(source, nested)
        raise PolicyCompileError(
            "comprehensions (all, exists, exists_one, map, filter) may not be nested: "
            "their cost multiplies",
            line,
            column,
        )
    functions = set(references.get("functions", ()))
    helpers = {
        name: HELPERS[name] for last in functions for name in HELPERS_BY_LAST_NAME.get(last, ())
    }
    variables = tuple(v for v in VARIABLES if v in named)
    fields = {v: _fields_read(code, v) for v in variables if v != "recommended"}
    return Analysis(variables, MappingProxyType(fields), MappingProxyType(helpers))
