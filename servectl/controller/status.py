"""One cycle's outcome as ``ModelServiceStatus`` and events (DESIGN §3).

Pure: ``now`` is the cycle's time in seconds since the epoch (the simulator's seconds
read as such), turned into the status's timestamps without reading any clock.
Conditions keep their ``lastTransitionTime`` while their status does not change.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from servectl.api import models
from servectl.controller import weight_events
from servectl.controller.backend import Event, EventReason, EventType
from servectl.controller.decide import LoopState, Outcome
from servectl.planning.types import Observed
from servectl.rollout import machine

C = models.ConditionType
S = models.ConditionStatus


class ConditionReason(enum.StrEnum):
    """``reason`` of the conditions servectl writes."""

    SERVING = "Serving"  # every revision with traffic has a ready replica
    NO_READY_REPLICA = "NoReadyReplica"  # a revision with traffic has none
    PODS_REFUSED = "PodsRefused"  # ... and the cluster refuses to create its pods
    ROLLOUT_IDLE = "NoRollout"
    ROLLOUT_RUNNING = "RolloutRunning"
    ROLLOUT_PAUSED = "RolloutPaused"
    ROLLOUT_COMPLETED = "RolloutCompleted"
    ROLLOUT_ABORTED = "RolloutAborted"
    PROGRESS_DEADLINE = "ProgressDeadlineExceeded"
    HEALTHY = "Healthy"
    METRICS_OK = "MetricsFresh"
    METRICS_STALE = "MetricsStale"  # rule 8: holding, scaling up only
    WITHIN_BOUNDS = "WithinBounds"
    AT_MAX = "AtMaxReplicas"  # the policy wanted more than maxReplicas
    AT_MIN = "AtMinReplicas"  # the policy wanted fewer than minReplicas
    RECOMMEND_ONLY = "RecommendOnly"  # mode: recommend: nothing is applied
    POLICY_FAILED = "PolicyFailed"  # the custom policy failed: the recommendation stands


def timestamp(now: float) -> datetime:
    return datetime.fromtimestamp(now, tz=UTC)


def condition(
    kind: models.ConditionType,
    status: models.ConditionStatus,
    reason: str,
    message: str,
    now: float,
    previous: models.ModelServiceStatus | None,
) -> models.Condition:
    """A condition whose transition time is ``previous``'s while its status holds."""
    old = previous.condition(kind) if previous is not None else None
    since = (
        old.last_transition_time
        if old is not None and old.status is status and old.last_transition_time is not None
        else timestamp(now)
    )
    return models.Condition(
        type=kind, status=status, reason=str(reason), message=message, last_transition_time=since
    )


def _phase(outcome: Outcome) -> models.RolloutPhase:
    try:
        return models.RolloutPhase(outcome.plan.phase)
    except ValueError:
        return models.RolloutPhase.IDLE


def _rollout(outcome: Outcome, now: float) -> models.RolloutStatus:
    state = outcome.state
    phase = _phase(outcome)
    if not isinstance(state, LoopState):
        return models.RolloutStatus(phase=phase, message=outcome.plan.message)
    r = state.rollout
    message = r.message or outcome.plan.message
    if outcome.plan.waiting and r.active:
        message = f"{message}; {outcome.plan.waiting}" if message else outcome.plan.waiting
    return models.RolloutStatus(
        phase=phase,
        step=r.step,
        stable_version=r.stable,
        canary_version=r.canary,
        message=message,
        winner=r.winner if r.winner in ("A", "B") else None,  # type: ignore[arg-type]
        verdicts=[
            models.AnalysisVerdict(
                step=v.step,
                verdict=models.Verdict(v.verdict),
                message=v.message,
                samples=v.samples,
                time=timestamp(v.time),
            )
            for v in r.verdicts
        ],
        state=machine.to_dict(r),
    )


def _readable(policy_state: Mapping[str, Any]) -> dict[str, Any]:
    """The policy state as status shows it: without the forecast's bucket history (~2,300
    numbers, kept in the loop state the controller checkpoints, not in what users read)."""
    return {k: v for k, v in policy_state.items() if k != "forecast"}


