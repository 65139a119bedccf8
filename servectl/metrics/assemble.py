"""Turn this tick's query results into per-revision signals, counters and a verdict.

Pure: the results come in as parsed Prometheus vectors (or a :class:`Problem` when a
query failed), the evaluation time comes from Prometheus' own answer, and the only state
is the :class:`CounterTracker` the caller keeps between ticks.

What it guarantees to the decision code:

- No NaN or infinity reaches a decision: an empty histogram, a 0/0 error rate or a NaN
  sample becomes ``None`` (missing).
- A revision whose model servers are scraped fine but that has no request or latency
  series has served nothing yet (TF Serving creates those series at the first request):
  ``rps`` 0, no latency value, no error rate, and the signals are *present*. Only a
  failing or stale scrape (or no target at all) makes them missing.
- Every signal carries its age (evaluation time minus its newest sample's timestamp); a
  signal older than ``staleAfterSeconds`` is dropped and named as stale.
- A failed query, a series without a label the join needs, or a signal with no data
  makes the snapshot say which signal is missing and why (:func:`condition`); the engine
  then holds or scales up only (DESIGN §4 rule 8).
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servectl.api.models import AnalysisCheck, Condition, ConditionStatus, ConditionType
from servectl.autoscaling.snapshot import (
    PodSample,
    Replicas,
    RolloutInfo,
    Signals,
    Snapshot,
    percentile_key,
)
from servectl.autoscaling.windows import histogram_quantile
from servectl.metrics.config import MetricsConfig
from servectl.metrics.promql import PART_LABEL
from servectl.rollout.counters import Counters

RevisionKey = tuple[str, str, str]
"""(namespace, service, revision)."""

#: Signals a service needs by default for ``MetricsAvailable``; GPU only where used.
DEFAULT_REQUIRED = ("cpu", "requests", "latency")
ALL_SIGNALS = ("cpu", "gpu", "latency", "requests")


class Reason(enum.StrEnum):
    """Reason codes of a :class:`Problem` and of the ``MetricsAvailable`` condition."""

    OK = "MetricsFresh"
    UNREACHABLE = "PrometheusUnreachable"
    NOT_PROMETHEUS = "NotPrometheus"  # something answers at the URL, but not Prometheus' API
    TIMEOUT = "QueryTimeout"
    QUERY_ERROR = "QueryError"
    LABEL_MISSING = "LabelMissing"
    NO_DATA = "NoData"
    STALE = "MetricsStale"
    PARTIAL = "SignalsMissing"


@dataclass(frozen=True)
class Problem:
    """Why one signal is missing this tick, for every revision (or for ``revisions``)."""

    signal: str
    reason: Reason
    message: str


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector."""

    labels: Mapping[str, str]
    value: float | None  # None: NaN or infinite
    time: float


def parse_vector(result: Sequence[Mapping[str, Any]]) -> list[Sample]:
    """Prometheus' ``{"metric": {...}, "value": [t, "v"]}`` list -> samples (NaN -> None)."""
    samples = []
    for item in result:
        # A template that answers a scalar or a range vector is a bad query, not a crash:
        # ValueError is what the source turns into a QueryError problem.
        pair = item.get("value") if isinstance(item, Mapping) else None
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"expected an instant vector element {{metric, value}}, got {item!r}")
        ts, raw = pair
        value = float(raw)
        samples.append(
            Sample(item.get("metric", {}), value if math.isfinite(value) else None, float(ts))
        )
    return samples


# ----------------------------------------------------------------------------- counters


