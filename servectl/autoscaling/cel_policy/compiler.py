"""Compiling a policy expression: limits, the library's compile, the static checks; cached."""

from __future__ import annotations

import functools
import re
from typing import Final

import cel

from servectl.autoscaling import cel_diagnostics, cel_types
from servectl.autoscaling.cel_policy.analysis import analyse
from servectl.autoscaling.cel_policy.compiled import CompiledPolicy
from servectl.autoscaling.cel_policy.errors import PolicyCompileError, PolicyResultTypeError

#: Compile and evaluation costs grow with the expression; policies are a few lines.
MAX_EXPRESSION_CHARS: Final = 8192


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
    if not cel_diagnostics.code_only(expr, keep_strings=True).strip():
        raise PolicyCompileError(
            "empty expression; return replicas, e.g. `recommended` or "
            '`{"replicas": recommended, "reason": "WHY"}`'
        )
    try:
        program = cel.compile(expr)
    except Exception as error:
        diagnostic = cel_diagnostics.from_library(error)
        raise PolicyCompileError(
            diagnostic.message, diagnostic.line, diagnostic.column, detail=diagnostic.detail
        ) from None
    except BaseException as error:  # a Rust panic surfaces as pyo3's PanicException
        if not cel_diagnostics.is_panic(error):
            raise
        raise PolicyCompileError(f"does not compile: {error}") from None
    _reject_struct_literals(expr)
    try:
        analysis = analyse(expr, program)
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
        (
            m
            for m in _STRUCT_LITERAL.finditer(cel_diagnostics.code_only(expr))
            if m.group(1) not in _KEYWORDS
        ),
        None,
    )
    if match is None:
        return
    line, column = cel_diagnostics.position(expr, match.start())
    raise PolicyCompileError(
        f"`{match.group(1)}{{...}}` builds a message type, which policies cannot use; "
        'return a map instead, e.g. {"replicas": recommended, "reason": "WHY"}',
        line,
        column,
    )
