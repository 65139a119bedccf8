"""simulate(): determinism, conservation, accounting, ticks, scores."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from servectl.autoscaling import decision, snapshot
from servectl.backends.sim import bench, run
from servectl.sim import model, results, traces

Fixed = bench.FixedReplicas


@dataclass
class Scripted:
    """Replica counts from a schedule {from_second: replicas}; records what it saw."""

    schedule: dict[int, int]
    period_s: float = 1.0
    name: str = "scripted"
    seen: list[snapshot.Snapshot] = field(default_factory=list)

    def initial_state(self) -> dict[str, Any]:
        return {"calls": 0}

    def decide(
        self, snap: snapshot.Snapshot, state: dict[str, Any]
    ) -> tuple[decision.Decision, dict[str, Any]]:
        self.seen.append(snap)
        due = [at for at in self.schedule if at <= snap.time]
        replicas = self.schedule[max(due)] if due else snap.replicas.current
        return (
            decision.Decision(replicas=replicas, reason=decision.Reason.POLICY, signal="script"),
            {"calls": state["calls"] + 1},
        )


@dataclass
class Proportional:
    """A toy: replicas = ceil(observed rps x service time / threads / 0.6)."""

    service: model.ServiceModel
    period_s: float = 2.0
    name: str = "proportional"

    def initial_state(self) -> dict[str, Any]:
        return {}

    def decide(
        self, snap: snapshot.Snapshot, state: dict[str, Any]
    ) -> tuple[decision.Decision, dict[str, Any]]:
        rps = snap.signals.rps
        if rps is None:
            return decision.Decision(snap.replicas.current, decision.Reason.METRICS_MISSING), state
        want = math.ceil(rps * self.service.service_s / self.service.threads_per_replica / 0.6)
        return decision.Decision(want, decision.Reason.SIGNAL, signal="rps"), state


SERVICE = model.ServiceModel()


def _assert_same(a: results.SimResult, b: results.SimResult) -> None:
    for name in ("arrivals", "ready", "desired", "replicas", "p99_ms", "slo_met", "cpu_cores"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.to_record() == b.to_record()
    assert a.decisions == b.decisions


def test_same_seed_same_result() -> None:
    trace = traces.steady(400, 300, seed=1)
    _assert_same(
        run.simulate(trace, Proportional(SERVICE), SERVICE, seed=3),
        run.simulate(trace, Proportional(SERVICE), SERVICE, seed=3),
    )


def test_different_seed_different_arrivals() -> None:
    trace = traces.steady(400, 120, seed=1)
    a = run.simulate(trace, Fixed(8), SERVICE, seed=1)
    b = run.simulate(trace, Fixed(8), SERVICE, seed=2)
    assert not np.array_equal(a.arrivals, b.arrivals)


def test_every_policy_sees_the_same_requests() -> None:
    trace = traces.step(200, 800, 100, 300)
    results = [
        run.simulate(trace, policy, SERVICE, seed=9)
        for policy in (Fixed(4), Fixed(14), Proportional(SERVICE), Scripted({0: 2, 50: 20}))
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(other.arrivals, results[0].arrivals)
        assert other.requests == results[0].requests
    # The same offered work: CPU used over the run is the same wherever it ran (within
    # what is still queued at the end).
    assert results[1].cpu_cores.sum() == pytest.approx(results[2].cpu_cores.sum(), rel=1e-3)


def test_requests_with_no_ready_replica_are_lost_at_the_router() -> None:
    """Start from zero: three replicas are ordered at t = 0 and are ready after the cold
    start; what arrives before is lost at once (a 503, as HAProxy, Envoy and a Service
    without endpoints answer: the world's one rule) and counted as failed."""
    trace = traces.Trace("flat", np.full(120, 50.0))
    result = run.simulate(
        trace, Scripted({0: 3}), SERVICE, min_replicas=0, initial_replicas=0, seed=4
    )
    cold = int(SERVICE.cold_start_s)
    assert result.requests == int(result.arrivals.sum())
    assert result.ready[cold - 1] == 0 and result.ready[cold] == 3
    early = int(result.arrivals[:cold].sum())
    assert early > 0
    assert early <= result.failed < early + 10  # then served (on time, 3 replicas suffice)
    assert result.met_slo + result.failed <= result.requests
    assert np.isinf(result.p99_ms[:cold][result.arrivals[:cold] > 0]).all()
    assert (result.slo_met[:cold][result.arrivals[:cold] > 0] == 0.0).all()
    assert result.p99_ms[60] < 150
    assert not np.isnan(result.p99_ms[:120][result.arrivals > 0]).any()


def test_requests_are_conserved_under_overload() -> None:
    trace = traces.Trace("flat", np.full(60, 500.0))
    result = run.simulate(trace, Fixed(2), SERVICE, seed=1)
    assert result.requests == int(result.arrivals.sum())
    assert result.failed > 0 and result.slo_attainment < 0.2


def test_replica_seconds_accounting() -> None:
    trace = traces.Trace("flat", np.full(200, 100.0))
    fixed = run.simulate(trace, Fixed(5), SERVICE, initial_replicas=5)
    assert fixed.replica_seconds == 5 * 200
    assert fixed.replicas.tolist() == [5] * 200
    up = run.simulate(trace, Scripted({0: 2, 100: 6}), SERVICE, initial_replicas=2)
    assert up.replica_seconds == 2 * 100 + 6 * 100  # starting replicas are billed
    assert up.ready[129] == 2 and up.ready[130] == 6
    down = run.simulate(trace, Scripted({0: 6, 100: 2}), SERVICE, initial_replicas=6)
    # Draining replicas are billed for the backlog they still had (well under a second).
    assert 6 * 100 + 2 * 100 <= down.replica_seconds < 6 * 100 + 2 * 100 + 4
    assert down.failed == 0 and down.requests == int(down.arrivals.sum())


def test_shrink_loses_no_request() -> None:
    trace = traces.Trace("flat", np.full(300, 700.0))
    result = run.simulate(
        trace, Scripted({0: 12, 60: 8, 120: 10, 180: 8}), SERVICE, initial_replicas=12
    )
    assert result.requests == int(result.arrivals.sum())
    assert result.failed == 0
    assert result.scale_actions == 3 and result.direction_reversals == 2


def test_policy_ticks_state_and_clamping() -> None:
    trace = traces.Trace("flat", np.full(61, 100.0))
    policy = Scripted({0: 500, 30: 0}, period_s=5.0)
    result = run.simulate(trace, policy, SERVICE, min_replicas=2, max_replicas=7)
    assert [d.time for d in result.decisions] == [float(t) for t in range(0, 61, 5)]
    assert {d.replicas for d in result.decisions} == {7, 2}
    assert result.decisions[0].requested == 500 and result.decisions[0].reason == "POLICY"
    assert result.desired[:30].tolist() == [7] * 30 and result.desired[30:].tolist() == [2] * 31
    assert [s.replicas.current for s in policy.seen[:2]] == [2, 7]  # initial: 2 (clamped)
    assert all(s.replicas.min == 2 and s.replicas.max == 7 for s in policy.seen)
    assert not run.simulate(trace, policy, SERVICE, record_decisions=False).decisions


def test_state_is_carried_between_calls() -> None:
    seen: list[int] = []

    @dataclass
    class Counter:
        name: str = "counter"
        period_s: float = 1.0

        def initial_state(self) -> dict[str, Any]:
            return {"n": 0}

        def decide(
            self, snap: snapshot.Snapshot, state: dict[str, Any]
        ) -> tuple[decision.Decision, dict[str, Any]]:
            seen.append(state["n"])
            return decision.Decision(2, decision.Reason.POLICY), {"n": state["n"] + 1}

    run.simulate(traces.Trace("flat", np.full(5, 10.0)), Counter(), SERVICE)
    assert seen == [0, 1, 2, 3, 4]


def test_default_initial_replicas_fit_the_first_minute_at_70_percent() -> None:
    trace = traces.step(700, 100, 60, 120)
    assert results.initial_replicas_for(trace, SERVICE, 1, 100) == math.ceil(700 * 0.02 / 2 / 0.7)
    result = run.simulate(trace, Fixed(3, tick_s=1000.0), SERVICE)
    assert result.replicas[0] == 3  # the first tick at t=0 applies the policy at once
    assert results.initial_replicas_for(traces.Trace("z", np.zeros(10)), SERVICE, 0, 5) == 0


def test_recovery_after_a_step() -> None:
    trace = traces.step(200, 800, 120, 400)
    oracle_like = Scripted({0: 4, 80: 16})
    good = run.simulate(trace, oracle_like, SERVICE, initial_replicas=4)
    assert good.change_at_s == 120
    assert good.recovery_s is not None and good.recovery_s < 5
    starved = run.simulate(trace, Fixed(4), SERVICE, initial_replicas=4)
    assert starved.recovery_s == math.inf
    assert starved.to_record()["recovery"] == "never"
    # Scaled 5 s late: ready at 155; 35 s at 2x overload leave each old replica ~3500
    # requests (35 s of work) behind, which round robin drains at only 50 rps each.
    late = run.simulate(trace, Scripted({0: 4, 125: 16}), SERVICE, initial_replicas=4)
    assert late.recovery_s is not None and 90 <= late.recovery_s <= 120
    flat = run.simulate(traces.ramp(100, 200, 300), Fixed(4), SERVICE)
    assert flat.recovery_s is None and flat.to_record()["recovery"] == "none"


def test_record_is_strict_json() -> None:
    result = run.simulate(traces.step(100, 400, 60, 120), Fixed(2), SERVICE)
    record = result.to_record()
    text = json.dumps(record, allow_nan=False)
    assert json.loads(text)["requests"] == result.requests
    assert record["slo_attainment"] == result.met_slo / result.requests


def test_invalid_arguments() -> None:
    trace = traces.Trace("flat", np.full(5, 1.0))
    with pytest.raises(ValueError, match="min_replicas"):
        run.simulate(trace, Fixed(1), SERVICE, min_replicas=3, max_replicas=2)
    with pytest.raises(ValueError, match="period_s"):
        run.simulate(trace, Fixed(1, tick_s=0.0), SERVICE)
