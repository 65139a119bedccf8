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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SNAPSHOT_VERSION = 1

#: Every replica count (current, ready, min, max) at most: Kubernetes' documented limit
#: of pods in one cluster. Policies reason per replica (the HPA baseline pod by pod).
MAX_REPLICAS = 150_000
#: ``rollout.step`` at most (an int32, as in the resource).
MAX_STEP = 2**31 - 1
#: ``time`` range: the years 1-9999 as unix seconds (``time.hour`` and friends exist).
MIN_TIME = _dt.datetime.min.replace(tzinfo=_dt.UTC).timestamp()
MAX_TIME = _dt.datetime.max.replace(tzinfo=_dt.UTC).timestamp()


class SnapshotError(ValueError):
    """A snapshot document is malformed; the message names the field and the fix."""


def _finite(value: float) -> bool:
    """``math.isfinite``, also for an int too large for a double (not finite then)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


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

    def __post_init__(self) -> None:
        # Built in code (metrics assembly, simulator) as well as by from_dict: a
        # non-finite measurement is missing here too, so no policy ever sees one.
        for name in ("cpu_usage_cores", "concurrency", "gpu_duty_cycle"):
            value = getattr(self, name)
            if value is not None and not _finite(value):
                object.__setattr__(self, name, None)
        if not _finite(self.start_time):
            object.__setattr__(self, "start_time", 0.0)
        if not _finite(self.cpu_request_cores):
            object.__setattr__(self, "cpu_request_cores", 0.0)  # unknown: as if none set


@dataclass(frozen=True)
class Signals:
    """Service-level signals, already windowed by the metrics pipeline.

    ``None`` means missing (never scraped, stale, or NaN from an empty histogram); a
    non-finite value given here (NaN, +-inf) becomes ``None``, and a non-finite latency
    percentile is dropped. ``age_s`` is the age of the newest sample behind these
    values; a non-finite age is unknown and becomes ``inf`` (stale).
    """

    cpu_utilization: float | None = None
    cpu_usage_cores: float | None = None
    gpu_duty_cycle: float | None = None
    rps: float | None = None
    concurrency: float | None = None
    latency_ms: Mapping[str, float] = field(default_factory=dict)
    error_rate: float | None = None
    age_s: float = 0.0

    def __post_init__(self) -> None:
        for name in _OPTIONAL_SIGNALS:
            value = getattr(self, name)
            if value is not None and not _finite(value):
                object.__setattr__(self, name, None)
        if not all(_finite(value) for value in self.latency_ms.values()):
            kept = {key: value for key, value in self.latency_ms.items() if _finite(value)}
            object.__setattr__(self, "latency_ms", kept)
        if not _finite(self.age_s):
            object.__setattr__(self, "age_s", math.inf)

    def latency(self, percentile: float) -> float | None:
        """Latency at ``percentile`` (e.g. 99 or 99.9) in ms, or None if missing."""
        return self.latency_ms.get(percentile_key(percentile))


_OPTIONAL_SIGNALS = (
    "cpu_utilization",
    "cpu_usage_cores",
    "gpu_duty_cycle",
    "rps",
    "concurrency",
    "error_rate",
)


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

    def __post_init__(self) -> None:
        if not _finite(self.time):
            raise SnapshotError(f"time: must be a finite number of seconds, got {self.time!r}")

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


def signals_doc(signals: Signals) -> dict[str, Any]:
    """The signals as users read them (camelCase keys, latency per percentile key, no
    infinity): ``servectl explain``, ``top`` and ``metrics show`` all print this form."""
    return {
        "cpuUtilization": signals.cpu_utilization,
        "cpuUsageCores": signals.cpu_usage_cores,
        "gpuDutyCycle": signals.gpu_duty_cycle,
        "rps": signals.rps,
        "concurrency": signals.concurrency,
        "latencyMs": dict(signals.latency_ms),
        "errorRate": signals.error_rate,
        "ageSeconds": signals.age_s if math.isfinite(signals.age_s) else None,
    }


def _show(value: Any) -> str:
    """A short rendering of a rejected value for an error message (never a deep repr)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**40 else f"an int of {value.bit_length()} bits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _as_float(value: Any, where: str) -> float:
    """A JSON number as a float; an int too large for a double is +-inf."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SnapshotError(f"{where}: expected a number, got {_show(value)}")
    try:
        return float(value) + 0.0  # + 0.0: -0.0 is 0.0
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _number(
    value: Any, where: str, *, minimum: float | None = 0.0, maximum: float | None = None
) -> float | None:
    """A measurement: null and non-finite numbers (NaN, +-inf) are missing (None); a
    finite one outside [minimum, maximum] is refused."""
    if value is None:
        return None
    number = _as_float(value, where)
    if not math.isfinite(number):
        return None
    if minimum is not None and number < minimum:
        raise SnapshotError(f"{where}: must be >= {minimum:g}, got {_show(value)}")
    if maximum is not None and number > maximum:
        raise SnapshotError(f"{where}: must be at most {maximum:g}, got {_show(value)}")
    return number


_REPLICAS_LIMIT = " (Kubernetes' documented limit of pods in one cluster)"


def _integer(
    value: Any, where: str, low: int, high: int = MAX_REPLICAS, why: str = _REPLICAS_LIMIT
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{where}: expected an integer, got {_show(value)}")
    if value < low:
        raise SnapshotError(f"{where}: must be >= {low}, got {_show(value)}")
    if value > high:
        raise SnapshotError(f"{where}: must be at most {high}{why}, got {_show(value)}")
    return value


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{where}: expected true or false, got {_show(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: expected a string, got {_show(value)}")
    return value


def _section(doc: Mapping[str, Any], key: str, kind: type, expected: str) -> Any:
    """An optional part of the document: absent or null is empty, else of ``kind``."""
    value = doc.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise SnapshotError(f"{key}: expected {expected}, got {_show(value)}")
    return value


def _known_keys(doc: Mapping[Any, Any], allowed: Iterable[str], where: str) -> None:
    allowed = set(allowed)
    unknown = sorted(str(key) for key in doc if key not in allowed)
    if unknown:
        shown = ", ".join(name if len(name) <= 40 else name[:37] + "..." for name in unknown[:5])
        more = f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise SnapshotError(
            f"{where}: unknown field(s) {shown}{more}; allowed: {', '.join(sorted(allowed))}"
        )


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _time(doc: Mapping[str, Any]) -> float:
    if "time" not in doc:
        raise SnapshotError("time: required (seconds, e.g. unix time of the decision)")
    value = doc["time"]
    now = _as_float(value, "time")
    if not math.isfinite(now):
        raise SnapshotError(f"time: must be a finite number of seconds, got {_show(value)}")
    if not MIN_TIME <= now <= MAX_TIME:
        raise SnapshotError(
            f"time: {_show(value)} is outside the years 1-9999 as unix seconds "
            f"([{MIN_TIME:.0f}, {MAX_TIME:.0f}]); give the decision's time in seconds"
        )
    return now


def _replicas(doc: Mapping[str, Any]) -> Replicas:
    rep = doc.get("replicas")
    if not isinstance(rep, Mapping) or "current" not in rep:
        raise SnapshotError("replicas.current: required (the replica count applied now)")
    _known_keys(rep, _fields(Replicas), "replicas")
    current = _integer(rep["current"], "replicas.current", 0)
    replicas = Replicas(
        current=current,
        ready=_integer(rep.get("ready", current), "replicas.ready", 0),
        min=_integer(rep.get("min", 1), "replicas.min", 0),
        max=_integer(rep.get("max", max(current, 10)), "replicas.max", 1),
    )
    if replicas.min > replicas.max:
        raise SnapshotError(
            f"replicas.min ({replicas.min}) > replicas.max ({replicas.max}): lower min or raise max"
        )
    return replicas


def _percentile(key: Any) -> bool:
    if not isinstance(key, str) or not key.startswith("p"):
        return False
    try:
        percentile = float(key[1:])
    except ValueError:
        return False
    return 0.0 <= percentile <= 100.0


def _signals(doc: Mapping[str, Any]) -> Signals:
    sig = _section(doc, "signals", dict, "an object")
    _known_keys(sig, _fields(Signals), "signals")
    latency_raw = sig.get("latency_ms")
    if latency_raw is None:
        latency_raw = {}
    if not isinstance(latency_raw, Mapping):
        raise SnapshotError(
            'signals.latency_ms: expected an object like {"p99": 120.0}, '
            f"got {_show(latency_raw)}"
        )
    latency: dict[str, float] = {}
    for key, value in latency_raw.items():
        where = f"signals.latency_ms.{_show(key) if not isinstance(key, str) else key[:40]}"
        if not _percentile(key):
            raise SnapshotError(f'{where}: keys are percentiles from "p0" to "p100", like "p99"')
        number = _number(value, where)
        if number is not None:
            latency[key] = number
    age = sig.get("age_s")
    age_s = 0.0 if age is None else _as_float(age, "signals.age_s")
    if math.isfinite(age_s) and age_s < 0:
        raise SnapshotError(
            f"signals.age_s: must be >= 0, got {_show(age)} (a sample from the future: "
            "do the clocks of the observer and the metrics agree?)"
        )
    return Signals(
        cpu_utilization=_number(sig.get("cpu_utilization"), "signals.cpu_utilization"),
        cpu_usage_cores=_number(sig.get("cpu_usage_cores"), "signals.cpu_usage_cores"),
        gpu_duty_cycle=_number(sig.get("gpu_duty_cycle"), "signals.gpu_duty_cycle"),
        rps=_number(sig.get("rps"), "signals.rps"),
        concurrency=_number(sig.get("concurrency"), "signals.concurrency"),
        latency_ms=latency,
        error_rate=_number(sig.get("error_rate"), "signals.error_rate", maximum=1.0),
        age_s=age_s,  # a non-finite age is unknown: Signals makes it stale
    )


def _pods(doc: Mapping[str, Any]) -> tuple[PodSample, ...]:
    raw_pods = _section(doc, "pods", list, "a list of pod objects")
    pods: list[PodSample] = []
    seen: dict[str, int] = {}
    for i, pod in enumerate(raw_pods):
        where = f"pods[{i}]"
        if not isinstance(pod, Mapping) or "name" not in pod:
            raise SnapshotError(f"{where}.name: required")
        _known_keys(pod, _fields(PodSample), where)
        name = _string(pod["name"], f"{where}.name")
        if name in seen:
            raise SnapshotError(
                f"{where}.name: {_show(name)} is also the name of pods[{seen[name]}]; "
                "pod names are unique"
            )
        seen[name] = i
        start = _number(pod.get("start_time"), f"{where}.start_time", minimum=None)
        request = pod.get("cpu_request_cores", 1.0)
        pods.append(
            PodSample(
                name=name,
                ready=_boolean(pod.get("ready", True), f"{where}.ready"),
                start_time=0.0 if start is None else start,
                cpu_usage_cores=_number(pod.get("cpu_usage_cores"), f"{where}.cpu_usage_cores"),
                # null or non-finite: the request is unknown, as if the pod set none.
                cpu_request_cores=_number(request, f"{where}.cpu_request_cores") or 0.0,
                concurrency=_number(pod.get("concurrency"), f"{where}.concurrency"),
                gpu_duty_cycle=_number(pod.get("gpu_duty_cycle"), f"{where}.gpu_duty_cycle"),
            )
        )
    return tuple(pods)


def _rollout(doc: Mapping[str, Any]) -> RolloutInfo:
    ro = _section(doc, "rollout", dict, "an object")
    _known_keys(ro, _fields(RolloutInfo), "rollout")
    return RolloutInfo(
        phase=_string(ro.get("phase", "Idle"), "rollout.phase"),
        step=_integer(ro.get("step", 0), "rollout.step", 0, MAX_STEP, ""),
        canary_weight=_integer(
            ro.get("canary_weight", 0), "rollout.canary_weight", 0, 100, " (percent)"
        ),
    )


def from_dict(doc: Mapping[str, Any]) -> Snapshot:
    """Parse the JSON form; raises SnapshotError (and nothing else) naming the field.

    The rules (docs/snapshot.md): NaN, infinite and null measurements are missing; a
    negative one is refused; counts are ints within Kubernetes' limits; ``time`` is a
    finite number of seconds within the years 1-9999.
    """
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"snapshot: expected a JSON object, got {_show(doc)}")
    _known_keys(doc, ("version", "time", "replicas", "signals", "pods", "rollout"), "snapshot")
    return Snapshot(
        time=_time(doc),
        replicas=_replicas(doc),
        signals=_signals(doc),
        pods=_pods(doc),
        rollout=_rollout(doc),
    )
