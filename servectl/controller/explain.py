"""One cycle as the JSON document ``servectl explain`` and ``servectl top`` read: what was
seen (the service's and each revision's signals), what the policy proposed and decided,
the bounds, and the plan. Pure: the local runtime stores it per service every tick."""

from __future__ import annotations

from typing import Any

from servectl.autoscaling.snapshot import signals_doc
from servectl.controller.reconcile import Cycle


def _signals(snapshot: Any) -> dict[str, Any]:
    return {} if snapshot is None else signals_doc(snapshot.signals)


def cycle_record(cycle: Cycle) -> dict[str, Any]:
    """One cycle in JSON, for ``servectl explain`` and ``top``: what was seen (service and
    per-revision signals), what the policy proposed and decided, and the plan."""
    outcome = cycle.outcome
    observed = cycle.observed
    limits = outcome.limits
    planned = getattr(outcome.state, "planner", None)  # servectl's loop: its planner state
    sized = dict(getattr(planned, "sizing_cost", {}) or {})
    estimates = dict(getattr(planned, "cost", {}) or {})

    def cost(name: str) -> dict[str, Any]:
        """The cost a revision is sized at and the estimate behind it (rule 3)."""
        if name not in sized:
            return {}
        return {"cost": round(sized[name], 3), "costEstimate": round(estimates[name], 3)}

    return {
        "time": cycle.time,
        "applied": cycle.applied,
        "metricsOk": observed.metrics_ok,
        "metricsDetail": observed.metrics_detail,
        "service": _signals(observed.service),
        "replicas": {
            "current": observed.service.replicas.current,
            "ready": observed.service.replicas.ready,
            "min": observed.service.replicas.min,
            "max": observed.service.replicas.max,
        },
        "revisions": [
            {
                "name": r.name,
                "version": r.version,
                "desired": r.desired,
                "ready": r.ready,
                "starting": r.starting,
                "draining": r.draining,
                "weight": r.weight,
                "signals": _signals(r.snapshot),
            }
            for r in observed.revisions
        ],
        "decision": outcome.decision.to_dict() if outcome.decision is not None else None,
        "requested": outcome.requested,
        "demand": outcome.demand,
        "decidedBy": outcome.decided_by,
        "reason": outcome.reason,
        "errors": list(outcome.errors),
        "limits": (
            {k: v for k, v in vars(limits).items() if isinstance(v, (int, float, str, type(None)))}
            if limits is not None
            else None
        ),
        "plan": {
            "phase": str(outcome.plan.phase),
            "message": outcome.plan.message,
            "header": outcome.plan.header_revision,
            "revisions": [
                {
                    "name": r.name,
                    "version": r.version,
                    "replicas": r.replicas,
                    "weight": r.weight,
                    "reason": r.reason,
                    "message": r.message,
                    **cost(r.name),
                }
                for r in outcome.plan.revisions
            ],
        },
    }
