"""The JSON form of the whole :class:`~servectl.controller.decide.LoopState`.

A backend keeps it where it keeps status (the ModelService status, the local store), and
a loop restarted from it decides exactly as the uninterrupted loop would have: the rollout
state, the planner's drain clocks and held shares (so a revision still draining is never
shrunk early), the policy's state (stabilization history, windows) and the demand.

``to_dict`` / ``from_dict`` give JSON-compatible values; ``dumps`` / ``loads`` the text.
Floats round-trip exactly (Python writes the shortest repr). ``from_dict`` refuses a
malformed document with a :class:`StateError` naming the field, never half a state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from servectl.controller.decide import LoopState
from servectl.planning.planner import PlannerState
from servectl.rollout import machine

FORMAT = 1
"""The document's ``format``; a document from a newer servectl is refused, not guessed."""


class StateError(ValueError):
    """A saved loop state that cannot be read; the message names the field."""


def _floats(values: Mapping[str, float]) -> dict[str, float]:
    return {str(k): float(v) for k, v in values.items()}


def to_dict(state: LoopState) -> dict[str, Any]:
    p = state.planner
    return {
        "format": FORMAT,
        "demand": state.demand,
        "rollout": machine.to_dict(state.rollout),
        "planner": {
            "replicas": {k: int(v) for k, v in p.replicas.items()},
            "shares": _floats(p.shares),
            "loweredAt": _floats(p.lowered_at),
            "holdSeconds": _floats(p.hold_s),
            "heldShare": _floats(p.held_share),
            "cost": _floats(p.cost),
            "sizingCost": _floats(p.sizing_cost),
            "headerShare": p.header_share,
        },
        "policy": state.policy,
    }


def _map(doc: Mapping[str, Any], key: str, kind: type) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, Mapping):
        raise StateError(f"planner.{key}: expected an object, got {type(value).__name__}")
    out: dict[str, Any] = {}
    for name, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise StateError(f"planner.{key}.{name}: expected a number, got {item!r}")
        number = kind(item)
        if not math.isfinite(number):
            raise StateError(f"planner.{key}.{name}: expected a finite number, got {item!r}")
        out[str(name)] = number
    return out


def from_dict(doc: Mapping[str, Any]) -> LoopState:
    if not isinstance(doc, Mapping):
        raise StateError(f"loop state: expected an object, got {type(doc).__name__}")
    version = doc.get("format")
    if version != FORMAT:
        raise StateError(
            f"format: this servectl reads loop state format {FORMAT}, got {version!r} "
            "(written by another servectl version?)"
        )
    demand = doc.get("demand")
    if isinstance(demand, bool) or not isinstance(demand, int) or demand < 0:
        raise StateError(f"demand: expected an int >= 0, got {demand!r}")
    rollout = doc.get("rollout")
    if not isinstance(rollout, Mapping):
        raise StateError("rollout: expected an object")
    try:
        rollout_state = machine.from_dict(rollout)
    except ValueError as exc:
        raise StateError(f"rollout: {exc}") from exc
    p = doc.get("planner")
    if not isinstance(p, Mapping):
        raise StateError("planner: expected an object")
    header_share = p.get("headerShare")
    if header_share is not None and (
        isinstance(header_share, bool)
        or not isinstance(header_share, int | float)
        or not 0.0 <= float(header_share) <= 1.0
    ):
        raise StateError(f"planner.headerShare: expected null or 0..1, got {header_share!r}")
    planner_state = PlannerState(
        replicas=_map(p, "replicas", int),
        shares=_map(p, "shares", float),
        lowered_at=_map(p, "loweredAt", float),
        hold_s=_map(p, "holdSeconds", float),
        held_share=_map(p, "heldShare", float),
        cost=_map(p, "cost", float),
        sizing_cost=_map(p, "sizingCost", float),  # absent before 2026-12: sized at cost
        header_share=None if header_share is None else float(header_share),
    )
    policy = doc.get("policy")
    if not isinstance(policy, dict):
        raise StateError("policy: expected an object (the policy's own state)")
    return LoopState(rollout=rollout_state, planner=planner_state, policy=policy, demand=demand)


def dumps(state: LoopState) -> str:
    """Strict JSON text (no NaN or Infinity: a policy state holding one is a bug)."""
    return json.dumps(to_dict(state), sort_keys=True, allow_nan=False, separators=(",", ":"))


def loads(text: str) -> LoopState:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(f"loop state is not JSON: {exc}") from exc
    return from_dict(doc)
