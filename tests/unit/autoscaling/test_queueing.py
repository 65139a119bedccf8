"""Erlang C maths against hand-computed values (see queueing's worked example)."""

from __future__ import annotations

import math

import pytest

from servectl.autoscaling import queueing


@pytest.mark.parametrize(
    ("threads", "load", "expected"),
    [
        (1, 0.5, 0.5),  # M/M/1: P(wait) = rho
        (2, 1.6, 0.7111111),
        (2, 1.0, 1 / 3),
        (3, 0.0, 0.0),
        (2, 2.0, 1.0),  # unstable
        (2, 5.0, 1.0),
    ],
)
def test_erlang_c(threads: int, load: float, expected: float) -> None:
    assert queueing.erlang_c(threads, load) == pytest.approx(expected, rel=1e-6)


def test_erlang_c_is_stable_for_many_servers() -> None:
    value = queueing.erlang_c(200, 180.0)
    assert 0.0 < value < 1.0


def test_wait_quantile_matches_the_worked_example() -> None:
    assert queueing.wait_quantile_s(80, 0.02, 2, 0.99) == pytest.approx(0.2132, rel=1e-3)
    assert queueing.wait_quantile_s(40, 0.02, 2, 0.99) == pytest.approx(0.0522, rel=1e-3)


def test_wait_quantile_edges() -> None:
    assert queueing.wait_quantile_s(0, 0.02, 2, 0.99) == 0.0
    assert math.isinf(queueing.wait_quantile_s(100, 0.02, 2, 0.99))
    # Light load: fewer than 1 % wait at all -> the p99 wait is zero.
    assert queueing.wait_quantile_s(1, 0.02, 2, 0.99) == 0.0


def test_replicas_for_latency_is_the_fewest_that_fit() -> None:
    n = queueing.replicas_for_latency(1000, 0.02, 2, 0.99, 0.1, 100)
    assert queueing.wait_quantile_s(1000 / n, 0.02, 2, 0.99) <= 0.1
    assert queueing.wait_quantile_s(1000 / (n - 1), 0.02, 2, 0.99) > 0.1


def test_replicas_for_latency_edges() -> None:
    assert queueing.replicas_for_latency(0, 0.02, 2, 0.99, 0.1, 100) == 1
    assert queueing.replicas_for_latency(1e6, 0.02, 2, 0.99, 0.1, 30) == 30
    # The utilization cap binds before the tail does with a generous budget.
    assert queueing.replicas_for_latency(950, 0.02, 2, 0.99, 10.0, 100) == 10
    # An impossible budget runs out of replicas.
    assert queueing.replicas_for_latency(500, 0.02, 2, 0.99, 0.0, 40) == 40


def test_pooled_queue_matches_the_worked_example_and_waits_less() -> None:
    # 80 req/s on 2 replicas of 2 threads at 20 ms: pooled, one M/M/4 queue (a = 1.6):
    # C = 0.0907, W_99 = ln(9.07) / (200 - 80) = 0.0184 s; per replica (round robin),
    # 40 req/s each on M/M/2: 0.052 s.
    pooled = queueing.replica_wait_quantile_s(80.0, 2, 0.02, 2, 0.99, pooled=True)
    split = queueing.replica_wait_quantile_s(80.0, 2, 0.02, 2, 0.99, pooled=False)
    assert queueing.erlang_c(4, 1.6) == pytest.approx(0.0907, rel=1e-3)
    assert pooled == pytest.approx(math.log(0.0907 / 0.01) / 120.0, rel=1e-3)
    assert split == pytest.approx(queueing.wait_quantile_s(40.0, 0.02, 2, 0.99))
    assert pooled < split


def test_pooled_sizing_needs_fewer_replicas_and_is_the_fewest_that_fit() -> None:
    args = (1000.0, 0.02, 2, 0.99, 0.05)
    split = queueing.replicas_for_latency(*args, 100)
    pooled = queueing.replicas_for_latency(*args, 100, pooled=True)
    assert pooled < split
    fits = [
        queueing.replica_wait_quantile_s(1000.0, n, 0.02, 2, 0.99, True) <= 0.05
        for n in (pooled - 1, pooled)
    ]
    assert fits == [False, True]


def test_galloping_search_never_evaluates_a_huge_pool_it_does_not_need() -> None:
    # A pooled Erlang C over 2 x 10^6 threads would take seconds; the search starts at
    # the utilization bound and finds the answer a few replicas above it.
    n = queueing.replicas_for_latency(2000.0, 0.02, 2, 0.99, 0.05, 1_000_000, pooled=True)
    assert 21 <= n <= 25


@pytest.mark.parametrize("pooled", [False, True])
def test_the_continuous_proposal_lies_between_the_fewest_that_fit_and_one_less(
    pooled: bool,
) -> None:
    previous = 0.0
    for rate in range(50, 1500, 37):
        whole = queueing.replicas_for_latency(rate, 0.02, 2, 0.99, 0.1, 100, pooled=pooled)
        part = queueing.fractional_replicas_for_latency(
            rate, 0.02, 2, 0.99, 0.1, 100, pooled=pooled
        )
        assert whole - 1 <= part <= whole
        assert part >= previous  # more load never asks for fewer
        previous = part


def test_round_robin_continuous_proposal_is_the_rate_over_one_replicas_most() -> None:
    one = queueing.max_rate(1, 0.02, 2, 0.99, 0.1)
    # One replica at that rate sits exactly on the budget.
    assert queueing.wait_quantile_s(one, 0.02, 2, 0.99) == pytest.approx(0.1, rel=1e-4)
    assert queueing.fractional_replicas_for_latency(700.0, 0.02, 2, 0.99, 0.1, 100) == (
        pytest.approx(700.0 / one)
    )


def test_max_rate_is_capped_by_the_utilization_bound() -> None:
    # A huge budget: the bound (95 % of 2 threads / 20 ms) decides.
    assert queueing.max_rate(3, 0.02, 2, 0.99, 100.0) == pytest.approx(3 * 100 * 0.95)
