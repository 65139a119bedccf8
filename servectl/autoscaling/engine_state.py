"""The engine's persisted state as a typed value, and its JSON codec.

:class:`EngineState` is what ``engine.EnginePolicy`` remembers from one tick to the next
(the load it learnt, the burst memory, the rails' history). At the Policy protocol's
boundary the state is the JSON-compatible dict every policy hands the controller
(``policy.State``): the engine reads it with :func:`from_dict` on entry and writes it
with :func:`to_dict` on exit, so the document kept in the loop state's ``policy`` section
(SQLite, Kubernetes status) keeps the keys and encodings the engine has always written:

==================  ====================================  =================================
key                 JSON                                  absent (or null) means
==================  ====================================  =================================
``last_time``       time of the last decision             first tick: one period elapsed
``rates``           ``[[time, req/s], ...]``              no history
``service_s``       learnt CPU seconds per request        not learnt yet
``wait_budget_s``   learnt queueing-wait budget           not learnt yet
``inflight``        ``[time, in-flight requests]``        not seen
``forecast``        ``forecast.History`` as JSON          forecasting has seen no rate
``surges``          ``[time, ...]``                       none
``peaks``           ``[[bucket time, req/s], ...]``       none
``behavior``        ``{recommendations, scale_events}``   an empty rails history
``panics``          ``[time, ...]``                       none
``regrets``         ``[time, ...]``                       none
``direction``       -1, 0 or 1: the last change's sign    0
``panic_until``     end of the panic hold                 never panicked (written only
                                                          while finite)
``unsteady_at``     last time the service was unsteady    never
``surge_base``      the rate the last surge rose from     armed: no surge pending
``overload_since``  start of the current overload         not overloaded
``policy``          a custom CEL policy's own state       none
==================  ====================================  =================================

``from_dict`` refuses a malformed document with a :class:`StateError` naming the field
(the same document would have failed, less clearly, inside ``decide``). Two fields are
hints read leniently, as the engine always read them: ``forecast`` is kept as it is and
validated against the configuration by ``forecast.from_state`` (a history for another
bucket length, or garbage, is a fresh history); ``peaks`` entries that are not pairs of
finite numbers are dropped (a lost peak only costs standing burst capacity). Keys the
engine does not know (another policy's state after a switch of policy) are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servectl.autoscaling import behavior

Pair = tuple[float, float]

_NUMBERS = frozenset({int, float})
_SEQUENCES = frozenset({list, tuple})
_LOW, _HIGH = -math.inf, math.inf


class StateError(ValueError):
    """A saved engine state that cannot be read; the message names the field."""


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the engine carries from one ``decide`` to the next (never mutated)."""

    #: Time of the last decision; None before the first.
    last_time: float | None = None
    #: Request rates seen over the trend's long window, oldest first.
    rates: tuple[Pair, ...] = ()
    #: Learnt mean CPU seconds per request (None: not learnt yet).
    service_s: float | None = None
    #: Learnt queueing wait the latency target allows (None: not learnt yet).
    wait_budget_s: float | None = None
    #: The last in-flight count seen, with its time (the queue's growth from it).
    inflight: Pair | None = None
    #: The forecaster's history as stored (``forecast.History`` in JSON form), unvalidated:
    #: its validity depends on the forecast configuration (``forecast.from_state``).
    forecast: object = None
    #: Burst memory: times of surges, the highest rate per bucket, panics and re-grows.
    surges: tuple[float, ...] = ()
    peaks: tuple[Pair, ...] = ()
    panics: tuple[float, ...] = ()
    regrets: tuple[float, ...] = ()
    #: The rails' memory (stabilization recommendations, scale events).
    behavior: behavior.BehaviorState = field(default_factory=behavior.BehaviorState)
    #: Sign of the last change of the replica count (a re-grow follows a shrink).
    direction: int = 0
    #: End of the panic hold; -inf: none.
    panic_until: float = -math.inf
    #: Last tick the service was unsteady (its latency then teaches nothing).
    unsteady_at: float | None = None
    #: The rate the pending surge rose from; None: armed for the next surge.
    surge_base: float | None = None
    #: When the current overload began; None: not overloaded.
    overload_since: float | None = None
    #: A custom CEL policy's own state, as it returned it.
    policy: Mapping[str, Any] | None = None


def to_dict(state: EngineState) -> dict[str, Any]:
    """The JSON-compatible document (the keys and encodings the engine always wrote)."""
    doc: dict[str, Any] = {
        "inflight": None if state.inflight is None else list(state.inflight),
        "last_time": state.last_time,
        "rates": [[t, v] for t, v in state.rates],
        "service_s": state.service_s,
        "wait_budget_s": state.wait_budget_s,
    }
    if state.forecast is not None:
        # The very object read (not a copy): the engine's memos key on its identity.
        doc["forecast"] = state.forecast
    doc["surges"] = list(state.surges)
    doc["peaks"] = [[t, v] for t, v in state.peaks]
    doc["behavior"] = state.behavior.to_dict()
    doc["panics"] = list(state.panics)
    doc["regrets"] = list(state.regrets)
    doc["direction"] = state.direction
    # An infinite time is not JSON: no panic is no key.
    if math.isfinite(state.panic_until):
        doc["panic_until"] = state.panic_until
    for key, value in (
        ("unsteady_at", state.unsteady_at),
        ("surge_base", state.surge_base),
        ("overload_since", state.overload_since),
        ("policy", state.policy),
    ):
        if value is not None:
            doc[key] = value
    return doc


