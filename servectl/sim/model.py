"""The replica and queue model: requests, FIFO replicas with cold start, one second at a time.

Each replica is a FIFO queue in front of ``c`` threads, approximated as one server of
speed ``c`` (it does ``c`` core-seconds of work per second). The wait of every request
comes from Lindley's recursion in closed form, vectorized over all requests and all
replicas of a second; a request's latency is that wait plus its own (un-scaled) service
time, because ``c`` threads give parallelism, not a faster thread. docs/simulator.md
explains the approximation and where it is pessimistic.

Lindley in closed form, for one replica with backlog ``B`` (server-seconds) at the start
of the second and requests at offsets ``x_n`` bringing work ``w_n = S_n / c``::

    U_n = B + sum_{k<n} w_k - x_n            (work offered minus time elapsed)
    W_n = U_n - min(0, min_{k<=n} U_k)       (the reflection at an empty queue)

All replicas are done in one pass: requests are sorted by replica and every replica's
values are shifted down by ``replica_index * big`` so one ``np.minimum.accumulate`` over
the concatenation never lets a replica see an earlier replica's minimum.

Routing decides each request's replica before that pass. Round robin and random routing
are vectorized; least-request routing (``Routing.LEAST_REQUEST``) depends on every earlier
request's departure, so it walks the requests in arrival order (``Fleet._least_request``).
"""

from __future__ import annotations

import enum
import heapq
import math
import statistics
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _tf_serving_latency_bounds_us() -> FloatArray:
    """TF Serving's ``/tensorflow/serving/request_latency`` bucket upper bounds (µs).

    ``monitoring::Buckets::Exponential(10, 1.8, 33)`` (tensorflow_serving/servables/
    tensorflow/util.cc): 33 finite bounds 10 x 1.8^k, built by repeated multiplication as
    TensorFlow's ``ExponentialBuckets`` does, then +Inf (TF's DBL_MAX). The last finite
    bound is ~1.3e9 µs (~21 minutes).
    """
    bounds = []
    bound = 10.0
    for _ in range(33):
        bounds.append(bound)
        bound *= 1.8
    return np.array(bounds)


LATENCY_BUCKETS_US: FloatArray = _tf_serving_latency_bounds_us()
"""Finite upper bounds; the histogram has one more bucket (+Inf)."""
LATENCY_BUCKET_COUNT = LATENCY_BUCKETS_US.size + 1


class ServiceDistribution(enum.StrEnum):
    LOGNORMAL = "lognormal"  # mean and coefficient of variation from the model
    EXPONENTIAL = "exponential"  # cv = 1 regardless of service_cv (M/M/c checks)


class Routing(enum.StrEnum):
    ROUND_ROBIN = "round_robin"  # the rotation continues across seconds
    RANDOM = "random"  # uniform per request (kube-proxy iptables style)
    # Fewest outstanding requests at the arrival instant, round robin among ties (HAProxy
    # leastconn); see ``Fleet``.
    LEAST_REQUEST = "least_request"