def build(
    observed: Observed,
    outcome: Outcome,
    previous: models.ModelServiceStatus | None,
    *,
    now: float,
    applied: bool,
) -> tuple[models.ModelServiceStatus, list[Event]]:
    """The status after this cycle and the events it caused.

    A revision's ``desiredReplicas`` is what the planner asks for, ``readyReplicas`` what
    runs. ``applied`` is False in ``mode: recommend``: weights then show what routes now,
    and the desired replicas, autoscaling and rollout parts what would have been done.
    """
    plan = outcome.plan
    seen = {r.name: r for r in observed.revisions}
    revisions: list[models.RevisionStatus] = []
    for rp in plan.revisions:
        o = seen.get(rp.name)
        revisions.append(
            models.RevisionStatus(
                name=rp.name,
                version=rp.version,
                weight=rp.weight if applied else (o.weight if o else 0),
                desired_replicas=rp.replicas,
                ready_replicas=o.ready if o else 0,
                standby_replicas=(o.standby or None) if o else None,
                model_state=(
                    models.ModelState.AVAILABLE
                    if o is not None and o.available
                    else models.ModelState.UNKNOWN
                ),
            )
        )
    for name, o in seen.items():  # still running, no longer planned (draining away)
        if plan.revision(name) is None and (o.desired or o.ready or o.draining):
            revisions.append(
                models.RevisionStatus(
                    name=name,
                    version=o.version,
                    weight=o.weight,
                    desired_replicas=0,
                    ready_replicas=o.ready,
                )
            )

    decision = outcome.decision
    message = decision.detail if decision is not None and decision.detail else outcome.reason
    if not applied:
        message = f"recommend mode, not applied: {message}"
    last_scale = previous.autoscaling.last_scale_time if previous and previous.autoscaling else None
    before = previous.autoscaling.desired_replicas if previous and previous.autoscaling else None
    if before is not None and before != outcome.demand:
        last_scale = timestamp(now)
    autoscaling = models.AutoscalingStatus(
        desired_replicas=outcome.demand,
        decided_by=outcome.decided_by,
        reason=outcome.reason,
        message=message,
        last_scale_time=last_scale,
        policy_state=_readable(outcome.state.policy)
        if isinstance(outcome.state, LoopState)
        else {},
    )
    rollout = _rollout(outcome, now)

    weighted = [r for r in observed.revisions if r.weight > 0]
    dark = [r.name for r in weighted if r.ready == 0]
    refusal = pods_refused(observed)
    if dark:
        ready = (S.FALSE, ConditionReason.NO_READY_REPLICA, f"no ready replica: {', '.join(dark)}")
    elif not weighted:
        ready = (S.FALSE, ConditionReason.NO_READY_REPLICA, "no revision receives traffic")
    else:
        ready = (S.TRUE, ConditionReason.SERVING, "every revision with traffic has a ready replica")
    if refusal and ready[0] is S.FALSE:
        ready = (S.FALSE, ConditionReason.PODS_REFUSED, f"{ready[2]}; {refusal}")
    elif refusal:
        ready = (ready[0], ready[1], f"{ready[2]}; {refusal}")
    conditions = [condition(C.READY, *ready, now, previous)]
    phase = rollout.phase
    progressing = {
        models.RolloutPhase.PROGRESSING: (S.TRUE, ConditionReason.ROLLOUT_RUNNING),
        models.RolloutPhase.PAUSED: (S.TRUE, ConditionReason.ROLLOUT_PAUSED),
        models.RolloutPhase.COMPLETED: (S.FALSE, ConditionReason.ROLLOUT_COMPLETED),
        models.RolloutPhase.ABORTED: (S.FALSE, ConditionReason.ROLLOUT_ABORTED),
        models.RolloutPhase.DEGRADED: (S.FALSE, ConditionReason.PROGRESS_DEADLINE),
        models.RolloutPhase.IDLE: (S.FALSE, ConditionReason.ROLLOUT_IDLE),
    }[phase]
    conditions.append(
        condition(C.PROGRESSING, *progressing, rollout.message or str(phase), now, previous)
    )
    degraded = phase in (models.RolloutPhase.DEGRADED, models.RolloutPhase.ABORTED)
    conditions.append(
        condition(
            C.DEGRADED,
            S.TRUE if degraded else S.FALSE,
            progressing[1] if degraded else ConditionReason.HEALTHY,
            rollout.message if degraded else "",
            now,
            previous,
        )
    )
    conditions.append(
        condition(
            C.METRICS_AVAILABLE,
            S.TRUE if observed.metrics_ok else S.FALSE,
            ConditionReason.METRICS_OK if observed.metrics_ok else ConditionReason.METRICS_STALE,
            ""
            if observed.metrics_ok
            else observed.metrics_detail
            or "metrics stale or missing: holding or scaling up only, never down",
            now,
            previous,
        )
    )
    requested, bounds = outcome.requested, outcome.limits
    failed = _policy_failure(outcome)
    if not applied:
        limited = (
            S.TRUE,
            ConditionReason.RECOMMEND_ONLY,
            "mode: recommend: nothing is applied" + (f"; {failed}" if failed else ""),
        )
    elif failed is not None:
        limited = (S.TRUE, ConditionReason.POLICY_FAILED, failed)
    elif requested is not None and bounds is not None and requested > bounds.max_replicas:
        limited = (
            S.TRUE,
            ConditionReason.AT_MAX,
            f"wanted {requested}, maxReplicas is {bounds.max_replicas}",
        )
    elif requested is not None and bounds is not None and requested < bounds.min_replicas:
        limited = (
            S.TRUE,
            ConditionReason.AT_MIN,
            f"wanted {requested}, minReplicas is {bounds.min_replicas}",
        )
    else:
        limited = (S.FALSE, ConditionReason.WITHIN_BOUNDS, "")
    conditions.append(condition(C.SCALING_LIMITED, *limited, now, previous))

    status = models.ModelServiceStatus(
        revisions=revisions,
        traffic=" ".join(f"{r.name}:{r.weight}" for r in revisions) or None,
        rollout=rollout,
        autoscaling=autoscaling,
        conditions=conditions,
    )
    return status, events_for(status, previous, outcome, observed, now=now, applied=applied)


