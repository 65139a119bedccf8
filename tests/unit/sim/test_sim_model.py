"""The replica/queue model: Lindley waits, M/M/c sanity, lifecycle, drains, in-flight."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servectl.autoscaling import queueing
from servectl.sim import model


def _unsorted_waits(outcome: model.StepOutcome) -> np.ndarray:
    waits = np.empty(outcome.order.size)
    waits[outcome.order] = outcome.wait_s
    return waits


def test_latency_buckets_match_tf_serving() -> None:
    bounds = model.LATENCY_BUCKETS_US
    assert bounds.size == 33 and model.LATENCY_BUCKET_COUNT == 34
    assert bounds[0] == 10.0
    assert np.allclose(bounds[1:] / bounds[:-1], 1.8)
    assert bounds[-1] == pytest.approx(10 * 1.8**32)


def test_lindley_matches_a_request_by_request_queue() -> None:
    """Every wait equals a plain per-request FIFO simulation (speed-c server, RR routing
    continuing across seconds, backlog carried across seconds)."""
    service = model.ServiceModel(threads_per_replica=2, cold_start_s=0)
    rng = np.random.default_rng(7)
    fleet = model.Fleet(service)
    fleet.add(3, created=0.0, ready_at=0.0)
    fleet.update(0.0)
    free_at = np.zeros(3)  # when each reference server finishes its queued work
    rotation = 0
    for t in range(40):
        count = int(rng.integers(0, 400))
        offsets = np.sort(rng.random(count))
        service_s = rng.exponential(0.02, size=count) * (3.0 if t % 7 == 0 else 1.0)
        outcome = fleet.step(t, offsets, service_s)
        got = _unsorted_waits(outcome)
        expected = np.empty(count)
        for i in range(count):
            replica = (rotation + i) % 3
            arrival = t + offsets[i]
            expected[i] = max(0.0, free_at[replica] - arrival)
            free_at[replica] = max(free_at[replica], arrival) + service_s[i] / 2
        rotation = (rotation + count) % 3
        np.testing.assert_allclose(got, expected, atol=1e-9)
        np.testing.assert_allclose(fleet.backlog, np.maximum(free_at - (t + 1), 0.0), atol=1e-9)


def test_work_done_is_cpu_seconds_and_capped_by_threads() -> None:
    service = model.ServiceModel(threads_per_replica=2, cold_start_s=0)
    fleet = model.Fleet(service)
    fleet.add(1, created=0.0, ready_at=0.0)
    fleet.update(0.0)
    # 3 core-seconds of work at t=0 on a 2-core replica: 2 done now, 1 carried over.
    outcome = fleet.step(0, np.array([0.0, 0.0, 0.0]), np.array([1.0, 1.0, 1.0]))
    assert outcome.cpu_cores == pytest.approx(2.0)
    assert fleet.backlog[0] == pytest.approx(0.5)  # server-seconds at speed 2
    assert fleet.step(1, np.empty(0), np.empty(0)).cpu_cores == pytest.approx(1.0)
    assert fleet.cpu_seconds_total == pytest.approx(3.0)


def _mean_wait(
    service: model.ServiceModel, replicas: int, rate: float, routing: model.Routing
) -> float:
    seconds = 3000
    stream = model.RequestStream(
        np.full(seconds, rate), service, seed=11, with_routing=routing is model.Routing.RANDOM
    )
    fleet = model.Fleet(service, routing)
    fleet.add(replicas, created=-60.0, ready_at=-60.0)
    fleet.update(0.0)
    waits = []
    for t in range(seconds):
        offsets, service_s, route = stream.second(t)
        outcome = fleet.step(t, offsets, service_s, route)
        if t >= 60:  # past the empty start
            waits.append(outcome.wait_s)
    return float(np.concatenate(waits).mean())


def test_mm1_mean_wait_matches_erlang_c_at_70_percent() -> None:
    """One replica, one thread, exponential service: the model is exactly M/M/1."""
    service = model.ServiceModel(
        threads_per_replica=1, distribution=model.ServiceDistribution.EXPONENTIAL
    )
    rate = 0.7 / service.service_s
    theory = queueing.erlang_c(1, 0.7) / (1 / service.service_s - rate)
    simulated = _mean_wait(service, 1, rate, model.Routing.ROUND_ROBIN)
    assert simulated == pytest.approx(theory, rel=0.15)


def test_two_threads_are_a_pessimistic_fast_server() -> None:
    """c = 2 is approximated by one server of speed 2: its mean wait is the fast M/M/1
    one, rho / (c mu - lambda), which exceeds Erlang C's by rho / C(c, a) (~21 % at
    70 %). Documented in docs/simulator.md."""
    service = model.ServiceModel(
        threads_per_replica=2, distribution=model.ServiceDistribution.EXPONENTIAL
    )
    rate = 0.7 * 2 / service.service_s
    capacity = 2 / service.service_s
    erlang = queueing.erlang_c(2, rate * service.service_s) / (capacity - rate)
    fast_server = 0.7 / (capacity - rate)
    simulated = _mean_wait(service, 1, rate, model.Routing.ROUND_ROBIN)
    assert simulated == pytest.approx(fast_server, rel=0.15)
    assert simulated > erlang


def test_random_routing_keeps_poisson_per_replica_and_round_robin_smooths_it() -> None:
    service = model.ServiceModel(
        threads_per_replica=1, distribution=model.ServiceDistribution.EXPONENTIAL
    )
    per_replica = 0.7 / service.service_s
    theory = queueing.erlang_c(1, 0.7) / (1 / service.service_s - per_replica)
    random_wait = _mean_wait(service, 4, 4 * per_replica, model.Routing.RANDOM)
    rr_wait = _mean_wait(service, 4, 4 * per_replica, model.Routing.ROUND_ROBIN)
    assert random_wait == pytest.approx(theory, rel=0.15)
    assert rr_wait < 0.7 * theory  # Erlang-4 inter-arrivals queue much less


def test_request_stream_is_deterministic_and_sorted() -> None:
    service = model.ServiceModel()
    rps = np.full(200, 300.0)
    a = model.RequestStream(rps, service, seed=5)
    b = model.RequestStream(rps, service, seed=5)
    # Read b out of order: a second's requests never depend on what came before.
    late = [b.second(t) for t in (150, 3, 70)]
    for t, (offsets, service_s, _) in zip((150, 3, 70), late, strict=True):
        a_offsets, a_service, _ = a.second(t)
        assert np.array_equal(offsets, a_offsets) and np.array_equal(service_s, a_service)
        assert np.all(np.diff(offsets) >= 0) and offsets.min() >= 0 and offsets.max() < 1
    assert a.counts.sum() == pytest.approx(200 * 300, rel=0.02)


def test_service_distribution_mean_cv_and_p99() -> None:
    service = model.ServiceModel(service_time_ms=20, service_cv=0.5)
    draws = service.sample_service_s(np.random.default_rng(0), 400_000)
    assert draws.mean() == pytest.approx(0.020, rel=0.01)
    assert draws.std() / draws.mean() == pytest.approx(0.5, rel=0.02)
    assert np.quantile(draws, 0.99) == pytest.approx(service.service_quantile_s(0.99), rel=0.02)
    exponential = model.ServiceModel(distribution=model.ServiceDistribution.EXPONENTIAL)
    assert exponential.service_quantile_s(0.99) == pytest.approx(0.020 * math.log(100))


def test_cold_start_delays_readiness_exactly() -> None:
    service = model.ServiceModel(cold_start_s=30)
    fleet = model.Fleet(service)
    fleet.add(1, created=-100.0, ready_at=-70.0)
    fleet.update(0.0)
    fleet.scale_to(10.0, 3)
    ready_by_second = []
    for t in range(10, 45):
        fleet.refresh(float(t))
        ready_by_second.append(fleet.receiving_count)
    assert ready_by_second[: 40 - 10] == [1] * 30
    assert ready_by_second[40 - 10 :] == [3] * 5
    assert fleet.active_count == 3


def test_scale_down_removes_starting_first_and_drains_the_rest() -> None:
    service = model.ServiceModel(threads_per_replica=1, cold_start_s=5)
    fleet = model.Fleet(service)
    fleet.add(2, created=-10.0, ready_at=-5.0)
    fleet.update(0.0)
    # Give both ready replicas a long backlog: 4 requests of 1.5 s each.
    fleet.step(0, np.zeros(4), np.full(4, 1.5))
    fleet.refresh(1.0)
    fleet.scale_to(1.0, 4)  # two starting replicas
    assert fleet.active_count == 4 and fleet.receiving_count == 2
    billed = fleet.scale_to(1.0, 1)  # both starting go, then the newest ready drains
    assert fleet.active_count == 1 and fleet.draining_count == 1
    assert billed == pytest.approx(2.0)  # its remaining 2 server-seconds of backlog
    assert fleet.receiving_count == 1
    drained_at = None
    for t in range(1, 10):
        fleet.refresh(float(t))
        if fleet.draining_count == 0 and drained_at is None:
            drained_at = t
        fleet.step(t, np.empty(0), np.empty(0))
    assert drained_at == 4  # 3 s of work left at t=1 (2 queued + the rest of one running)
    assert fleet.size == 1


def test_inflight_obeys_littles_law() -> None:
    service = model.ServiceModel()
    rate = 600.0
    seconds = 600
    stream = model.RequestStream(np.full(seconds, rate), service, seed=2)
    fleet = model.Fleet(service)
    fleet.add(9, created=-60.0, ready_at=-60.0)
    fleet.update(0.0)
    inflight = []
    latencies = []
    for t in range(seconds):
        offsets, service_s, _ = stream.second(t)
        outcome = fleet.step(t, offsets, service_s)
        inflight.append(outcome.inflight)
        latencies.append(outcome.wait_s + service_s[outcome.order])
    lam = stream.counts.mean()
    mean_latency = float(np.concatenate(latencies).mean())
    assert np.mean(inflight[10:]) == pytest.approx(lam * mean_latency, rel=0.02)
    # Every request left: counters balance once the queues are empty.
    for t in range(seconds, seconds + 5):
        fleet.step(t, np.empty(0), np.empty(0))
    assert int(fleet.in_system.sum()) == 0
    assert fleet.inflight_seconds_total == pytest.approx(float(np.concatenate(latencies).sum()))


# ---------------------------------------------------------------- least-request routing

LEAST = model.Routing.LEAST_REQUEST


def _fleet(
    replicas: int, routing: model.Routing = LEAST, threads: int = 1, cold_start_s: float = 0.0
) -> model.Fleet:
    service = model.ServiceModel(threads_per_replica=threads, cold_start_s=cold_start_s)
    fleet = model.Fleet(service, routing)
    fleet.add(replicas, created=-10.0, ready_at=-10.0)
    fleet.update(0.0)
    return fleet


def _columns_and_waits(outcome: model.StepOutcome) -> tuple[np.ndarray, np.ndarray]:
    """The replica column and wait of each request, in arrival order."""
    assert outcome.columns is not None
    columns = np.empty(outcome.order.size, dtype=np.int64)
    columns[outcome.order] = outcome.columns
    return columns, _unsorted_waits(outcome)


def test_least_request_steers_around_a_replica_busy_with_a_slow_request() -> None:
    """Replica 0 takes a 0.9 s request; the fast ones after it all find replica 1 with
    nothing outstanding, where round robin would queue every other one behind the slow one."""
    offsets = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    service_s = np.array([0.9, 0.01, 0.01, 0.01, 0.01])
    columns, waits = _columns_and_waits(_fleet(2).step(0, offsets, service_s))
    assert columns.tolist() == [0, 1, 1, 1, 1]
    assert waits == pytest.approx([0.0] * 5, abs=1e-12)
    rr_columns, rr_waits = _columns_and_waits(
        _fleet(2, model.Routing.ROUND_ROBIN).step(0, offsets, service_s)
    )
    assert rr_columns.tolist() == [0, 1, 0, 1, 0]
    assert rr_waits[2] == pytest.approx(0.7) and rr_waits[4] == pytest.approx(0.51)


def test_least_request_counts_requests_not_work() -> None:
    """Outstanding requests are counted whatever their size, as a router does: replica 0
    holding two short requests counts as busier than replica 1 holding one long one."""
    offsets = np.array([0.0, 0.0, 0.0, 0.05])
    service_s = np.array([0.1, 1.0, 0.1, 0.1])
    columns, waits = _columns_and_waits(_fleet(2).step(0, offsets, service_s))
    # 0 -> r0, 1 -> r1 (none there), 2 -> a 1-1 tie, the rotation after r1 wraps to r0;
    # at 0.05 r0 holds 2 (until 0.1 and 0.2), r1 holds 1 (until 1.0): r1, behind 0.95 s.
    assert columns.tolist() == [0, 1, 0, 1]
    assert waits == pytest.approx([0.0, 0.0, 0.1, 0.95], abs=1e-12)


def test_least_request_ties_go_round_robin_and_equal_round_robin_when_always_idle() -> None:
    """Every request leaves before the next arrives: every arrival is a tie at 0, and ties
    rotate exactly as round robin does, across seconds."""
    rng = np.random.default_rng(4)
    least, rr = _fleet(3), _fleet(3, model.Routing.ROUND_ROBIN)
    for t in range(5):
        count = int(rng.integers(1, 8))
        offsets = np.arange(count) / 8.0
        service_s = np.full(count, 0.1)  # < 1/8 s: gone before the next arrival
        got, got_waits = _columns_and_waits(least.step(t, offsets, service_s))
        want, _ = _columns_and_waits(rr.step(t, offsets, service_s))
        assert got.tolist() == want.tolist()
        assert got_waits == pytest.approx([0.0] * count, abs=1e-12)


def test_least_request_simultaneous_arrivals_fill_level_by_level() -> None:
    """Requests arriving at the same instant are taken in order, each seeing the ones before
    it: 7 at once on 3 idle replicas give 3, 2, 2 (in rotation order)."""
    columns, waits = _columns_and_waits(_fleet(3).step(0, np.zeros(7), np.full(7, 0.5)))
    assert columns.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 1.0], abs=1e-12)


def test_a_departure_at_the_arrival_instant_has_left() -> None:
    offsets = np.array([0.0, 0.2, 0.25, 0.5])
    service_s = np.array([0.1, 0.75, 0.25, 0.125])
    columns, waits = _columns_and_waits(_fleet(2).step(0, offsets, service_s))
    # 0 -> r0 (gone at 0.1); 1: a 0-0 tie, the rotation gives r1 (until 0.95); 2: r0 (none
    # there, until exactly 0.5). At 0.5 r0 has nothing outstanding, r1 one: r0. Were the
    # request leaving at 0.5 still counted, the 1-1 tie would go to r1 by rotation.
    assert columns.tolist() == [0, 1, 0, 0]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.0], abs=1e-12)


def test_least_request_never_picks_a_starting_or_draining_replica() -> None:
    fleet = _fleet(3, cold_start_s=30.0)
    fleet.step(0, np.array([0.0, 0.0, 0.0]), np.full(3, 5.0))  # one long request each
    fleet.refresh(1.0)
    fleet.scale_to(1.0, 2)  # column 2 drains with 1 outstanding
    fleet.scale_to(1.0, 4)  # columns 3 and 4 start (cold start 30 s): nothing outstanding
    assert fleet.draining.tolist() == [False, False, True, False, False]
    assert fleet.receiving_count == 2
    for t in range(1, 4):
        fleet.refresh(float(t))
        columns, _ = _columns_and_waits(fleet.step(t, np.linspace(0.0, 0.9, 10), np.full(10, 0.05)))
        assert set(columns.tolist()) <= {0, 1}


def test_a_replica_ready_mid_run_takes_the_load_until_it_catches_up() -> None:
    """Two replicas carry 4 outstanding requests each into second 1; a third becomes ready
    at 1 with none, so it takes every arrival until its count reaches theirs."""
    fleet = _fleet(2, threads=1)
    fleet.step(0, np.full(10, 0.5), np.full(10, 0.4))  # 5 each, leaving at 0.9 ... 2.5
    fleet.add(1, created=-29.0, ready_at=1.0)
    fleet.update(1.0)
    assert fleet.receiving_count == 3
    # At 1.0 the old replicas still hold 4 each (leaving at 1.3, 1.7, 2.1 and 2.5).
    offsets = np.array([0.0, 0.0, 0.0, 0.0])
    columns, waits = _columns_and_waits(fleet.step(1, offsets, np.full(4, 0.01)))
    assert columns.tolist() == [2, 2, 2, 2]
    assert waits == pytest.approx([0.0, 0.01, 0.02, 0.03], abs=1e-12)
    rr = _fleet(2, model.Routing.ROUND_ROBIN, threads=1)
    rr.step(0, np.full(10, 0.5), np.full(10, 0.4))
    rr.add(1, created=-29.0, ready_at=1.0)
    rr.update(1.0)
    rr_columns, _ = _columns_and_waits(rr.step(1, offsets, np.full(4, 0.01)))
    assert sorted(set(rr_columns.tolist())) == [0, 1, 2]


def test_least_request_follows_columns_when_a_replica_is_killed() -> None:
    """Killing column 0 renumbers column 2, which holds a long request, to 1: new requests
    keep avoiding it under its new column."""
    fleet = _fleet(3)
    columns, _ = _columns_and_waits(
        fleet.step(0, np.array([0.0, 0.1, 0.2]), np.array([0.05, 0.05, 5.0]))
    )
    assert columns.tolist() == [0, 1, 2]
    long_id = int(fleet.ids[2])
    assert fleet.kill(1.0, fleet.ids[:1]) == 0
    assert int(fleet.ids[1]) == long_id
    columns, _ = _columns_and_waits(fleet.step(1, np.array([0.0, 0.5]), np.full(2, 0.05)))
    assert columns.tolist() == [0, 0]  # 0 outstanding against the long request's 1


# One second of a scenario: a lifecycle action, then requests as (offset, service) in
# sixteenths of a second: exact in floats, so ties (equal counts, a departure at an
# arrival instant) happen and the reference below agrees with the fleet to the bit.
_ACTIONS = ("none", "none", "add_ready", "add_starting", "drain", "kill_oldest")
_Second = tuple[str, list[tuple[int, int]]]


@st.composite
def _lr_scenarios(draw: st.DrawFn) -> tuple[int, int, list[_Second]]:
    threads = draw(st.integers(1, 2))
    initial = draw(st.integers(1, 4))
    seconds = draw(
        st.lists(
            st.tuples(
                st.sampled_from(_ACTIONS),
                st.lists(st.tuples(st.integers(0, 15), st.integers(0, 40)), max_size=12),
            ),
            min_size=1,
            max_size=6,
        )
    )
    return threads, initial, seconds


@settings(max_examples=200, deadline=None)
@given(_lr_scenarios())
def test_least_request_always_picks_a_replica_with_the_fewest_outstanding(
    scenario: tuple[int, int, list[_Second]],
) -> None:
    """Against a slow reference, by replica id: every request's outstanding count at its
    arrival instant, recounted from every earlier request's departure (its own per-replica
    FIFO speed-c server, across seconds). The chosen replica is receiving, none has fewer
    outstanding, ties go to the first at or after the rotation pointer, and the wait is the
    reference's."""
    threads, initial, seconds = scenario
    service = model.ServiceModel(threads_per_replica=threads, cold_start_s=2.0)
    fleet = model.Fleet(service, LEAST)
    fleet.add(initial, created=-10.0, ready_at=-10.0)
    fleet.update(0.0)
    departures: dict[int, list[float]] = {}  # replica id -> its requests' departures
    free: dict[int, float] = {}  # replica id -> when its queue empties
    pointer = 0
    for t, (action, requests) in enumerate(seconds):
        now = float(t)
        fleet.refresh(now)
        if action == "add_ready":
            fleet.add(1, created=now - 10.0, ready_at=now)
            fleet.update(now)
        elif action == "add_starting":
            fleet.scale_to(now, fleet.active_count + 1)
        elif action == "drain" and fleet.active_count > 1:
            fleet.scale_to(now, fleet.active_count - 1)
        elif action == "kill_oldest" and fleet.size > 1:
            fleet.kill(now, fleet.ids[:1])
        receiving = [
            int(fleet.ids[c])
            for c in range(fleet.size)
            if fleet.ready_at[c] <= now and not fleet.draining[c]
        ]
        pairs = sorted(requests) if receiving else []
        offsets = np.array([x / 16.0 for x, _ in pairs])
        service_s = np.array([w / 16.0 for _, w in pairs])
        outcome = fleet.step(t, offsets, service_s)
        n = len(receiving)
        if n:  # the pointer is an index among the receiving replicas, as round robin's
            pointer %= n
        if not pairs:
            continue
        columns, waits = _columns_and_waits(outcome)
        for i in range(len(pairs)):
            arrival = t + offsets[i]
            outstanding = [sum(d > arrival for d in departures.get(r, [])) for r in receiving]
            chosen = int(fleet.ids[columns[i]])
            assert chosen in receiving
            k = receiving.index(chosen)
            assert outstanding[k] == min(outstanding)  # never a replica with strictly more
            tied = [
                j % n for j in range(pointer, pointer + n) if outstanding[j % n] == min(outstanding)
            ]
            assert k == tied[0]
            pointer = k + 1
            start = max(arrival, free.get(chosen, -math.inf))
            assert waits[i] == pytest.approx(start - arrival, abs=1e-12)
            free[chosen] = start + service_s[i] / threads
            departures.setdefault(chosen, []).append(start + service_s[i])
        pointer %= n


