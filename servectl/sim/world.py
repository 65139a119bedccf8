"""The simulated world: several model versions (revisions) behind one router.

:class:`World` is what the simulator backend (:class:`servectl.backends.sim.SimBackend`)
observes and applies plans to. One :class:`~servectl.sim.model.Fleet` per revision, ONE
:class:`~servectl.sim.model.RequestStream` for the whole service (so every decider faces
the same requests, each with its routing draw) and one
:class:`~servectl.sim.pipeline.MetricsPipeline` per revision plus one for the service.
A single-revision run (``servectl simulate``, ``servectl bench``) is the same world with
one revision and no rollout.

Each simulated second ``t`` the driver (:func:`servectl.backends.sim.run.run_world`) does,
in this order:

1. :meth:`World.begin`: every revision's fleet is refreshed (cold starts end, drained
   replicas go), then any draining replica whose grace period has run out is killed and
   its requests are cut; on a scrape tick, outside ``scenario.metrics_outages``, every
   counter is scraped;
2. on a controller tick, one ``reconcile_once``: the controller observes
   (:meth:`World.observe`) and its plan is validated and applied at once
   (:meth:`World.apply`; kills with ``grace_s = 0`` happen here, before any request of
   ``t``);
3. :meth:`World.end`: billing, then second ``t``'s requests are routed (header route,
   then weights, then within the revision round robin or least-request) and served.

**A request with no ready replica to go to is lost at once** (a 503 from the router).
That is what the routers servectl drives do: HAProxy answers 503 when no server of a
backend is up, Envoy (Gateway API) answers 503 "no healthy upstream", and a Kubernetes
Service with no ready endpoint refuses the connection. (The single-revision simulator
used to hold such requests at the router until their deadline, like Knative's activator;
servectl never scales to zero, so that case only arose with every replica still cold.)

docs/simulator.md states every rule; the ones that need care are in the docstrings of
:meth:`World.serve` (routing, errors) and :meth:`World._cut` (what a kill takes back).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servectl.autoscaling import snapshot
from servectl.planning.types import Observed, ObservedRevision, Plan, RevisionPlan
from servectl.sim import model, results
from servectl.sim import pipeline as pipeline_mod
from servectl.sim import revision as revision_mod
from servectl.sim import scenario as scenario_mod

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

IDLE = "Idle"
FINAL_PHASES = frozenset({"Completed", "Aborted"})
"""Phases that end a rollout window (so does ``Idle`` once the rollout has left it)."""

_EPS = 1e-9
_EMPTY = np.empty(0)
_EMPTY_IDS = np.empty(0, dtype=np.int64)


# ----------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class RevisionTimeline:
    """One revision's per-second timelines (index = second; zero before it existed) and
    totals. ``replicas`` is what is billed: starting + ready + draining."""

    name: str
    version: int
    weight: IntArray
    desired: IntArray
    ready: IntArray
    replicas: IntArray
    routed: IntArray  # requests the router sent it (lost ones included)
    lost_unready: IntArray  # of those, lost because it had no ready replica
    lost_cut: IntArray  # requests cut when its replicas were killed, by kill second
    errors: int  # requests it answered with an error (its error_rate)
    cpu_seconds: float


@dataclass(frozen=True, eq=False)
class RolloutSimResult:
    """Per-second timelines of the service, every revision's timelines, phases and totals."""

    scenario: str
    controller: str
    seed: int
    t: IntArray
    offered_rps: FloatArray
    arrivals: IntArray
    p99_ms: FloatArray  # of the requests arriving that second (inf: some never served)
    slo_met: FloatArray  # fraction of that second's requests meeting the SLO (NaN: none)
    total_replicas: IntArray  # billed: starting + ready + draining, every revision
    total_ready: IntArray  # ready replicas taking requests, every revision
    cpu_cores: FloatArray  # mean cores busy that second, every revision
    mean_ms: FloatArray  # mean latency of that second's served requests (NaN: none)
    revisions: dict[str, RevisionTimeline]
    phases: tuple[tuple[float, str], ...]  # (time, phase) whenever the phase changed
    plans: tuple[tuple[float, Plan], ...]  # every plan applied (empty: not recorded)
    starts: tuple[float, ...]  # times of the START events delivered
    requests: int
    met_slo: int
    failed: int
    errors: int  # requests answered with an error by a revision's error_rate
    lost_unready: int
    lost_cut: int
    replica_seconds: float  # serving replicas (starting, ready, draining): standby apart
    standby: IntArray | None = None  # standby replicas (loading + parked), every revision
    parked: IntArray | None = None  # of those, loaded and parked

    @property
    def standby_seconds(self) -> float:
        return 0.0 if self.standby is None else float(self.standby.sum())

    @property
    def parked_seconds(self) -> float:
        return 0.0 if self.parked is None else float(self.parked.sum())

    @property
    def duration_s(self) -> int:
        return int(self.t.size)

    @property
    def slo_attainment(self) -> float:
        return self.met_slo / self.requests if self.requests else 1.0

    @property
    def lost(self) -> int:
        return self.lost_unready + self.lost_cut

    def phase_at(self, t: float) -> str:
        """The phase in effect at ``t`` (``Idle`` before the first plan)."""
        at = bisect.bisect_right([time for time, _ in self.phases], t + _EPS)
        return self.phases[at - 1][1] if at else IDLE

    def rollout_window(self) -> tuple[float, float] | None:
        """(start, end): start is the first delivered START event's time; end the first
        phase change after it to ``Completed``, ``Aborted``, or ``Idle`` after having left
        ``Idle``. None without a START or if the rollout never ended."""
        if not self.starts:
            return None
        start = self.starts[0]
        left_idle = False
        for time, phase in self.phases:
            if time + _EPS < start:
                continue
            if phase in FINAL_PHASES or (phase == IDLE and left_idle):
                return (start, time)
            left_idle = left_idle or phase != IDLE
        return None

    def to_record(self) -> dict[str, Any]:
        """Totals as JSON-compatible values (no timelines)."""
        window = self.rollout_window()
        return {
            "scenario": self.scenario,
            "controller": self.controller,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "requests": self.requests,
            "met_slo": self.met_slo,
            "failed": self.failed,
            "errors": self.errors,
            "lost_unready": self.lost_unready,
            "lost_cut": self.lost_cut,
            "lost": self.lost,
            "slo_attainment": self.slo_attainment,
            "replica_seconds": self.replica_seconds,
            "standby_seconds": self.standby_seconds,
            "parked_seconds": self.parked_seconds,
            "peak_total_replicas": int(self.total_replicas.max()) if self.t.size else 0,
            "rollout_start_s": self.starts[0] if self.starts else None,
            "rollout_end_s": None if window is None else window[1],
            "rollout_duration_s": None if window is None else window[1] - window[0],
            "final_phase": self.phases[-1][1] if self.phases else IDLE,
            "revisions": list(self.revisions),
        }


