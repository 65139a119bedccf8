"""The JSON form of :class:`RolloutState`, kept in ``status.rollout.state`` so that a
restarted controller resumes exactly where it was."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servectl.api import models
from servectl.rollout.counters import Counters
from servectl.rollout.machine.state import Phase, RolloutState, VerdictRecord


def _counters_to_dict(c: Counters) -> dict[str, Any]:
    return {
        "time": c.time,
        "requests": c.requests,
        "errors": c.errors,
        "cpuSeconds": c.cpu_seconds,
        "latencyBuckets": list(c.latency_buckets),
    }


def _counters_from_dict(doc: Mapping[str, Any]) -> Counters:
    return Counters(
        time=float(doc["time"]),
        requests=float(doc["requests"]),
        errors=float(doc["errors"]),
        cpu_seconds=float(doc["cpuSeconds"]),
        latency_buckets=tuple(float(x) for x in doc.get("latencyBuckets", ())),
    )


def to_dict(state: RolloutState) -> dict[str, Any]:
    """The JSON form kept in ``status.rollout.state``."""
    return {
        "stable": state.stable,
        "phase": str(state.phase),
        "canary": state.canary,
        "previousStable": state.previous_stable,
        "step": state.step,
        "stepStarted": state.step_started,
        "userPaused": state.user_paused,
        "message": state.message,
        "baseline": {str(v): _counters_to_dict(c) for v, c in state.baseline.items()},
        "nextCheck": state.next_check,
        "extensions": state.extensions,
        "verdicts": [
            {
                "step": v.step,
                "verdict": str(v.verdict),
                "message": v.message,
                "samples": v.samples,
                "time": v.time,
            }
            for v in state.verdicts
        ],
        "waitSince": state.wait_since,
        "waitReady": state.wait_ready,
        "canaryScale": list(state.canary_scale) if state.canary_scale else None,
        "hardAbort": state.hard_abort,
        "promoting": state.promoting,
        "skipAnalysis": state.skip_analysis,
        "userDecided": state.user_decided,
        "winner": state.winner,
        "abStarted": state.ab_started,
        "switchedAt": state.switched_at,
    }


def from_dict(doc: Mapping[str, Any]) -> RolloutState:
    """Inverse of :func:`to_dict`; raises ValueError naming a bad field."""
    try:
        scale = doc.get("canaryScale")
        return RolloutState(
            stable=int(doc["stable"]),
            phase=Phase(doc.get("phase", "Idle")),
            canary=None if doc.get("canary") is None else int(doc["canary"]),
            previous_stable=(
                None if doc.get("previousStable") is None else int(doc["previousStable"])
            ),
            step=int(doc.get("step", 0)),
            step_started=_opt_float(doc.get("stepStarted")),
            user_paused=bool(doc.get("userPaused", False)),
            message=str(doc.get("message", "")),
            baseline={
                int(v): _counters_from_dict(c) for v, c in dict(doc.get("baseline", {})).items()
            },
            next_check=_opt_float(doc.get("nextCheck")),
            extensions=int(doc.get("extensions", 0)),
            verdicts=tuple(
                VerdictRecord(
                    step=int(v["step"]),
                    verdict=models.Verdict(v["verdict"]),
                    message=str(v.get("message", "")),
                    samples=int(v.get("samples", 0)),
                    time=float(v["time"]),
                )
                for v in doc.get("verdicts", ())
            ),
            wait_since=_opt_float(doc.get("waitSince")),
            wait_ready=int(doc.get("waitReady", 0)),
            canary_scale=(str(scale[0]), int(scale[1])) if scale else None,
            hard_abort=bool(doc.get("hardAbort", False)),
            promoting=bool(doc.get("promoting", False)),
            skip_analysis=bool(doc.get("skipAnalysis", False)),
            user_decided=bool(doc.get("userDecided", False)),
            winner=None if doc.get("winner") is None else str(doc["winner"]),
            ab_started=_opt_float(doc.get("abStarted")),
            switched_at=_opt_float(doc.get("switchedAt")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"status.rollout.state is malformed: {exc!r}") from exc


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number
