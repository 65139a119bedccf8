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
