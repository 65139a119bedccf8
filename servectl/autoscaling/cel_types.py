"""What a policy expression can return, found statically: refuse what is certainly wrong.

The CEL library (``common-expression-language``, a Rust interpreter) parses and runs
expressions but has no type checker: ``cel.compile`` accepts ``"hello"`` as a policy,
and only evaluation finds that a string is not a replica count. This module parses the
expression again (a small CEL parser: literals, operators, ternaries, calls, member
access, list and map literals) and infers the set of types the result may have.

It is conservative: a variable of unknown type (``state.x``, ``signals.latency_ms[k]``),
an index, arithmetic, an unknown function, anything it does not parse, all give
"unknown", and unknown is never refused. It refuses a result only when *every* type it
can have is wrong:

- a literal string, bool, null, bytes or list (``"hello"``, ``true``, ``[1]``), or an
  expression that can only be one (``'x' + 'y'``, ``a < b``, ``size(x) > 0 && ...``,
  ``string(recommended)``, ``rollout.phase``), ternaries whose branches all are;
- a map literal with string-literal keys that is certainly not ``{replicas, reason,
  state}``: an unknown key, no ``replicas``, ``replicas`` that can only be a string,
  bool, null, list or map, ``reason`` that can only be a non-string, ``state`` that can
  only be a non-map.

The rules of the types follow CEL (and the library's behaviour, checked by tests):
``&&``, ``||``, ``!``, comparisons and ``in`` give a bool or an error; ``+`` with a
string operand gives a string or an error (CEL never converts), likewise lists and
bytes; ``int()``, ``double()``, ``string()``, ``size()`` have fixed result types.

Pure and total: :func:`result_problem` returns a message or None and never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: A type: the set of kinds a value may have (``"int"``, ``"string"``, ``"map"``...),
#: with, for a map literal whose keys are all string literals, the types of its fields;
#: None is unknown (anything).
Kinds = frozenset["Kind"] | None

_NUMBERS: Final = frozenset({"int", "uint", "double"})


@dataclass(frozen=True)
class Kind:
    name: str
    # For a map literal with string-literal keys: (key, type) pairs; else None.
    fields: tuple[tuple[str, Kinds], ...] | None = None


def _of(*names: str) -> frozenset[Kind]:
    return frozenset(Kind(name) for name in names)


BOOL: Final = _of("bool")
STRING: Final = _of("string")
LIST: Final = _of("list")
MAP: Final = _of("map")
INT: Final = _of("int")
DOUBLE: Final = _of("double")

#: The snapshot's fields in CEL (docs/snapshot.md, "In CEL") that have a fixed type.
_FIELDS: Final[Mapping[tuple[str, str], frozenset[Kind]]] = {
    ("rollout", "phase"): STRING,
    ("rollout", "step"): INT,
    ("rollout", "canary_weight"): INT,
    **{("replicas", name): INT for name in ("current", "ready", "starting", "min", "max")},
    ("time", "now"): DOUBLE,
    **{("time", name): INT for name in ("hour", "minute", "weekday", "day_of_month")},
    ("signals", "latency_ms"): MAP,
    ("signals", "age_s"): DOUBLE,
}
_VARIABLES: Final[Mapping[str, frozenset[Kind]]] = {
    "recommended": INT,
    "signals": MAP,
    "replicas": MAP,
    "time": MAP,
    "rollout": MAP,
    "params": MAP,
    "state": MAP,
}
#: Functions with a fixed result type, called as ``f(x)``.
_GLOBAL_CALLS: Final[Mapping[str, frozenset[Kind]]] = {
    "int": INT,
    "uint": _of("uint"),
    "double": DOUBLE,
    "string": STRING,
    "bytes": _of("bytes"),
    "bool": BOOL,
    "size": INT,
    "type": _of("type"),
    "has": BOOL,
    "matches": BOOL,
    "timestamp": _of("timestamp"),
    "duration": _of("duration"),
    "math.ceil": DOUBLE,
    "math.floor": DOUBLE,
    "math.round": DOUBLE,
    "math.trunc": DOUBLE,
    "math.sqrt": DOUBLE,
    "math.isFinite": BOOL,
}
#: Methods with a fixed result type, called as ``x.f(...)``.
_METHODS: Final[Mapping[str, frozenset[Kind]]] = {
    "contains": BOOL,
    "startsWith": BOOL,
    "endsWith": BOOL,
    "matches": BOOL,
    "all": BOOL,
    "exists": BOOL,
    "exists_one": BOOL,
    "map": LIST,
    "filter": LIST,
    "size": INT,
}

_RESULT_KEYS: Final = ("replicas", "reason", "state")


class _GiveUp(Exception):
    """Something this parser does not know: the result is unknown."""


# ----------------------------------------------------------------------------- tokens

_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:'''|\"\"\"|'|"))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # "string", "number", "ident", "op", "end"
    text: str
    value: str | None = None  # a string literal's text, when it has no escapes


def _string_literal(source: str, start: int, opener: str) -> tuple[_Token, int]:
    prefix = opener.rstrip("'\"")
    quote = opener[len(prefix) :]
    raw = "r" in prefix.lower()
    kind = "bytes" if "b" in prefix.lower() else "string"
    i = start + len(opener)
    escaped = False
    while i < len(source):
        if source.startswith(quote, i):
            body = source[start + len(opener) : i]
            value = body if (raw or not escaped) and kind == "string" else None
            return _Token(kind, source[start : i + len(quote)], value), i + len(quote)
        if source[i] == "\\" and not raw:
            escaped = True
            i += 2
        else:
            i += 1
    raise _GiveUp("unterminated string")


def _tokens(source: str) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(source):
        match = _TOKEN.match(source, i)
        if match is None:
            raise _GiveUp(f"unexpected character at {i}")
        group = match.lastgroup
        if group == "string":
            token, i = _string_literal(source, i, match.group())
            out.append(token)
            continue
        if group != "space":
            assert group is not None
            out.append(_Token(group, match.group()))
        i = match.end()
    out.append(_Token("end", ""))
    return out


# ----------------------------------------------------------------------------- parser

_BINARY: Final[Mapping[str, int]] = {
    "||": 1,
    "&&": 2,
    "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
    "+": 4, "-": 4,
    "*": 5, "/": 5, "%": 5,
}  # fmt: skip

#: Nesting deeper than this gives up, well within Python's recursion limit (the library
#: itself refuses more than 96 levels before this check runs).
_MAX_DEPTH: Final = 100


def _union(left: Kinds, right: Kinds) -> Kinds:
    if left is None or right is None:
        return None
    return left | right


def _names(kinds: Kinds) -> frozenset[str] | None:
    return None if kinds is None else frozenset(kind.name for kind in kinds)


def _binary(operator: str, left: Kinds, right: Kinds) -> Kinds:
    if _BINARY[operator] <= 3:
        return BOOL  # logic, comparisons and `in`: a bool or an error
    if operator == "+":
        # No implicit conversion: a string, list or bytes operand makes the sum one (or
        # an error). Numbers and durations stay unknown.
        for name in ("string", "list", "bytes"):
            if frozenset({name}) in (_names(left), _names(right)):
                return _of(name)
    return None


class _Parser:
    """Precedence climbing over the tokens; each method returns the result's Kinds."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0
        self.depth = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at = min(self.at + 1, len(self.tokens) - 1)
        return token

    def expect(self, text: str) -> None:
        if self.take().text != text:
            raise _GiveUp(f"expected {text!r}")

    def expression(self) -> Kinds:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _GiveUp("too deep")
        condition = self.binary(1)
        if self.peek().text != "?":
            self.depth -= 1
            return condition
        self.take()
        then = self.binary(1)
        self.expect(":")
        otherwise = self.expression()
        self.depth -= 1
        return _union(then, otherwise)

    def binary(self, lowest: int) -> Kinds:
        left = self.unary()
        while True:
            token = self.peek()
            precedence = _BINARY.get(token.text) if token.kind in ("op", "ident") else None
            if precedence is None or precedence < lowest:
                return left
            self.take()
            right = self.binary(precedence + 1)
            left = _binary(token.text, left, right)

    def unary(self) -> Kinds:
        operators: list[str] = []
        while self.peek().text in ("!", "-"):
            operators.append(self.take().text)
        value = self.member()
        for operator in reversed(operators):
            if operator == "!":
                value = BOOL
            else:
                names = _names(value)
                if names is None or not names <= _NUMBERS:
                    value = None  # negating anything but a number: unknown (or an error)
        return value

    def member(self) -> Kinds:
        value, path = self.primary()
        while True:
            token = self.peek()
            if token.text == ".":
                self.take()
                name = self.take()
                if name.kind != "ident":
                    raise _GiveUp("expected a field name")
                if self.peek().text == "(":
                    args = self.arguments()
                    dotted = f"{path}.{name.text}" if path else ""
                    if dotted in _GLOBAL_CALLS:
                        value = _GLOBAL_CALLS[dotted]
                    elif name.text in _METHODS:
                        value = _METHODS[name.text]
                    elif name.text == "orDefault" and args:
                        value = _union(value, args[0]) if value is not None else None
                    else:
                        value = None
                    path = None
                else:
                    value = self.field(value, path, name.text)
                    path = f"{path}.{name.text}" if path else None
            elif token.text == "[":
                self.take()
                self.expression()
                self.expect("]")
                value, path = None, None
            else:
                return value

    def field(self, value: Kinds, path: str | None, name: str) -> Kinds:
        if path is not None and "." not in path and (path, name) in _FIELDS:
            return _FIELDS[(path, name)]
        if value is not None and len(value) == 1:
            (kind,) = value
            if kind.fields is not None:
                return dict(kind.fields).get(name)
        return None

    def arguments(self) -> list[Kinds]:
        self.expect("(")
        args: list[Kinds] = []
        if self.peek().text != ")":
            while True:
                args.append(self.expression())
                if self.peek().text != ",":
                    break
                self.take()
        self.expect(")")
        return args

    def primary(self) -> tuple[Kinds, str | None]:
        token = self.take()
        if token.kind == "number":
            text = token.text.lower()
            if text.endswith("u"):
                return _of("uint"), None
            if text.startswith("0x"):
                return INT, None
            return (DOUBLE if any(c in text for c in ".e") else INT), None
        if token.kind in ("string", "bytes"):
            return _of(token.kind), None
        if token.kind == "ident":
            return self.identifier(token.text)
        if token.text == "(":
            value = self.expression()
            self.expect(")")
            return value, None
        if token.text == "[":
            self.sequence("]", pairs=False)
            return LIST, None
        if token.text == "{":
            return frozenset({Kind("map", self.sequence("}", pairs=True))}), None
        if token.text == "." and self.peek().kind == "ident":
            return self.identifier(self.take().text)
        raise _GiveUp(f"unexpected {token.text!r}")

    def identifier(self, name: str) -> tuple[Kinds, str | None]:
        if name in ("true", "false"):
            return BOOL, None
        if name == "null":
            return _of("null"), None
        if self.peek().text == "(":
            self.arguments()
            return _GLOBAL_CALLS.get(name), None
        if self.peek().text == "{":
            raise _GiveUp("a message literal")
        return _VARIABLES.get(name), name

    def sequence(self, closer: str, *, pairs: bool) -> tuple[tuple[str, Kinds], ...] | None:
        """List items or map entries up to ``closer``; for a map, its fields when every
        key is a string literal."""
        fields: list[tuple[str, Kinds]] | None = []
        while self.peek().text != closer:
            start, key = self.at, self.peek()
            self.expression()
            literal = self.at == start + 1 and key.kind == "string" and key.value is not None
            if pairs:
                self.expect(":")
                value = self.expression()
                if fields is not None and literal and key.value is not None:
                    fields.append((key.value, value))
                else:
                    fields = None
            if self.peek().text != ",":
                break
            self.take()
        self.expect(closer)
        return tuple(fields) if pairs and fields is not None else None


