"""Hypothesis generators for snapshot documents, policies and CEL expressions.

Shared by the property test ``tests/property/test_decide_never_raises.py`` and the fuzz
targets in ``tests/fuzz``. Snapshot documents are generated *broadly*: most look like
what an observer writes (so most pass ``from_dict`` and reach ``decide``), and every
number may also be zero, negative, huge (``1e308``, ``10**30``), infinite or NaN, any
key may be missing, and now and then a value has the wrong type altogether.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

# ----------------------------------------------------------------------------- numbers

NON_FINITE = st.sampled_from([math.inf, -math.inf, math.nan])

#: Numbers ``from_dict`` accepts in a measurement, beyond the plausible ones: zero,
#: tiny, huge (a double's largest, ints too large for a double) and non-finite (missing).
EXTREME_MEASUREMENTS = st.sampled_from(
    [0, 0.0, -0.0, 5e-324, 1e-300, 1e-9, 1.0 - 1e-12, 1e15, 1e300, 1.7976931348623157e308,
     2**53 + 1, 2**63, 10**30, 10**400, math.inf, -math.inf, math.nan]
)  # fmt: skip
#: Numbers ``from_dict`` refuses in a measurement.
NEGATIVE_NUMBERS = st.sampled_from([-1, -3, -1e-300, -0.5, -1e300, -(10**30)])
#: Values of the wrong JSON type for any field.
WRONG_TYPES = st.sampled_from(["x", "", "3", True, False, [], {}, [1.0], {"a": 1}])
#: Ints at and beyond the limits, and things that are not ints, for a replica count.
BAD_COUNTS = st.sampled_from(
    [-1, -(2**63), 2**31 - 1, 2**63, 10**30, 10**400, 150_001, 1.0, 2.5, 1e308, math.inf,
     math.nan, True, "3", None]
)  # fmt: skip


def measurements(low: float = 0.0, high: float = 1e6) -> st.SearchStrategy[Any]:
    """A JSON number (or null) ``from_dict`` accepts for a measurement."""
    plausible = st.floats(min_value=low, max_value=high, allow_nan=False) | st.integers(
        int(low), int(high)
    )
    return st.one_of(plausible, plausible, plausible, EXTREME_MEASUREMENTS, NON_FINITE, st.none())


def numbers(low: float = 0.0, high: float = 1e6) -> st.SearchStrategy[Any]:
    """Any number at all for a measurement: accepted ones, negative ones, any double."""
    return st.one_of(measurements(low, high), NEGATIVE_NUMBERS, st.floats())


def counts(high: int = 60, limit: int = 150_000) -> st.SearchStrategy[int]:
    """A replica count ``from_dict`` accepts: mostly small, sometimes up to ``limit``."""
    small = st.integers(0, high)
    # Rarely huge: the HPA baseline reasons pod by pod (150,000 pods take 0.3 s).
    return st.one_of(*[small] * 12, st.integers(0, limit), st.just(limit))


TIMES = st.one_of(
    st.floats(min_value=0, max_value=2e9, allow_nan=False),
    st.integers(0, 2_000_000_000),
    st.sampled_from([0, 0.0, -1.0, 1e-300, 253402300799.0, -62135596800.0, 1718020800]),
)
BAD_TIMES = st.sampled_from(
    [math.inf, -math.inf, math.nan, 1e300, -1e300, 10**400, 253402300800.0, "now", None, True]
)

# ----------------------------------------------------------------------------- documents

LATENCY_KEYS = st.sampled_from(["p50", "p90", "p95", "p99", "p99.9", "p100", "p0"])
BAD_LATENCY_KEYS = st.sampled_from(["p", "99", "pfoo", "p101", "p-1", "pnan", "P99", ""])


@st.composite
def replicas_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {"current": draw(counts())}
    if draw(st.booleans()):
        doc["ready"] = draw(counts())
    low = draw(st.one_of(st.none(), counts(5)))
    high = draw(st.one_of(st.none(), counts(60)))
    if low is not None:
        doc["min"] = low
    if high is not None:
        doc["max"] = max(high, 1, low or 0)
    elif low is not None:
        doc["max"] = max(low, doc["current"], 10)
    return doc


SIGNAL_RANGES = {
    "cpu_utilization": (0.0, 200.0),
    "cpu_usage_cores": (0.0, 500.0),
    "gpu_duty_cycle": (0.0, 100.0),
    "rps": (0.0, 50_000.0),
    "concurrency": (0.0, 5_000.0),
    "age_s": (0.0, 120.0),
}


@st.composite
def signals_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, (low, high) in SIGNAL_RANGES.items():
        if draw(st.booleans()):
            doc[key] = draw(measurements(low, high))
    if draw(st.booleans()):
        error_rate = st.floats(0.0, 1.0) | st.sampled_from([0, 1, None, math.nan, math.inf])
        doc["error_rate"] = draw(error_rate)
    if draw(st.booleans()):
        doc["latency_ms"] = draw(
            st.dictionaries(LATENCY_KEYS, measurements(0.0, 5_000.0), max_size=4)
        )
    return doc


@st.composite
def pod_docs(draw: st.DrawFn, index: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": f"pod-{index}"}
    if draw(st.booleans()):
        doc["ready"] = draw(st.booleans())
    fields = {
        "start_time": (0.0, 2e9),
        "cpu_usage_cores": (0.0, 8.0),
        "cpu_request_cores": (0.0, 8.0),
        "concurrency": (0.0, 100.0),
        "gpu_duty_cycle": (0.0, 100.0),
    }
    for key, (low, high) in fields.items():
        if draw(st.booleans()):
            value = measurements(low, high)
            doc[key] = draw(st.floats(-1e10, 3e9) | value if key == "start_time" else value)
    return doc


@st.composite
def valid_snapshot_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A snapshot document ``from_dict`` accepts, with numbers from every corner."""
    doc: dict[str, Any] = {"time": draw(TIMES), "replicas": draw(replicas_docs())}
    if draw(st.integers(0, 3)):
        doc["signals"] = draw(st.one_of(signals_docs(), signals_docs(), st.none()))
    if draw(st.booleans()):
        size = draw(st.integers(0, 6))
        doc["pods"] = draw(st.tuples(*(pod_docs(i) for i in range(size))).map(list))
    if draw(st.booleans()):
        rollout: dict[str, Any] = {}
        if draw(st.booleans()):
            rollout["phase"] = draw(st.sampled_from(["Idle", "Progressing", "Paused", ""]))
        if draw(st.booleans()):
            rollout["step"] = draw(counts(10, 2**31 - 1))  # an int32
        if draw(st.booleans()):
            rollout["canary_weight"] = draw(st.integers(0, 100))
        doc["rollout"] = rollout
    if draw(st.booleans()):
        doc["version"] = 1
    return doc