class CounterTracker:
    """Per-revision cumulative counters that survive pods coming and going.

    A per-revision *sum* of per-pod counters drops when a pod goes away, which the
    analysis would read as a reset and overcount. The tracker instead adds each series'
    own increase (a decrease is a reset: the new value is counted from 0, as Prometheus'
    ``increase()`` does), so a revision's totals only ever grow.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, ...], float] = {}
        self._totals: dict[tuple[RevisionKey, str], float] = {}

    def add(self, key: RevisionKey, counter: str, series: tuple[str, ...], value: float) -> None:
        """Fold one series' current value into ``key``'s ``counter``."""
        ident = (*key, counter, *series)
        last = self._last.get(ident)
        delta = value if last is None or value < last else value - last
        self._last[ident] = value
        self._totals[(key, counter)] = self._totals.get((key, counter), 0.0) + delta

    def total(self, key: RevisionKey, counter: str) -> float | None:
        return self._totals.get((key, counter))

    def forget(self, keep: Iterable[RevisionKey]) -> None:
        """Drop revisions that no longer exist (bounded memory over months of rollouts)."""
        alive = set(keep)
        self._last = {k: v for k, v in self._last.items() if k[:3] in alive}
        self._totals = {k: v for k, v in self._totals.items() if k[0] in alive}


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RevisionMetrics:
    """One revision's signals this tick."""

    key: RevisionKey
    time: float
    signals: Signals
    pods: tuple[PodSample, ...] = ()
    rate_by_status: Mapping[str, float] = field(default_factory=dict)
    latency_rates: tuple[float, ...] = ()  # per bucket (not cumulative), +Inf last
    gpu_memory_mib: float | None = None
    counters: Counters | None = None
    ages: Mapping[str, float] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # signals with no usable value (stale ones included)
    stale: tuple[str, ...] = ()
    scrape_failing: tuple[str, ...] = ()  # missing signals whose targets' scrape fails


@dataclass(frozen=True)
class ServiceMetrics:
    """All of a service's revisions together: what the autoscaler sees."""

    namespace: str
    service: str
    signals: Signals
    pods: tuple[PodSample, ...]
    missing: tuple[str, ...]

    def snapshot(
        self, time: float, replicas: Replicas, rollout: RolloutInfo | None = None
    ) -> Snapshot:
        """The autoscaler's input: these signals with the backend's replica counts."""
        return Snapshot(
            time=time,
            replicas=replicas,
            signals=self.signals,
            pods=self.pods,
            rollout=rollout or RolloutInfo(),
        )


CustomValues = Mapping[str, tuple[float | None, float | None]]
"""A rollout's custom analysis checks: metric -> (the canary's value, the stable's)."""


@dataclass(frozen=True)
class CustomRequest:
    """A service in a rollout analysis whose custom PromQL checks the tick must measure,
    for the canary ``revision`` and the ``stable`` one (what the decider asked for)."""

    namespace: str
    service: str
    revision: str
    stable: str | None
    checks: tuple[AnalysisCheck, ...]


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything one tick learned from Prometheus."""

    time: float
    revisions: Mapping[RevisionKey, RevisionMetrics]
    latency_bounds_us: tuple[float, ...]
    problems: tuple[Problem, ...] = ()
    queries: int = 0
    percentiles: tuple[float, ...] = ()
    # The custom analysis checks' values per (namespace, service), and what went wrong
    # measuring them (kept apart from ``problems``: a failing check makes the analysis
    # Inconclusive, it does not make the service's signals missing).
    custom: Mapping[tuple[str, str], CustomValues] = field(default_factory=dict)
    custom_problems: tuple[Problem, ...] = ()

    def problem(self, signal: str) -> Problem | None:
        return next((p for p in self.problems if p.signal == signal), None)

    def custom_for(
        self, namespace: str, service: str
    ) -> dict[str, tuple[float | None, float | None]]:
        return dict(self.custom.get((namespace, service), {}))

    def revision(self, namespace: str, service: str, revision: str) -> RevisionMetrics:
        """The revision's metrics; every signal missing when Prometheus had none for it."""
        key = (namespace, service, revision)
        found = self.revisions.get(key)
        if found is not None:
            return found
        return RevisionMetrics(key, self.time, Signals(), missing=ALL_SIGNALS)

    def service_keys(self) -> list[tuple[str, str]]:
        return sorted({(k[0], k[1]) for k in self.revisions})

    def service(
        self, namespace: str, service: str, revisions: Iterable[str] | None = None
    ) -> ServiceMetrics:
        """Aggregate ``revisions`` (default: all seen) of one service."""
        if revisions is None:
            keys = [k for k in self.revisions if k[:2] == (namespace, service)]
        else:
            keys = [(namespace, service, r) for r in revisions]
        parts = [self.revision(*k) for k in sorted(keys)]
        return aggregate(namespace, service, parts, self.latency_bounds_us, self.percentiles)


