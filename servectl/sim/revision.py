"""One revision inside the simulated world: its fleet, pipeline, ledgers and timelines.

:class:`~servectl.sim.world.World` holds one :class:`Revision` per model version it has
seen and routes each second's requests across them; this module is the state a revision
keeps and the bookkeeping of observations (:class:`Ledger`: histogram counts and errors
booked into the second they become observable; :class:`ErrorDraws`: each request's error
draw from the seed alone; :class:`Part` and :class:`Second`: requests kept while a kill
may still cut them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from servectl.planning.types import Counters
from servectl.sim import model
from servectl.sim import pipeline as pipeline_mod
from servectl.sim import scenario as scenario_mod

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

ID_STRIDE = 1_000_000
"""Revision ``i``'s replica ids are ``i * ID_STRIDE + n``: unique across revisions."""

_ERROR_STREAM = 7  # RequestStream uses 0-3
_EMPTY = np.empty(0)


class Ledger:
    """Counts booked into the second in which they become observable (one row a second,
    ``width`` columns); bookings at or after the end of the trace are never observed."""

    def __init__(self, seconds: int, width: int) -> None:
        self.width = width
        self.values: IntArray = np.zeros((seconds, width), dtype=np.int64)

    def book(self, t: int, seconds: IntArray, column: IntArray | None = None) -> None:
        """Add one at each (absolute second >= t, column)."""
        if seconds.size == 0:
            return
        inside = seconds < self.values.shape[0]
        if not inside.all():
            seconds = seconds[inside]
            column = None if column is None else column[inside]
            if seconds.size == 0:
                return
        offsets = seconds - t
        span = int(offsets.max()) + 1
        flat = offsets * self.width if column is None else offsets * self.width + column
        self.values[t : t + span] += np.bincount(flat, minlength=span * self.width).reshape(
            span, self.width
        )

    def take_back(self, seconds: IntArray, column: IntArray | None = None) -> None:
        """Remove one at each (absolute second, column) booked earlier (rare: kills)."""
        inside = seconds < self.values.shape[0]
        seconds = seconds[inside]
        columns = np.zeros_like(seconds) if column is None else column[inside]
        np.subtract.at(self.values, (seconds, columns), 1)


class ErrorDraws:
    """One uniform draw per request for the error decision, from the seed alone (stream
    ``(seed, 7, block)``, in the RequestStream's request order), so a request is an error
    or not whatever the controller did."""

    def __init__(self, counts: IntArray, seed: int) -> None:
        self._counts = counts
        self._seed = seed
        self._block = -1
        self._draws: FloatArray = _EMPTY
        self._starts: IntArray = np.zeros(1, dtype=np.int64)

    def second(self, t: int) -> FloatArray:
        size = model.RequestStream.BLOCK_S
        block = t // size
        if block != self._block:
            counts = self._counts[block * size : (block + 1) * size]
            rng = np.random.default_rng([self._seed, _ERROR_STREAM, block])
            self._draws = rng.random(int(counts.sum()))
            self._starts = np.concatenate(([0], np.cumsum(counts)))
            self._block = block
        i = t - block * size
        return self._draws[int(self._starts[i]) : int(self._starts[i + 1])]


@dataclass(eq=False)
class Part:
    """The requests one revision served in one second, kept while any may still be in a
    replica (a kill can still cut them). ``ids`` are fleet-local replica ids."""

    revision: int
    ids: IntArray
    done: FloatArray  # absolute completion time (-inf once cut)
    latency: FloatArray  # server-side latency, s (inf once cut)
    met: BoolArray
    failed: BoolArray
    error_second: IntArray  # when its error is observed (-1: none)


@dataclass(eq=False)
class Second:
    t: int
    parts: list[Part]
    lost: int  # requests of this second lost at the router
    last_done: float


class Revision:
    """A revision's fleet, counters, pipeline and timelines."""

    def __init__(
        self,
        index: int,
        name: str,
        revision: scenario_mod.RevisionModel,
        base: model.ServiceModel,
        duration: int,
        config: pipeline_mod.PipelineConfig,
        routing: model.Routing = model.Routing.ROUND_ROBIN,
    ) -> None:
        self.index = index
        self.name = name
        self.version = revision.version
        self.service = revision.service
        self.error_rate = revision.error_rate
        self.scale = revision.service.service_time_ms / base.service_time_ms
        self.offset = index * ID_STRIDE
        self.fleet = model.Fleet(revision.service, routing)
        self.pipeline = pipeline_mod.MetricsPipeline(
            config, cpu_request_cores=revision.service.cpu_request_cores
        )
        self.desired = 0
        self.weight = 0
        self.kill_at: dict[int, float] = {}  # draining replica id -> kill time
        self.histogram = Ledger(duration, model.LATENCY_BUCKET_COUNT)  # by completion
        self.error_rows = Ledger(duration, 1)  # by the second the error is seen
        self.seen_requests = 0
        self.seen_errors = 0
        self.seen_buckets: IntArray = np.zeros(model.LATENCY_BUCKET_COUNT, dtype=np.int64)
        self.last_scrape: pipeline_mod.Scrape | None = None
        self.errors_total = 0
        self.weight_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.desired_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.ready_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.replicas_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.routed_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.lost_unready_tl: IntArray = np.zeros(duration, dtype=np.int64)
        self.lost_cut_tl: IntArray = np.zeros(duration, dtype=np.int64)

    def scale_to(self, now: float, replicas: int, grace_s: float) -> None:
        fleet = self.fleet
        if fleet.active_count != replicas:
            fleet.scale_to(now, replicas)
            for replica in fleet.ids[fleet.draining].tolist():
                self.kill_at.setdefault(replica, now + grace_s)
        self.desired = replicas

    def pods(self) -> model.PodView:
        view = self.fleet.pods()
        return model.PodView(
            ids=view.ids + self.offset, start_times=view.start_times, ready=view.ready
        )

    def scrape(self, now: float) -> pipeline_mod.Scrape:
        fleet = self.fleet
        sample = pipeline_mod.Scrape(
            time=now,
            requests=float(self.seen_requests),
            errors=float(self.seen_errors),
            cpu_seconds=fleet.cpu_seconds_total,
            inflight_seconds=fleet.inflight_seconds_total,
            latency_buckets=self.seen_buckets.copy(),
            replica_ids=fleet.ids + self.offset,
            replica_cpu_seconds=fleet.cpu_total.copy(),
            replica_inflight_seconds=fleet.inflight_total.copy(),
        )
        self.pipeline.ingest(sample)
        self.last_scrape = sample
        return sample

    def counters(self) -> Counters | None:
        sample = self.last_scrape
        if sample is None:
            return None
        return Counters(
            time=sample.time,
            requests=sample.requests,
            errors=sample.errors,
            cpu_seconds=sample.cpu_seconds,
            latency_buckets=tuple(sample.latency_buckets.astype(np.float64).tolist()),
        )
