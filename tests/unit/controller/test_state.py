"""The loop state's JSON form: exact round trips, and malformed documents named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servectl.controller import state as codec
from servectl.controller.decide import LoopState
from tests.unit.controller.canary_run import canary_under_a_step


def _states() -> list[LoopState]:
    """Every loop state of a canary rollout under a load step (drains, analyses, holds)."""
    return [c.outcome.state for c in canary_under_a_step()]


STATES = _states()


def test_the_states_cover_drains_analyses_and_learnt_costs() -> None:
    assert any(s.planner.lowered_at for s in STATES)
    assert any(s.rollout.baseline for s in STATES)
    assert any(s.rollout.verdicts for s in STATES)
    assert any(s.planner.cost for s in STATES)
    assert any(s.planner.sizing_cost for s in STATES)
    assert any(s.policy for s in STATES)


def test_every_state_round_trips_exactly() -> None:
    for state in STATES:
        assert codec.loads(codec.dumps(state)) == state
        assert codec.from_dict(json.loads(json.dumps(codec.to_dict(state)))) == state


def test_dumps_is_strict_json() -> None:
    text = codec.dumps(STATES[-1])
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))


def _doc() -> dict[str, Any]:
    return codec.to_dict(STATES[len(STATES) // 2])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(format=99), "format"),
        (lambda d: d.pop("format"), "format"),
        (lambda d: d.update(demand=-1), "demand"),
        (lambda d: d.update(demand=True), "demand"),
        (lambda d: d.update(rollout=[]), "rollout"),
        (lambda d: d["rollout"].update(stable="x"), "rollout"),
        (lambda d: d.update(planner=None), "planner"),
        (lambda d: d["planner"].update(loweredAt={"m-v1": "soon"}), "planner.loweredAt.m-v1"),
        (lambda d: d["planner"].update(holdSeconds=[1]), "planner.holdSeconds"),
        (lambda d: d["planner"].update(cost={"m-v2": float("nan")}), "planner.cost.m-v2"),
        (lambda d: d["planner"].update(sizingCost={"m-v2": "1"}), "planner.sizingCost.m-v2"),
        (lambda d: d["planner"].update(headerShare=2), "planner.headerShare"),
        (lambda d: d.update(policy=[]), "policy"),
    ],
)
def test_a_malformed_document_is_refused_naming_the_field(change: Any, field: str) -> None:
    doc = _doc()
    change(doc)
    with pytest.raises(codec.StateError) as caught:
        codec.from_dict(doc)
    assert str(caught.value).startswith(field), str(caught.value)


def test_a_state_saved_before_sizing_costs_loads_with_none_held() -> None:
    doc = _doc()
    doc["planner"].pop("sizingCost")
    assert codec.from_dict(doc).planner.sizing_cost == {}


def test_not_json_and_not_an_object_are_refused() -> None:
    with pytest.raises(codec.StateError, match="not JSON"):
        codec.loads("{")
    with pytest.raises(codec.StateError, match="expected an object"):
        codec.from_dict([])  # type: ignore[arg-type]