# ----------------------------------------------------------------------------- assembly


def _by_part(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.labels.get(PART_LABEL, "value"), []).append(s)
    return out


@dataclass
class _Acc:
    """A revision's raw values while a tick is assembled."""

    cpu: dict[str, float | None] = field(default_factory=dict)  # pod -> cores
    request: dict[str, float] = field(default_factory=dict)  # pod -> cores requested
    gpu: dict[str, float | None] = field(default_factory=dict)
    gpu_memory: dict[str, float | None] = field(default_factory=dict)
    by_status: dict[str, float] = field(default_factory=dict)
    status_seen: bool = False
    latency: dict[float, float] = field(default_factory=dict)  # le -> cumulative rate
    latency_count: float | None = None  # requests per second behind the histogram
    busy: float | None = None
    newest: dict[str, float] = field(default_factory=dict)  # signal -> newest sample time
    gateway: dict[str, float] = field(default_factory=dict)  # code -> rate
    counted: bool = False
    # signal -> the oldest successful scrape of the revision's model servers; 0: one fails
    scraped: dict[str, float] = field(default_factory=dict)


def _on_layout(le: float | None, layout: Sequence[float]) -> float | None:
    """``le`` as the layout's own bound when it is that bound as printed.

    TF Serving prints bounds with six significant digits (``67466.4`` for 67466.406...):
    matching them to the layout keeps one bucket per bound instead of two near-twins.
    """
    if le is None or not math.isfinite(le):
        return le
    index = bisect.bisect_left(layout, le)
    for near in layout[max(0, index - 1) : index + 1]:
        if abs(near - le) <= 1e-5 * max(abs(near), 1.0):
            return near
    return le


def _le(labels: Mapping[str, str]) -> float | None:
    raw = labels.get("le")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


class _Keyer:
    """Reads a sample's revision key, recording the label a join or a scrape left out."""

    def __init__(self, signal: str, labels: tuple[str, str, str], source: str) -> None:
        self.signal = signal
        self.labels = labels
        self.source = source
        self.missing_label: tuple[str, Mapping[str, str]] | None = None

    def __call__(self, sample: Sample) -> RevisionKey | None:
        values = []
        for label in self.labels:
            value = sample.labels.get(label, "")
            if not value:
                if self.missing_label is None:
                    shown = {k: v for k, v in sample.labels.items() if k != PART_LABEL}
                    self.missing_label = (label, shown)
                return None
            values.append(value)
        return (values[0], values[1], values[2])

    def problem(self, config: MetricsConfig) -> Problem | None:
        if self.missing_label is None:
            return None
        label, shown = self.missing_label
        where = ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items())) or "no labels"
        if self.source == "pod_info":
            info = config.pod_info
            lacking = info.revision_label if label == "revision" else info.service_label
            hint = (
                f"the pod-info series {info.metric} lacks {lacking} "
                "for these pods: allow the servectl.io/service and servectl.io/revision pod labels "
                "in kube-state-metrics (--metric-labels-allowlist=pods=[servectl.io/service,"
                "servectl.io/revision]) or set metrics podInfo.serviceLabel/revisionLabel"
            )
        else:
            hint = (
                f"the scrape of TF Serving must add the '{label}' target label from the pod's "
                "servectl.io labels (deploy/prometheus/scrape-config.yaml), or set "
                f"metrics tfServingLabels.{_field_of(config, label)} to the label your cluster uses"
            )
        return Problem(
            self.signal,
            Reason.LABEL_MISSING,
            f"{self.signal}: series without the '{label}' label ({where}): {hint}",
        )


def _field_of(config: MetricsConfig, label: str) -> str:
    labels = config.tf_serving_labels
    for name in ("namespace", "service", "revision", "pod"):
        if getattr(labels, name) == label:
            return name
    return label


