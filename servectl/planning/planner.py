"""The coordination planner: every revision's replicas and the weights, from the
autoscaler's demand, the rollout's intent and what the backend observed (DESIGN §4).

One call per cycle, pure; its steps read the cycle's inputs (demand, costs, ready
replicas, ...) from one :class:`_Cycle` value built at its start. The rules, and where
each is enforced:

1. Scale first, then shift (:func:`_shift`): a revision's share of traffic rises only
   as far as its *ready* replicas can carry at its own per-request cost, and only once
   TF Serving reports the version AVAILABLE. The replicas for the target share are
   ordered first (pre-scaling), so the shift follows as they become ready. And back
   (:func:`_carry_back`): a revision whose ready replicas stop carrying its weight (its
   cost, borrowed until it had traffic, is measured higher; it lost replicas) gives the
   excess back to the stable revision, as far as the stable's ready replicas carry it.
2. Drain, then shrink (:func:`_replicas`): a revision whose share went down keeps,
   for ``hold_s`` (``drainSeconds``, or blue/green's scale-down delay) after the route
   change was applied, the capacity of the share it had before (its replicas, or fewer
   if the autoscaler's demand fell meanwhile: what the old share needs at today's
   demand). A further lowering within the window restarts the clock and keeps the
   highest share. The share loss alone never shrinks a revision before its deadline;
   demand falling is the autoscaler's business (its scale-down stabilization).
3. Per-revision sizing (:func:`need`): the autoscaler decides the total ``demand`` in
   replicas of the current traffic mix; a revision at share ``e`` with relative cost
   ``r`` (its CPU seconds per request over the stable revision's) gets
   ``ceil(demand * e * r / mix)`` where ``mix = sum(e_j * r_j)`` over the applied shares.
   A CPU-heavy canary thus adds canary replicas, never stable ones. A revision with too
   few requests to measure borrows the stable revision's cost (r = 1). The ``r`` sized
   at holds while the smoothed estimate stays within 10 % of it (``COST_TOLERANCE``):
   a canary as costly as stable is sized as stable, not a replica more on noise.
4. No capacity dip on abort: an abort is a shift back to stable like any other, so
   stable is scaled first and traffic follows its ready capacity; a canary failing hard
   (the rollout says so) loses its traffic at once and stable is sized for all of it,
   provided stable has a ready replica (AVAILABLE) to take it: else it is scaled first.
5. Promotion keeps the current size: the promoted revision's share is sized on the
   whole demand, never on minReplicas.
6. Surge budget (:func:`_replicas`): replicas are added ahead of traffic only while
   they and the replicas held while draining stay within the budget. The budget never
   cuts a replica already there (held while draining, or added ahead in an earlier
   cycle): when a giver's drain fills it, nothing more is added until the drain ends.
7. Sample-aware analysis lives in ``servectl.rollout.analysis``.
8. Missing metrics never shrink (:func:`plan`): with stale metrics every revision keeps
   at least its current replicas and weights hold (an abort still moves traffic back).
9. Warm standby (``Limits.standby``; docs/standby.md): each revision that takes traffic
   (a weight, or the header route) keeps that many standby replicas beside its serving
   ones; one that takes none keeps none. Standby counts apart from ``maxReplicas`` and
   the surge budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from servectl.autoscaling import decision
from servectl.planning.types import (
    Observed,
    ObservedRevision,
    Plan,
    PlanReason,
    RevisionNames,
    RevisionPlan,
)
from servectl.rollout.machine import Intent

COST_MIN_RPS = 1.0
"""A revision serving fewer requests per second than this borrows the stable cost."""
COST_SMOOTHING = 0.3
"""EWMA weight of a new cost measurement (the rest is the previous estimate)."""
HEADER_SHARE_PRIOR = 0.1
"""Share of traffic assumed to match an A/B header before any was routed."""
SHRINK_TOLERANCE = 0.05
"""A revision not losing traffic shrinks only when 5 % more demand would still fit."""
COST_TOLERANCE = 0.1
"""The cost a revision is sized at (rule 3) moves only when its smoothed estimate left it
by more than 10 %: the estimate's noise (a few percent after smoothing, from per-window
ratios 20 % apart on a busy machine) never adds a replica at a rounding edge one cycle and
takes it back the next."""
CARRY_TOLERANCE = 0.1
"""A revision gives weight back only when its ready replicas no longer carry 90 % of its
share: noise in the cost estimate never makes the weights flap."""


@dataclass(frozen=True)
class PlannerState:
    """Kept between cycles (persisted with the rest of the loop state)."""

    replicas: Mapping[str, int] = field(default_factory=dict)  # last planned
    shares: Mapping[str, float] = field(default_factory=dict)  # last planned effective share
    lowered_at: Mapping[str, float] = field(default_factory=dict)
    hold_s: Mapping[str, float] = field(default_factory=dict)
    held_share: Mapping[str, float] = field(default_factory=dict)  # share before lowering
    cost: Mapping[str, float] = field(default_factory=dict)  # relative to stable, smoothed
    #: What each revision is sized at: ``cost`` within COST_TOLERANCE of it holds it.
    sizing_cost: Mapping[str, float] = field(default_factory=dict)
    header_share: float | None = None


@dataclass(frozen=True)
class Limits:
    min_replicas: int = 1
    max_replicas: int = 100
    surge_replicas: int | None = None  # None: no budget
    standby: int = 0  # warm standby replicas for each revision that takes traffic


@dataclass(frozen=True)
class _Cycle:
    """What every step of one :func:`plan` call reads, built once at its start."""

    intent: Intent
    observed: Observed
    state: PlannerState
    limits: Limits
    versions: Mapping[str, int]  # revision name -> model version
    stable: str
    now: float
    #: Share of all requests the A/B header matches (measured, smoothed).
    hs: float
    ready: Mapping[str, int]
    available: Mapping[str, bool]
    #: The autoscaler's demand, each revision's relative cost and the current mix of
    #: the two: what :meth:`needs` sizes with (rule 3).
    demand: int
    costs: Mapping[str, float]
    mix: float

    def needs(self, name: str, share: float) -> int:
        """Replicas ``name`` needs for ``share`` of all requests (:func:`need`)."""
        return need(self.demand, share, self.costs.get(name, 1.0), self.mix)


def _effective(weights: Mapping[str, int], header: str | None, hs: float) -> dict[str, float]:
    """Share of all requests each revision gets: weights apply to the unmatched part."""
    matched = hs if header is not None else 0.0
    shares = {name: (1.0 - matched) * w / 100.0 for name, w in weights.items()}
    if header is not None:
        shares[header] = shares.get(header, 0.0) + matched
    return shares


def need(demand: int, share: float, cost: float, mix: float) -> int:
    """Replicas a revision needs for ``share`` of all requests at relative ``cost``."""
    if share <= 0.0:
        return 0
    mix = mix if mix > 0 else 1.0
    return max(1, math.ceil(demand * share * cost / mix - 1e-6))


def _rebased(previous: Mapping[str, float], stable: str) -> Mapping[str, float]:
    """Estimates relative to the stable revision, whose own is 1. Once a promotion made
    another revision stable, kept ones are still relative to the old stable: rebase them
    (the old stable then costs 1/r, not 1), or a draining old stable, which has no traffic
    left to measure, would be sized at the wrong cost."""
    scale = previous.get(stable)
    if scale is not None and scale > 0 and not math.isclose(scale, 1.0):
        return {name: cost / scale for name, cost in previous.items()}
    return previous


def _sizing_costs(
    costs: Mapping[str, float], stable: str, previous: Mapping[str, float]
) -> dict[str, float]:
    """The costs sizing uses: each one held while the estimate stays within
    COST_TOLERANCE of it, else the estimate."""
    previous = _rebased(previous, stable)
    out: dict[str, float] = {}
    for name, cost in costs.items():
        held = previous.get(name)
        keep = name != stable and held is not None and abs(cost - held) <= COST_TOLERANCE * held
        out[name] = held if keep and held is not None else cost
    return out


def _measure_costs(
    observed: Observed, stable: str, previous: Mapping[str, float]
) -> dict[str, float]:
    def per_request(rev: ObservedRevision | None) -> float | None:
        if rev is None or rev.snapshot is None:
            return None
        sig = rev.snapshot.signals
        if sig.rps is None or sig.rps < COST_MIN_RPS or sig.cpu_usage_cores is None:
            return None
        return sig.cpu_usage_cores / sig.rps

    previous = _rebased(previous, stable)
    base = per_request(observed.revision(stable))
    costs: dict[str, float] = {}
    for rev in observed.revisions:
        own = per_request(rev)
        old = previous.get(rev.name)
        if rev.name == stable:
            costs[rev.name] = 1.0
        elif own is None or base is None or base <= 0:
            costs[rev.name] = old if old is not None else 1.0
        else:
            ratio = own / base
            costs[rev.name] = ratio if old is None else old + COST_SMOOTHING * (ratio - old)
    return costs


def _header_share(observed: Observed, previous: float | None) -> float:
    header = observed.header_revision
    rev = observed.revision(header) if header is not None else None
    total = observed.service.signals.rps
    if rev is None or rev.weight != 0 or rev.snapshot is None or not total or total <= 0:
        return previous if previous is not None else HEADER_SHARE_PRIOR
    own = rev.snapshot.signals.rps
    if own is None:
        return previous if previous is not None else HEADER_SHARE_PRIOR
    measured = min(max(own / total, 0.0), 1.0)
    return measured if previous is None else previous + COST_SMOOTHING * (measured - previous)


def plan(
    intent: Intent,
    observed: Observed,
    demand: int,
    state: PlannerState,
    names: RevisionNames,
    limits: Limits | None = None,
) -> tuple[Plan, PlannerState]:
    """One cycle of the planner. ``names``: the cycle's revisions, version <-> name."""
    limits = limits or Limits()
    now = observed.time
    stable = names[intent.stable]
    target_weights = {names[v]: w for v, w in intent.weights.items() if w > 0}
    target_header = names[intent.header] if intent.header is not None else None
    versions = names.by_name

    current_weights = {r.name: r.weight for r in observed.revisions if r.weight > 0}
    if sum(current_weights.values()) != 100:  # nothing routed yet (or a lagging backend)
        current_weights = {stable: 100}
    current_header = observed.header_revision
    estimates = _measure_costs(observed, stable, state.cost)
    costs = _sizing_costs(estimates, stable, state.sizing_cost)
    hs = _header_share(observed, state.header_share)
    ready = {r.name: r.ready for r in observed.revisions}
    available = {r.name: r.available for r in observed.revisions}
    current_shares = _effective(current_weights, current_header, hs)
    mix = sum(share * costs.get(name, 1.0) for name, share in current_shares.items())

    cycle = _Cycle(
        intent=intent,
        observed=observed,
        state=state,
        limits=limits,
        versions=versions,
        stable=stable,
        now=now,
        hs=hs,
        ready=ready,
        available=available,
        demand=demand,
        costs=costs,
        mix=mix,
    )
    notes: dict[str, tuple[PlanReason, str]] = {}
    waiting = ""
    # A canary failing hard loses its traffic at once, onto a stable that serves: one with
    # no ready replica (drained to 0 after a setWeight 100 step) would lose every request,
    # worse than the failing canary; then the abort scales stable first like any other.
    failing_hard = (
        intent.abort and intent.hard and available.get(stable, False) and ready.get(stable, 0) > 0
    )
    if failing_hard:
        new_weights, new_header = dict(target_weights), target_header
        for name in set(current_weights) - set(target_weights):
            notes[name] = (PlanReason.ABORTED_HARD, "failing hard: its traffic moved at once")
    elif not observed.metrics_ok and not intent.abort and not intent.explicit:
        # Rule 8: no traffic moves on stale metrics, but a user's explicit decision (an
        # abort, undo or promote --full) does; the rollout's status says what waits.
        new_weights, new_header = dict(current_weights), current_header
        if new_weights != target_weights or new_header != target_header:
            waiting = (
                "metrics stale: traffic held where it is until they return "
                "(an abort, undo or promote --full is carried out now)"
            )
    else:
        new_header = _route_header(cycle, current_header, target_header, current_weights, notes)
        new_weights = _shift(cycle, current_weights, target_weights, new_header, notes)
        new_weights = _carry_back(cycle, new_weights, new_header, notes)
    new_shares = _effective(new_weights, new_header, hs)
    target_shares = _effective(target_weights, target_header, hs)
    # Lowered shares start (or restart) the drain clock.
    lowered_at = dict(state.lowered_at)
    hold_s = dict(state.hold_s)
    held_share = dict(state.held_share)
    for name, share in current_shares.items():
        if new_shares.get(name, 0.0) < share - 1e-9:
            since = lowered_at.get(name)
            still_held = since is not None and now < since + hold_s.get(name, 0.0)
            held_share[name] = max(share, held_share.get(name, 0.0)) if still_held else share
            lowered_at[name] = now
            hold_s[name] = intent.hold_s
    # The canary is planned even at weight 0 and before it exists: a blue/green preview
    # and a setCanaryScale step size it ahead of any traffic.
    canary_name = names[intent.canary] if intent.canary is not None else None
    names_all = sorted(
        set(new_shares)
        | set(target_shares)
        | {r.name for r in observed.revisions}
        | set(state.replicas)
        | ({canary_name} if canary_name is not None else set()),
        key=lambda n: (n != stable, n),
    )
    replicas, reasons = _replicas(
        cycle,
        names_all,
        headers={h for h in (current_header, new_header, target_header) if h is not None},
        new_shares=new_shares,
        target_shares=target_shares,
        lowered_at=lowered_at,
        hold_s=hold_s,
        held_share=held_share,
    )
    for name, (code, text) in notes.items():
        own = reasons.get(name)
        if own is not None and own[0] == PlanReason.SURGE_LIMITED:
            reasons[name] = (own[0], f"{own[1]}; {text}")
        else:
            reasons[name] = (code, f"{text}; {own[1]}" if own and own[1] else text)
    # Forget revisions that are gone: no replicas, no traffic, nothing held. The header
    # route's revision stays listed even when its matched share measures 0 (a plan's
    # header route must name one of its revisions).
    kept = [
        n
        for n in names_all
        if replicas.get(n, 0) > 0 or new_weights.get(n, 0) > 0 or n == new_header
    ]
    for name in list(lowered_at):
        if name not in kept:
            lowered_at.pop(name, None)
            hold_s.pop(name, None)
            held_share.pop(name, None)
    revisions = tuple(
        RevisionPlan(
            name=name,
            version=versions[name],
            replicas=replicas.get(name, 0),
            weight=new_weights.get(name, 0),
            reason=reasons.get(name, (PlanReason.STEADY, ""))[0],
            message=reasons.get(name, (PlanReason.STEADY, ""))[1],
            # A standby pool only for a revision that takes traffic now (a canary's comes
            # with its first weight; an aborted or drained one's goes with its last).
            standby=limits.standby if new_weights.get(name, 0) > 0 or name == new_header else 0,
        )
        for name in kept
    )
    new_state = PlannerState(
        replicas={n: replicas.get(n, 0) for n in kept},
        shares={n: new_shares.get(n, 0.0) for n in kept},
        lowered_at=lowered_at,
        hold_s=hold_s,
        held_share=held_share,
        cost={n: c for n, c in estimates.items() if n in kept},
        sizing_cost={n: c for n, c in costs.items() if n in kept},
        header_share=hs,
    )
    events = tuple(
        f"{name}: weight {current_weights.get(name, 0)} -> {new_weights.get(name, 0)}"
        for name in kept
        if current_weights.get(name, 0) != new_weights.get(name, 0)
    )
    header_event = (
        (f"header route -> {new_header}" if new_header else "header route removed",)
        if new_header != current_header
        else ()
    )
    result = Plan(
        revisions=revisions,
        header_revision=new_header,
        phase=intent.phase,
        message=intent.message,
        events=events + header_event,
        waiting=waiting,
    )
    return result, new_state


