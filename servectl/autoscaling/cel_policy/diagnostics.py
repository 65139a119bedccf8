"""Reading CEL source and the CEL library's compile diagnostics.

``code_only`` blanks string literals and comments so static scans are not fooled by a
reason string; ``compile_error_from_library`` turns the library's diagnostic text into a
message with a line and column.
"""

from __future__ import annotations

import re

from servectl.autoscaling.cel_policy.errors import PolicyCompileError


def code_only(source: str, *, keep_strings: bool = False) -> str:
    """``source`` with string literals and ``//`` comments blanked, positions kept.

    The static scans (variables, fields, function names) must not be fooled by
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


def position(source: str, offset: int) -> tuple[int, int]:
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


def compile_error_from_library(error: Exception) -> PolicyCompileError:
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