def assemble(
    time: float,
    results: Mapping[str, Sequence[Sample] | Problem],
    config: MetricsConfig,
    tracker: CounterTracker | None = None,
    *,
    queries: int = 0,
    expected: Iterable[RevisionKey] = (),
) -> MetricsSnapshot:
    """Build the snapshot. ``time`` is Prometheus' evaluation time of this tick.

    ``results`` maps each signal to its samples, or to the Problem that kept it from
    answering. ``expected`` revisions appear in the snapshot even with no data (every
    signal missing), so a revision Prometheus never saw is reported, not forgotten.
    """
    accs: dict[RevisionKey, _Acc] = {k: _Acc() for k in expected}
    problems: list[Problem] = []
    tfs = config.tf_serving_labels

    def acc(key: RevisionKey) -> _Acc:
        return accs.setdefault(key, _Acc())

    for signal, result in results.items():
        if isinstance(result, Problem):
            problems.append(result)
            continue
        if signal in ("cpu", "cpu_requests", "gpu"):
            source = config.gpu_labels if signal == "gpu" else config.cpu_labels
            keyer = _Keyer(signal, (source.namespace, "service", "revision"), "pod_info")
            pod_label = source.pod
        else:
            keyer = _Keyer(signal, (tfs.namespace, tfs.service, tfs.revision), "tf_serving")
            pod_label = tfs.pod
        for part, samples in _by_part(result).items():
            for sample in samples:
                key = keyer(sample)
                if key is None:
                    continue
                a = acc(key)
                pod = sample.labels.get(pod_label, "")
                _fold(signal, part, sample, pod, a, tracker, key, config.latency_bounds_us)
        found = keyer.problem(config)
        if found is not None:
            problems.append(found)
        elif not result and signal != "gateway":
            problems.append(
                Problem(signal, Reason.NO_DATA, f"{signal}: the query returned no series")
            )
    bounds = _bounds(accs.values(), config.latency_bounds_us)
    revisions = {key: _revision(key, time, a, config, tracker, bounds) for key, a in accs.items()}
    # A revision absent because a query failed is not dead: forget only after a tick that
    # answered in full, else its totals would restart from its current pods' values.
    if tracker is not None and not any(isinstance(r, Problem) for r in results.values()):
        tracker.forget(revisions)
    return MetricsSnapshot(
        time, revisions, bounds, tuple(problems), queries, tuple(config.percentiles)
    )


def _fold(
    signal: str,
    part: str,
    sample: Sample,
    pod: str,
    a: _Acc,
    tracker: CounterTracker | None,
    key: RevisionKey,
    layout: Sequence[float],
) -> None:
    value = sample.value
    if part == "sample_time":
        if value is not None:
            a.newest[signal] = max(a.newest.get(signal, -math.inf), value)
        return
    if part == "scraped":
        # A NaN counts as a failing scrape: only a known, successful one means "idle".
        at = value if value is not None else 0.0
        a.scraped[signal] = min(a.scraped.get(signal, math.inf), at)
        return
    if signal == "cpu":
        if part == "value":
            a.cpu[pod] = value
        elif part == "total" and value is not None and tracker is not None:
            tracker.add(key, "cpu_seconds", (pod,), value)
            a.counted = True
    elif signal == "cpu_requests":
        if value is not None:
            a.request[pod] = value
    elif signal == "gpu":
        (a.gpu if part == "util" else a.gpu_memory)[pod] = value
    elif signal == "requests":
        status = sample.labels.get("status", "")
        if part == "rate":
            a.status_seen = True
            if value is not None:
                a.by_status[status] = a.by_status.get(status, 0.0) + value
        elif part == "total" and value is not None and tracker is not None:
            tracker.add(key, "requests", (pod, status), value)
            if status != "OK":
                tracker.add(key, "errors", (pod, status), value)
            a.counted = True
    elif signal == "latency":
        le = _on_layout(_le(sample.labels), layout)
        if part == "rate" and le is not None and value is not None:
            a.latency[le] = a.latency.get(le, 0.0) + value
        elif part == "count":
            a.latency_count = value
        elif part == "busy":
            a.busy = value
        elif part == "total" and le is not None and value is not None and tracker is not None:
            tracker.add(key, f"le={le!r}", (pod,), value)
            a.counted = True
    elif signal == "gateway" and value is not None:
        code = sample.labels.get("code", "")
        a.gateway[code] = a.gateway.get(code, 0.0) + value