def _route_header(
    cycle: _Cycle,
    current: str | None,
    target: str | None,
    weights: Mapping[str, int],
    notes: dict[str, tuple[PlanReason, str]],
) -> str | None:
    """Move the A/B header route when the revision receiving it can carry it."""
    if current == target:
        return current
    hs, ready, available, needs = cycle.hs, cycle.ready, cycle.available, cycle.needs
    after = _effective(weights, target, hs)
    gaining = [
        (name, share)
        for name, share in after.items()
        if share > _effective(weights, current, hs).get(name, 0.0) + 1e-9
    ]
    for name, share in gaining:
        wanted = needs(name, share)
        if not available.get(name, False) or ready.get(name, 0) < wanted:
            notes[name] = (
                PlanReason.WAITING_FOR_CAPACITY,
                f"header route waits for {wanted} ready replicas (has {ready.get(name, 0)})",
            )
            return current
    return target


def _shift(
    cycle: _Cycle,
    current: Mapping[str, int],
    target: Mapping[str, int],
    header: str | None,
    notes: dict[str, tuple[PlanReason, str]],
) -> dict[str, int]:
    """Move weights toward ``target`` as far as the receivers' ready capacity allows."""
    if dict(current) == dict(target):
        return dict(current)
    hs, ready, available, needs = cycle.hs, cycle.ready, cycle.available, cycle.needs
    stable = cycle.stable
    matched = hs if header is not None else 0.0
    allowed: dict[str, int] = {}
    for name, goal in target.items():
        now_w = current.get(name, 0)
        if goal <= now_w:
            continue
        extra = matched if header == name else 0.0
        best = now_w
        if available.get(name, False):
            for w in range(goal, now_w, -1):
                share = (1.0 - matched) * w / 100.0 + extra
                if needs(name, share) <= ready.get(name, 0):
                    best = w
                    break
        allowed[name] = best
        if best < goal:
            share = (1.0 - matched) * goal / 100.0 + extra
            wanted = needs(name, share)
            why = (
                "model not AVAILABLE yet"
                if not available.get(name, False)
                else f"{ready.get(name, 0)} of {wanted} replicas ready"
            )
            notes[name] = (PlanReason.WAITING_FOR_CAPACITY, f"at {best} % of {goal} %: {why}")
    gain = sum(w - current.get(n, 0) for n, w in allowed.items())
    result = dict(current)
    result.update(allowed)
    # Givers give back in this order: revisions leaving entirely, then others; stable last.
    givers = sorted(
        (n for n, w in current.items() if target.get(n, 0) < w),
        key=lambda n: (n == stable, target.get(n, 0) > 0, n),
    )
    for name in givers:
        if gain <= 0:
            break
        give = min(current[name] - target.get(name, 0), gain)
        result[name] = current[name] - give
        gain -= give
    return {n: w for n, w in result.items() if w > 0}