_nearest_rank = results.nearest_rank


def _timeline(revision: revision_mod.Revision) -> RevisionTimeline:
    return RevisionTimeline(
        name=revision.name,
        version=revision.version,
        weight=revision.weight_tl,
        desired=revision.desired_tl,
        ready=revision.ready_tl,
        replicas=revision.replicas_tl,
        routed=revision.routed_tl,
        lost_unready=revision.lost_unready_tl,
        lost_cut=revision.lost_cut_tl,
        errors=revision.errors_total,
        cpu_seconds=revision.fleet.cpu_seconds_total,
    )


# ----------------------------------------------------------------------------- the run


def check_scenario(scenario: scenario_mod.RolloutScenario) -> None:
    if scenario.stable_version not in scenario.revisions:
        raise ValueError(
            f"scenario {scenario.name!r}: stable_version {scenario.stable_version} is not "
            f"one of its revisions {sorted(scenario.revisions)}"
        )
    for version, revision in scenario.revisions.items():
        if revision.version != version:
            raise ValueError(
                f"scenario {scenario.name!r}: revisions[{version}] has version "
                f"{revision.version}; the key must be the version"
            )
    if not 0.0 <= scenario.header_share <= 1.0:
        raise ValueError(f"header_share must be in [0, 1], got {scenario.header_share}")
    if scenario.grace_s < 0:
        raise ValueError(f"grace_s must be >= 0, got {scenario.grace_s}")
    if scenario.min_replicas < 0 or scenario.max_replicas < max(scenario.min_replicas, 1):
        raise ValueError(
            "need 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
            f"got {scenario.min_replicas}..{scenario.max_replicas}"
        )
    if scenario.standby < 0:
        raise ValueError(f"standby must be >= 0, got {scenario.standby}")
    if scenario.routing is model.Routing.RANDOM:
        raise ValueError(
            "routing: the world routes within a revision round robin or least-request; "
            "random routing is a single-fleet model only (servectl.sim.model.Fleet)"
        )


