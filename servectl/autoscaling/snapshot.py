"""The snapshot: everything a policy may look at for one decision, and its JSON form.

A snapshot is a value. It is built once per reconcile cycle by the observer (metrics
backend, simulator, or a JSON file handed to ``servectl policy eval``) and passed to a
policy together with that policy's persisted state. Time comes in as ``time.now``; no
policy reads a clock. See docs/snapshot.md for the documented field list.

Units: CPU in cores, utilizations and duty cycles in percent (0-100), latency in
milliseconds, rates per second, times in seconds on the caller's clock (unix seconds
by convention, so ``time.hour`` and friends mean UTC).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SNAPSHOT_VERSION = 1


class SnapshotError(ValueError):
    """A snapshot document is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class PodSample:
    """One pod (replica) as the Kubernetes replica calculator sees it."""

    name: str
    ready: bool = True
    start_time: float = 0.0
    cpu_usage_cores: float | None = None
    cpu_request_cores: float = 1.0
    concurrency: float | None = None
    gpu_duty_cycle: float | None = None


@dataclass(frozen=True)
class Signals:
    """Service-level signals, already windowed by the metrics pipeline.

    ``None`` means missing (never scraped, stale, or NaN from an empty histogram).
    ``age_s`` is the age of the newest sample behind these values.
    """

    cpu_utilization: float | None = None
    cpu_usage_cores: float | None = None
    gpu_duty_cycle: float | None = None
    rps: float | None = None
    concurrency: float | None = None
    latency_ms: Mapping[str, float] = field(default_factory=dict)
    error_rate: float | None = None
    age_s: float = 0.0

    def latency(self, percentile: float) -> float | None:
        """Latency at ``percentile`` (e.g. 99 or 99.9) in ms, or None if missing."""
        return self.latency_ms.get(percentile_key(percentile))


@dataclass(frozen=True)
class Replicas:
    """Replica counts: ``current`` is the count last applied (spec), ``ready`` serve now."""

    current: int
    ready: int
    min: int = 1
    max: int = 10

    @property
    def starting(self) -> int:
        return max(0, self.current - self.ready)


@dataclass(frozen=True)
class RolloutInfo:
    """What a policy may know of a rollout in progress."""

    phase: str = "Idle"
    step: int = 0
    canary_weight: int = 0


@dataclass(frozen=True)
class Snapshot:
    """One decision's input. ``time`` is ``now`` for this cycle."""

    time: float
    replicas: Replicas
    signals: Signals = field(default_factory=Signals)
    pods: tuple[PodSample, ...] = ()
    rollout: RolloutInfo = field(default_factory=RolloutInfo)

    def with_replicas(self, **changes: int) -> Snapshot:
        return dataclasses.replace(self, replicas=dataclasses.replace(self.replicas, **changes))


def percentile_key(percentile: float) -> str:
    """99 -> "p99", 99.9 -> "p99.9"."""
    return f"p{percentile:g}"


def time_fields(now: float) -> dict[str, float | int]:
    """Calendar fields of ``now`` (UTC), for policies such as business hours."""
    moment = _dt.datetime.fromtimestamp(now, tz=_dt.UTC)
    return {
        "now": now,
        "hour": moment.hour,
        "minute": moment.minute,
        "weekday": moment.weekday(),  # Monday = 0
        "day_of_month": moment.day,
    }


# ----------------------------------------------------------------------------- JSON


def to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """The documented JSON form (docs/snapshot.md)."""
    return {
        "version": SNAPSHOT_VERSION,
        "time": snapshot.time,
        "replicas": dataclasses.asdict(snapshot.replicas),
        "signals": {
            **{f.name: getattr(snapshot.signals, f.name) for f in dataclasses.fields(Signals)},
            "latency_ms": dict(snapshot.signals.latency_ms),
        },
        "pods": [dataclasses.asdict(p) for p in snapshot.pods],
        "rollout": dataclasses.asdict(snapshot.rollout),
    }