REFUSAL_CHARS = 600
"""The most of one revision's refusal kept in Ready's message (Pod Security's names every
violated field: a few hundred characters)."""


def pods_refused(observed: Observed) -> str:
    """The revisions whose pods the cluster refuses to create, and its reason, or ""."""
    refused = [
        f"{r.name}: {r.refused[:REFUSAL_CHARS]}"
        for r in observed.revisions
        if r.refused and (r.desired > 0 or r.weight > 0)
    ]
    return "pods refused: " + "; ".join(refused) if refused else ""


def _policy_failure(outcome: Outcome) -> str | None:
    """The custom policy's failure this cycle, as ``ScalingLimited`` says it (None: it
    ran, or there is none). The message holds the error only, no replica counts, so it
    stays the same while the same error lasts: the event is due once per distinct error."""
    decision = outcome.decision
    if decision is None or decision.policy_error is None:
        return None
    return f"{decision.policy_error}; servectl's own recommendation is used instead"


def events_for(
    status: models.ModelServiceStatus,
    previous: models.ModelServiceStatus | None,
    outcome: Outcome,
    observed: Observed,
    *,
    now: float,
    applied: bool,
) -> list[Event]:
    events: list[Event] = []
    before = previous.autoscaling.desired_replicas if previous and previous.autoscaling else None
    after = status.autoscaling.desired_replicas if status.autoscaling else None
    if before is not None and after is not None and before != after:
        detail = outcome.decision.detail if outcome.decision is not None else ""
        what = f"total replicas {before} -> {after} ({outcome.reason}" + (
            f": {detail})" if detail else ")"
        )
        if applied:
            events.append(Event(now, EventType.NORMAL, EventReason.SCALED, what))
        else:
            events.append(
                Event(now, EventType.NORMAL, EventReason.RECOMMENDED, f"would set {what}")
            )
    old_phase = previous.rollout.phase if previous and previous.rollout else None
    new_phase = status.rollout.phase if status.rollout else None
    if old_phase is not None and new_phase is not None and old_phase != new_phase:
        kind = (
            EventType.WARNING
            if new_phase in (models.RolloutPhase.ABORTED, models.RolloutPhase.DEGRADED)
            else EventType.NORMAL
        )
        # Where the rollout ended (Completed, Aborted, Degraded) its message says why: an
        # Aborted event that names no failed check sends the user to `describe` to find it.
        why = status.rollout.message if status.rollout and kind == EventType.WARNING else ""
        what = f"rollout {old_phase} -> {new_phase}" + (f": {why}" if why else "")
        events.append(Event(now, kind, EventReason.ROLLOUT_PHASE, what))
    if not applied:
        wanted = {r.name: r.desired_replicas for r in status.revisions}
        known = {r.name: r.desired_replicas for r in previous.revisions} if previous else {}
        running = {r.name: r.desired for r in observed.revisions}
        if wanted != known and any(running.get(n, 0) != c for n, c in wanted.items()):
            events.append(
                Event(
                    now,
                    EventType.NORMAL,
                    EventReason.RECOMMENDED,
                    "would set replicas "
                    + ", ".join(f"{n} {running.get(n, 0)} -> {c}" for n, c in wanted.items()),
                )
            )
    refused = set(outcome.errors)
    texts = [text for text in outcome.plan.events if text not in refused]
    if applied:  # one event where a shift begins and one where it ends, not one per percent
        rollout_before = previous.rollout.state if previous and previous.rollout else None
        texts = weight_events.coalesce(texts, outcome, observed, rollout_before)
    for text in texts:
        reason = EventReason.WEIGHTS_CHANGED if applied else EventReason.RECOMMENDED
        events.append(
            Event(now, EventType.NORMAL, reason, text if applied else f"would apply: {text}")
        )
    # Each refused command names its id, so a backend can tell the user which one.
    answered = [(r.error, r.command.id) for r in outcome.commands if r.error is not None]
    for text, ident in answered or [(text, None) for text in outcome.errors]:
        events.append(
            Event(now, EventType.WARNING, EventReason.COMMAND_REFUSED, text, command=ident)
        )
    refusal = pods_refused(observed)
    old_ready = previous.condition(C.READY) if previous else None
    if refusal and (old_ready is None or refusal not in old_ready.message):
        events.append(Event(now, EventType.WARNING, EventReason.PODS_REFUSED, refusal))
    failed = _policy_failure(outcome)
    old_limit = previous.condition(C.SCALING_LIMITED) if previous else None
    new_limit = status.condition(C.SCALING_LIMITED)
    if failed is not None and (
        old_limit is None or new_limit is None or old_limit.message != new_limit.message
    ):
        events.append(Event(now, EventType.WARNING, EventReason.POLICY_FAILED, failed))
    old_ok = previous.condition(C.METRICS_AVAILABLE) if previous else None
    new_ok = status.condition(C.METRICS_AVAILABLE)
    if old_ok is not None and new_ok is not None and old_ok.status is not new_ok.status:
        if new_ok.status is S.FALSE:
            events.append(
                Event(now, EventType.WARNING, EventReason.METRICS_UNAVAILABLE, new_ok.message)
            )
        else:
            events.append(
                Event(now, EventType.NORMAL, EventReason.METRICS_RESTORED, "metrics are fresh")
            )
    return events


def refused(
    previous: models.ModelServiceStatus | None, reason: str, message: str, *, now: float
) -> tuple[models.ModelServiceStatus, bool]:
    """``previous`` with ``Ready=False`` for ``reason``: servectl cannot run the service as
    it is (the driver's report of a refused spec, a missing model, a failed cycle). The
    rest of the status is kept. Returns the status and whether the condition changed (an
    event is due only then, not every tick the fault lasts)."""
    message = message[:2000]
    old = previous.condition(C.READY) if previous is not None else None
    if old is not None and old.status is S.FALSE and old.reason == reason:
        if old.message == message:
            return previous or models.ModelServiceStatus(), False
        since = old.last_transition_time
    else:
        since = timestamp(now)
    ready = models.Condition(
        type=C.READY, status=S.FALSE, reason=reason, message=message, last_transition_time=since
    )
    base = previous or models.ModelServiceStatus()
    conditions = [ready, *(c for c in base.conditions if c.type is not C.READY)]
    return base.model_copy(update={"conditions": conditions}), True
