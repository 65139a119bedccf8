"""The peers, emulated: Argo Rollouts and Flagger as simulator controllers.

Both are :class:`servectl.sim.control.Controller`s, so the multi-revision simulator can run
them side by side with servectl on the same requests. Each emulates what the real tool
does with a canary behind a traffic router *and* what the Kubernetes HPA does next to it,
because the point of the comparison is how autoscaling and rollouts interact:

- :class:`ArgoStyle`: Argo Rollouts' canary strategy with ``trafficRouting``. One HPA
  targets the Rollout: it sees every pod (stable and canary) and decides the Rollout's
  ``spec.replicas`` T; the canary gets ``ceil(weight x T)`` replicas and the stable stays
  at T (``dynamicStableScale: false``, the default) or follows the traffic
  (``dynamic_stable_scale=True``).
- :class:`FlaggerStyle`: Flagger's canary analysis loop. Two HPAs, one on the primary
  Deployment and one on the canary Deployment, each seeing only its own pods; the weight
  moves by ``stepWeight`` after every passing analysis interval; promotion is a rolling
  update of the primary Deployment (maxSurge 25 %, maxUnavailable 25 %).

docs/peers.md lists every modelling choice with the source of the behaviour. The HPAs are
the repository's exact HPA baseline (:mod:`servectl.autoscaling.hpa`), built as the
benchmark builds its ``hpa`` baseline (:func:`peer_hpa_config`), and every analysis uses
:func:`servectl.rollout.analysis.judge` with the spec's checks and ``minSamples``, so the
comparison differs only in what the tools *do*.

``Plan.phase`` uses the simulator's vocabulary (``Idle``, ``Progressing``, ``Paused``,
``Completed``, ``Aborted``) so rollout windows are measured alike for every controller;
the tool's own phase (Argo's ``Healthy``/``Degraded``, Flagger's ``Promoting``,
``Finalising``, ``Succeeded``, ``Failed``) is in :attr:`native_phase` and the message.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from servectl.api import models
from servectl.autoscaling import config, hpa
from servectl.autoscaling.decision import Decision
from servectl.autoscaling.snapshot import Replicas, Signals, Snapshot
from servectl.planning.types import Counters, Observed, ObservedRevision, Plan, RevisionPlan
from servectl.rollout import analysis
from servectl.sim import control

__all__ = [
    "ABORT_SCALE_DOWN_DELAY_S",
    "CONSECUTIVE_ERROR_LIMIT",
    "CPU_TARGET",
    "FLAGGER_METRIC_INTERVAL_S",
    "FLAGGER_PROGRESS_DEADLINE_S",
    "FLAGGER_THRESHOLD",
    "MAX_SURGE",
    "MAX_UNAVAILABLE",
    "SCALE_DOWN_DELAY_S",
    "ArgoStyle",
    "FlaggerStyle",
    "flagger_weights",
    "peer_hpa_config",
]

CPU_TARGET = 70.0
"""The HPA's CPU target (percent of the request), as the benchmark's hpa baseline."""
SCALE_DOWN_DELAY_S = 30.0
"""Argo ``scaleDownDelaySeconds`` default: an old ReplicaSet stays up this long."""
ABORT_SCALE_DOWN_DELAY_S = 30.0
"""Argo ``abortScaleDownDelaySeconds`` default (v1.1+): the canary stays up after an abort."""
CONSECUTIVE_ERROR_LIMIT = 4
"""Argo AnalysisRun ``consecutiveErrorLimit`` default: one more Error fails the run."""
FLAGGER_THRESHOLD = 5
"""Flagger ``analysis.threshold``: failed checks before a rollback (the docs' value)."""
FLAGGER_METRIC_INTERVAL_S = 60.0
"""Flagger's default metric ``interval`` (``1m``): the range of every metric query."""
FLAGGER_PROGRESS_DEADLINE_S = 600.0
"""Flagger ``progressDeadlineSeconds`` default."""
MAX_SURGE = 0.25
MAX_UNAVAILABLE = 0.25
"""Kubernetes Deployment rolling-update defaults (Flagger's primary Deployment)."""

_EPS = 1e-9
_NO_HARD_FAILURE = math.inf  # neither tool has servectl's hard-failure rule


# ----------------------------------------------------------------------------- shared parts


def peer_hpa_config(
    min_replicas: int, max_replicas: int, cpu_target: float = CPU_TARGET
) -> hpa.HPAConfig:
    """The HPA every peer runs: the benchmark's ``hpa`` baseline (``servectl.sim.suite``):
    CPU utilization ``cpu_target`` %, Kubernetes' defaults for everything else."""
    cfg = config.AutoscalingConfig(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        signals=(config.SignalTarget(config.SignalType.CPU, cpu_target),),
    )
    return hpa.from_config(cfg).config


def _merge_signals(snaps: Sequence[Snapshot]) -> Signals:
    """Service-level signals of several revisions seen as one workload (only what an HPA
    on CPU reads: utilization weighted by ready replicas, usage summed, the oldest age)."""
    if len(snaps) == 1:
        return snaps[0].signals
    weighted = [
        (s.signals.cpu_utilization, s.replicas.ready)
        for s in snaps
        if s.signals.cpu_utilization is not None
    ]
    ready = sum(r for _, r in weighted)
    utilization = sum(u * r for u, r in weighted) / ready if ready > 0 else None
    usage = [s.signals.cpu_usage_cores for s in snaps if s.signals.cpu_usage_cores is not None]
    rps = [s.signals.rps for s in snaps if s.signals.rps is not None]
    return Signals(
        cpu_utilization=utilization,
        cpu_usage_cores=sum(usage) if usage else None,
        rps=sum(rps) if rps else None,
        age_s=max(s.signals.age_s for s in snaps),
    )


class _HPA:
    """One HorizontalPodAutoscaler object: the exact baseline, synced every sync period
    (aligned on multiples of it, like the controller-manager's loop) whatever the
    controller's own period."""

    def __init__(self, cfg: hpa.HPAConfig) -> None:
        self.policy = hpa.HPAPolicy(cfg)
        self.state = self.policy.initial_state()
        self.due = -math.inf
        self.last: Decision | None = None

    def sync(self, now: float, snaps: Sequence[Snapshot | None], current: int, ready: int) -> int:
        """The scale target's new ``spec.replicas`` (``current`` when no sync is due)."""
        if now + _EPS < self.due:
            return current
        period = self.policy.config.sync_period_s
        self.due = (math.floor(now / period + _EPS) + 1) * period
        cfg = self.policy.config
        present = [s for s in snaps if s is not None]
        snap = Snapshot(
            time=now,
            replicas=Replicas(
                current=current, ready=ready, min=cfg.min_replicas, max=cfg.max_replicas
            ),
            signals=_merge_signals(present) if present else Signals(),
            pods=tuple(p for s in present for p in s.pods),
        )
        decision, self.state = self.policy.decide(snap, self.state)
        self.last = decision
        return decision.replicas


def _ready(observed: Observed, name: str | None) -> int:
    rev = observed.revision(name) if name is not None else None
    return rev.ready if rev is not None else 0


def _weight(observed: Observed, name: str | None) -> int:
    rev = observed.revision(name) if name is not None else None
    return rev.weight if rev is not None else 0


def _snapshot(observed: Observed, name: str) -> Snapshot | None:
    rev = observed.revision(name)
    return rev.snapshot if rev is not None else None


def _ceil_pct(weight: float, total: int) -> int:
    """Argo's ``trafficWeightToReplicas``: ceil(weight x total / 100)."""
    return math.ceil(weight * total / 100.0 - _EPS)


def _initial_stable(observed: Observed) -> ObservedRevision:
    if not observed.revisions:
        raise ValueError("the first observation lists no revision: nothing to serve")
    return max(observed.revisions, key=lambda r: (r.weight, r.desired, r.ready))


def _analysis_config(
    spec: models.RolloutSpec, step: models.StepAnalysis | None
) -> tuple[float, int, tuple[models.AnalysisCheck, ...]]:
    """(interval s, min samples, checks) of an analysis step, defaults from the spec."""
    shared = spec.analysis or models.AnalysisSpec()
    interval = step.interval if step is not None and step.interval is not None else None
    min_samples = step.min_samples if step is not None else None
    checks = step.checks if step is not None else None
    return (
        models.parse_duration(interval or shared.interval),
        min_samples if min_samples is not None else shared.min_samples,
        tuple(checks if checks is not None else shared.checks),
    )


def _metrics_error(message: str) -> analysis.AnalysisResult:
    return analysis.AnalysisResult(models.Verdict.ERROR, message, 0, (), False)


@dataclass
class _Retiring:
    """An old ReplicaSet kept at its size, with no traffic, until ``until``."""

    name: str
    version: int
    replicas: int
    until: float


def _phase_for(native: str) -> str:
    return {
        "Healthy": "Idle",
        "Initialized": "Idle",
        "Succeeded": "Completed",
        "Failed": "Aborted",
        "Degraded": "Aborted",
        "Promoting": "Progressing",
        "Finalising": "Progressing",
    }.get(native, native)


# ----------------------------------------------------------------------------- Argo


class _Peer:
    """What both emulated peers share: the controller protocol's name and period, and a
    constructor from a scenario."""

    _name: str
    _period_s: float

    def __init__(self, spec: models.RolloutSpec, **options: Any) -> None:
        raise NotImplementedError

    @classmethod
    def for_scenario(
        cls, spec: models.RolloutSpec, scenario: control.RolloutScenario, **options: Any
    ) -> Self:
        """One with the scenario's service name and replica bounds."""
        return cls(
            spec,
            service=scenario.service_name,
            min_replicas=scenario.min_replicas,
            max_replicas=scenario.max_replicas,
            **options,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def period_s(self) -> float:
        return self._period_s


class ArgoStyle(_Peer):
    """Argo Rollouts, canary strategy with ``trafficRouting``, one HPA on the Rollout.

    Per tick (``period_s``; the Argo controller itself reacts to ReplicaSet events, so
    this adds up to one period of lag): the user's commands, then the HPA (every 15 s) over
    all the Rollout's pods sets T, then the steps advance as far as they can, then the
    replica counts and the weight follow Argo's rules (docs/peers.md):

    - canary replicas ``ceil(setWeight x T / 100)`` (``setCanaryScale`` overrides);
      stable T, or with ``dynamic_stable_scale`` the larger of ``ceil((100 - setWeight) x
      T / 100)`` and what the weight applied now still sends it;
    - the weight moves to a step's ``setWeight`` only once both ReplicaSets are fully
      available at the new counts (and no older ReplicaSet has available pods); until
      then it stays at the previous ``setWeight``, and at 0 while the canary has no
      available pod. ``weight_before_ready=True`` instead moves the weight as soon as the
      step is reached (the model some comparisons assume; not what Argo does since v1.1);
    - a ``setWeight`` step completes when the counts are available; ``pause`` after its
      seconds (without: on resume/promote); ``analysis`` after one interval, judged over
      the step's window: Successful -> next step, Failed -> abort, Inconclusive -> paused
      until resumed, Error -> measured again, the 5th Error in a row aborts;
    - after the last step the canary is scaled to T; once it is available the weight goes
      to 100 and it becomes the stable; the old stable stays ``scale_down_delay_s``;
    - abort: weight 0 at once (with ``dynamic_stable_scale``: as fast as the stable, scaled
      back to T, becomes available), the canary scaled down ``abort_scale_down_delay_s``
      later (dynamic: with its weight).
    """

    def __init__(
        self,
        spec: models.RolloutSpec,
        *,
        hpa_config: hpa.HPAConfig | None = None,
        min_replicas: int = 1,
        max_replicas: int = 100,
        service: str = "model",
        period_s: float = hpa.SYNC_PERIOD_S,
        dynamic_stable_scale: bool = False,
        weight_before_ready: bool = False,
        scale_down_delay_s: float = SCALE_DOWN_DELAY_S,
        abort_scale_down_delay_s: float = ABORT_SCALE_DOWN_DELAY_S,
        name: str | None = None,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        base = hpa_config or peer_hpa_config(min_replicas, max_replicas)
        self.spec = spec
        self.hpa_config = replace(base, min_replicas=min_replicas, max_replicas=max_replicas)
        self.service = service
        self.dynamic_stable_scale = dynamic_stable_scale
        self.weight_before_ready = weight_before_ready
        self.scale_down_delay_s = scale_down_delay_s
        self.abort_scale_down_delay_s = abort_scale_down_delay_s
        self._period_s = float(period_s)
        self._name = name or ("argo-style-dynamic" if dynamic_stable_scale else "argo-style")
        self._hpa = _HPA(self.hpa_config)
        # the Rollout
        self.total: int | None = None  # spec.replicas, as the HPA sets it (T)
        self.stable: tuple[str, int] | None = None
        self.canary: tuple[str, int] | None = None
        self.step_index = 0
        self.aborted = False
        self.user_paused = False  # spec.paused (`kubectl argo rollouts pause`)
        self.step_paused = False  # an indefinite pause step, or an Inconclusive analysis
        self.promote_full = False
        self.native_phase = "Healthy"
        self.retiring: list[_Retiring] = []
        self.verdicts: list[tuple[float, int, analysis.AnalysisResult]] = []
        self._step_started = 0.0
        self._abort_time = 0.0
        self._abort_canary = 0  # the canary's size when it was aborted
        self._baseline: dict[str, Counters] | None = None
        self._measure_at = math.inf
        self._errors = 0
        self._events: list[str] = []
        self._message = ""
        self._canary_now = 0  # the canary's replicas as last planned
        self._stable_now = 0  # the stable's replicas as last planned
        self._outcome = "Idle"  # the phase once no rollout runs: Idle, Completed

    def revision_name(self, version: int) -> str:
        return f"{self.service}-v{version}"

    # ------------------------------------------------------------------ one tick

    def tick(self, observed: Observed, events: Sequence[control.Event]) -> Plan:
        now = observed.time
        self._events = []
        if self.stable is None or self.total is None:
            first = _initial_stable(observed)
            self.stable = (first.name, first.version)
            self.total = max(first.desired, self.hpa_config.min_replicas)
        for event in events:
            self._command(event, now)
        self.total = self._hpa.sync(
            now, [observed.service], self.total, observed.service.replicas.ready
        )
        self.retiring = [r for r in self.retiring if r.until > now + _EPS]
        if self.canary is not None and not self.aborted:
            self._progress(observed, now)
        return self._plan(observed, now)

    # ------------------------------------------------------------------ commands

    def _command(self, event: control.Event, now: float) -> None:
        op = event.op
        if op is control.Op.START and event.version is not None:
            self._start(event.version, now)
        elif op is control.Op.ABORT and self.canary is not None and not self.aborted:
            self._abort(now, "aborted by the user")
        elif op is control.Op.RETRY and self.canary is not None and self.aborted:
            self.aborted = False
            self._enter_step(0, now)
            self._note("retry: steps restart from 0")
        elif op is control.Op.PAUSE and self.canary is not None:
            self.user_paused = True
            self._note("paused (spec.paused)")
        elif op is control.Op.RESUME and self.canary is not None:
            self.user_paused = False
            if self.step_paused:
                self._enter_step(self.step_index + 1, now)
            self._note("resumed")
        elif op is control.Op.PROMOTE and self.canary is not None and not self.aborted:
            self.user_paused = False
            self._enter_step(self.step_index + 1, now)
            self._note("promote: step skipped")
        elif op is control.Op.PROMOTE_FULL and self.canary is not None and not self.aborted:
            self.promote_full = True
            self.user_paused = self.step_paused = False
            self._note("promote --full: every step skipped")
        else:
            self._note(f"{op} ignored (not applicable now, or not modelled)")

    def _start(self, version: int, now: float) -> None:
        assert self.stable is not None
        name = self.revision_name(version)
        if self.canary is not None and self.canary[1] == version:
            self._note(f"v{version} is already the canary")
            return
        if version == self.stable[1]:
            if self.canary is not None:
                # The template is the stable's again: Argo goes straight back to it.
                self._retire(self.canary, self._canary_now, now + self.scale_down_delay_s)
                self.canary = None
                self.aborted = False
                self.native_phase = "Healthy"
                self._outcome = "Idle"
                self._note(f"v{version} is the stable: back to it, steps skipped")
            return
        if self.canary is not None:
            # A new template mid-rollout: the old canary is an older ReplicaSet now.
            self._retire(self.canary, self._canary_now, now + self.scale_down_delay_s)
        self.retiring = [r for r in self.retiring if r.name != name]  # its RS is reused
        self.canary = (name, version)
        self.aborted = self.promote_full = False
        self.native_phase = "Progressing"
        self._enter_step(0, now)
        self._note(f"new revision v{version}: step 0")

    def _retire(self, revision: tuple[str, int], replicas: int, until: float) -> None:
        if replicas > 0:
            self.retiring.append(_Retiring(revision[0], revision[1], replicas, until))

    def _abort(self, now: float, why: str) -> None:
        self.aborted = True
        self.promote_full = False
        self._abort_time = now
        self._abort_canary = self._canary_now
        self.native_phase = "Degraded"
        self._note(f"abort: {why}")

    def _note(self, what: str) -> None:
        self._events.append(what)
        self._message = what

    # ------------------------------------------------------------------ steps

    @property
    def steps(self) -> list[models.RolloutStep]:
        return self.spec.steps

    def _enter_step(self, index: int, now: float) -> None:
        self.step_index = index
        self._step_started = now
        self.step_paused = False
        self._baseline = None
        self._measure_at = math.inf
        self._errors = 0

    def _set_weight(self, index: int) -> int:
        """``GetCurrentSetWeight``: the last setWeight at or before ``index`` (100 past
        the steps)."""
        if index >= len(self.steps):
            return 100
        for step in reversed(self.steps[: index + 1]):
            if step.set_weight is not None:
                return step.set_weight
        return 0

    def _previous_set_weight(self, index: int) -> int:
        """The setWeight before ``index`` (the weight kept while the counts catch up)."""
        for step in reversed(self.steps[: min(index, len(self.steps))]):
            if step.set_weight is not None:
                return step.set_weight
        return 0

    def _canary_scale(self, index: int) -> models.SetCanaryScale | None:
        """``UseSetCanaryScale``: the last setCanaryScale at or before ``index``."""
        if index >= len(self.steps) or self.promote_full:
            return None
        for step in reversed(self.steps[: index + 1]):
            if step.set_canary_scale is not None:
                scale = step.set_canary_scale
                return None if scale.match_traffic_weight else scale
        return None

    def _counts(self, observed: Observed) -> tuple[int, int]:
        """(canary, stable) replicas for the current step (Argo's
        ``CalculateReplicaCountsForTrafficRoutedCanary``)."""
        assert self.total is not None and self.stable is not None
        total = self.total
        index = len(self.steps) if self.promote_full else self.step_index
        weight = self._set_weight(index)
        scale = self._canary_scale(index)
        if scale is not None and scale.replicas is not None:
            canary, weight = scale.replicas, 0
        elif scale is not None and scale.weight is not None:
            weight = scale.weight
            canary = _ceil_pct(weight, total)
        else:
            canary = _ceil_pct(weight, total)
        if not self.dynamic_stable_scale:
            return canary, total
        actual = _weight(observed, self.stable[0])
        return canary, max(_ceil_pct(100 - weight, total), _ceil_pct(actual, total))

    def _at_desired(self, observed: Observed, canary: int, stable: int) -> bool:
        """``AtDesiredReplicaCountsForCanary``: both ReplicaSets available at the wanted
        counts, no older ReplicaSet with available pods."""
        assert self.canary is not None and self.stable is not None
        return (
            _ready(observed, self.canary[0]) == canary
            and _ready(observed, self.stable[0]) == stable
            and all(_ready(observed, r.name) == 0 for r in self.retiring)
        )

    def _progress(self, observed: Observed, now: float) -> None:
        """Advance the steps as far as they go this tick (Argo requeues at once)."""
        for _ in range(len(self.steps) + 2):
            if self.user_paused or self.step_paused or self.aborted:
                return
            if self.promote_full or self.step_index >= len(self.steps):
                canary, stable = self._counts(observed)
                if self._at_desired(observed, canary, stable):
                    self._promote(now)
                return
            step = self.steps[self.step_index]
            if step.set_weight is not None or step.set_canary_scale is not None:
                if not self._at_desired(observed, *self._counts(observed)):
                    return
            elif step.pause is not None:
                if step.pause.seconds is None:
                    self.step_paused = True
                    self._note(f"step {self.step_index}: paused until resumed")
                    return
                if now + _EPS < self._step_started + step.pause.seconds:
                    return
            elif step.analysis is not None and not self._analyse(step.analysis, observed, now):
                return
            self._enter_step(self.step_index + 1, now)
            self._note(f"step {self.step_index - 1} done")

    def _analyse(self, step: models.StepAnalysis, observed: Observed, now: float) -> bool:
        """Run the step's analysis; True when it passed (the step is done)."""
        assert self.canary is not None and self.stable is not None
        interval, min_samples, checks = _analysis_config(self.spec, step)
        names = (self.canary[0], self.stable[0])
        if self._baseline is None:
            found = {n: r.counters for n in names if (r := observed.revision(n)) is not None}
            self._baseline = {n: c for n, c in found.items() if c is not None}
            self._measure_at = now + interval
            return False
        if now + _EPS < self._measure_at:
            return False
        result = self._measure(observed, checks, min_samples)
        self.verdicts.append((now, self.step_index, result))
        verdict = result.verdict
        if verdict is models.Verdict.SUCCESSFUL:
            return True
        if verdict is models.Verdict.FAILED:
            self._abort(now, f"analysis failed at step {self.step_index}: {result.message}")
            return False
        if verdict is models.Verdict.INCONCLUSIVE:
            self.step_paused = True
            self.native_phase = "Paused"
            self._note(f"analysis Inconclusive at step {self.step_index}: {result.message}")
            return False
        self._errors += 1
        if self._errors > CONSECUTIVE_ERROR_LIMIT:
            self._abort(now, f"analysis Error at step {self.step_index}: {result.message}")
            return False
        # Measured again one interval later, over a fresh window.
        self._baseline = None
        self._measure_at = math.inf
        self._analyse(step, observed, now)
        self._note(f"analysis Error ({self._errors} in a row): {result.message}")
        return False

    def _measure(
        self,
        observed: Observed,
        checks: Sequence[models.AnalysisCheck],
        min_samples: int,
    ) -> analysis.AnalysisResult:
        assert self.canary is not None and self.stable is not None and self._baseline is not None
        if not observed.metrics_ok:
            return _metrics_error("metrics unavailable: the measurement failed")
        windows: dict[str, analysis.Window | None] = {}
        for name in (self.canary[0], self.stable[0]):
            rev = observed.revision(name)
            start = self._baseline.get(name)
            end = rev.counters if rev is not None else None
            windows[name] = (
                analysis.Window.between(start, end)
                if start is not None and end is not None
                else None
            )
        canary = windows[self.canary[0]]
        if canary is None:
            return _metrics_error(f"no counters for {self.canary[0]}")
        rev = observed.revision(self.canary[0])
        return analysis.judge(
            checks,
            canary,
            windows[self.stable[0]],
            min_samples=min_samples,
            bounds_us=observed.latency_bounds_us,
            canary_available=rev is not None and rev.available,
            hard_failure_error_rate=_NO_HARD_FAILURE,
        )

    def _promote(self, now: float) -> None:
        assert self.canary is not None and self.stable is not None and self.total is not None
        old = self.stable
        self._retire(old, self._stable_now, now + self.scale_down_delay_s)
        self.stable = self.canary
        self.canary = None
        self.promote_full = False
        self.native_phase = "Healthy"
        self._outcome = "Completed"
        self._note(f"promoted: {self.stable[0]} is the stable; {old[0]} scaled down later")

    # ------------------------------------------------------------------ the plan

    def _canary_weight(self, observed: Observed, canary: int, stable: int) -> int:
        assert self.canary is not None and self.total is not None
        ready = _ready(observed, self.canary[0])
        if self.promote_full:
            if self.weight_before_ready:
                return 100
            if self.dynamic_stable_scale:
                return min(100, (100 * ready) // max(self.total, 1))
            return _weight(observed, self.canary[0])
        target = self._set_weight(self.step_index)
        if self.weight_before_ready:
            return target
        if ready == 0:
            return 0
        if self._at_desired(observed, canary, stable):
            return target
        return self._previous_set_weight(self.step_index)

    def _plan(self, observed: Observed, now: float) -> Plan:
        assert self.stable is not None and self.total is not None
        total = self.total
        revisions: list[RevisionPlan] = []
        canary_replicas = canary_weight = 0
        stable_replicas = total
        if self.canary is not None and self.aborted:
            stable_replicas = total
            if self.dynamic_stable_scale:
                applied = _weight(observed, self.canary[0])
                stable_ready = _ready(observed, self.stable[0])
                canary_weight = max(0, min(applied, 100 - (100 * stable_ready) // max(total, 1)))
                canary_replicas = _ceil_pct(applied, total)
            else:
                late = now + _EPS >= self._abort_time + self.abort_scale_down_delay_s
                canary_replicas = 0 if late else self._abort_canary
        elif self.canary is not None:
            canary_replicas, stable_replicas = self._counts(observed)
            canary_weight = self._canary_weight(observed, canary_replicas, stable_replicas)
        self._canary_now = canary_replicas
        self._stable_now = stable_replicas
        revisions.append(
            RevisionPlan(
                self.stable[0],
                self.stable[1],
                stable_replicas,
                100 - canary_weight,
                "Stable",
                f"T={total}",
            )
        )
        if self.canary is not None and (canary_replicas > 0 or canary_weight > 0):
            revisions.append(
                RevisionPlan(
                    self.canary[0],
                    self.canary[1],
                    canary_replicas,
                    canary_weight,
                    "Aborted" if self.aborted else "Canary",
                    f"step {self.step_index} of {len(self.steps)}",
                )
            )
        listed = {r.name for r in revisions}
        for old in self.retiring:
            if old.name not in listed:
                revisions.append(
                    RevisionPlan(
                        old.name,
                        old.version,
                        old.replicas,
                        0,
                        "ScaleDownDelay",
                        f"until t={old.until:g}",
                    )
                )
        if self.canary is not None and not self.aborted:
            paused = self.user_paused or self.step_paused
            self.native_phase = "Paused" if paused else "Progressing"
        phase = self._outcome if self.canary is None else _phase_for(self.native_phase)
        return Plan(
            revisions=tuple(revisions),
            phase=phase,
            message=f"argo: {self.native_phase}; {self._message}".rstrip("; "),
            events=tuple(self._events),
        )


# ----------------------------------------------------------------------------- Flagger


def flagger_weights(spec: models.RolloutSpec) -> tuple[int, int]:
    """(stepWeight, maxWeight) for a Flagger canary equivalent to the spec's setWeight
    steps: stepWeight is the first positive setWeight, maxWeight the largest setWeight
    below 100 (100 when there is none)."""
    weights = [s.set_weight for s in spec.steps if s.set_weight is not None and s.set_weight > 0]
    if not weights:
        raise ValueError(
            "FlaggerStyle needs a setWeight step above 0 to derive stepWeight from "
            "(Flagger's canary analysis moves the weight by stepWeight)"
        )
    below = [w for w in weights if w < 100]
    return weights[0], max(below) if below else 100


@dataclass
class _RS:
    """A ReplicaSet of a Deployment: its revision and ``spec.replicas``."""

    name: str
    version: int
    spec: int = 0


@dataclass
class _Deployment:
    """A Kubernetes Deployment with the RollingUpdate strategy (25 % / 25 %).

    ``new`` is the ReplicaSet of the current template, ``olds`` the ones it replaces
    (oldest first); ``replicas`` is the Deployment's ``spec.replicas`` (its HPA's output).
    :meth:`reconcile` is one sync of the Deployment controller's ``rolloutRolling``.
    """

    replicas: int
    new: _RS | None = None
    olds: list[_RS] = field(default_factory=list)

    def all(self) -> list[_RS]:
        return [*self.olds, *([self.new] if self.new is not None else [])]

    @property
    def rolling(self) -> bool:
        return any(rs.spec > 0 for rs in self.olds)

    def set_template(self, name: str, version: int) -> None:
        """The pod template changed (to ``version``): a new ReplicaSet (or an old one
        whose template matches, reused) and a rolling update if pods exist."""
        if self.new is not None and self.new.name == name:
            return
        reused = next((rs for rs in self.olds if rs.name == name), None)
        olds = [rs for rs in self.olds if rs is not reused]
        if self.new is not None and self.new.spec > 0:
            olds.append(self.new)
        self.olds = olds
        self.new = reused or _RS(name, version)

    def scale_to_zero(self) -> None:
        for rs in self.all():
            rs.spec = 0
        self.olds = []
        self.replicas = 0

    def ready(self, observed: Observed) -> bool:
        """Flagger's ``isDeploymentReady``: rolled out and every replica available."""
        return (
            self.new is not None
            and self.replicas > 0
            and not self.rolling
            and self.new.spec == self.replicas
            and _ready(observed, self.new.name) >= self.replicas
        )

    def available(self, observed: Observed, rs: _RS) -> int:
        return min(_ready(observed, rs.name), rs.spec)

    def reconcile(self, observed: Observed) -> None:
        """One Deployment-controller sync: scale up the new ReplicaSet within maxSurge,
        else scale old ones down within maxUnavailable (``rolloutRolling``)."""
        if self.new is None:
            return
        target = self.replicas
        self.olds = [rs for rs in self.olds if rs.spec > 0]
        if not self.olds or target == 0:
            self.new.spec = target
            if target == 0:
                self.scale_to_zero()
            return
        surge = math.ceil(MAX_SURGE * target)
        unavailable = math.floor(MAX_UNAVAILABLE * target)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        total = sum(rs.spec for rs in self.all())
        if self.new.spec > target:
            self.new.spec = target
            return
        if self.new.spec < target and total < target + surge:
            self.new.spec += min(target + surge - total, target - self.new.spec)
            return
        min_available = target - unavailable
        new_unavailable = self.new.spec - self.available(observed, self.new)
        budget = total - min_available - new_unavailable
        if budget <= 0:
            return
        for rs in self.olds:  # cleanupUnhealthyReplicas
            unhealthy = rs.spec - self.available(observed, rs)
            cut = min(unhealthy, budget)
            rs.spec -= cut
            budget -= cut
        available = sum(self.available(observed, rs) for rs in self.all())
        down = available - min_available
        for rs in self.olds:  # scaleDownOldReplicaSetsForRollingUpdate
            if down <= 0:
                break
            cut = min(rs.spec, down)
            rs.spec -= cut
            down -= cut
        self.olds = [rs for rs in self.olds if rs.spec > 0]

    def snapshots(self, observed: Observed) -> list[Snapshot | None]:
        return [_snapshot(observed, rs.name) for rs in self.all()]

    def ready_pods(self, observed: Observed) -> int:
        return sum(_ready(observed, rs.name) for rs in self.all())

    def plans(self, observed: Observed, weight: int, reason: str) -> list[RevisionPlan]:
        """Every ReplicaSet with pods; the Deployment's weight spread over them in
        proportion to their ready pods (one Service over all its pods)."""
        sets = [rs for rs in self.all() if rs.spec > 0 or rs is self.new]
        if not sets:
            return []
        ready = [_ready(observed, rs.name) for rs in sets]
        shares = _split(weight, ready)
        return [
            RevisionPlan(rs.name, rs.version, rs.spec, share, reason, f"{ready_n} ready")
            for rs, share, ready_n in zip(sets, shares, ready, strict=True)
            if rs.spec > 0 or share > 0
        ]


def _split(weight: int, ready: Sequence[int]) -> list[int]:
    """``weight`` over the parts in proportion to ``ready`` (largest remainder; ties to the
    earlier part); all of it to the first part when none is ready."""
    total = sum(ready)
    if total <= 0:
        return [weight] + [0] * (len(ready) - 1)
    exact = [weight * r / total for r in ready]
    shares = [math.floor(x) for x in exact]
    order = sorted(range(len(ready)), key=lambda i: (shares[i] - exact[i], i))
    for i in order[: weight - sum(shares)]:
        shares[i] += 1
    return shares


class FlaggerStyle(_Peer):
    """Flagger's canary analysis loop with two HPAs (primary and canary).

    Per tick (``period_s``): the user's commands; both HPAs (every 15 s), each over its own
    Deployment's pods; one sync of each Deployment's rolling update; then, every analysis
    interval (``spec.analysis.interval``, on multiples of it like Flagger's ticker), one
    run of Flagger's ``advanceCanary``, in its order:

    1. suspended (``pause``): nothing;
    2. the primary must be ready (rolled out, all replicas available), else wait;
    3. a new revision: scale the canary from 0 to 1 replica (its HPA takes over), phase
       Progressing, weight 0; a newer one mid-analysis: weight 0, analysis restarts;
    4. the canary must be ready, else wait (rollback after the progress deadline);
    5. ``promote-full`` (skipAnalysis): all traffic to the primary, the primary is
       updated, the canary scaled to 0 at once;
    6. ``abort`` (the rollback gate): rollback;
    7. Promoting (the primary's rolling update has finished, step 2): weight 100 to the
       primary, then Finalising: the canary scaled to 0, Succeeded;
    8. ``threshold`` failed checks: rollback (weight 100 to the primary, canary to 0);
    9. at weight 0 no analysis ("starting"); else the checks over the last metric interval
       (1 min): anything but Successful is a failed check and holds the weight;
    10. below ``maxWeight``: weight += ``stepWeight``; else promote: the primary Deployment
        gets the canary's template (a rolling update, 25 % surge / 25 % unavailable) while
        the weights stay.

    The primary's pods of the new version are a revision of their own,
    ``<service>-v<version>-primary`` (the canary's are ``<service>-v<version>``); while the
    primary rolls, its weight is spread over its old and new pods by ready pods.
    """

    def __init__(
        self,
        spec: models.RolloutSpec,
        *,
        hpa_config: hpa.HPAConfig | None = None,
        min_replicas: int = 1,
        max_replicas: int = 100,
        service: str = "model",
        period_s: float = hpa.SYNC_PERIOD_S,
        threshold: int = FLAGGER_THRESHOLD,
        metric_interval_s: float = FLAGGER_METRIC_INTERVAL_S,
        progress_deadline_s: float | None = None,
        primary_suffix: str = "-primary",
        name: str = "flagger-style",
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        base = hpa_config or peer_hpa_config(min_replicas, max_replicas)
        self.spec = spec
        self.hpa_config = replace(base, min_replicas=min_replicas, max_replicas=max_replicas)
        self.service = service
        self.step_weight, self.max_weight = flagger_weights(spec)
        shared = spec.analysis or models.AnalysisSpec()
        self.interval_s = models.parse_duration(shared.interval)
        self.min_samples = shared.min_samples
        self.checks = self._checks(spec)
        self.threshold = threshold
        self.metric_interval_s = metric_interval_s
        deadline = getattr(spec, "progress_deadline_seconds", None)
        self.progress_deadline_s = (
            progress_deadline_s
            if progress_deadline_s is not None
            else float(deadline)
            if deadline is not None
            else FLAGGER_PROGRESS_DEADLINE_S
        )
        self.primary_suffix = primary_suffix
        self._period_s = float(period_s)
        self._name = name
        self._primary_hpa = _HPA(self.hpa_config)
        self._canary_hpa = _HPA(self.hpa_config)
        self.primary: _Deployment | None = None
        self.canary = _Deployment(replicas=0)
        self.native_phase = "Initialized"
        self.canary_weight = 0
        self.failed_checks = 0
        self.pending: int | None = None  # a canary template Flagger has not acted on yet
        self.suspended = False
        self.rollback_requested = False
        self.skip_analysis = False
        self.verdicts: list[tuple[float, analysis.AnalysisResult]] = []
        self._next_run = 0.0
        self._unready_since: float | None = None
        self._history: dict[str, deque[tuple[float, Counters]]] = {}
        self._events: list[str] = []
        self._message = ""

    @staticmethod
    def _checks(spec: models.RolloutSpec) -> tuple[models.AnalysisCheck, ...]:
        """The spec's shared checks, or else the first analysis step's (Flagger has one
        analysis for the whole canary)."""
        if spec.analysis is not None and spec.analysis.checks:
            return tuple(spec.analysis.checks)
        for step in spec.steps:
            if step.analysis is not None and step.analysis.checks:
                return tuple(step.analysis.checks)
        return ()

    def canary_name(self, version: int) -> str:
        return f"{self.service}-v{version}"

    def primary_name(self, version: int) -> str:
        return f"{self.service}-v{version}{self.primary_suffix}"

    # ------------------------------------------------------------------ one tick

    def tick(self, observed: Observed, events: Sequence[control.Event]) -> Plan:
        now = observed.time
        self._events = []
        if self.primary is None:
            first = _initial_stable(observed)
            replicas = max(first.desired, self.hpa_config.min_replicas)
            self.primary = _Deployment(replicas, new=_RS(first.name, first.version, replicas))
        self._record(observed)
        for event in events:
            self._command(event)
        primary, canary = self.primary, self.canary
        primary.replicas = self._primary_hpa.sync(
            now, primary.snapshots(observed), primary.replicas, primary.ready_pods(observed)
        )
        canary.replicas = self._canary_hpa.sync(
            now, canary.snapshots(observed), canary.replicas, canary.ready_pods(observed)
        )
        primary.reconcile(observed)
        canary.reconcile(observed)  # the Deployment controller reacts within the tick
        if now + _EPS >= self._next_run:
            while self._next_run <= now + _EPS:
                self._next_run += self.interval_s
            self._run(observed, now)
        return self._plan(observed)

    def _record(self, observed: Observed) -> None:
        if not observed.metrics_ok:
            return
        keep = self.metric_interval_s + 2 * self.interval_s
        for rev in observed.revisions:
            if rev.counters is None:
                continue
            history = self._history.setdefault(rev.name, deque())
            history.append((observed.time, rev.counters))
            while len(history) > 2 and history[1][0] <= observed.time - keep:
                history.popleft()

    def _window(self, name: str, now: float) -> analysis.Window | None:
        """``increase()`` over the metric interval ending now (shorter if younger)."""
        history = self._history.get(name)
        if not history or history[-1][0] + _EPS < now:
            return None
        start = history[0][1]
        for when, counters in history:
            if when <= now - self.metric_interval_s + _EPS:
                start = counters
        return analysis.Window.between(start, history[-1][1])

    # ------------------------------------------------------------------ commands

    def _command(self, event: control.Event) -> None:
        op = event.op
        if op is control.Op.START and event.version is not None:
            self._start(event.version)
        elif op is control.Op.ABORT and self.native_phase == "Progressing":
            self.rollback_requested = True
            self._note("rollback gate opened")
        elif op is control.Op.PAUSE:
            self.suspended = True
            self._note("suspended")
        elif op is control.Op.RESUME:
            self.suspended = False
            self._note("resumed")
        elif op is control.Op.PROMOTE_FULL:
            self.skip_analysis = True
            self._note("skipAnalysis: true")
        else:
            self._note(f"{op} ignored (Flagger has no such operation)")

    def _start(self, version: int) -> None:
        """The canary Deployment's template changes; its pods (if any) roll over at once
        (Deployment controller); Flagger notices at its next run."""
        canary = self.canary
        if canary.new is not None and canary.new.version == version:
            self._note(f"v{version} is already the canary template")
            return
        canary.set_template(self.canary_name(version), version)
        self.pending = version
        self._note(f"canary template -> v{version}")

    def _note(self, what: str) -> None:
        self._events.append(what)
        self._message = what

    # ------------------------------------------------------------------ advanceCanary

    def _run(self, observed: Observed, now: float) -> None:
        assert self.primary is not None
        if self.suspended:
            self._note("skipping canary run as object is suspended")
            return
        active = self.native_phase in ("Progressing", "Promoting", "Finalising")
        if not active and self.pending is None:
            return
        if not self.skip_analysis and not self.primary.ready(observed):
            self._note("primary not ready: waiting")
            return
        if not active:
            self._scale_up_canary(observed)
            return
        if self.native_phase == "Progressing" and self.pending is not None:
            self.canary_weight = 0
            self.failed_checks = 0
            self.pending = None
            self._unready_since = None
            self._note("New revision detected! Restarting analysis")
            return
        if not self.canary.ready(observed):
            if self._unready_since is None:
                self._unready_since = now
            if now - self._unready_since > self.progress_deadline_s + _EPS:
                self._rollback("progress deadline exceeded")
            else:
                self._note("canary not ready: waiting")
            return
        self._unready_since = None
        if self.skip_analysis:
            self._promote_primary()
            self.canary_weight = 0
            self.canary.scale_to_zero()
            self.skip_analysis = False
            self.native_phase = "Succeeded"
            self._note("Promotion completed! Canary analysis was skipped")
            return
        if self.rollback_requested and self.native_phase == "Progressing":
            self._rollback("manual rollback gate")
            return
        self.rollback_requested = False
        if self.native_phase == "Promoting":
            self.canary_weight = 0
            self.native_phase = "Finalising"
            self._note("Routing all traffic to primary")
            return
        if self.native_phase == "Finalising":
            self.canary.scale_to_zero()
            self.native_phase = "Succeeded"
            self._note("Promotion completed! Scaling down the canary")
            return
        if self.failed_checks >= self.threshold:
            self._rollback(f"failed checks threshold reached {self.failed_checks}")
            return
        if self.canary_weight > 0:
            result = self._judge(observed, now)
            self.verdicts.append((now, result))
            if result.verdict is not models.Verdict.SUCCESSFUL:
                self.failed_checks += 1
                self._note(f"Halt advancement ({result.verdict}): {result.message}")
                return
        if self.canary_weight < self.max_weight:
            self.canary_weight = min(100, self.canary_weight + self.step_weight)
            self._note(f"Advance canary weight {self.canary_weight}")
            return
        self._promote_primary()
        self.native_phase = "Promoting"
        self._note("Copying the canary template to the primary")

    def _scale_up_canary(self, observed: Observed) -> None:
        self.pending = None
        self.canary.replicas = max(self.canary.replicas, 1)  # ScaleFromZero
        self.canary.reconcile(observed)
        self.native_phase = "Progressing"
        self.canary_weight = 0
        self.failed_checks = 0
        self._unready_since = None
        self._note("New revision detected! Scaling up the canary")

    def _promote_primary(self) -> None:
        assert self.primary is not None and self.canary.new is not None
        version = self.canary.new.version
        self.primary.set_template(self.primary_name(version), version)

    def _rollback(self, why: str) -> None:
        self.canary_weight = 0
        self.canary.scale_to_zero()
        self.rollback_requested = False
        self.native_phase = "Failed"
        self._note(f"Rolling back: {why}")

    def _judge(self, observed: Observed, now: float) -> analysis.AnalysisResult:
        assert self.primary is not None and self.primary.new is not None
        assert self.canary.new is not None
        if not observed.metrics_ok:
            return _metrics_error("metrics unavailable: the query failed")
        canary = self._window(self.canary.new.name, now)
        if canary is None:
            return _metrics_error(f"no values found for {self.canary.new.name}")
        rev = observed.revision(self.canary.new.name)
        return analysis.judge(
            self.checks,
            canary,
            self._window(self.primary.new.name, now),
            min_samples=self.min_samples,
            bounds_us=observed.latency_bounds_us,
            canary_available=rev is not None and rev.available,
            hard_failure_error_rate=_NO_HARD_FAILURE,
        )

    # ------------------------------------------------------------------ the plan

    def _plan(self, observed: Observed) -> Plan:
        assert self.primary is not None
        revisions = self.primary.plans(observed, 100 - self.canary_weight, "Primary")
        revisions += self.canary.plans(observed, self.canary_weight, "Canary")
        phase = "Paused" if self.suspended and self.native_phase == "Progressing" else None
        return Plan(
            revisions=tuple(revisions),
            phase=phase or _phase_for(self.native_phase),
            message=f"flagger: {self.native_phase}; {self._message}".rstrip("; "),
            events=tuple(self._events),
        )