def _bounds(accs: Iterable[_Acc], layout: Iterable[float] = ()) -> tuple[float, ...]:
    seen: set[float] = set(layout)
    for a in accs:
        seen.update(le for le in a.latency if math.isfinite(le))
    return tuple(sorted(seen))


def _complete(a: _Acc, bounds: Sequence[float]) -> dict[float, float] | None:
    """The whole cumulative histogram from the buckets the query returned.

    The query returns only buckets strictly between empty and full: buckets below the
    lowest returned one are empty (0), buckets above the highest are full (the total). When
    none is returned, every request fell into one bucket: the one holding the mean latency
    (busy time over requests), since a mean lies within its observations' bucket. A full
    histogram (all buckets returned, as a user template may give) passes through unchanged.
    Returns None when there is no histogram at all (no series).
    """
    total = a.latency_count
    if total is None:
        total = a.latency.get(math.inf)
    if total is None:
        return None if not a.latency else dict(a.latency)
    layout = [*bounds, math.inf]
    present = dict(a.latency)
    if total <= 0:
        return {le: 0.0 for le in layout}
    if present:
        high = max(present)
        out, running = {}, 0.0
        for le in layout:
            if le in present:
                running = max(running, present[le])
            elif le > high:
                running = total
            out[le] = running  # below the lowest returned: 0; a gap inside: carried forward
        return out
    if a.busy is None:
        return None
    mean_us = a.busy / total
    full_from = next((le for le in layout if le >= mean_us), math.inf)
    return {le: (total if le >= full_from else 0.0) for le in layout}


def _per_bucket(cumulative: Mapping[float, float], bounds: Sequence[float]) -> tuple[float, ...]:
    """Cumulative ``le -> value`` to per-bucket values on ``bounds`` + Inf."""
    out = []
    below = 0.0
    for le in [*bounds, math.inf]:
        at = cumulative.get(le, below)
        out.append(max(0.0, at - below))
        below = max(below, at)
    return tuple(out)


def _latencies(
    per_bucket: Sequence[float], bounds: Sequence[float], percentiles: Iterable[float]
) -> dict[str, float]:
    cumulative = []
    total = 0.0
    for le, count in zip([*bounds, math.inf], per_bucket, strict=True):
        total += count
        cumulative.append((le, total))
    out = {}
    for p in percentiles:
        value = histogram_quantile(p / 100.0, cumulative)
        if value is not None and math.isfinite(value):
            out[percentile_key(p)] = value / 1000.0
    return out