def _number(value: Any, where: str, *, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SnapshotError(f"{where}: expected a number, got {value!r}")
    as_float = float(value)
    if math.isnan(as_float):
        return None
    return as_float


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{where}: expected an integer, got {value!r}")
    return value


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{where}: expected true or false, got {value!r}")
    return value


def _known_keys(doc: Mapping[str, Any], cls: type, where: str) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise SnapshotError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def from_dict(doc: Mapping[str, Any]) -> Snapshot:
    """Parse the JSON form; raises SnapshotError naming the offending field."""
    if not isinstance(doc, Mapping):
        raise SnapshotError("snapshot: expected a JSON object")
    unknown = sorted(set(doc) - {"version", "time", "replicas", "signals", "pods", "rollout"})
    if unknown:
        raise SnapshotError(f"snapshot: unknown field(s) {', '.join(unknown)}")
    if "time" not in doc:
        raise SnapshotError("time: required (seconds, e.g. unix time of the decision)")
    now = _number(doc["time"], "time", optional=False)
    assert now is not None
    rep = doc.get("replicas")
    if not isinstance(rep, Mapping) or "current" not in rep:
        raise SnapshotError("replicas.current: required (the replica count applied now)")
    _known_keys(rep, Replicas, "replicas")
    current = _integer(rep["current"], "replicas.current")
    replicas = Replicas(
        current=current,
        ready=_integer(rep.get("ready", current), "replicas.ready"),
        min=_integer(rep.get("min", 1), "replicas.min"),
        max=_integer(rep.get("max", max(current, 10)), "replicas.max"),
    )
    if replicas.min > replicas.max:
        raise SnapshotError(
            f"replicas.min ({replicas.min}) > replicas.max ({replicas.max}): lower min or raise max"
        )
    sig = doc.get("signals", {}) or {}
    if not isinstance(sig, Mapping):
        raise SnapshotError("signals: expected an object")
    _known_keys(sig, Signals, "signals")
    latency_raw = sig.get("latency_ms", {}) or {}
    if not isinstance(latency_raw, Mapping):
        raise SnapshotError('signals.latency_ms: expected an object like {"p99": 120.0}')
    latency: dict[str, float] = {}
    for key, value in latency_raw.items():
        if not (isinstance(key, str) and key.startswith("p")):
            raise SnapshotError(f'signals.latency_ms.{key}: keys are percentiles like "p99"')
        number = _number(value, f"signals.latency_ms.{key}")
        if number is not None:
            latency[key] = number
    signals = Signals(
        cpu_utilization=_number(sig.get("cpu_utilization"), "signals.cpu_utilization"),
        cpu_usage_cores=_number(sig.get("cpu_usage_cores"), "signals.cpu_usage_cores"),
        gpu_duty_cycle=_number(sig.get("gpu_duty_cycle"), "signals.gpu_duty_cycle"),
        rps=_number(sig.get("rps"), "signals.rps"),
        concurrency=_number(sig.get("concurrency"), "signals.concurrency"),
        latency_ms=latency,
        error_rate=_number(sig.get("error_rate"), "signals.error_rate"),
        age_s=_number(sig.get("age_s", 0.0), "signals.age_s") or 0.0,
    )
    pods: list[PodSample] = []
    raw_pods = doc.get("pods", []) or []
    if not isinstance(raw_pods, list):
        raise SnapshotError("pods: expected a list of pod objects")
    for i, pod in enumerate(raw_pods):
        where = f"pods[{i}]"
        if not isinstance(pod, Mapping) or "name" not in pod:
            raise SnapshotError(f"{where}.name: required")
        _known_keys(pod, PodSample, where)
        pods.append(
            PodSample(
                name=str(pod["name"]),
                ready=_boolean(pod.get("ready", True), f"{where}.ready"),
                start_time=_number(pod.get("start_time", 0.0), f"{where}.start_time") or 0.0,
                cpu_usage_cores=_number(pod.get("cpu_usage_cores"), f"{where}.cpu_usage_cores"),
                cpu_request_cores=_number(
                    pod.get("cpu_request_cores", 1.0), f"{where}.cpu_request_cores"
                )
                or 0.0,
                concurrency=_number(pod.get("concurrency"), f"{where}.concurrency"),
                gpu_duty_cycle=_number(pod.get("gpu_duty_cycle"), f"{where}.gpu_duty_cycle"),
            )
        )
    ro = doc.get("rollout", {}) or {}
    if not isinstance(ro, Mapping):
        raise SnapshotError("rollout: expected an object")
    _known_keys(ro, RolloutInfo, "rollout")
    rollout = RolloutInfo(
        phase=str(ro.get("phase", "Idle")),
        step=_integer(ro.get("step", 0), "rollout.step"),
        canary_weight=_integer(ro.get("canary_weight", 0), "rollout.canary_weight"),
    )
    return Snapshot(time=now, replicas=replicas, signals=signals, pods=tuple(pods), rollout=rollout)
