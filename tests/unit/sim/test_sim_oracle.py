"""The oracle: perfect foresight, ready when needed, the floor for replica-seconds."""

from __future__ import annotations

import numpy as np
import pytest

from servectl.autoscaling import decision, policy, queueing, snapshot
from servectl.backends.sim import bench, run
from servectl.sim import model, oracle, traces

SERVICE = model.ServiceModel()
COLD = int(SERVICE.cold_start_s)


def test_erlang_c_sizing_uses_the_slo_wait_budget() -> None:
    budget = SERVICE.slo_ms / 1000 - SERVICE.service_quantile_s(0.99)
    assert 0.09 < budget < 0.1  # 150 ms minus a ~54 ms service p99
    needed = oracle.needed_replicas(
        np.array([0.0, 100.0, 800.0]), SERVICE, 100, sizing=oracle.Sizing.ERLANG_C
    )
    assert needed[0] == 0
    assert needed[2] == queueing.replicas_for_latency(800.0, 0.02, 2, 0.99, budget, 100)
    assert needed[1] < needed[2]


def test_simulated_sizing_is_calibrated_on_the_simulator() -> None:
    rr = [oracle.replica_rate_limit(SERVICE, model.Routing.ROUND_ROBIN, n) for n in (1, 3, 9)]
    assert rr[0] < rr[1] < rr[2] < SERVICE.capacity_rps  # round robin smooths more with n
    rnd = [oracle.replica_rate_limit(SERVICE, model.Routing.RANDOM, n) for n in (1, 3, 9)]
    assert rnd[0] == rnd[1] == rnd[2] == rr[0]  # random routing: Poisson whatever n
    # Just under the limit n replicas keep 99 % of requests within the SLO; over it, not.
    n = 6
    limit = n * oracle.replica_rate_limit(SERVICE, model.Routing.ROUND_ROBIN, n)
    for load, meets in ((0.97 * limit, True), (1.05 * limit, False)):
        result = run.simulate(
            traces.Trace("flat", np.full(600, load)),
            bench.FixedReplicas(n),
            SERVICE,
            initial_replicas=n,
        )
        assert (result.slo_attainment >= 0.99) is meets, load
    # The M/M/c rule asks for more under round robin (Poisson per replica, additive p99s).
    peak = np.array([800.0])
    assert (
        oracle.needed_replicas(peak, SERVICE, 100)[0]
        < oracle.needed_replicas(peak, SERVICE, 100, sizing=oracle.Sizing.ERLANG_C)[0]
    )


def test_oracle_is_a_policy_with_its_reason() -> None:
    trace = traces.step(200, 800, 100, 200)
    o = oracle.OraclePolicy(trace, SERVICE)
    assert isinstance(o, policy.Policy)
    assert o.name == "oracle" and o.period_s == 1.0
    snap = snapshot.Snapshot(time=0.0, replicas=snapshot.Replicas(current=1, ready=1))
    d, state = o.decide(snap, o.initial_state())
    assert d.reason is decision.Reason.ORACLE and state == {}
    with pytest.raises(ValueError):
        oracle.OraclePolicy(trace, SERVICE, period_s=0.5)


@pytest.mark.parametrize("sizing", list(oracle.Sizing))
def test_oracle_is_ready_when_needed_and_scales_ahead_of_the_cold_start(
    sizing: oracle.Sizing,
) -> None:
    trace = traces.step(200, 800, 300, 600)
    o = oracle.OraclePolicy(trace, SERVICE, sizing=sizing)
    result = run.simulate(trace, o, SERVICE)
    # Everyone starts from the same count; from one cold start on, the oracle is ahead.
    assert np.all(result.ready[COLD:] >= o.needed[COLD:])
    first_up = int(np.flatnonzero(np.diff(result.desired[COLD:]) > 0)[0]) + 1 + COLD
    assert first_up == 300 - COLD
    assert result.slo_attainment > 0.995


def test_a_burst_shorter_than_the_cold_start_is_covered() -> None:
    """The two-point max(needed(t), needed(t + cold)) would drop the replicas for a 10 s
    burst at t = 100..109 when t = 71..99; the window max keeps them."""
    rates = np.full(200, 200.0)
    rates[100:110] = 900.0
    trace = traces.Trace("burst", rates)
    o = oracle.OraclePolicy(trace, SERVICE)
    two_point = np.maximum(o.needed[:-COLD], o.needed[COLD:])
    assert np.any(two_point[70:100] < o.needed[100])
    result = run.simulate(trace, o, SERVICE)
    assert np.all(result.ready[COLD:] >= o.needed[COLD:])
    assert result.desired[70] == o.needed[100]


def test_oracle_spends_no_more_than_any_fixed_count_meeting_the_slo() -> None:
    trace = traces.step(200, 800, 300, 600)
    o = run.simulate(trace, oracle.OraclePolicy(trace, SERVICE), SERVICE)
    at_capacity = int(np.ceil(800 / SERVICE.capacity_rps))  # fewer can't keep up at all
    for replicas in range(at_capacity, 40):
        fixed = run.simulate(
            trace, bench.FixedReplicas(replicas), SERVICE, initial_replicas=replicas
        )
        if fixed.slo_attainment >= o.slo_attainment:
            assert o.replica_seconds <= fixed.replica_seconds
            assert o.replica_seconds < 0.85 * fixed.replica_seconds  # the low half is cheap
            break
    else:
        raise AssertionError("no fixed count met the SLO")
