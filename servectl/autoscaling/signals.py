"""One replica proposal per signal: how many replicas each signal alone asks for.

All proposals size on *demand*, not on what the ready replicas manage to serve, so
an overloaded service (CPU pinned at 100 %, queues growing) still gets a proposal as
large as its load, and replicas that are starting are not ordered twice.

Demand is the request rate projected ``horizon_s`` ahead (``rate + max(0, trend) *
horizon``, horizon = cold start + one tick): capacity ordered now arrives one cold
start later, so that is the load it must meet.

- cpu:         replicas = demand_cores / (request_cores * target%)
               demand_cores = max(observed usage, projected rate * service time)
- gpu:         replicas = ready * duty% / target% * growth      (proportional, like HPA)
- rps:         replicas = projected rate / target per replica
- concurrency: replicas = in-flight * growth / target per replica
- latency:     fewest replicas whose M/M/c wait quantile fits the latency budget
               (target minus the service-time quantile learnt from observations);
               one queue per replica behind round robin, one pooled queue behind
               least request; see ``queueing``.

``growth`` = projected rate / current rate (1 without a rate signal).
Worked example (cpu 70 %, 2-core replicas, 20 ms/request): 600 req/s rising 2 req/s²,
horizon 32 s -> demand 664 req/s * 0.02 s = 13.3 cores -> 13.3 / (2 * 0.7) = 9.5 replicas.
"""

from __future__ import annotations

from dataclasses import dataclass

from servectl.autoscaling import config, queueing, snapshot


@dataclass(frozen=True)
class Demand:
    """What the engine knows of the load this tick (estimates kept in its state)."""

    rate: float | None  # requests/s now
    projected_rate: float | None  # requests/s one horizon ahead
    service_s: float | None  # mean CPU time per request
    wait_budget_s: float | None  # queueing wait the latency target allows (learnt)
    request_cores: float  # CPU request of one replica
    threads: int  # requests one replica serves in parallel
    # Least-request routing in front: the replicas' queues behave as one (``queueing``).
    pooled: bool = False

    @property
    def growth(self) -> float:
        if self.rate is None or self.projected_rate is None or self.rate <= 0:
            return 1.0
        return max(1.0, self.projected_rate / self.rate)


@dataclass(frozen=True)
class Proposal:
    signal: str
    replicas: float
    detail: str
    #: Why the proposal is a lower bound ("" when it is whole): it may add replicas and
    #: never removes any (the engine holds as for a missing signal).
    partial: str = ""


def propose(
    target: config.SignalTarget,
    snap: snapshot.Snapshot,
    demand: Demand,
    max_replicas: int,
) -> Proposal | None:
    """The proposal of one signal, or None if its inputs are missing."""
    kind = target.type
    if kind is config.SignalType.CPU:
        return _cpu(target, snap, demand)
    if kind is config.SignalType.GPU:
        return _gpu(target, snap, demand)
    if kind is config.SignalType.RPS:
        return _rps(target, demand)
    if kind is config.SignalType.CONCURRENCY:
        return _concurrency(target, snap, demand)
    return _latency(target, snap, demand, max_replicas)


def signal_name(target: config.SignalTarget) -> str:
    if target.type is config.SignalType.LATENCY:
        return f"latency_{snapshot.percentile_key(target.percentile)}"
    return target.type.value


def usage_cores(sig: snapshot.Signals, replicas: int, request_cores: float) -> float | None:
    """CPU in use, in cores: the usage signal, else utilization x ``replicas`` x request."""
    if sig.cpu_usage_cores is not None:
        return sig.cpu_usage_cores
    if sig.cpu_utilization is None:
        return None
    return sig.cpu_utilization / 100.0 * replicas * request_cores


def _cpu(target: config.SignalTarget, snap: snapshot.Snapshot, demand: Demand) -> Proposal | None:
    usage = usage_cores(snap.signals, max(snap.replicas.ready, 1), demand.request_cores)
    if usage is None:
        return None
    demand_cores = usage * demand.growth
    if demand.projected_rate is not None and demand.service_s is not None:
        demand_cores = max(demand_cores, demand.projected_rate * demand.service_s)
    per_replica = demand.request_cores * target.target / 100.0
    replicas = demand_cores / per_replica
    # Ready replicas whose CPU is not counted yet (settling: their rate window still holds
    # their model's load) serve their share: the usage read is the others' only.
    counted = sum(1 for p in snap.pods if p.ready and p.cpu_usage_cores is not None)
    ready = snap.replicas.ready
    partial = (
        f"cpu counts {counted} of {ready} ready replicas" if snap.pods and counted < ready else ""
    )
    return Proposal(
        signal_name(target),
        replicas,
        f"demand {demand_cores:.2f} cores / ({demand.request_cores:g} cores x "
        f"{target.target:g}%) = {replicas:.2f}",
        partial,
    )


def _gpu(target: config.SignalTarget, snap: snapshot.Snapshot, demand: Demand) -> Proposal | None:
    duty = snap.signals.gpu_duty_cycle
    if duty is None:
        return None
    ready = max(snap.replicas.ready, 1)
    replicas = ready * duty / target.target * demand.growth
    return Proposal(
        signal_name(target),
        replicas,
        f"{ready} ready x duty {duty:.1f}% / {target.target:g}% x growth {demand.growth:.2f}"
        f" = {replicas:.2f}",
    )


def _rps(target: config.SignalTarget, demand: Demand) -> Proposal | None:
    if demand.projected_rate is None:
        return None
    replicas = demand.projected_rate / target.target
    return Proposal(
        signal_name(target),
        replicas,
        f"{demand.projected_rate:.1f} req/s / {target.target:g} per replica = {replicas:.2f}",
    )


def _concurrency(
    target: config.SignalTarget, snap: snapshot.Snapshot, demand: Demand
) -> Proposal | None:
    inflight = snap.signals.concurrency
    if inflight is None:
        return None
    replicas = inflight * demand.growth / target.target
    return Proposal(
        signal_name(target),
        replicas,
        f"{inflight:.1f} in flight x growth {demand.growth:.2f} / {target.target:g}"
        f" = {replicas:.2f}",
    )


def _latency(
    target: config.SignalTarget, snap: snapshot.Snapshot, demand: Demand, max_replicas: int
) -> Proposal | None:
    if demand.projected_rate is None or demand.service_s is None or demand.wait_budget_s is None:
        return None
    replicas = queueing.fractional_replicas_for_latency(
        demand.projected_rate,
        demand.service_s,
        demand.threads,
        target.percentile / 100.0,
        demand.wait_budget_s,
        max_replicas,
        pooled=demand.pooled,
    )
    observed = snap.signals.latency(target.percentile)
    seen = f"observed {observed:.0f} ms, " if observed is not None else ""
    detail = (
        f"{seen}service {demand.service_s * 1000:.1f} ms, learnt wait budget "
        f"{demand.wait_budget_s * 1000:.0f} ms at {demand.projected_rate:.1f} req/s "
        f"-> {replicas:.2f}"
    )
    return Proposal(signal_name(target), replicas, detail)