def _revision(
    key: RevisionKey,
    time: float,
    a: _Acc,
    config: MetricsConfig,
    tracker: CounterTracker | None,
    bounds: tuple[float, ...],
) -> RevisionMetrics:
    # A signal with no series of its own is as fresh as its targets' last scrape.
    newest = {s: t for s, t in a.scraped.items() if t > 0} | a.newest
    ages = {s: max(0.0, time - t) for s, t in newest.items()}
    stale = tuple(sorted(s for s, age in ages.items() if age > config.stale_after_seconds))

    def usable(signal: str) -> bool:
        return signal not in stale

    def served_nothing(signal: str) -> bool:
        """Every model server of the revision scraped, freshly: no series is zero requests."""
        return a.scraped.get(signal, 0.0) > 0 and usable(signal)

    # CPU: per pod usage over request.
    pods: list[PodSample] = []
    usage = None
    utilization = None
    if usable("cpu"):
        names = sorted(set(a.cpu) | set(a.request))
        for name in names:
            pods.append(
                PodSample(
                    name=name,
                    # Without its request a pod has no utilization (the HPA refuses it too):
                    # a stand-in request would make the usage read as any percentage.
                    cpu_usage_cores=a.cpu.get(name) if name in a.request else None,
                    cpu_request_cores=a.request.get(name, 1.0),
                    gpu_duty_cycle=a.gpu.get(name) if usable("gpu") else None,
                )
            )
        used = {p: v for p, v in a.cpu.items() if v is not None}
        # Every servectl pod requests CPU: a pod using CPU without a known request means the
        # requests (kube-state-metrics) are missing or lagging, so CPU is missing this tick.
        if used and all(p in a.request for p in used):
            usage = sum(used.values())
            requested = sum(a.request[p] for p in used)
            utilization = 100.0 * usage / requested if requested > 0 else None
    gpu_values = [v for v in a.gpu.values() if v is not None] if usable("gpu") else []
    gpu = sum(gpu_values) / len(gpu_values) if gpu_values else None
    gpu_memory_values = [v for v in a.gpu_memory.values() if v is not None]
    gpu_memory = sum(gpu_memory_values) if gpu_memory_values and usable("gpu") else None

    rps = error_rate = None
    if usable("requests") and a.status_seen:
        rps = sum(a.by_status.values())
        ok = a.by_status.get("OK", 0.0)
        error_rate = (rps - ok) / rps if rps > 0 else None
    elif served_nothing("requests"):
        rps = 0.0  # the error rate of no requests is unknown, not missing
    if a.gateway:
        total = sum(a.gateway.values())
        rps = total
        errors = sum(v for code, v in a.gateway.items() if code.startswith("5"))
        error_rate = errors / total if total > 0 else None

    latency_rates: tuple[float, ...] = ()
    latency_ms: dict[str, float] = {}
    concurrency = None
    cumulative, busy = _complete(a, bounds), a.busy
    if cumulative is None and served_nothing("latency"):
        # An empty histogram: no latency value, as for a revision whose traffic stopped.
        cumulative, busy = {le: 0.0 for le in [*bounds, math.inf]}, 0.0
    if usable("latency") and cumulative is not None:
        latency_rates = _per_bucket(cumulative, bounds)
        latency_ms = _latencies(latency_rates, bounds, config.percentiles)
        concurrency = busy / 1e6 if busy is not None else None

    counters = None
    if tracker is not None and a.counted:
        buckets = tuple(tracker.total(key, f"le={le!r}") or 0.0 for le in [*bounds, math.inf])
        per_bucket = dict(zip([*bounds, math.inf], buckets, strict=True))
        counters = Counters(
            time=time,
            requests=tracker.total(key, "requests") or 0.0,
            errors=tracker.total(key, "errors") or 0.0,
            cpu_seconds=tracker.total(key, "cpu_seconds") or 0.0,
            latency_buckets=_per_bucket(per_bucket, bounds) if any(buckets) else (),
        )

    present = {
        "cpu": usage is not None,
        "gpu": gpu is not None,
        "requests": rps is not None,
        "latency": bool(latency_ms) or (usable("latency") and cumulative is not None),
    }
    missing = tuple(sorted(s for s, ok in present.items() if not ok))
    failing = tuple(s for s in missing if a.scraped.get(s) == 0.0)
    kept_ages = [age for s, age in ages.items() if s not in stale and present.get(s, False)]
    signals = Signals(
        cpu_utilization=utilization,
        cpu_usage_cores=usage,
        gpu_duty_cycle=gpu,
        rps=rps,
        concurrency=concurrency,
        latency_ms=latency_ms,
        error_rate=error_rate,
        age_s=max(kept_ages) if kept_ages else 0.0,
    )
    return RevisionMetrics(
        key=key,
        time=time,
        signals=signals,
        pods=tuple(pods),
        rate_by_status=dict(a.by_status),
        latency_rates=latency_rates,
        gpu_memory_mib=gpu_memory,
        counters=counters,
        ages=ages,
        missing=missing,
        stale=stale,
        scrape_failing=failing,
    )


