"""One home for what the CEL library reports: compile diagnostics, names, panics.

Custom policies (``servectl.autoscaling.cel_policy``) and analysis-check conditions
(``servectl.api.conditions``) both compile CEL with the same library, so a syntax error
must read the same in both: :func:`from_library` turns the library's diagnostic text into
a :class:`Diagnostic` (a short message, a 1-based line and column), and
:func:`located` is how both write it (``"line L, column C: <message>"``). The static
scans of both use :func:`code_only` (string literals and comments blanked) and
:func:`position`.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: Type names (``type(x) == double``): the library reports them as variables.
TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)

#: Built-in functions. The library reports one called with argument types it has no
#: overload for (``int(null)``) as "Undefined variable or function".
BUILTIN_FUNCTIONS: Final = frozenset(
    {"int", "uint", "double", "string", "bytes", "bool", "size", "type", "dyn", "timestamp",
     "duration", "contains", "startsWith", "endsWith", "matches"}
)  # fmt: skip


@dataclass(frozen=True)
class Diagnostic:
    """A compile error as people should read it; ``detail`` is the library's full text."""

    message: str
    line: int | None = None
    column: int | None = None
    detail: str = ""


def located(message: str, line: int | None, column: int | None) -> str:
    """``"line L, column C: <message>"``, as precise as the position is known."""
    if line is None:
        return message
    if column is None:
        return f"line {line}: {message}"
    return f"line {line}, column {column}: {message}"


def is_panic(error: BaseException) -> bool:
    """Whether ``error`` is a Rust panic inside the library (pyo3's PanicException, a
    BaseException): reported like any other failure, where KeyboardInterrupt is not."""
    return type(error).__name__ == "PanicException"


def code_only(source: str, *, keep_strings: bool = False) -> str:
    """``source`` with string literals and ``//`` comments blanked, positions kept.

    The static scans (variables, fields, function names) must not be fooled by
    a reason string such as ``"signals.rps missing"``; ``keep_strings`` blanks
    comments only (an expression that is only a comment is empty).
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


def position(source: str, offset: int) -> tuple[int, int]:
    """The 1-based (line, column) of ``offset`` in ``source``."""
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


def from_library(error: Exception) -> Diagnostic:
    """What ``cel.compile`` raised, as one diagnostic: the first one meant for people,
    its first line without ANTLR's list of expected tokens, at its line and column.
    Without a position in the text: ``"does not compile: <text>"``."""
    text = str(error)
    diagnostics = [
        (int(m.group(1)), int(m.group(2)), m.group(3).strip()) for m in _DIAGNOSTIC.finditer(text)
    ]
    if not diagnostics:
        return Diagnostic(f"does not compile: {text}", detail=text)
    # The parser sometimes reports an internal "Incomplete ExprContext" before the
    # real syntax error it caused; prefer the first diagnostic meant for people.
    useful = [d for d in diagnostics if "Incomplete `ExprContext`" not in d[2]] or diagnostics
    line, column, message = useful[0]
    return Diagnostic(_short_syntax_message(message), line, column, detail=text)
