"""The engine state's codec: the documents the engine wrote before it had a typed state
read back to the same decisions, round trips, and malformed fields named."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from servectl.autoscaling import behavior, cel_policy, config, engine, engine_state, snapshot
from servectl.autoscaling.engine_state import EngineState, StateError
from servectl.sim import suite
from servectl.testing import make_snapshot

SAVED = json.loads((Path(__file__).parent / "saved_engine_state.json").read_text())
#: The custom policy the saved state was written under: adds one replica every other tick.
ALTERNATE = (
    '{"replicas": recommended + (has(state.n) ? state.n % 2 : 0),'
    ' "state": {"n": has(state.n) ? state.n + 1 : 1}}'
)


def saved_policy() -> engine.EnginePolicy:
    cfg = dataclasses.replace(suite.autoscaling_config(suite.service()), forecast=None)
    program = cel_policy.compile_expression(ALTERNATE)
    return engine.EnginePolicy(cfg, engine.CustomPolicy("alternate", program))


def test_a_state_saved_before_the_typed_state_gives_the_same_decisions() -> None:
    # SAVED was written by the engine at commit abc1f4d (dict state) with the decisions it
    # made next; a restart from it (a new policy object, the state read back from JSON)
    # must decide exactly as that engine did, and write the state it wrote.
    policy = saved_policy()
    state: dict[str, Any] = json.loads(json.dumps(SAVED["saved"]))
    for tick in SAVED["ticks"]:
        decision, state = policy.decide(snapshot.from_dict(tick["snapshot"]), state)
        assert decision.to_dict() == tick["decision"]
        state = json.loads(json.dumps(state, allow_nan=False))
    assert state == SAVED["state_after"]


def test_the_saved_document_reads_every_field() -> None:
    typed = engine_state.from_dict(SAVED["saved"])
    assert typed.last_time == 38.0
    assert typed.inflight == tuple(SAVED["saved"]["inflight"])
    assert typed.panic_until == SAVED["saved"]["panic_until"]
    assert typed.overload_since == 38.0 and typed.unsteady_at == 30.0
    assert typed.surge_base == SAVED["saved"]["surge_base"]
    assert typed.policy == {"n": 20}
    assert typed.direction == 1
    assert len(typed.rates) == 18 and len(typed.peaks) == 4
    assert len(typed.behavior.recommendations) == 20
    assert typed.behavior.scale_events == tuple(
        (t, n) for t, n in SAVED["saved"]["behavior"]["scale_events"]
    )
    # Written back, it is the same document: keys, values and encodings (the loop
    # state's JSON sorts the keys, so their order in the dict is no part of it).
    assert engine_state.to_dict(typed) == SAVED["saved"]
    written = json.dumps(engine_state.to_dict(typed), sort_keys=True, allow_nan=False)
    assert written == json.dumps(SAVED["saved"], sort_keys=True)


def test_round_trip_through_json() -> None:
    state = EngineState(
        last_time=12.0,
        rates=((10.0, 100.0), (12.0, 110.5)),
        service_s=0.02,
        wait_budget_s=0.1,
        inflight=(12.0, 3.5),
        forecast={"version": 1, "means": [None, 3.0]},
        surges=(5.0,),
        peaks=((10.0, 110.5),),
        panics=(4.0, 8.0),
        regrets=(9.0,),
        behavior=behavior.BehaviorState(((10.0, 3), (12.0, 4)), ((12.0, 1),)),
        direction=-1,
        panic_until=70.0,
        unsteady_at=8.0,
        surge_base=80.0,
        overload_since=11.0,
        policy={"n": 2, "note": "x"},
    )
    text = json.dumps(engine_state.to_dict(state), allow_nan=False)
    assert engine_state.from_dict(json.loads(text)) == state


def test_what_is_not_written() -> None:
    # No panic is no key (an infinite time is not JSON); unset optional values are absent.
    doc = engine_state.to_dict(EngineState(last_time=1.0))
    for key in ("panic_until", "unsteady_at", "surge_base", "overload_since", "policy"):
        assert key not in doc
    assert "forecast" not in doc
    assert doc["inflight"] is None and doc["service_s"] is None
    assert engine_state.from_dict(doc) == EngineState(last_time=1.0)


def test_an_empty_document_is_a_fresh_state() -> None:
    assert engine_state.from_dict({}) == EngineState()
    assert engine.EnginePolicy(config.AutoscalingConfig()).initial_state() == {}


def test_null_is_absent() -> None:
    doc = {key: None for key in engine_state.to_dict(EngineState())}
    doc.update(panic_until=None, unsteady_at=None, surge_base=None, policy=None, forecast=None)
    assert engine_state.from_dict(doc) == EngineState()


def test_another_policys_keys_are_ignored() -> None:
    # An HPA state after a switch of policy: its rails history reads, its pods do not.
    hpa_doc = {"behavior": {"recommendations": [[1.0, 3]], "scale_events": []}, "pods": {}}
    typed = engine_state.from_dict(hpa_doc)
    assert typed.behavior.recommendations == ((1.0, 3),)
    assert "pods" not in engine_state.to_dict(typed)


def test_the_hints_are_read_leniently() -> None:
    # The forecast history is kept as it is (forecast.from_state checks it against the
    # configuration); peaks that are not pairs of finite numbers are dropped.
    typed = engine_state.from_dict(
        {"forecast": "nope", "peaks": [[1.0, 2.0], "junk", [3.0], [4.0, math.inf], [5, 6]]}
    )
    assert typed.forecast == "nope"
    assert typed.peaks == ((1.0, 2.0), (5.0, 6.0))
    assert engine_state.from_dict({"peaks": "junk"}).peaks == ()


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ([1, 2], "engine state: expected an object"),
        ({"last_time": "soon"}, "last_time: expected a finite number, got 'soon'"),
        ({"service_s": True}, "service_s: expected a finite number, got True"),
        ({"wait_budget_s": math.nan}, "wait_budget_s: expected a finite number"),
        ({"panic_until": math.inf}, "panic_until: expected a finite number"),
        ({"surge_base": 10**400}, "surge_base: expected a finite number"),
        ({"rates": "x"}, "rates: expected a list of [time, value] pairs, got 'x'"),
        ({"rates": [[1.0, 2.0], [3.0]]}, "rates[1]: expected a [time, value] pair, got [3.0]"),
        ({"rates": [[1.0, 2.0], [3.0, "4"]]}, "rates[1]: expected a pair of finite numbers"),
        ({"rates": [[1.0, 2.0], 7]}, "rates[1]: expected a [time, value] pair, got 7"),
        ({"inflight": [1.0]}, "inflight: expected a [time, value] pair"),
        ({"inflight": 5}, "inflight: expected a [time, value] pair, got 5"),
        ({"panics": [1.0, "2"]}, "panics[1]: expected a finite number, got '2'"),
        ({"regrets": 3.0}, "regrets: expected a list of times, got 3.0"),
        ({"surges": [math.inf]}, "surges[0]: expected a finite number, got inf"),
        ({"direction": 2}, "direction: expected -1, 0 or 1, got 2"),
        ({"direction": "up"}, "direction: expected -1, 0 or 1, got 'up'"),
        ({"behavior": "x"}, "behavior: expected an object, got 'x'"),
        (
            {"behavior": {"recommendations": [[1.0, 2.5]]}},
            "behavior.recommendations[0]: expected a whole count, got [1.0, 2.5]",
        ),
        (
            {"behavior": {"scale_events": {"a": 1}}},
            "behavior.scale_events: expected a list of [time, count] pairs",
        ),
        ({"policy": [1]}, "policy: expected an object (the custom policy's state), got [1]"),
    ],
    ids=repr,
)
def test_a_malformed_document_is_refused_naming_the_field(doc: Any, names: str) -> None:
    with pytest.raises(StateError) as caught:
        engine_state.from_dict(doc)
    assert names in str(caught.value)


def test_decide_refuses_a_malformed_state_with_a_value_error() -> None:
    # ``servectl policy eval --state`` reports a ValueError as a state it never returned.
    policy = engine.EnginePolicy(config.AutoscalingConfig())
    with pytest.raises(ValueError, match="rates: expected a list"):
        policy.decide(make_snapshot(current=2, rps=10.0), {"rates": "x"})


def test_whole_float_counts_are_counts() -> None:
    typed = engine_state.from_dict({"behavior": {"recommendations": [[1.0, 3.0]]}})
    assert typed.behavior.recommendations == ((1.0, 3),)
    assert type(typed.behavior.recommendations[0][1]) is int


def test_a_state_handed_back_unchanged_is_not_read_again_but_a_changed_one_is() -> None:
    # The engine keeps the last document it returned (a loop hands it back as is); a
    # caller that set a key in it gets it read again, as a new document would be.
    policy = engine.EnginePolicy(config.AutoscalingConfig())

    def snap(t: float) -> snapshot.Snapshot:
        return make_snapshot(t, current=4, rps=100.0, cpu_usage_cores=2.0)

    def fresh(t: float, doc: dict[str, Any]) -> dict[str, Any]:
        """A new policy object with nothing in memory, given a copy of ``doc``."""
        return engine.EnginePolicy(policy.config).decide(snap(t), dict(doc))[1]

    _, state = policy.decide(snap(1000.0), {"service_s": 0.02})
    _, kept = policy.decide(snap(1002.0), state)
    assert kept == fresh(1002.0, state)
    kept["service_s"] = 0.05
    _, edited = policy.decide(snap(1004.0), kept)
    assert edited == fresh(1004.0, kept)
    assert edited["service_s"] > 0.04