def result_type(expression: str) -> Kinds:
    """The kinds the expression's result may have, or None when unknown."""
    try:
        parser = _Parser(_tokens(expression))
        kinds = parser.expression()
        if parser.peek().kind != "end":
            return None
        return kinds
    except (_GiveUp, RecursionError):
        return None


# ----------------------------------------------------------------------------- verdict

_WHAT: Final = {
    "int": "an int",
    "uint": "a uint",
    "double": "a double",
    "string": "a string",
    "bool": "a bool",
    "null": "null",
    "bytes": "bytes",
    "list": "a list",
    "map": "a map",
    "type": "a type",
    "timestamp": "a timestamp",
    "duration": "a duration",
}


def _describe(kinds: frozenset[Kind]) -> str:
    return " or ".join(sorted({_WHAT.get(kind.name, kind.name) for kind in kinds}))


def _certainly(kinds: Kinds, allowed: frozenset[str]) -> bool:
    """Whether the value can only be of kinds outside ``allowed``."""
    names = _names(kinds)
    return names is not None and not names & allowed


def _wrong_map(fields: tuple[tuple[str, Kinds], ...]) -> str | None:
    """What is certainly wrong with a result map with these fields, as a noun phrase."""
    unknown = sorted({key for key, _ in fields} - set(_RESULT_KEYS))
    if unknown:
        return (
            f"a map with the key(s) {', '.join(repr(key) for key in unknown)} "
            f"(a result map has only {', '.join(_RESULT_KEYS)})"
        )
    types = dict(fields)
    if "replicas" not in types:
        return "a map without replicas"
    checks = (
        ("replicas", _NUMBERS, None),
        ("reason", frozenset({"string", "null"}), None),
        ("state", frozenset({"map"}), None),
    )
    for key, allowed, _ in checks:
        kinds = types.get(key)
        if key in types and kinds is not None and _certainly(kinds, allowed):
            return f"a map whose {key} can only be {_describe(kinds)}"
    return None


def result_problem(expression: str) -> str | None:
    """Why the expression can never return replicas (``"the expression can only return
    a string"``), or None when it may, or when that cannot be told without running it."""
    kinds = result_type(expression)
    if kinds is None:
        return None
    wrong: set[str] = set()
    for kind in kinds:
        if kind.name in _NUMBERS:
            return None
        if kind.name == "map":
            if kind.fields is None:
                return None
            problem = _wrong_map(kind.fields)
            if problem is None:
                return None
            wrong.add(problem)
        else:
            wrong.add(_WHAT.get(kind.name, kind.name))
    return f"the expression can only return {' or '.join(sorted(wrong))}"