def from_dict(doc: Mapping[str, Any]) -> EngineState:
    """The state in ``doc`` (as :func:`to_dict` or any earlier engine wrote it)."""
    if not isinstance(doc, Mapping):
        raise StateError(f"engine state: expected an object, got {type(doc).__name__}")
    inflight = doc.get("inflight")
    policy = doc.get("policy")
    if policy is not None and not isinstance(policy, Mapping):
        raise StateError(f"policy: expected an object (the custom policy's state), got {policy!r}")
    direction = doc.get("direction", 0)
    if direction is None:
        direction = 0
    if type(direction) is not int or direction not in (-1, 0, 1):
        raise StateError(f"direction: expected -1, 0 or 1, got {direction!r}")
    panic_until = _number(doc, "panic_until")
    return EngineState(
        last_time=_number(doc, "last_time"),
        rates=_pairs(doc.get("rates"), "rates"),
        service_s=_number(doc, "service_s"),
        wait_budget_s=_number(doc, "wait_budget_s"),
        inflight=None if inflight is None else _pair(inflight, "inflight"),
        forecast=doc.get("forecast"),
        surges=_times(doc.get("surges"), "surges"),
        peaks=_peaks(doc.get("peaks")),
        panics=_times(doc.get("panics"), "panics"),
        regrets=_times(doc.get("regrets"), "regrets"),
        behavior=_behavior(doc.get("behavior")),
        direction=direction,
        panic_until=-math.inf if panic_until is None else panic_until,
        unsteady_at=_number(doc, "unsteady_at"),
        surge_base=_number(doc, "surge_base"),
        overload_since=_number(doc, "overload_since"),
        policy=policy,
    )


def _finite(value: object) -> bool:
    """A finite int or float (not a bool, which JSON and Python both let pass as one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a double
        return False


def _number(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if not _finite(value):
        raise StateError(f"{key}: expected a finite number, got {value!r}")
    return float(value)


def _pair(item: object, where: str) -> Pair:
    if not isinstance(item, list | tuple) or len(item) != 2:
        raise StateError(f"{where}: expected a [time, value] pair, got {item!r}")
    t, v = item
    if not (_finite(t) and _finite(v)):
        raise StateError(f"{where}: expected a pair of finite numbers, got {item!r}")
    return float(t), float(v)


def _fast_pairs(raw: list[Any] | tuple[Any, ...]) -> tuple[Pair, ...] | None:
    """``raw`` as pairs of floats if it is a list of pairs of finite numbers, else None.

    One comprehension (a decision reads about 150 pairs, ~20 ns each matters); the
    per-item checks that name the culprit run only on a document that fails it.
    Comparisons with infinity reject NaN and infinities.
    """
    if not set(map(type, raw)) <= _SEQUENCES:
        return None
    try:
        pairs = [
            (float(t), float(v))
            for t, v in raw
            if type(t) in _NUMBERS and type(v) in _NUMBERS and _LOW < t < _HIGH and _LOW < v < _HIGH
        ]
    except (ValueError, OverflowError):  # not a pair; an int beyond a double
        return None
    return tuple(pairs) if len(pairs) == len(raw) else None


def _pairs(raw: object, where: str) -> tuple[Pair, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise StateError(f"{where}: expected a list of [time, value] pairs, got {raw!r}")
    pairs = _fast_pairs(raw)
    if pairs is None:
        pairs = tuple(_pair(item, f"{where}[{i}]") for i, item in enumerate(raw))
    return pairs


def _counts(raw: object, where: str) -> tuple[tuple[float, int], ...]:
    """``[[time, count], ...]`` (the rails' history)."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise StateError(f"{where}: expected a list of [time, count] pairs, got {raw!r}")
    if set(map(type, raw)) <= _SEQUENCES:
        try:
            fast = [
                (float(t), n)
                for t, n in raw
                if type(t) in _NUMBERS and type(n) is int and _LOW < t < _HIGH
            ]
        except (ValueError, OverflowError):
            fast = []
        if len(fast) == len(raw):
            return tuple(fast)
    counts: list[tuple[float, int]] = []
    for i, item in enumerate(raw):
        t, n = _pair(item, f"{where}[{i}]")
        if not n.is_integer():
            raise StateError(f"{where}[{i}]: expected a whole count, got {item!r}")
        counts.append((t, int(n)))
    return tuple(counts)


def _times(raw: object, where: str) -> tuple[float, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise StateError(f"{where}: expected a list of times, got {raw!r}")
    for i, value in enumerate(raw):
        if not _finite(value):
            raise StateError(f"{where}[{i}]: expected a finite number, got {value!r}")
    return tuple(map(float, raw))


def _peaks(raw: object) -> tuple[Pair, ...]:
    """Lenient: entries that are not pairs of finite numbers are dropped."""
    if not isinstance(raw, list | tuple):
        return ()
    pairs = _fast_pairs(raw)
    if pairs is not None:
        return pairs
    kept: list[Pair] = []
    for item in raw:
        try:
            t, v = float(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            continue
        if math.isfinite(t) and math.isfinite(v):
            kept.append((t, v))
    return tuple(kept)


def _behavior(raw: object) -> behavior.BehaviorState:
    if not raw:
        return behavior.BehaviorState()
    if not isinstance(raw, Mapping):
        raise StateError(f"behavior: expected an object, got {raw!r}")
    return behavior.BehaviorState(
        recommendations=_counts(raw.get("recommendations"), "behavior.recommendations"),
        scale_events=_counts(raw.get("scale_events"), "behavior.scale_events"),
    )