@dataclass(frozen=True)
class ServiceModel:
    """What a replica is: its CPU time per request, threads, cold start and SLO.

    ``service_time_ms`` is the mean CPU time of one request; a replica serves
    ``threads_per_replica`` requests in parallel and requests that many cores.
    A request *fails* if its latency exceeds ``timeout_s`` and *meets the SLO* if its
    latency is at most ``slo_ms`` and it did not fail.
    """

    service_time_ms: float = 20.0
    service_cv: float = 0.5
    threads_per_replica: int = 2
    cold_start_s: float = 30.0
    # A parked standby replica (loaded, warmed up, not routed) takes this long to serve
    # once activated: its CPU quota raised and its route added (docs/standby.md); never
    # longer than a cold start.
    activation_s: float = 1.0
    timeout_s: float = 10.0
    slo_ms: float = 150.0
    distribution: ServiceDistribution = ServiceDistribution.LOGNORMAL

    def __post_init__(self) -> None:
        if not self.service_time_ms > 0:
            raise ValueError(f"service_time_ms must be > 0, got {self.service_time_ms}")
        if self.service_cv < 0:
            raise ValueError(f"service_cv must be >= 0, got {self.service_cv}")
        if self.threads_per_replica < 1:
            raise ValueError(f"threads_per_replica must be >= 1, got {self.threads_per_replica}")
        if self.cold_start_s < 0:
            raise ValueError(f"cold_start_s must be >= 0, got {self.cold_start_s}")
        if self.activation_s < 0:
            raise ValueError(f"activation_s must be >= 0, got {self.activation_s}")
        if not (self.timeout_s > 0 and self.slo_ms > 0):
            raise ValueError("timeout_s and slo_ms must be > 0")

    @property
    def service_s(self) -> float:
        return self.service_time_ms / 1000.0

    @property
    def cpu_request_cores(self) -> float:
        return float(self.threads_per_replica)

    @property
    def capacity_rps(self) -> float:
        """Requests per second one replica can complete when saturated."""
        return self.threads_per_replica / self.service_s

    def _lognormal_params(self) -> tuple[float, float]:
        sigma2 = math.log1p(self.service_cv**2)
        return math.log(self.service_s) - sigma2 / 2.0, math.sqrt(sigma2)

    def service_quantile_s(self, quantile: float) -> float:
        """The ``quantile`` (0-1) of one request's service time, in seconds."""
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        if self.distribution is ServiceDistribution.EXPONENTIAL:
            return -math.log1p(-quantile) * self.service_s
        if self.service_cv == 0:
            return self.service_s
        mu, sigma = self._lognormal_params()
        return math.exp(mu + sigma * statistics.NormalDist().inv_cdf(quantile))

    def sample_service_s(self, rng: np.random.Generator, count: int) -> FloatArray:
        if self.distribution is ServiceDistribution.EXPONENTIAL:
            return rng.exponential(self.service_s, size=count)
        if self.service_cv == 0:
            return np.full(count, self.service_s)
        mu, sigma = self._lognormal_params()
        return rng.lognormal(mu, sigma, size=count)


# Independent random streams, all derived from the seed alone: the offered load (counts,
# arrival instants, service times) is the same whatever the policy does.
_STREAM_COUNTS = 0
_STREAM_INSTANTS = 1
_STREAM_SERVICE = 2
_STREAM_ROUTING = 3


class RequestStream:
    """Every request of a trace: Poisson counts, arrival instants, service times.

    Drawn block by block (``BLOCK_S`` seconds) from generators seeded with
    ``(seed, stream, block)``, so memory stays small for long traces and a second's
    requests never depend on what happened before it.
    """

    BLOCK_S = 64

    def __init__(
        self,
        rps: FloatArray,
        service: ServiceModel,
        seed: int,
        *,
        with_routing: bool = False,
    ) -> None:
        self._service = service
        self._seed = seed
        self._with_routing = with_routing
        counts_rng = np.random.default_rng([seed, _STREAM_COUNTS])
        self.counts: IntArray = counts_rng.poisson(rps).astype(np.int64)
        self._block = -1
        self._starts: IntArray = np.zeros(1, dtype=np.int64)
        self._offsets: FloatArray = np.empty(0)
        self._service_s: FloatArray = np.empty(0)
        self._route_u: FloatArray | None = None

    def _load(self, block: int) -> None:
        first = block * self.BLOCK_S
        counts = self.counts[first : first + self.BLOCK_S]
        total = int(counts.sum())
        instants = np.random.default_rng([self._seed, _STREAM_INSTANTS, block]).random(total)
        second_of = np.repeat(np.arange(counts.size, dtype=np.float64), counts)
        # Seconds do not overlap, so one global sort orders each second's instants in place.
        keyed = np.sort(second_of + instants)
        self._offsets = np.minimum(keyed - second_of, math.nextafter(1.0, 0.0))
        service_rng = np.random.default_rng([self._seed, _STREAM_SERVICE, block])
        self._service_s = self._service.sample_service_s(service_rng, total)
        if self._with_routing:
            routing_rng = np.random.default_rng([self._seed, _STREAM_ROUTING, block])
            self._route_u = routing_rng.random(total)
        self._starts = np.concatenate(([0], np.cumsum(counts)))
        self._block = block

    def second(self, t: int) -> tuple[FloatArray, FloatArray, FloatArray | None]:
        """Second ``t``'s requests: offsets in [0, 1) (sorted), service times, routing draws."""
        block = t // self.BLOCK_S
        if block != self._block:
            self._load(block)
        i = t - block * self.BLOCK_S
        lo, hi = int(self._starts[i]), int(self._starts[i + 1])
        route = None if self._route_u is None else self._route_u[lo:hi]
        return self._offsets[lo:hi], self._service_s[lo:hi], route


