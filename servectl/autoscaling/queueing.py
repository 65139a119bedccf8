"""Queueing maths for latency-aware sizing: Erlang C for M/M/c replicas.

Each replica serves ``threads`` requests in parallel, each taking ``service_s`` on
average; requests are spread evenly over ``n`` replicas, so each replica is an
M/M/c queue with arrival rate ``rate / n``. For one such queue with offered load
``a = lambda * s`` and utilization ``rho = a / c``:

    Erlang C      C(c, a) = (a^c / c!) / ((1 - rho) * sum_{k<c} a^k / k! + a^c / c!)
    wait tail     P(W > t) = C(c, a) * exp(-(c/s - lambda) * t)
    wait quantile W_p = ln(C / (1 - p)) / (c/s - lambda)   if C > 1 - p, else 0

Worked example: 80 req/s on 1 replica of 2 threads at 20 ms: a = 1.6, rho = 0.8,
C = 0.711, W_99 = ln(0.711 / 0.01) / (100 - 80) = 0.213 s. With 2 replicas, 40 req/s
each: a = 0.8, C = 0.229, W_99 = ln(22.9) / 60 = 0.052 s.
"""

from __future__ import annotations

import math


def erlang_c(threads: int, offered_load: float) -> float:
    """Probability that an arriving request waits (1.0 when the queue is unstable)."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= threads:
        return 1.0
    # Iterative Erlang B, then C from B: numerically stable for large c.
    erlang_b = 1.0
    for k in range(1, threads + 1):
        erlang_b = offered_load * erlang_b / (k + offered_load * erlang_b)
    rho = offered_load / threads
    return erlang_b / (1 - rho + rho * erlang_b)


def wait_quantile_s(rate: float, service_s: float, threads: int, quantile: float) -> float:
    """The ``quantile`` (0-1) of queueing delay for one M/M/c replica; inf if unstable."""
    if rate <= 0 or service_s <= 0:
        return 0.0
    capacity = threads / service_s
    if rate >= capacity:
        return math.inf
    p_wait = erlang_c(threads, rate * service_s)
    tail = 1.0 - quantile
    if p_wait <= tail:
        return 0.0
    return math.log(p_wait / tail) / (capacity - rate)


def replicas_for_latency(
    rate: float,
    service_s: float,
    threads: int,
    quantile: float,
    wait_budget_s: float,
    max_replicas: int,
    max_utilization: float = 0.95,
) -> int:
    """Fewest replicas whose ``quantile`` queueing delay fits ``wait_budget_s``.

    Never runs a replica above ``max_utilization`` (the M/M/c tail is too optimistic
    there for real, bursty traffic). Returns ``max_replicas`` if even that is not enough
    (an infinite rate or service time included).

    The wait quantile only falls as replicas are added (each gets less of the rate), so
    the fewest that fit is found by bisection: a few dozen steps even for 100,000 replicas.
    """
    if not (rate > 0 and service_s > 0):
        return 1
    per_replica_capacity = threads / service_s
    if not per_replica_capacity > 0:  # an infinite service time
        return max_replicas
    needed = rate / (per_replica_capacity * max_utilization)
    if not needed < max_replicas:  # also inf
        return max_replicas
    low = max(1, math.ceil(needed))
    if low >= max_replicas:
        return max_replicas

    def fits(n: int) -> bool:
        return wait_quantile_s(rate / n, service_s, threads, quantile) <= wait_budget_s

    if not fits(max_replicas):
        return max_replicas
    high = max_replicas  # fits; find the first n in [low, high] that does
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low
