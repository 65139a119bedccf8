"""The replica/queue model: Lindley waits, M/M/c sanity, lifecycle, drains, in-flight."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
