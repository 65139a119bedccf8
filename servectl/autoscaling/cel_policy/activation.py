"""The snapshot as CEL variables: what a policy sees (docs/snapshot.md, "In CEL")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from servectl.autoscaling import snapshot
from servectl.autoscaling.cel_policy.errors import PolicyRuntimeError
from servectl.autoscaling.cel_policy.helpers import is_number

#: The top-level variables a policy may name, in documentation order.
VARIABLES: Final = ("signals", "replicas", "time", "rollout", "recommended", "params", "state")

#: The params a policy sees when none are given.
NO_PARAMS: Mapping[str, float] = MappingProxyType({})

SIGNAL_FIELDS: Final = tuple(f.name for f in dataclasses.fields(snapshot.Signals))


def _number_or_null(value: float | None) -> float | None:
    return None if value is None else float(value)


def _signals(snap: snapshot.Snapshot) -> dict[str, Any]:
    sig = snap.signals
    return {
        "cpu_utilization": _number_or_null(sig.cpu_utilization),
        "cpu_usage_cores": _number_or_null(sig.cpu_usage_cores),
        "gpu_duty_cycle": _number_or_null(sig.gpu_duty_cycle),
        "rps": _number_or_null(sig.rps),
        "concurrency": _number_or_null(sig.concurrency),
        "error_rate": _number_or_null(sig.error_rate),
        "latency_ms": {str(k): float(v) for k, v in sig.latency_ms.items()},
        "age_s": float(sig.age_s),
    }


def _replicas(snap: snapshot.Snapshot) -> dict[str, Any]:
    rep = snap.replicas
    return {
        "current": int(rep.current),
        "ready": int(rep.ready),
        "starting": int(rep.starting),
        "min": int(rep.min),
        "max": int(rep.max),
    }


def _time(snap: snapshot.Snapshot) -> dict[str, Any]:
    fields = snapshot.time_fields(float(snap.time))
    fields["now"] = float(snap.time)
    return fields


def _rollout(snap: snapshot.Snapshot) -> dict[str, Any]:
    ro = snap.rollout
    return {"phase": str(ro.phase), "step": int(ro.step), "canary_weight": int(ro.canary_weight)}


SNAPSHOT_PARTS: Final[Mapping[str, Callable[[snapshot.Snapshot], dict[str, Any]]]] = {
    "signals": _signals,
    "replicas": _replicas,
    "time": _time,
    "rollout": _rollout,
}


def cel_params(params: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(params, Mapping):
        raise PolicyRuntimeError(f"params must be a map of names to numbers, got {params!r}")
    out: dict[str, float] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not is_number(value) or not math.isfinite(value):
            raise PolicyRuntimeError(f"params.{name}: expected a finite number, got {value!r}")
        out[name] = float(value)  # always double: `150` and `150.0` in YAML mean the same
    return out


def cel_state(state: Mapping[str, Any] | None) -> dict[str, Any]:
    if state is None:
        return {}
    if not isinstance(state, Mapping):
        raise PolicyRuntimeError(f"state must be a map, got {type(state).__name__}")
    return dict(state)


def cel_recommended(recommended: int) -> int:
    if isinstance(recommended, bool) or not isinstance(recommended, int) or recommended < 0:
        raise PolicyRuntimeError(f"recommended must be an int ≥ 0, got {recommended!r}")
    return recommended


def snapshot_activation(
    snap: snapshot.Snapshot,
    recommended: int,
    params: Mapping[str, float] = NO_PARAMS,
    state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CEL variables a policy sees (docs/snapshot.md, "In CEL").

    CEL never converts between int and double, so the types are fixed: counts and
    calendar fields are ints; signals, ``time.now`` and every ``params`` value are
    doubles (a missing signal is null; a missing latency percentile is absent);
    ``state`` is passed through as the policy returned it.
    """
    return {
        "signals": _signals(snap),
        "replicas": _replicas(snap),
        "time": _time(snap),
        "rollout": _rollout(snap),
        "recommended": cel_recommended(recommended),
        "params": cel_params(params),
        "state": cel_state(state),
    }