#: Ways to break a valid document: (path, values); a value of ``DELETE`` removes the key.
DELETE = object()
BREAKAGES: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("time",), BAD_TIMES | st.just(DELETE)),
    (("replicas",), WRONG_TYPES | st.just(DELETE) | st.just({})),
    (("replicas", "current"), BAD_COUNTS | st.just(DELETE)),
    (("replicas", "ready"), BAD_COUNTS),
    (("replicas", "min"), BAD_COUNTS | st.integers(61, 10**6)),
    (("replicas", "max"), BAD_COUNTS | st.just(0)),
    (("signals",), WRONG_TYPES),
    (("signals", "rps"), NEGATIVE_NUMBERS | WRONG_TYPES),
    (("signals", "cpu_usage_cores"), NEGATIVE_NUMBERS | WRONG_TYPES),
    (("signals", "cpu_utilization"), NEGATIVE_NUMBERS),
    (("signals", "concurrency"), NEGATIVE_NUMBERS),
    (("signals", "gpu_duty_cycle"), NEGATIVE_NUMBERS),
    (("signals", "error_rate"), NEGATIVE_NUMBERS | st.sampled_from([1.5, 5, 100.0, 1e300])),
    (("signals", "age_s"), NEGATIVE_NUMBERS | WRONG_TYPES),
    (("signals", "latency_ms"), WRONG_TYPES),
    (("signals", "latency_ms", "p99"), NEGATIVE_NUMBERS | WRONG_TYPES),
    (("signals", "latency"), st.just(1.0)),
    (("pods",), WRONG_TYPES | st.just([{"ready": True}]) | st.just([{"name": 1}])),
    (("pods",), st.just([{"name": "a"}, {"name": "a"}]) | st.just([{"name": "a", "x": 1}])),
    (("pods",), st.just([{"name": "a", "cpu_usage_cores": -1.0}])),
    (("pods",), st.just([{"name": "a", "ready": "yes"}]) | st.just(["pod-0"])),
    (("rollout",), WRONG_TYPES),
    (("rollout", "phase"), st.sampled_from([3, None, ["Idle"], {"a": 1}])),
    (("rollout", "step"), BAD_COUNTS),
    (("rollout", "canary_weight"), BAD_COUNTS | st.just(101)),
    (("extra",), st.just(1)),
]


