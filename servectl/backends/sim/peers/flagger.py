"""Flagger, emulated: its canary analysis loop with independent HPAs on the primary and
the canary Deployments, and a rolling update of the primary on promotion.

docs/peers.md lists every modelling choice with the source of the behaviour.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from servectl.api import models, names
from servectl.autoscaling import hpa
from servectl.autoscaling.snapshot import Snapshot
from servectl.backends.sim.peers.common import (
    EPS,
    FLAGGER_METRIC_INTERVAL_S,
    FLAGGER_THRESHOLD,
    HPA,
    MAX_SURGE,
    MAX_UNAVAILABLE,
    NO_HARD_FAILURE,
    Peer,
    initial_stable,
    metrics_error,
    phase_for,
    ready_of,
    snapshot_of,
)
from servectl.controller.decide import Command
from servectl.planning.types import Counters, Observed, Plan, RevisionPlan
from servectl.rollout import analysis
from servectl.rollout.machine import Op


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
            and ready_of(observed, self.new.name) >= self.replicas
        )

    def available(self, observed: Observed, rs: _RS) -> int:
        return min(ready_of(observed, rs.name), rs.spec)

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
        return [snapshot_of(observed, rs.name) for rs in self.all()]

    def ready_pods(self, observed: Observed) -> int:
        return sum(ready_of(observed, rs.name) for rs in self.all())

    def plans(self, observed: Observed, weight: int, reason: str) -> list[RevisionPlan]:
        """Every ReplicaSet with pods; the Deployment's weight spread over them in
        proportion to their ready pods (one Service over all its pods)."""
        sets = [rs for rs in self.all() if rs.spec > 0 or rs is self.new]
        if not sets:
            return []
        ready = [ready_of(observed, rs.name) for rs in sets]
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


class FlaggerStyle(Peer):
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
        super().__init__(
            spec,
            name=name,
            hpa_config=hpa_config,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            service=service,
            period_s=period_s,
        )
        self.step_weight, self.max_weight = flagger_weights(spec)
        shared = spec.analysis or models.AnalysisSpec()
        self.interval_s = models.parse_duration(shared.interval)
        self.min_samples = shared.min_samples
        self.checks = self._checks(spec)
        self.threshold = threshold
        self.metric_interval_s = metric_interval_s
        self.progress_deadline_s = (
            float(spec.progress_deadline_seconds)
            if progress_deadline_s is None
            else progress_deadline_s
        )
        self.primary_suffix = primary_suffix
        self._primary_hpa = HPA(self.hpa_config)
        self._canary_hpa = HPA(self.hpa_config)
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
        return names.revision_name(self.service, version)

    def primary_name(self, version: int) -> str:
        return names.revision_name(self.service, version) + self.primary_suffix

    # ------------------------------------------------------------------ one tick

    def tick(self, observed: Observed, events: Sequence[Command]) -> Plan:
        now = observed.time
        self._events = []
        if self.primary is None:
            first = initial_stable(observed)
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
        if now + EPS >= self._next_run:
            while self._next_run <= now + EPS:
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
        if not history or history[-1][0] + EPS < now:
            return None
        start = history[0][1]
        for when, counters in history:
            if when <= now - self.metric_interval_s + EPS:
                start = counters
        return analysis.Window.between(start, history[-1][1])

    # ------------------------------------------------------------------ commands

    def _command(self, event: Command) -> None:
        op = event.op
        if op is Op.START and event.version is not None:
            self._start(event.version)
        elif op is Op.ABORT and self.native_phase == "Progressing":
            self.rollback_requested = True
            self._note("rollback gate opened")
        elif op is Op.PAUSE:
            self.suspended = True
            self._note("suspended")
        elif op is Op.RESUME:
            self.suspended = False
            self._note("resumed")
        elif op is Op.PROMOTE_FULL:
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
            if now - self._unready_since > self.progress_deadline_s + EPS:
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
            return metrics_error("metrics unavailable: the query failed")
        canary = self._window(self.canary.new.name, now)
        if canary is None:
            return metrics_error(f"no values found for {self.canary.new.name}")
        rev = observed.revision(self.canary.new.name)
        return analysis.judge(
            self.checks,
            canary,
            self._window(self.primary.new.name, now),
            min_samples=self.min_samples,
            bounds_us=observed.latency_bounds_us,
            canary_available=rev is not None and rev.available,
            hard_failure_error_rate=NO_HARD_FAILURE,
        )

    # ------------------------------------------------------------------ the plan

    def _plan(self, observed: Observed) -> Plan:
        assert self.primary is not None
        revisions = self.primary.plans(observed, 100 - self.canary_weight, "Primary")
        revisions += self.canary.plans(observed, self.canary_weight, "Canary")
        phase = (
            models.RolloutPhase.PAUSED
            if self.suspended and self.native_phase == "Progressing"
            else None
        )
        return Plan(
            revisions=tuple(revisions),
            phase=phase or phase_for(self.native_phase),
            message=f"flagger: {self.native_phase}; {self._message}".rstrip("; "),
            events=tuple(self._events),
        )
