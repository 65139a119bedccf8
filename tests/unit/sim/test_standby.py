"""The simulated world's warm standby pool (issue 28; docs/standby.md): a scale-up takes
parked replicas first, each serving ``activation_s`` after it is asked for, the pool is
refilled behind it with replicas that load for a cold start, and the pool is billed apart
from the serving replicas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.backends.sim import run as sim_run
from servectl.planning.types import Plan
from servectl.sim import model, results, traces
from tests.unit.sim.test_world import Script, flat, plan, scenario

SERVICE = model.ServiceModel(cold_start_s=30, activation_s=1)


def pooled(scripted: Plan, size: int) -> Plan:
    """``scripted`` with a pool of ``size`` for each revision that takes traffic (what
    servectl's planner does; ``test_planner`` checks that rule)."""
    return dataclasses.replace(
        scripted,
        revisions=tuple(
            dataclasses.replace(rp, standby=size if rp.weight > 0 else 0)
            for rp in scripted.revisions
        ),
    )


def warm_fleet(pool: int, serving: int = 1) -> model.Fleet:
    """``serving`` ready replicas and ``pool`` parked ones, at t = 0."""
    fleet = model.Fleet(SERVICE)
    fleet.add(serving, created=-100.0, ready_at=-70.0)
    fleet.set_standby(-100.0, pool, ready_at=-70.0)
    fleet.update(0.0)
    return fleet


def ready_by_second(fleet: model.Fleet, seconds: range) -> list[int]:
    out = []
    for t in seconds:
        fleet.refresh(float(t))
        out.append(fleet.receiving_count)
    return out


def test_a_scale_up_takes_parked_replicas_first_ready_after_the_activation() -> None:
    fleet = warm_fleet(pool=2)
    assert fleet.parked_count(0.0) == 2
    fleet.scale_to(10.0, 4)  # +3: two parked (ready at 11), one cold (ready at 40)
    assert fleet.active_count == 4
    seen = ready_by_second(fleet, range(10, 42))
    assert seen[:1] == [1]  # at 10: asked, not yet serving
    assert seen[1:30] == [3] * 29  # 11 .. 39: the two activated ones serve
    assert seen[30:] == [4, 4]  # 40: the cold one too


def test_the_pool_is_refilled_behind_an_activation_with_loading_replicas() -> None:
    fleet = warm_fleet(pool=2)
    fleet.scale_to(10.0, 2)  # one activation
    assert fleet.standby_count == 2  # refilled at once...
    assert fleet.parked_count(10.0) == 1  # ...with one still loading
    assert fleet.parked_count(39.0) == 1
    assert fleet.parked_count(40.0) == 2  # parked one cold start later


def test_a_loading_standby_replica_beats_a_cold_start() -> None:
    fleet = warm_fleet(pool=1)
    fleet.scale_to(10.0, 2)  # takes the parked one; the refill loads until 40
    fleet.scale_to(20.0, 3)  # takes the loading one: ready at 40, not 50
    seen = ready_by_second(fleet, range(20, 42))
    assert seen[19:] == [2, 3, 3]  # 39, 40, 41


def test_the_activation_is_never_earlier_than_asked() -> None:
    fleet = warm_fleet(pool=1)
    fleet.scale_to(10.0, 2)
    # Taken at 10 with the pool's replica parked long before: serving at 11, not before.
    assert ready_by_second(fleet, range(10, 12)) == [1, 2]


def test_a_smaller_pool_drops_loading_replicas_first_and_a_scale_down_never_parks() -> None:
    fleet = warm_fleet(pool=1, serving=3)
    fleet.set_standby(5.0, 3)  # two more, loading until 35
    fleet.set_standby(6.0, 1)
    assert fleet.standby_count == 1 and fleet.parked_count(6.0) == 1
    fleet.scale_to(7.0, 1)  # two go (idle: drained at once); none is parked
    assert fleet.size == 1 and fleet.standby_count == 1


def test_an_activation_never_takes_longer_than_a_cold_start() -> None:
    with pytest.raises(ValueError, match="activation_s"):
        model.ServiceModel(activation_s=-1)
    fleet = model.Fleet(model.ServiceModel(cold_start_s=0, activation_s=1))
    fleet.set_standby(0.0, 1)
    fleet.scale_to(5.0, 1)
    fleet.update(5.0)
    assert fleet.receiving_count == 1


def step_trace() -> traces.Trace:
    return traces.step(100, 400, 60, 180)


def test_in_the_world_a_step_is_served_by_standby_within_the_activation() -> None:
    services = {1: SERVICE}
    # Two replicas until 62, then 5: one second's activation with a pool of 3, the cold
    # start without one.
    controller = Script({0: plan((1, 2, 100)), 62: plan((1, 5, 100))})
    cold = sim_run.simulate_rollout(scenario(step_trace(), services), controller)
    controller = Script({0: pooled(plan((1, 2, 100)), 3), 62: pooled(plan((1, 5, 100)), 3)})
    warm = sim_run.simulate_rollout(scenario(step_trace(), services, standby=3), controller)
    assert warm.total_ready[63] == 5 and cold.total_ready[63] == 2
    assert cold.total_ready[92] == 5
    assert warm.met_slo > cold.met_slo
    # The pool: 3 parked from the start; at 62, 3 taken and 3 started loading (parked at 92).
    assert warm.standby is not None and warm.parked is not None
    assert (warm.standby == 3).all()
    assert warm.parked[61] == 3 and warm.parked[62] == 0 and warm.parked[92] == 3
    # Standby is billed apart: the serving replicas are the same in both runs.
    np.testing.assert_array_equal(warm.total_replicas, cold.total_replicas)
    assert warm.standby_seconds == 3 * 180
    assert warm.parked_seconds == 3 * 180 - 3 * 30


def test_each_plan_sets_the_pools_and_a_revision_left_out_loses_its_own() -> None:
    services = {1: SERVICE, 2: SERVICE}
    controller = Script(
        {
            0: pooled(plan((1, 2, 100), (2, 1, 0)), 2),
            30: pooled(plan((1, 2, 50), (2, 2, 50)), 2),
            60: pooled(plan((2, 2, 100)), 2),
        }
    )
    result = sim_run.simulate_rollout(scenario(flat(50, 90), services, standby=2), controller)
    assert result.standby is not None
    assert result.standby[10] == 2  # v1's only: v2 has no traffic yet
    assert result.standby[40] == 4  # both take traffic
    assert result.standby[70] == 2  # v1 left the plan: its pool went with it


def test_a_plan_with_a_negative_pool_is_refused() -> None:
    revision = dataclasses.replace(plan((1, 2, 100)).revisions[0], standby=-1)
    bad = dataclasses.replace(plan((1, 2, 100)), revisions=(revision,))
    with pytest.raises(ValueError, match="standby must be"):
        sim_run.simulate_rollout(scenario(flat(50, 10), {1: SERVICE}), Script({0: bad}))


def test_the_cost_counts_loading_standby_whole_and_parked_at_the_parked_share() -> None:
    cost = results.standby_cost(1000.0, standby_seconds=300.0, parked_seconds=200.0)
    assert cost == pytest.approx(1000.0 + 100.0 + results.PARKED_COST * 200.0)


def test_simulate_reports_the_pool_apart_from_the_serving_replicas() -> None:
    from servectl.sim import suite

    trace = traces.step(100, 400, 120, 300)
    svc = suite.service()
    policy = suite.policies(svc, ["servectl"])["servectl"]
    without = sim_run.simulate(trace, policy(trace), svc)
    with_pool = sim_run.simulate(trace, policy(trace), svc, standby=4)
    assert without.standby_seconds == 0 and without.cost_replica_seconds == without.replica_seconds
    assert with_pool.standby_seconds >= 4 * 300
    assert with_pool.cost_replica_seconds > with_pool.replica_seconds
    # The step's replicas serve within seconds, not a cold start: fewer requests miss.
    assert with_pool.met_slo > without.met_slo
    assert with_pool.recovery_s is not None and without.recovery_s is not None
    assert with_pool.recovery_s < without.recovery_s


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=40),  # seconds since the last operation
            st.integers(min_value=0, max_value=12),  # serving replicas wanted
            st.integers(min_value=0, max_value=6),  # pool wanted
        ),
        min_size=1,
        max_size=25,
    )
)
def test_the_pool_holds_its_target_and_no_replica_serves_sooner_than_it_can(
    operations: list[tuple[int, int, int]],
) -> None:
    fleet = warm_fleet(pool=2, serving=2)
    now = 0.0
    for gap, desired, pool in operations:
        now += gap
        fleet.refresh(now)
        before = set(fleet.ids.tolist())
        parked, loading = fleet.parked_count(now), fleet.standby_count - fleet.parked_count(now)
        fleet.scale_to(now, desired)
        fleet.set_standby(now, pool)
        assert fleet.standby_count == pool
        assert (fleet.pool <= now + SERVICE.cold_start_s).all()
        new = ~np.isin(fleet.ids, list(before))
        ready_at = np.sort(fleet.ready_at[new])
        # Parked ones first (one activation away), then loading ones, then cold starts.
        fast = min(parked, int(new.sum()))
        assert (ready_at[:fast] == now + SERVICE.activation_s).all()
        assert (ready_at >= now + SERVICE.activation_s).all()
        assert (ready_at <= now + SERVICE.cold_start_s).all()
        cold = int(new.sum()) - fast - loading
        if cold > 0:
            assert (ready_at[-cold:] == now + SERVICE.cold_start_s).all()
        assert fleet.active_count == desired


def test_every_request_is_accounted_for_once_with_a_pool() -> None:
    load = np.concatenate([np.full(60, 100.0), np.full(60, 600.0), np.full(60, 100.0)])
    trace = traces.Trace("burst", np.concatenate([load, np.zeros(60)]))
    schedule = {0: 2, 62: 8, 130: 2, 150: 9}
    controller = Script({at: pooled(plan((1, n, 100)), 3) for at, n in schedule.items()})
    result = sim_run.simulate_rollout(
        scenario(trace, {1: SERVICE}, standby=3, initial_replicas=2), controller, seed=2
    )
    counters = controller.seen[-1].revisions[0].counters
    assert counters is not None
    assert counters.requests == result.requests
    assert sum(counters.latency_buckets) == result.requests - result.lost
    assert result.standby is not None and (result.standby == 3).all()
    # The second scale-up comes 88 s after the first: the pool has parked again (30 s).
    assert result.total_ready[151] == 5 and result.total_ready[63] == 5