@st.composite
def broken_snapshot_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document with one or two fields broken; most are refused."""
    doc = draw(valid_snapshot_docs())
    for _ in range(draw(st.integers(1, 2))):
        path, values = draw(st.sampled_from(BREAKAGES))
        value = draw(values)
        target: Any = doc
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        if value is DELETE:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value
    return doc


#: Snapshot documents, broadly: three in four are valid, the rest broken somewhere.
snapshot_docs = st.one_of(
    valid_snapshot_docs(), valid_snapshot_docs(), valid_snapshot_docs(), broken_snapshot_docs()
)


#: Arbitrary JSON trees (what ``json.loads`` can return), for the parser fuzz target.
json_trees = st.recursive(
    st.none()
    | st.booleans()
    | st.floats()
    | st.integers()
    | st.sampled_from([2**63, 10**30, 10**400, -(10**30)])
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=25,
)


def grafted_docs() -> st.SearchStrategy[Any]:
    """A valid snapshot document with an arbitrary JSON tree grafted onto one field."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        doc = draw(valid_snapshot_docs())
        path = draw(
            st.sampled_from(
                [("time",), ("replicas",), ("replicas", "current"), ("signals",),
                 ("signals", "rps"), ("signals", "latency_ms"), ("pods",), ("rollout",),
                 ("rollout", "phase")]
            )
        )  # fmt: skip
        target: Any = doc
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = draw(json_trees)
        return doc

    return build()


# ----------------------------------------------------------------------------- CEL

#: Pieces of policy expressions: names, literals, operators, calls.
CEL_ATOMS = [
    "recommended", "replicas.current", "replicas.ready", "replicas.max", "signals.rps",
    "signals.cpu_utilization", "signals.latency_ms.p99", "signals.gpu_duty_cycle",
    "params.targetMs", "state.n", "time.hour", "time.now", "rollout.phase",
    "rollout.canary_weight", "1", "0", "-1", "2.5", "0.0", "1e308", "9223372036854775807",
    '"x"', "'y'", "true", "false", "null", "[]", "[1, 2]", "{}", '{"replicas": 1}',
    'b"z"', "1u", "signal", "foo",
]  # fmt: skip
CEL_OPERATORS = [" + ", " - ", " * ", " / ", " % ", " == ", " != ", " < ", " >= ", " && ",
                 " || ", " ? ", " : ", ".", ", ", " in "]  # fmt: skip
CEL_CALLS = ["math.greatest(", "math.ceil(", "int(", "double(", "size(", "has(",
             "orDefault(", "math.nope(", "ceil(", "string(", "("]  # fmt: skip
CEL_JUNK = ["(", ")", "[", "]", "{", "}", '"', "'", "//", "\n", "?", ":", "!", "-", "`",
            "\\", "\x00", "é", "Name{", ".map(x, ", ".all(x, "]  # fmt: skip


@st.composite
def near_valid_cel(draw: st.DrawFn) -> str:
    """Something that looks like a policy: atoms joined by operators, calls, junk."""
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.integers(0, 9))
        if kind <= 4:
            parts.append(draw(st.sampled_from(CEL_ATOMS)))
        elif kind <= 6:
            parts.append(draw(st.sampled_from(CEL_OPERATORS)))
        elif kind <= 8:
            parts.append(draw(st.sampled_from(CEL_CALLS)))
            parts.append(draw(st.sampled_from(CEL_ATOMS)))
            parts.append(")")
        else:
            parts.append(draw(st.sampled_from(CEL_JUNK)))
    return "".join(parts)


@st.composite
def valid_result_shaped_cel(draw: st.DrawFn) -> str:
    """A result-shaped expression: a number, a map of the result keys, a ternary."""
    value = draw(st.sampled_from(CEL_ATOMS))
    shape = draw(st.integers(0, 3))
    if shape == 0:
        return value
    if shape == 1:
        reason = draw(st.sampled_from(['"WHY"', "rollout.phase", "1", "null"]))
        return f'{{"replicas": {value}, "reason": {reason}}}'
    if shape == 2:
        other = draw(st.sampled_from(CEL_ATOMS))
        return f"recommended > 3 ? {value} : {other}"
    return f'{{"replicas": recommended, "state": {{"n": {value}}}}}'


cel_sources = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from(list("()[]{}\"'.,:?!+-*/%<>=&|0123456789abcxyz \n")),
            max_size=60),
    near_valid_cel(),
    valid_result_shaped_cel(),
)  # fmt: skip