def _mean_wait_s(
    service: model.ServiceModel, replicas: int, rate: float, routing: model.Routing, seconds: int
) -> float:
    stream = model.RequestStream(np.full(seconds, rate), service, seed=3)
    fleet = model.Fleet(service, routing)
    fleet.add(replicas, created=-60.0, ready_at=-60.0)
    fleet.update(0.0)
    waits = []
    for t in range(seconds):
        offsets, service_s, _ = stream.second(t)
        outcome = fleet.step(t, offsets, service_s)
        if t >= 10:  # past the empty start
            waits.append(outcome.wait_s)
    return float(np.concatenate(waits).mean())


@pytest.mark.parametrize(
    ("threads", "replicas", "utilization", "seconds"),
    [(1, 4, 0.7, 300), (2, 15, 0.9, 120)],
)
def test_least_request_waits_less_than_round_robin_under_service_variance(
    threads: int, replicas: int, utilization: float, seconds: int
) -> None:
    """Same seeded requests (lognormal, cv 0.5). Measured ratios: 0.66-0.68 (1 thread, 4
    replicas, 70 %) and 0.54-0.57 (2 threads, 15 replicas, 90 %) over seeds 0-5. Not at
    any load: with 2 threads, 15 replicas and 50-70 % the fast-server model makes least
    request wait as long as round robin or longer (docs/simulator.md)."""
    service = model.ServiceModel(threads_per_replica=threads)
    rate = utilization * replicas * service.capacity_rps
    rr = _mean_wait_s(service, replicas, rate, model.Routing.ROUND_ROBIN, seconds)
    least = _mean_wait_s(service, replicas, rate, LEAST, seconds)
    assert least < 0.8 * rr


def test_least_request_keeps_the_in_flight_accounting_exact() -> None:
    """Little's law and balanced counters, as for round robin."""
    service = model.ServiceModel()
    seconds = 300
    stream = model.RequestStream(np.full(seconds, 600.0), service, seed=2)
    fleet = model.Fleet(service, LEAST)
    fleet.add(9, created=-60.0, ready_at=-60.0)
    fleet.update(0.0)
    inflight = []
    latencies = []
    for t in range(seconds):
        offsets, service_s, _ = stream.second(t)
        outcome = fleet.step(t, offsets, service_s)
        inflight.append(outcome.inflight)
        latencies.append(outcome.wait_s + service_s[outcome.order])
    mean_latency = float(np.concatenate(latencies).mean())
    assert np.mean(inflight[10:]) == pytest.approx(stream.counts.mean() * mean_latency, rel=0.02)
    assert int(fleet.served_total.sum()) == int(stream.counts.sum())
    for t in range(seconds, seconds + 5):
        fleet.step(t, np.empty(0), np.empty(0))
    assert int(fleet.in_system.sum()) == 0
    assert fleet.inflight_seconds_total == pytest.approx(float(np.concatenate(latencies).sum()))