class World:
    """The state of one run; :func:`servectl.backends.sim.run.run_world` drives it second
    by second."""

    def __init__(
        self,
        scenario: scenario_mod.RolloutScenario,
        config: pipeline_mod.PipelineConfig,
        seed: int,
    ) -> None:
        self.scenario = scenario
        self.config = config
        trace = scenario.trace
        self.duration = duration = trace.duration_s
        stable = scenario.revisions[scenario.stable_version]
        self.base = base = stable.service
        self.slo_s = base.slo_ms / 1000.0
        self.timeout_s = base.timeout_s
        self.stream = model.RequestStream(trace.rps, base, seed, with_routing=True)
        erring = any(r.error_rate > 0 for r in scenario.revisions.values())
        self.error_draws = revision_mod.ErrorDraws(self.stream.counts, seed) if erring else None
        self.revisions: list[revision_mod.Revision] = []
        self.by_name: dict[str, revision_mod.Revision] = {}
        self.service_pipeline = pipeline_mod.MetricsPipeline(
            config, cpu_request_cores=base.cpu_request_cores
        )
        self.header: revision_mod.Revision | None = None
        self.bounds_us = tuple(model.LATENCY_BUCKETS_US.tolist())
        self.route_index: IntArray = np.array([-1], dtype=np.int64)  # plan order, then -1
        self.route_cum: IntArray = np.empty(0, dtype=np.int64)
        self.no_route = 0  # requests with no revision to go to (a 503 at the router)
        self.records: deque[revision_mod.Second] = deque()
        # totals and service timelines
        self.requests = self.met = self.failed = 0
        self.lost_unready = self.lost_cut = 0
        self.met_count: IntArray = np.zeros(duration, dtype=np.int64)
        self.p99_tl: FloatArray = np.full(duration, np.nan)
        self.total_replicas: IntArray = np.zeros(duration, dtype=np.int64)
        self.total_ready: IntArray = np.zeros(duration, dtype=np.int64)
        self.total_standby: IntArray = np.zeros(duration, dtype=np.int64)  # loading + parked
        self.total_parked: IntArray = np.zeros(duration, dtype=np.int64)
        self.cpu_tl: FloatArray = np.zeros(duration)
        self.mean_tl: FloatArray = np.full(duration, np.nan)
        self.stale = False  # a scheduled scrape was missed and none has happened since
        self.next_scrape = 0.0

        start = scenario.initial_replicas
        if start is None:
            start = results.initial_replicas_for(
                trace, base, scenario.min_replicas, scenario.max_replicas
            )
        initial = min(max(int(start), scenario.min_replicas), scenario.max_replicas)
        first = self._revision(scenario.stable_version, scenario.revision_name(stable.version))
        first.fleet.add(
            initial, created=-results.WARM_AGE_S, ready_at=-results.WARM_AGE_S + base.cold_start_s
        )
        warm = -results.WARM_AGE_S + base.cold_start_s
        first.fleet.set_standby(-results.WARM_AGE_S, scenario.standby, ready_at=warm)
        first.fleet.update(0.0)
        first.desired = initial
        first.weight = 100
        self._set_routes([(first, 100)])

    # -------------------------------------------------------------- revisions and plans

    def _revision(self, version: int, name: str) -> revision_mod.Revision:
        existing = self.by_name.get(name)
        if existing is not None:
            return existing
        revision = revision_mod.Revision(
            len(self.revisions),
            name,
            self.scenario.revisions[version],
            self.base,
            self.duration,
            self.config,
            self.scenario.routing,
        )
        self.revisions.append(revision)
        self.by_name[name] = revision
        return revision

    def _set_routes(self, weighted: list[tuple[revision_mod.Revision, int]]) -> None:
        self.route_index = np.array([r.index for r, _ in weighted] + [-1], dtype=np.int64)
        self.route_cum = np.cumsum(np.array([w for _, w in weighted], dtype=np.int64))

    def _validate(self, plan: Plan) -> None:
        scenario = self.scenario
        names: set[str] = set()
        total = 0
        for rp in plan.revisions:
            if rp.version not in scenario.revisions:
                raise ValueError(
                    f"plan names version {rp.version} ({rp.name!r}), which scenario "
                    f"{scenario.name!r} does not define (versions: {sorted(scenario.revisions)})"
                )
            expected = scenario.revision_name(rp.version)
            # Two groups of pods may run one version (Flagger's primary and canary):
            # "<name>-<suffix>" is a second revision of the same version.
            if rp.name != expected and not rp.name.startswith(expected + "-"):
                raise ValueError(
                    f"plan revision {rp.name!r} has version {rp.version}, whose name is "
                    f"{expected!r} (or {expected!r} + '-<suffix>')"
                )
            if rp.name in names:
                raise ValueError(f"plan lists revision {rp.name!r} twice")
            names.add(rp.name)
            if not _is_int(rp.replicas) or rp.replicas < 0:
                raise ValueError(
                    f"plan revision {rp.name!r}: replicas must be an int >= 0, got {rp.replicas!r}"
                )
            if not _is_int(rp.standby) or rp.standby < 0:
                raise ValueError(
                    f"plan revision {rp.name!r}: standby must be an int >= 0, got {rp.standby!r}"
                )
            if not _is_int(rp.weight) or not 0 <= rp.weight <= 100:
                raise ValueError(
                    f"plan revision {rp.name!r}: weight must be an int in 0..100, got {rp.weight!r}"
                )
            total += rp.weight
        serving = any(rp.replicas > 0 for rp in plan.revisions) or any(
            r.fleet.receiving_count > 0 for r in self.revisions
        )
        if total != 100 and (serving or total != 0):
            listed = ", ".join(f"{rp.name}={rp.weight}" for rp in plan.revisions) or "none"
            raise ValueError(
                f"plan weights must sum to 100 over the revisions listed, got {total} ({listed})"
            )
        if plan.header_revision is not None and plan.header_revision not in names:
            raise ValueError(
                f"plan header_revision {plan.header_revision!r} is not one of the plan's "
                f"revisions ({', '.join(sorted(names)) or 'none'})"
            )

    def apply(self, now: float, plan: Plan) -> None:
        """Validate ``plan`` and apply it at once (revisions not listed: 0 replicas, 0 %)."""
        self._validate(plan)
        grace = self.scenario.grace_s
        listed: list[tuple[revision_mod.Revision, RevisionPlan]] = [
            (self._revision(rp.version, rp.name), rp) for rp in plan.revisions
        ]
        named = {r.name for r, _ in listed}
        for revision in self.revisions:
            if revision.name not in named:
                revision.scale_to(now, 0, grace)
                revision.weight = 0
                revision.fleet.set_standby(now, 0)
        for revision, rp in listed:
            revision.scale_to(now, rp.replicas, grace)
            revision.weight = rp.weight
            revision.fleet.set_standby(now, rp.standby)  # the controller's pool
        self.header = None if plan.header_revision is None else self.by_name[plan.header_revision]
        self._set_routes([(r, rp.weight) for r, rp in listed])

    # -------------------------------------------------------------- kills

    def kill_due(self, t: int) -> None:
        """Kill every draining replica whose grace period ends at or before ``t``."""
        for revision in self.revisions:
            if not revision.kill_at:
                continue
            due = [i for i, at in revision.kill_at.items() if at <= t + _EPS]
            if not due:
                continue
            for replica in due:
                del revision.kill_at[replica]
            ids = np.array(due, dtype=np.int64)
            ids = ids[np.isin(ids, revision.fleet.ids)]  # the others drained in time
            if ids.size:
                revision.fleet.kill(float(t), ids)
                self._cut(revision, ids, t)

    def _cut(self, revision: revision_mod.Revision, ids: IntArray, now: int) -> None:
        """Take back what was booked for the requests still in the killed replicas ``ids``.

        A request's latency, SLO verdict and observations (latency histogram at its
        completion second, error at the second the client gives up) are all decided when
        it is dispatched, because FIFO latencies are final then. Dispatched requests are
        kept (``self.records``) until they complete, with their replica and completion
        time; the requests still in a replica killed at ``now`` are exactly those with
        ``done >= now`` (the same ones its ``in_system`` counts). For each: it no longer
        meets the SLO, it becomes failed (once: a request that had already timed out was
        failed already), its histogram observation (a second >= ``now``, not yet
        observed) is removed, and its error is observed at ``now`` instead of later (an
        error already observed before ``now`` stays). Its latency becomes inf, and the
        p99 of its arrival second is recomputed.
        """
        bounds = model.LATENCY_BUCKETS_US
        cut_total = 0
        for record in self.records:
            changed = False
            for part in record.parts:
                if part.revision != revision.index:
                    continue
                cut = np.isin(part.ids, ids) & (part.done >= now)
                count = int(np.count_nonzero(cut))
                if not count:
                    continue
                met = int(np.count_nonzero(part.met & cut))
                self.met -= met
                self.met_count[record.t] -= met
                self.failed += int(np.count_nonzero(cut & ~part.failed))
                latency = part.latency[cut]
                revision.histogram.take_back(
                    np.floor(part.done[cut]).astype(np.int64),
                    np.searchsorted(bounds, latency * 1e6, side="left").astype(np.int64),
                )
                seen_at = part.error_second[cut]
                pending = seen_at >= now
                revision.error_rows.take_back(seen_at[pending])
                fresh = int(np.count_nonzero(pending | (seen_at < 0)))
                if now < self.duration:
                    revision.error_rows.values[now, 0] += fresh
                part.latency[cut] = math.inf
                part.done[cut] = -math.inf
                part.met[cut] = False
                part.failed[cut] = True
                part.error_second[cut] = now
                cut_total += count
                changed = True
            if changed:
                self._p99(record)
        self.lost_cut += cut_total
        if now < self.duration:
            revision.lost_cut_tl[now] += cut_total

    def _p99(self, record: revision_mod.Second) -> None:
        values = [part.latency for part in record.parts]
        if record.lost:
            values.append(np.full(record.lost, math.inf))
        self.p99_tl[record.t] = _nearest_rank(np.concatenate(values), 0.99) * 1000.0

    # -------------------------------------------------------------- observation

    def scrape(self, now: float) -> None:
        samples = [revision.scrape(now) for revision in self.revisions]
        buckets = np.zeros(model.LATENCY_BUCKET_COUNT, dtype=np.int64)
        for sample in samples:
            buckets += sample.latency_buckets
        self.service_pipeline.ingest(
            pipeline_mod.Scrape(
                time=now,
                requests=sum(s.requests for s in samples) + self.no_route,
                errors=sum(s.errors for s in samples) + self.no_route,
                cpu_seconds=sum(s.cpu_seconds for s in samples),
                inflight_seconds=sum(s.inflight_seconds for s in samples),
                latency_buckets=buckets,
                replica_ids=_EMPTY_IDS,
                replica_cpu_seconds=_EMPTY,
                replica_inflight_seconds=_EMPTY,
            )
        )
        self.stale = False

    def observe(self, now: float) -> Observed:
        scenario = self.scenario
        header = self.header
        revisions: list[ObservedRevision] = []
        pods: list[snapshot.PodSample] = []
        desired = ready = 0
        ready_cores = 0.0
        for revision in self.revisions:
            fleet = revision.fleet
            receiving = fleet.receiving_count
            desired += revision.desired
            ready += receiving
            ready_cores += receiving * revision.service.cpu_request_cores
            if (
                revision.desired == 0
                and fleet.size == 0
                and revision.weight == 0
                and revision is not header
            ):
                continue
            own = revision.pipeline.snapshot(
                now,
                snapshot.Replicas(
                    current=revision.desired, ready=receiving, min=0, max=scenario.max_replicas
                ),
                revision.pods(),
            )
            pods.extend(own.pods)
            revisions.append(
                ObservedRevision(
                    name=revision.name,
                    version=revision.version,
                    desired=revision.desired,
                    ready=receiving,
                    starting=fleet.active_count - receiving,
                    draining=fleet.draining_count,
                    weight=revision.weight,
                    available=receiving > 0,
                    snapshot=own,
                    counters=revision.counters(),
                )
            )
        signals = self.service_pipeline.signals(now, ready)
        cpu = signals.cpu_usage_cores
        utilization = 100.0 * cpu / ready_cores if cpu is not None and ready_cores > 0 else None
        service = snapshot.Snapshot(
            time=now,
            replicas=snapshot.Replicas(
                current=desired, ready=ready, min=scenario.min_replicas, max=scenario.max_replicas
            ),
            signals=dataclasses.replace(signals, cpu_utilization=utilization),
            pods=tuple(pods),
        )
        return Observed(
            time=now,
            service=service,
            revisions=tuple(revisions),
            header_revision=None if header is None else header.name,
            latency_bounds_us=self.bounds_us,
            metrics_ok=not self.stale and not self.in_outage(now),
        )

    def in_outage(self, now: float) -> bool:
        return any(start <= now < end for start, end in self.scenario.metrics_outages)

    # -------------------------------------------------------------- one second

    def _route(self, u: FloatArray) -> IntArray:
        """Each request's revision index (-1: no route)."""
        share = self.scenario.header_share
        if self.header is not None and share > 0:
            matched = u < share
            draw = (u - share) / (1.0 - share) if share < 1.0 else np.zeros_like(u)
        else:
            matched = None
            draw = u
        slot = np.searchsorted(self.route_cum, draw * 100.0, side="right")
        dest: IntArray = self.route_index[slot]
        if matched is not None and self.header is not None:
            dest[matched] = self.header.index
        return dest

    def serve(self, t: int) -> None:
        """Route second ``t``'s requests and serve them.

        Routing: a request with draw ``u < header_share`` is header-matched and goes to
        the header revision when there is one; every other request (all of them without a
        header route) picks a revision by the cumulative weights in plan order, with the
        draw rescaled to ``(u - header_share) / (1 - header_share)`` when a header route
        splits off the matched ones (``u`` as is otherwise). Within a revision the fleet's
        round robin picks the replica. A revision with no ready replica loses what it is
        sent at once (503). Errors: a request of a revision with ``error_rate`` e is an
        error when its own draw (``revision.ErrorDraws``) is below e; it is served as usual, then
        observed as an error in its completion second.
        """
        offsets, service_s, route_u = self.stream.second(t)
        arriving = int(offsets.size)
        assert route_u is not None
        dest = self._route(route_u) if arriving else _EMPTY_IDS
        error_u = self.error_draws.second(t) if self.error_draws is not None else None
        routed = np.bincount(dest + 1, minlength=len(self.revisions) + 1)
        no_route = int(routed[0])
        lost = no_route
        self.no_route += no_route
        parts: list[revision_mod.Part] = []
        met_now = failed_now = served_now = 0
        cpu_now = latency_sum = 0.0
        bounds = model.LATENCY_BUCKETS_US
        for revision in self.revisions:
            fleet = revision.fleet
            count = int(routed[revision.index + 1])
            revision.routed_tl[t] = count
            revision.seen_requests += count
            if count and fleet.receiving_count == 0:
                revision.lost_unready_tl[t] = count
                revision.error_rows.values[t, 0] += count
                lost += count
                count = 0
            if fleet.size == 0:
                continue
            if count == 0:
                cpu_now += fleet.step(t, _EMPTY, _EMPTY).cpu_cores
                continue
            if count == arriving:
                x, s, err = offsets, service_s, error_u
            else:
                mine = np.flatnonzero(dest == revision.index)
                x, s = offsets[mine], service_s[mine]
                err = None if error_u is None else error_u[mine]
            if revision.scale != 1.0:
                s = s * revision.scale
            outcome = fleet.step(t, x, s)
            cpu_now += outcome.cpu_cores
            order = outcome.order
            assert outcome.columns is not None
            ids = fleet.ids[outcome.columns]
            latency = outcome.wait_s + s[order]
            served_now += int(latency.size)
            latency_sum += float(latency.sum())
            arrival = t + x[order]
            done = arrival + latency
            done_second = np.floor(done).astype(np.int64)
            revision.histogram.book(
                t,
                done_second,
                np.searchsorted(bounds, latency * 1e6, side="left").astype(np.int64),
            )
            too_slow = latency > self.timeout_s
            failed = too_slow
            error_second = np.where(
                too_slow, np.floor(arrival + self.timeout_s).astype(np.int64), -1
            )
            if err is not None and revision.error_rate > 0:
                is_error = err[order] < revision.error_rate
                revision.errors_total += int(np.count_nonzero(is_error))
                failed = too_slow | is_error
                error_second = np.where(~too_slow & is_error, done_second, error_second)
            seen = error_second[error_second >= 0]
            revision.error_rows.book(t, seen)
            met = ~failed & (latency <= self.slo_s)
            met_now += int(np.count_nonzero(met))
            failed_now += int(np.count_nonzero(failed))
            parts.append(
                revision_mod.Part(
                    revision=revision.index,
                    ids=ids,
                    done=done,
                    latency=latency,
                    met=met,
                    failed=failed,
                    error_second=error_second,
                )
            )
        self.requests += arriving
        self.met += met_now
        self.failed += failed_now + lost
        self.lost_unready += lost
        self.met_count[t] = met_now
        self.cpu_tl[t] = cpu_now
        if served_now:
            self.mean_tl[t] = latency_sum / served_now * 1000.0
        if arriving:
            record = revision_mod.Second(
                t=t,
                parts=parts,
                lost=lost,
                last_done=max((float(p.done.max()) for p in parts), default=-math.inf),
            )
            self._p99(record)
            if parts:
                self.records.append(record)
        for revision in self.revisions:
            revision.seen_buckets += revision.histogram.values[t]
            revision.seen_errors += int(revision.error_rows.values[t, 0])

    # -------------------------------------------------------------- the driver's steps

    def begin(self, t: int) -> None:
        """Start of second ``t``: refresh fleets, kill what is due, scrape on schedule."""
        now = float(t)
        self.forget(t)
        for revision in self.revisions:
            revision.fleet.refresh(now)
        self.kill_due(t)
        if t + _EPS >= self.next_scrape:
            if self.in_outage(now):
                self.stale = True
            else:
                self.scrape(now)
            while self.next_scrape <= t + _EPS:
                self.next_scrape += self.config.scrape_interval_s

    def end(self, t: int) -> None:
        """End of second ``t``: bill the replicas, then route and serve its requests."""
        self.bill(t)
        self.serve(t)

    def result(
        self,
        controller: str,
        seed: int,
        *,
        phases: tuple[tuple[float, str], ...],
        plans: tuple[tuple[float, Plan], ...],
        starts: tuple[float, ...],
    ) -> RolloutSimResult:
        arrivals = self.stream.counts.copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            slo_met = np.where(arrivals > 0, self.met_count / np.maximum(arrivals, 1), np.nan)
        return RolloutSimResult(
            scenario=self.scenario.name,
            controller=controller,
            seed=seed,
            t=np.arange(self.duration, dtype=np.int64),
            offered_rps=np.asarray(self.scenario.trace.rps, dtype=np.float64),
            arrivals=arrivals,
            p99_ms=self.p99_tl,
            slo_met=slo_met,
            total_replicas=self.total_replicas,
            total_ready=self.total_ready,
            cpu_cores=self.cpu_tl,
            mean_ms=self.mean_tl,
            revisions={r.name: _timeline(r) for r in self.revisions},
            phases=phases,
            plans=plans,
            starts=starts,
            requests=self.requests,
            met_slo=self.met,
            failed=self.failed,
            errors=sum(r.errors_total for r in self.revisions),
            lost_unready=self.lost_unready,
            lost_cut=self.lost_cut,
            replica_seconds=float(self.total_replicas.sum()),
            standby=self.total_standby,
            parked=self.total_parked,
        )

    def forget(self, t: int) -> None:
        """Drop the records of seconds whose requests have all completed before ``t``."""
        records = self.records
        while records and records[0].last_done < t:
            records.popleft()

    def bill(self, t: int) -> None:
        replicas = ready = standby = parked = 0
        for revision in self.revisions:
            fleet = revision.fleet
            revision.weight_tl[t] = revision.weight
            revision.desired_tl[t] = revision.desired
            revision.ready_tl[t] = fleet.receiving_count
            revision.replicas_tl[t] = fleet.size
            replicas += fleet.size
            ready += fleet.receiving_count
            standby += fleet.standby_count
            parked += fleet.parked_count(float(t))
        self.total_replicas[t] = replicas
        self.total_ready[t] = ready
        self.total_standby[t] = standby
        self.total_parked[t] = parked


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