def aggregate(
    namespace: str,
    service: str,
    revisions: Sequence[RevisionMetrics],
    bounds: Sequence[float],
    percentiles: Iterable[float],
) -> ServiceMetrics:
    """A service's signals from its revisions' (sums of rates; latency from summed buckets)."""
    pods = tuple(p for r in revisions for p in r.pods)
    sig = [r.signals for r in revisions]
    # A service misses a signal when any revision taking traffic misses it; the others'
    # partial sum would understate it (and scale down), so a missing signal is None.
    missing = tuple(sorted({m for r in revisions for m in r.missing}))
    usage = _sum(s.cpu_usage_cores for s in sig)
    requested = sum(
        p.cpu_request_cores
        for r in revisions
        if r.signals.cpu_usage_cores is not None
        for p in r.pods
        if p.cpu_usage_cores is not None
    )
    rps = _sum(s.rps for s in sig)
    errors = _sum(
        s.error_rate * s.rps for s in sig if s.error_rate is not None and s.rps is not None
    )
    gpu_weighted = [
        (r.signals.gpu_duty_cycle, max(1, len(r.pods)))
        for r in revisions
        if r.signals.gpu_duty_cycle is not None
    ]
    latency: dict[str, float] = {}
    with_buckets = [r.latency_rates for r in revisions if r.latency_rates]
    if with_buckets:
        summed = tuple(map(sum, zip(*with_buckets, strict=True)))
        latency = _latencies(summed, bounds, percentiles)
    concurrency = _sum(s.concurrency for s in sig)
    signals = Signals(
        cpu_utilization=100.0 * usage / requested if usage is not None and requested > 0 else None,
        cpu_usage_cores=usage,
        gpu_duty_cycle=(
            sum(v * n for v, n in gpu_weighted) / sum(n for _, n in gpu_weighted)
            if gpu_weighted
            else None
        ),
        rps=rps,
        concurrency=concurrency,
        latency_ms=latency,
        error_rate=errors / rps if errors is not None and rps else None,
        age_s=max((s.age_s for s in sig), default=0.0),
    )
    cleared: dict[str, Any] = {}
    for signal in missing:
        cleared.update({f: None for f in _FIELDS.get(signal, ())})
    if "latency" in missing:
        cleared["latency_ms"] = {}
    signals = dataclasses.replace(signals, **cleared)
    return ServiceMetrics(namespace, service, signals, pods, missing)


#: The ``Signals`` fields each signal feeds.
_FIELDS = {
    "cpu": ("cpu_utilization", "cpu_usage_cores"),
    "gpu": ("gpu_duty_cycle",),
    "requests": ("rps", "error_rate"),
    "latency": ("concurrency",),
}


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


# ----------------------------------------------------------------------------- condition


def condition(
    snapshot: MetricsSnapshot,
    namespace: str,
    service: str,
    revisions: Iterable[str] | None = None,
    *,
    required: Iterable[str] = DEFAULT_REQUIRED,
) -> Condition:
    """``MetricsAvailable`` for one service: False names each missing signal and its cause."""
    needed = tuple(required)
    if revisions is None:
        keys = [k for k in snapshot.revisions if k[:2] == (namespace, service)]
    else:
        keys = [(namespace, service, r) for r in revisions]
    causes: list[str] = []
    reasons: list[Reason] = []
    for signal in needed:
        problem = snapshot.problem(signal)
        if problem is None and signal == "cpu":
            problem = snapshot.problem("cpu_requests")  # utilization needs the requests too
        # A label missing on some series (say a TF Serving nobody labelled) only matters to
        # services that lack the signal; the others got theirs from well-labelled series.
        if problem is not None and problem.reason not in (Reason.NO_DATA, Reason.LABEL_MISSING):
            causes.append(problem.message)
            reasons.append(problem.reason)
            continue
        lacking = []
        stale = []
        for key in sorted(keys):
            rev = snapshot.revision(*key)
            if signal in rev.stale:
                stale.append(f"{key[2]} ({rev.ages[signal]:.0f} s old)")
            elif signal in rev.scrape_failing:
                lacking.append(f"{key[2]} (the scrape of its model server fails: up is 0)")
            elif signal in rev.missing:
                lacking.append(key[2])
        if not keys:
            lacking.append("(no revision seen)")
        if stale:
            causes.append(f"{signal} stale for {', '.join(stale)}")
            reasons.append(Reason.STALE)
        if lacking:
            detail = f"{signal} missing for {', '.join(lacking)}"
            if problem is not None:
                detail += f" ({problem.message})"
            causes.append(detail)
            reasons.append(Reason.PARTIAL if problem is None else problem.reason)
    if not causes:
        return Condition(
            type=ConditionType.METRICS_AVAILABLE,
            status=ConditionStatus.TRUE,
            reason=Reason.OK,
            message=f"{', '.join(needed)} fresh for {len(keys)} revision(s)",
        )
    return Condition(
        type=ConditionType.METRICS_AVAILABLE,
        status=ConditionStatus.FALSE,
        reason=reasons[0],
        message="; ".join(causes) + ": holding or scaling up only, never down",
    )