@dataclass(frozen=True, eq=False)
class StepOutcome:
    """One simulated second. ``wait_s`` is in the order ``order`` (requests by replica)."""

    order: IntArray
    wait_s: FloatArray
    cpu_cores: float  # core-seconds of work done in this second = mean cores in use
    inflight: float  # mean requests in the replicas during this second
    columns: IntArray | None = None  # the replica column of each request, in ``order``


@dataclass(frozen=True, eq=False)
class PodView:
    """The existing (not draining) replicas, oldest first."""

    ids: IntArray
    start_times: FloatArray
    ready: BoolArray


class Fleet:
    """Every replica's queue and counters, as parallel arrays (one column per replica).

    Columns stay in creation order. A replica is *starting* until ``ready_at``, then
    *ready*; scale-down marks the newest replicas *draining* (no new requests; they finish
    their backlog, then disappear) or removes them at once if still starting.

    In-flight accounting: every request's departure (arrival + latency) is booked when it
    is dispatched into a ring of ``horizon_s`` future seconds, so the time-average of
    requests in a replica is exact; departures later than the horizon are booked at its
    end (only under overload, when every such request has long timed out anyway).

    A *standby pool* (:meth:`set_standby`, default none) is apart from the columns: replicas
    started ahead (each loading for a cold start, then parked: not routed, billed apart), so
    that a scale-up takes parked ones first, each ready ``activation_s`` after it is asked
    for, then ones still loading (ready when loaded, or at the activation if later), and
    only then starts cold ones. The pool is refilled at once behind what it gave (new
    replicas, loading for a cold start). A scale-down never parks: its replicas drain and go.

    Routing picks one of the *receiving* replicas (ready, not draining) per request:

    * ``ROUND_ROBIN``: request ``i`` overall goes to receiving replica ``(k + i) mod n``;
      the rotation ``k`` carries over across seconds.
    * ``RANDOM``: ``floor(u * n)`` with the request's routing draw ``u``.
    * ``LEAST_REQUEST``: the receiving replica with the fewest *outstanding* requests at
      the request's arrival instant. A request is outstanding in its replica from its
      arrival until its departure (arrival + wait + service, the same instant the
      in-flight ring books), whichever second it was dispatched in; one departing at the
      very instant another arrives has left. Requests arriving at the same instant are
      taken in order, each seeing the ones before it. Ties go round robin, as HAProxy's
      leastconn does: the first tied replica at or after the one following the last
      chosen, in column order, wrapping around (the same rotation state as
      ``ROUND_ROBIN``). So when every replica is idle at every arrival, least request is
      exactly round robin. This is full least (every receiving replica is compared), not
      Envoy's default power-of-two-choices sampling. It is exact, which takes a Python loop
      over the requests (about 0.7 µs each, ~8x round robin's ``step``; docs/simulator.md,
      "Routing within a revision").
    """

    def __init__(
        self,
        service: ServiceModel,
        routing: Routing = Routing.ROUND_ROBIN,
        horizon_s: int = 128,
    ) -> None:
        self._threads = service.threads_per_replica
        self._cold_start_s = service.cold_start_s
        self._activation_s = min(service.activation_s, service.cold_start_s)
        self._routing = routing
        self.standby_target = 0
        self.pool: FloatArray = np.empty(0)  # standby replicas' ready times, earliest first
        self._horizon = horizon_s
        self.ids: IntArray = np.empty(0, dtype=np.int64)
        self.created: FloatArray = np.empty(0)
        self.ready_at: FloatArray = np.empty(0)
        self.draining: BoolArray = np.empty(0, dtype=np.bool_)
        self.backlog: FloatArray = np.empty(0)  # server-seconds of queued work
        self.in_system: IntArray = np.empty(0, dtype=np.int64)
        self.cpu_total: FloatArray = np.empty(0)  # core-seconds, per replica
        self.inflight_total: FloatArray = np.empty(0)  # request-seconds, per replica
        self.served_total: IntArray = np.empty(0, dtype=np.int64)
        self._dep_count: IntArray = np.zeros((horizon_s, 0), dtype=np.int64)
        self._dep_weight: FloatArray = np.zeros((horizon_s, 0))
        self._next_id = 0
        self._rotation = 0
        self._ready: BoolArray = np.empty(0, dtype=np.bool_)
        self._receiving: IntArray = np.empty(0, dtype=np.int64)
        self._next_ready_at = math.inf
        self._any_draining = False
        # Least request only: departure instants (absolute seconds) and columns of the
        # requests that may still be outstanding (pruned to departures after the end of
        # the last second served).
        self._lr_departure: FloatArray = np.empty(0)
        self._lr_column: IntArray = np.empty(0, dtype=np.int64)
        # Service-level counters: they keep counting after a replica is gone.
        self.cpu_seconds_total = 0.0
        self.inflight_seconds_total = 0.0

    # ------------------------------------------------------------------ lifecycle

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def receiving_count(self) -> int:
        """Ready replicas that take new requests."""
        return int(self._receiving.size)

    @property
    def active_count(self) -> int:
        """Starting + ready replicas (not draining): what is billed each second."""
        return int(self.size - np.count_nonzero(self.draining))

    @property
    def draining_count(self) -> int:
        return int(np.count_nonzero(self.draining))

    @property
    def standby_count(self) -> int:
        """Standby replicas, loading or parked."""
        return int(self.pool.size)

    def parked_count(self, now: float) -> int:
        """Standby replicas loaded and parked (the rest of the pool is still loading)."""
        return int(np.count_nonzero(self.pool <= now))

    def set_standby(self, now: float, target: int, *, ready_at: float | None = None) -> None:
        """Keep ``target`` standby replicas: new ones start now (ready one cold start later,
        or at ``ready_at``: a world that starts warm); excess ones go, loading ones first."""
        target = max(0, int(target))
        self.standby_target = target
        if target > self.pool.size:
            when = now + self._cold_start_s if ready_at is None else ready_at
            self.pool = np.sort(np.concatenate((self.pool, np.full(target - self.pool.size, when))))
        elif target < self.pool.size:
            self.pool = self.pool[:target]

    def add(self, count: int, *, created: float, ready_at: float | FloatArray) -> None:
        if count <= 0:
            return
        self.ids = np.concatenate((self.ids, np.arange(self._next_id, self._next_id + count)))
        self._next_id += count
        self.created = np.concatenate((self.created, np.full(count, created)))
        self.ready_at = np.concatenate((self.ready_at, np.full(count, ready_at)))
        self.draining = np.concatenate((self.draining, np.zeros(count, dtype=np.bool_)))
        self.backlog = np.concatenate((self.backlog, np.zeros(count)))
        self.in_system = np.concatenate((self.in_system, np.zeros(count, dtype=np.int64)))
        self.cpu_total = np.concatenate((self.cpu_total, np.zeros(count)))
        self.inflight_total = np.concatenate((self.inflight_total, np.zeros(count)))
        self.served_total = np.concatenate((self.served_total, np.zeros(count, dtype=np.int64)))
        self._dep_count = np.hstack(
            (self._dep_count, np.zeros((self._horizon, count), dtype=np.int64))
        )
        self._dep_weight = np.hstack((self._dep_weight, np.zeros((self._horizon, count))))

    def _drop(self, gone: BoolArray) -> None:
        if not gone.any():
            return
        keep = ~gone
        self.ids = self.ids[keep]
        self.created = self.created[keep]
        self.ready_at = self.ready_at[keep]
        self.draining = self.draining[keep]
        self.backlog = self.backlog[keep]
        self.in_system = self.in_system[keep]
        self.cpu_total = self.cpu_total[keep]
        self.inflight_total = self.inflight_total[keep]
        self.served_total = self.served_total[keep]
        self._dep_count = self._dep_count[:, keep]
        self._dep_weight = self._dep_weight[:, keep]
        if self._lr_column.size:
            kept = keep[self._lr_column]
            new_column = np.cumsum(keep) - 1
            self._lr_departure = self._lr_departure[kept]
            self._lr_column = new_column[self._lr_column[kept]]

    def _drained(self) -> BoolArray:
        drained: BoolArray = self.draining & (self.backlog <= 0.0) & (self.in_system == 0)
        return drained

    def _update_views(self, now: float) -> None:
        self._ready = self.ready_at <= now
        self._receiving = np.flatnonzero(self._ready & ~self.draining)
        later = self.ready_at[self.ready_at > now]
        self._next_ready_at = float(later.min()) if later.size else math.inf
        self._any_draining = bool(self.draining.any())
        if self._receiving.size:
            self._rotation %= self._receiving.size

    def update(self, now: float) -> None:
        """Recompute readiness and routing targets as of ``now`` (after ``add``)."""
        self._update_views(now)

    def refresh(self, now: float) -> None:
        """Start of a second: starting replicas whose time has come turn ready; drained
        replicas disappear."""
        if now >= self._next_ready_at or self._any_draining:
            self._drop(self._drained())
            self._update_views(now)

    def scale_to(self, now: float, desired: int) -> float:
        """Apply a replica count at once; returns the server-seconds of backlog the newly
        draining replicas still have to finish (billed as replica-seconds)."""
        active = np.flatnonzero(~self.draining)
        billed = 0.0
        if desired > active.size:
            wanted = desired - active.size
            taken = self.pool[:wanted]
            if taken.size:
                self.pool = self.pool[taken.size :]
                ready = np.maximum(taken, now + self._activation_s)
                self.add(taken.size, created=now, ready_at=ready)
                self.set_standby(now, self.standby_target)  # refilled behind
            self.add(wanted - taken.size, created=now, ready_at=now + self._cold_start_s)
        elif desired < active.size:
            victims = active[desired:]  # columns are in creation order: the newest go first
            starting = victims[self.ready_at[victims] > now]
            serving = victims[self.ready_at[victims] <= now]
            self.draining[serving] = True
            billed = float(self.backlog[serving].sum())
            gone = self._drained()
            gone[starting] = True
            self._drop(gone)
        self._update_views(now)
        return billed

    def kill(self, now: float, ids: IntArray) -> int:
        """Remove the replicas ``ids`` at once, draining or not (the SIGKILL at the end of a
        grace period); returns how many requests were still in them (``in_system``).
        Service-level counters keep what they counted; ids not present are ignored."""
        gone: BoolArray = np.isin(self.ids, ids)
        if not gone.any():
            return 0
        lost = int(self.in_system[gone].sum())
        self._drop(gone)
        self._update_views(now)
        return lost

    def pods(self) -> PodView:
        active = ~self.draining
        return PodView(
            ids=self.ids[active], start_times=self.created[active], ready=self._ready[active]
        )

    # ------------------------------------------------------------------ one second

    def _least_request(
        self, t: int, offsets: FloatArray, service_s: FloatArray, receivers: IntArray
    ) -> IntArray:
        """Each request's column under ``LEAST_REQUEST`` (the rule: class docstring).

        Walks the requests in arrival order (times relative to ``t``) with, per receiving
        replica, its outstanding count and the instant its queue empties (``free``, from
        ``backlog``: the speed-``c`` FIFO server of the vectorized Lindley in ``step``), and
        a heap of the departures still to come. Requests dispatched in earlier seconds
        come from ``_lr_departure``: all counted at the start, those leaving within this
        second also in the heap. Departures after this second are kept for the next.
        """
        n = int(receivers.size)
        slot_of = np.full(self.size, -1, dtype=np.int64)
        slot_of[receivers] = np.arange(n)
        carried_slot = slot_of[self._lr_column]
        live = (carried_slot >= 0) & (self._lr_departure > t)  # draining ones never count
        carried_left = self._lr_departure[live] - t
        carried_slot = carried_slot[live]
        within = carried_left < 1.0
        by_time = np.argsort(carried_left[within], kind="stable")
        # (departure, slot) sorted by departure is already a valid heap; the sentinel at
        # infinity keeps it from ever being empty.
        heap = list(
            zip(
                carried_left[within][by_time].tolist(),
                carried_slot[within][by_time].tolist(),
                strict=True,
            )
        )
        heap.append((math.inf, -1))
        # ``outstanding`` is doubled, so that ``index(fewest, pointer)`` finds the first
        # replica with the fewest at or after the pointer, wrapping around; both copies are
        # kept equal. ``level[k]`` counts the replicas with ``k`` outstanding (long enough
        # for every arrival of the second), so the minimum moves without a scan.
        counts = np.bincount(carried_slot, minlength=n)
        outstanding = counts.tolist() * 2
        level = np.bincount(counts, minlength=int(counts.max()) + offsets.size + 2).tolist()
        fewest = int(counts.min())
        free = self.backlog[receivers].tolist()
        scale = 1.0 / self._threads
        pointer = self._rotation
        chosen: list[int] = []
        choose = chosen.append
        find = outstanding.index
        pop, push, pushpop = heapq.heappop, heapq.heappush, heapq.heappushpop
        next_departure = heap[0][0]
        # The previous request's departure is pushed at the next arrival, with a pushpop
        # when something leaves before it (the first "previous" is a second sentinel).
        pending_departure, pending_slot = math.inf, -1
        for arrival, service in zip(offsets.tolist(), service_s.tolist(), strict=True):
            if arrival < next_departure and arrival < pending_departure:
                push(heap, (pending_departure, pending_slot))
                if pending_departure < next_departure:
                    next_departure = pending_departure
            else:  # departures at or before this arrival leave first
                gone = pushpop(heap, (pending_departure, pending_slot))[1]
                while True:
                    was = outstanding[gone]
                    outstanding[gone] = outstanding[gone + n] = was - 1
                    level[was] -= 1
                    level[was - 1] += 1
                    if was <= fewest:
                        fewest = was - 1
                    next_departure = heap[0][0]
                    if arrival < next_departure:
                        break
                    gone = pop(heap)[1]
            slot = find(fewest, pointer)
            if slot >= n:
                slot -= n
            pointer = slot + 1
            outstanding[slot] = outstanding[slot + n] = fewest + 1
            level[fewest] -= 1
            level[fewest + 1] += 1
            if not level[fewest]:
                fewest += 1
            start = free[slot]
            if arrival > start:
                start = arrival
            free[slot] = start + service * scale
            pending_departure = start + service
            pending_slot = slot
            choose(slot)
        heap.append((pending_departure, pending_slot))
        self._rotation = pointer % n
        # Keep what can still be outstanding next second: departures after t + 1.
        later = [entry for entry in heap if 1.0 < entry[0] < math.inf]
        old = self._lr_departure > t + 1
        self._lr_departure = np.concatenate(
            (self._lr_departure[old], t + np.array([left for left, _ in later]))
        )
        self._lr_column = np.concatenate(
            (self._lr_column[old], receivers[np.array([at for _, at in later], dtype=np.int64)])
        )
        return receivers[np.array(chosen, dtype=np.int64)]

    def step(
        self,
        t: int,
        offsets: FloatArray,
        service_s: FloatArray,
        route_u: FloatArray | None = None,
    ) -> StepOutcome:
        """Simulate second ``t``: route requests arriving at ``t + offsets`` (sorted),
        compute their waits, advance every queue by one second."""
        size = self.size
        horizon = self._horizon
        row = t % horizon
        backlog = self.backlog
        count = int(offsets.size)
        if count:
            receivers = self._receiving
            n_recv = int(receivers.size)
            if n_recv == 0:
                raise RuntimeError("no ready replica to route requests to")
            if self._routing is Routing.LEAST_REQUEST:
                column = self._least_request(t, offsets, service_s, receivers)
            else:
                if self._routing is Routing.RANDOM and route_u is not None:
                    slot = np.minimum((route_u * n_recv).astype(np.int64), n_recv - 1)
                else:
                    slot = (self._rotation + np.arange(count)) % n_recv
                    self._rotation = (self._rotation + count) % n_recv
                column = receivers[slot]
            # Radix sort on small ints is the fastest stable sort numpy has.
            key = column.astype(np.int16) if size < 32_000 else column
            order = np.argsort(key, kind="stable")
            col_s = column[order]
            x_s = offsets[order]
            s_s = service_s[order]
            per_column: IntArray = np.asarray(np.bincount(col_s, minlength=size), dtype=np.int64)
            work_cum = np.empty(count + 1)
            work_cum[0] = 0.0
            np.cumsum(s_s / self._threads, out=work_cum[1:])
            ends = np.cumsum(per_column)
            starts = ends - per_column
            segment_work = work_cum[ends] - work_cum[starts]
            offered = backlog[col_s] + work_cum[:-1] - work_cum[starts][col_s] - x_s
            clipped = np.minimum(offered, 0.0)
            big = 1.0 - float(clipped.min())
            shift = col_s * big
            running_min = np.minimum.accumulate(clipped - shift) + shift
            wait = offered - running_min
            last_min = np.zeros(size)
            busy = per_column > 0
            last_min[busy] = running_min[ends[busy] - 1]
            new_backlog = np.maximum(backlog + segment_work - 1.0 - last_min, 0.0)
            work = backlog + segment_work - new_backlog
            # Book departures (offset from t) into the ring of future seconds.
            stay = x_s + wait + s_s
            dep_second = np.minimum(stay.astype(np.int64), horizon - 1)
            dep_weight = np.maximum(dep_second + 1 - stay, 0.0)  # part of that second not in
            span = int(dep_second.max()) + 1
            flat = dep_second * size + col_s
            rows = (t + np.arange(span)) % horizon
            self._dep_count[rows] += np.bincount(flat, minlength=span * size).reshape(span, size)
            self._dep_weight[rows] += np.bincount(
                flat, weights=dep_weight, minlength=span * size
            ).reshape(span, size)
            arriving_part: FloatArray = np.asarray(
                np.bincount(col_s, weights=1.0 - x_s, minlength=size), dtype=np.float64
            )
        else:
            order = np.empty(0, dtype=np.int64)
            col_s = order
            wait = np.empty(0)
            per_column = np.zeros(size, dtype=np.int64)
            arriving_part = np.zeros(size)
            new_backlog = np.maximum(backlog - 1.0, 0.0)
            work = backlog - new_backlog
        integral = self.in_system + arriving_part - self._dep_weight[row]
        self.in_system += per_column - self._dep_count[row]
        self._dep_count[row] = 0
        self._dep_weight[row] = 0.0
        self.backlog = new_backlog
        cpu = work * self._threads
        self.cpu_total += cpu
        self.inflight_total += integral
        self.served_total += per_column
        cpu_cores = float(cpu.sum())
        inflight = float(integral.sum())
        self.cpu_seconds_total += cpu_cores
        self.inflight_seconds_total += inflight
        return StepOutcome(
            order=order,
            wait_s=wait,
            cpu_cores=cpu_cores,
            inflight=inflight,
            columns=col_s,
        )