def _carry_back(
    cycle: _Cycle,
    weights: Mapping[str, int],
    header: str | None,
    notes: dict[str, tuple[PlanReason, str]],
) -> dict[str, int]:
    """Give back what a revision's ready replicas no longer carry (rule 1, both ways).

    A weight reached with enough ready replicas can stop being carried: the revision's
    cost is measured for the first time once it has traffic (it borrowed the stable's
    until then), or it lost a replica. Its excess weight goes back to the stable revision,
    as far as the stable's *ready* replicas carry it (never onto a stable that is short
    itself); the rollout's target is unchanged, so the weight comes back as the
    revision's own replicas become ready.
    """
    hs, ready, available, needs = cycle.hs, cycle.ready, cycle.available, cycle.needs
    stable = cycle.stable
    result = dict(weights)
    if stable not in result or not available.get(stable, False):
        return result
    matched = hs if header is not None else 0.0

    def share(name: str, w: int) -> float:
        return (1.0 - matched) * w / 100.0 + (matched if header == name else 0.0)

    def carried(name: str, top: int, bottom: int) -> int:
        """The highest weight in [bottom, top] that ``name``'s ready replicas carry."""
        for w in range(top, bottom - 1, -1):
            if w == 0 or (
                available.get(name, False) and needs(name, share(name, w)) <= ready.get(name, 0)
            ):
                return w
        return bottom

    for name in sorted(n for n in result if n != stable):
        held = result[name]
        loose = share(name, held) * (1.0 - CARRY_TOLERANCE)
        if available.get(name, False) and needs(name, loose) <= ready.get(name, 0):
            continue
        keep = carried(name, held, 0)
        if keep >= held:
            continue
        room = carried(stable, result[stable] + held - keep, result[stable]) - result[stable]
        if room <= 0:
            continue
        result[name] = held - room
        result[stable] += room
        notes[name] = (
            PlanReason.WAITING_FOR_CAPACITY,
            f"gave {room} % back to {stable}: {ready.get(name, 0)} ready replicas carry "
            f"{keep} % at its measured cost ({cycle.costs.get(name, 1.0):.2f}x the "
            f"stable's) of a demand of {cycle.demand}",
        )
    return {n: w for n, w in result.items() if w > 0}


