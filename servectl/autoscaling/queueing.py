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

Routing decides which queue a request waits in. Round robin (a Kubernetes Service) gives
each replica its 1/n and a request waits at the replica it was sent to: n separate M/M/c
queues. Least request (HAProxy ``leastconn``, Envoy ``LEAST_REQUEST``) sends each request
to the replica with the fewest in flight, which is close to one shared queue in front of
all n x c threads (join-the-shortest-queue approaches the pooled queue): one M/M/(n c)
queue, whose wait falls much faster with n (``pooled=True``). Same example, pooled:
80 req/s on 2 replicas of 2 threads is a = 1.6 over c = 4: C = 0.0907,
W_99 = ln(9.07) / (200 - 80) = 0.018 s (against 0.052 s per replica).
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


def replica_wait_quantile_s(
    rate: float, replicas: int, service_s: float, threads: int, quantile: float, pooled: bool
) -> float:
    """The ``quantile`` wait of a request when ``rate`` is spread over ``replicas``: one
    M/M/c queue per replica, or (``pooled``) one queue in front of them all."""
    if pooled:
        return wait_quantile_s(rate, service_s, threads * replicas, quantile)
    return wait_quantile_s(rate / replicas, service_s, threads, quantile)


def replicas_for_latency(
    rate: float,
    service_s: float,
    threads: int,
    quantile: float,
    wait_budget_s: float,
    max_replicas: int,
    max_utilization: float = 0.95,
    *,
    pooled: bool = False,
) -> int:
    """Fewest replicas whose ``quantile`` queueing delay fits ``wait_budget_s``.

    Never runs a replica above ``max_utilization`` (the M/M/c tail is too optimistic
    there for real, bursty traffic). Returns ``max_replicas`` if even that is not enough
    (an infinite rate or service time included).

    The wait quantile only falls as replicas are added (each gets less of the rate), so
    the fewest that fit is found by galloping then bisection: a few dozen steps even for
    100,000 replicas.
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
        return replica_wait_quantile_s(rate, n, service_s, threads, quantile, pooled) <= (
            wait_budget_s
        )

    # Gallop up from the utilization bound (a pooled queue's Erlang C costs O(n x c), so
    # never start at a huge max), then bisect between the last miss and the first fit.
    high = low
    while not fits(high):
        if high >= max_replicas:
            return max_replicas
        low, high = high + 1, min(2 * high, max_replicas)
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def max_rate(
    replicas: int,
    service_s: float,
    threads: int,
    quantile: float,
    wait_budget_s: float,
    max_utilization: float = 0.95,
    *,
    pooled: bool = False,
    steps: int = 24,
) -> float:
    """The highest request rate ``replicas`` serve within the wait budget and the
    utilization bound (bisection on the rate: the wait only grows with it)."""
    top = replicas * threads / service_s * max_utilization
    if replica_wait_quantile_s(top, replicas, service_s, threads, quantile, pooled) <= (
        wait_budget_s
    ):
        return top
    low, high = 0.0, top
    for _ in range(steps):
        middle = (low + high) / 2
        if replica_wait_quantile_s(middle, replicas, service_s, threads, quantile, pooled) <= (
            wait_budget_s
        ):
            low = middle
        else:
            high = middle
    return low


def fractional_replicas_for_latency(
    rate: float,
    service_s: float,
    threads: int,
    quantile: float,
    wait_budget_s: float,
    max_replicas: int,
    max_utilization: float = 0.95,
    *,
    pooled: bool = False,
) -> float:
    """:func:`replicas_for_latency` as a continuous count, like every other signal's.

    ``n`` replicas fit and ``n - 1`` do not; the proposal is ``n - 1`` plus how far the
    rate is between the most ``n - 1`` and the most ``n`` replicas serve within the
    budget. Behind round robin every replica takes the same share, so that is simply
    ``rate / (the most one replica serves)``. A continuous proposal lets the engine's
    tolerance band work for latency (``engine.EnginePolicy._tolerate``): with 9 running,
    7.9 wanted holds 9 (``ceil(7.9 x 1.1) = 9``), so a load wandering about a replica
    boundary does not flap the count; an integer proposal cannot tell 7.9 from 7.1.
    """
    n = replicas_for_latency(
        rate,
        service_s,
        threads,
        quantile,
        wait_budget_s,
        max_replicas,
        max_utilization,
        pooled=pooled,
    )
    if n >= max_replicas or not (rate > 0 and service_s > 0 and math.isfinite(service_s)):
        return float(n)
    if not pooled:
        one = max_rate(1, service_s, threads, quantile, wait_budget_s, max_utilization)
        return min(max(rate / one, n - 1.0), float(n)) if one > 0 else float(n)
    upper = max_rate(n, service_s, threads, quantile, wait_budget_s, max_utilization, pooled=True)
    lower = (
        max_rate(n - 1, service_s, threads, quantile, wait_budget_s, max_utilization, pooled=True)
        if n > 1
        else 0.0
    )
    if upper <= lower:
        return float(n)
    share = (rate - lower) / (upper - lower)
    return n - 1.0 + min(max(share, 0.0), 1.0)