def _replicas(
    cycle: _Cycle,
    names: list[str],
    *,
    headers: set[str],
    new_shares: Mapping[str, float],
    target_shares: Mapping[str, float],
    lowered_at: Mapping[str, float],
    hold_s: Mapping[str, float],
    held_share: Mapping[str, float],
) -> tuple[dict[str, int], dict[str, tuple[PlanReason, str]]]:
    intent, observed, state, limits = cycle.intent, cycle.observed, cycle.state, cycle.limits
    versions, stable, now, needs = cycle.versions, cycle.stable, cycle.now, cycle.needs
    replicas: dict[str, int] = {}
    reasons: dict[str, tuple[PlanReason, str]] = {}
    base: dict[str, int] = {}
    prescale: dict[str, int] = {}
    held: dict[str, int] = {}
    slack: dict[str, int] = {}  # replicas kept above the need by the shrink tolerance
    last: dict[str, int] = {}  # the replicas it has now: last planned, else as observed
    canary = (
        None
        if intent.canary is None
        else next((n for n, v in versions.items() if v == intent.canary), None)
    )
    # Rule 8: on stale metrics nothing shrinks, for the demand they would shrink on is a
    # guess. A user's explicit decision (promote --full, undo) is carried out on the demand
    # last read: the revision losing traffic drains, then shrinks, as with fresh metrics.
    holding_all = not observed.metrics_ok and not intent.explicit
    for name in names:
        previous = state.replicas.get(name)
        if previous is None:
            rev = observed.revision(name)
            previous = rev.desired if rev is not None else 0
        last[name] = previous

    def drain_floor(name: str) -> int:
        """The replicas its drain clock holds (rule 2): what it had, up to what its share
        before lowering needs, until the hold ends; 0 with no clock running."""
        since = lowered_at.get(name)
        if since is None or now >= since + hold_s.get(name, 0.0):
            return 0
        return min(last[name], needs(name, held_share.get(name, new_shares.get(name, 0.0))))

    def retiring(name: str) -> bool:
        """No traffic now or ahead, nothing held: it gets no replica this cycle. A drain
        clock that holds no replica (none left, or a share lowered from nothing) holds
        nothing (and the revision is forgotten this cycle: counting it would keep the
        stable's slack once, then cut it). Stale metrics (rule 8) keep a header route's
        revision, whose share is measured, not one with no weight and no header route: it
        serves nothing (an aborted canary's pods go once drained, metrics or not)."""
        return (
            new_shares.get(name, 0.0) <= 0.0
            and target_shares.get(name, 0.0) <= 0.0
            and drain_floor(name) == 0
            and (observed.metrics_ok or last[name] == 0 or name not in headers)
        )

    for name in names:
        share = new_shares.get(name, 0.0)
        goal = target_shares.get(name, 0.0)
        previous = last[name]
        b = needs(name, share)
        want = needs(name, max(share, goal))
        if name == canary and intent.canary_scale is not None and not intent.abort:
            kind, value = intent.canary_scale
            scaled = value if kind == "replicas" else needs(name, value / 100.0)
            # Never below what its traffic needs, now or at the step's target share: a
            # scale under the target's need would hold the weight below it for good (rule
            # 1 waits for ready capacity), so the scale is a floor.
            want = max(want, scaled)
        # Not losing traffic: shrink only on a clear drop (tolerance), never jitter,
        # pre-scaled replicas included (not cut, then ordered again, on noise). The
        # slack kept is its base only when it adds nothing ahead; otherwise it is
        # pre-scaling, within the surge budget (a base holding last cycle's pre-scaled
        # replicas would free the budget for more, cut the cycle after: flapping).
        # Alone with all the traffic and no rollout, the need is the autoscaler's demand
        # itself (no measured cost or mix in it): the policy's own stabilization decides,
        # and the planner passes its count through unchanged.
        alone = canary is None and all(retiring(n) for n in names if n != name)
        if (
            not alone
            and previous > want
            and goal > 0
            and goal >= share - 1e-9
            and needs(name, max(share, goal) * (1.0 + SHRINK_TOLERANCE)) >= previous
        ):
            if want == b:
                slack[name] = previous - b
                b = previous
            want = previous
        base[name] = b
        floor = drain_floor(name)
        if floor > b:
            held[name] = floor - b
        # Replicas it holds while draining are there for its rising share too (a stable
        # lowered, then aborted back to): pre-scale only beyond them, never both.
        prescale[name] = max(0, want - b - held.get(name, 0))
    extra_budget = limits.surge_replicas
    if extra_budget is not None:
        # The budget limits what is added: replicas added ahead in an earlier cycle are
        # never cut for it (to be ordered again a drain later, cold start and all) when a
        # giver's drain fills it, just as held ones are not; they count first, and so do
        # the ones rule 8 keeps while metrics are stale. In an abort this keeps the
        # stable's capacity on order (rule 4).
        # Slack kept by the tolerance is extra too: a drain hold's replica kept next cycle
        # as slack must not free the budget it filled (the plan is a fixed point).
        holdover = sum(held.values()) + sum(slack.values())
        kept: dict[str, int] = {}
        for name in prescale:
            there = max(0, last[name] - base[name] - held.get(name, 0))
            if retiring(name) and base[name] + prescale[name] == 0:
                there = 0  # it goes this cycle, stale metrics or not: it keeps no budget
            kept[name] = there if holding_all else min(prescale[name], there)
        allowance = max(0, extra_budget - holdover - sum(kept.values()))
        for name in sorted(prescale, key=lambda n: (n == stable, n)):
            cap = kept[name] + allowance
            if intent.abort and intent.hard and name == stable:
                cap = prescale[name]  # rule 4: sized for all the traffic, budget or not
            if prescale[name] > cap:
                reasons[name] = (
                    PlanReason.SURGE_LIMITED,
                    f"pre-scaling {cap} of {prescale[name]} replicas (surge budget "
                    f"{extra_budget}, {holdover} held while draining)",
                )
                prescale[name] = cap
            allowance -= max(0, prescale[name] - kept[name])
    for name in names:
        count = base[name] + prescale[name] + held.get(name, 0)
        share = new_shares.get(name, 0.0)
        # Rule 8 holds what the revision has now, as observed when nothing was planned yet
        # (a first cycle, a restarted controller): not 0.
        previous = last[name]
        if holding_all and count < previous and not (count == 0 and retiring(name)):
            count = previous
            reasons.setdefault(
                name, (PlanReason.METRICS_MISSING, "metrics stale: holding, never shrinking")
            )
        replicas[name] = count
        if name in reasons:
            continue
        if held.get(name):
            until = lowered_at[name] + hold_s.get(name, 0.0)
            reasons[name] = (
                PlanReason.DRAINING,
                f"keeps {count} replicas until {decision.instant(until)} "
                f"({hold_s.get(name, 0.0):.0f} s after losing traffic), then shrinks",
            )
        elif prescale[name]:
            reasons[name] = (
                PlanReason.PRE_SCALING,
                f"{count} replicas ({base[name]} for {share * 100:.0f} % now, "
                f"+{prescale[name]} before its share rises)",
            )
        elif count == 0:
            reasons[name] = (PlanReason.RETIRED, "no traffic; drained; removed")
        elif name == stable and share >= 1.0 - 1e-9:
            reasons[name] = (PlanReason.STEADY, f"{count} replicas: the autoscaler's demand")
        else:
            reasons[name] = (
                PlanReason.SIZED,
                f"{count} replicas for {share * 100:.0f} % of requests",
            )
    return replicas, reasons
