"""Argo Rollouts, emulated: canary with trafficRouting and one HPA on the Rollout.

docs/peers.md lists every modelling choice with the source of the behaviour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servectl.api import models, names
from servectl.autoscaling import hpa
from servectl.backends.sim.peers.common import (
    ABORT_SCALE_DOWN_DELAY_S,
    CONSECUTIVE_ERROR_LIMIT,
    EPS,
    HPA,
    NO_HARD_FAILURE,
    SCALE_DOWN_DELAY_S,
    Peer,
    Retiring,
    analysis_config,
    ceil_pct,
    initial_stable,
    metrics_error,
    phase_for,
    ready_of,
    weight_of,
)
from servectl.controller.decide import Command
from servectl.planning.types import Counters, Observed, Plan, RevisionPlan
from servectl.rollout import analysis
from servectl.rollout.machine import Op


class ArgoStyle(Peer):
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
        super().__init__(
            spec,
            name=name or ("argo-style-dynamic" if dynamic_stable_scale else "argo-style"),
            hpa_config=hpa_config,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            service=service,
            period_s=period_s,
        )
        self.dynamic_stable_scale = dynamic_stable_scale
        self.weight_before_ready = weight_before_ready
        self.scale_down_delay_s = scale_down_delay_s
        self.abort_scale_down_delay_s = abort_scale_down_delay_s
        self._hpa = HPA(self.hpa_config)
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
        self.retiring: list[Retiring] = []
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
        self._outcome = models.RolloutPhase.IDLE  # the phase once no rollout runs: Idle, Completed

    def revision_name(self, version: int) -> str:
        return names.revision_name(self.service, version)

    # ------------------------------------------------------------------ one tick

    def tick(self, observed: Observed, events: Sequence[Command]) -> Plan:
        now = observed.time
        self._events = []
        if self.stable is None or self.total is None:
            first = initial_stable(observed)
            self.stable = (first.name, first.version)
            self.total = max(first.desired, self.hpa_config.min_replicas)
        for event in events:
            self._command(event, now)
        self.total = self._hpa.sync(
            now, [observed.service], self.total, observed.service.replicas.ready
        )
        self.retiring = [r for r in self.retiring if r.until > now + EPS]
        if self.canary is not None and not self.aborted:
            self._progress(observed, now)
        return self._plan(observed, now)

    # ------------------------------------------------------------------ commands

    def _command(self, event: Command, now: float) -> None:
        op = event.op
        if op is Op.START and event.version is not None:
            self._start(event.version, now)
        elif op is Op.ABORT and self.canary is not None and not self.aborted:
            self._abort(now, "aborted by the user")
        elif op is Op.RETRY and self.canary is not None and self.aborted:
            self.aborted = False
            self._enter_step(0, now)
            self._note("retry: steps restart from 0")
        elif op is Op.PAUSE and self.canary is not None:
            self.user_paused = True
            self._note("paused (spec.paused)")
        elif op is Op.RESUME and self.canary is not None:
            self.user_paused = False
            if self.step_paused:
                self._enter_step(self.step_index + 1, now)
            self._note("resumed")
        elif op is Op.PROMOTE and self.canary is not None and not self.aborted:
            self.user_paused = False
            self._enter_step(self.step_index + 1, now)
            self._note("promote: step skipped")
        elif op is Op.PROMOTE_FULL and self.canary is not None and not self.aborted:
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
                self._outcome = models.RolloutPhase.IDLE
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
            self.retiring.append(Retiring(revision[0], revision[1], replicas, until))

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
            canary = ceil_pct(weight, total)
        else:
            canary = ceil_pct(weight, total)
        if not self.dynamic_stable_scale:
            return canary, total
        actual = weight_of(observed, self.stable[0])
        return canary, max(ceil_pct(100 - weight, total), ceil_pct(actual, total))

    def _at_desired(self, observed: Observed, canary: int, stable: int) -> bool:
        """``AtDesiredReplicaCountsForCanary``: both ReplicaSets available at the wanted
        counts, no older ReplicaSet with available pods."""
        assert self.canary is not None and self.stable is not None
        return (
            ready_of(observed, self.canary[0]) == canary
            and ready_of(observed, self.stable[0]) == stable
            and all(ready_of(observed, r.name) == 0 for r in self.retiring)
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
                if now + EPS < self._step_started + step.pause.seconds:
                    return
            elif step.analysis is not None and not self._analyse(step.analysis, observed, now):
                return
            self._enter_step(self.step_index + 1, now)
            self._note(f"step {self.step_index - 1} done")

    def _analyse(self, step: models.StepAnalysis, observed: Observed, now: float) -> bool:
        """Run the step's analysis; True when it passed (the step is done)."""
        assert self.canary is not None and self.stable is not None
        interval, min_samples, checks = analysis_config(self.spec, step)
        names = (self.canary[0], self.stable[0])
        if self._baseline is None:
            found = {n: r.counters for n in names if (r := observed.revision(n)) is not None}
            self._baseline = {n: c for n, c in found.items() if c is not None}
            self._measure_at = now + interval
            return False
        if now + EPS < self._measure_at:
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
            return metrics_error("metrics unavailable: the measurement failed")
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
            return metrics_error(f"no counters for {self.canary[0]}")
        rev = observed.revision(self.canary[0])
        return analysis.judge(
            checks,
            canary,
            windows[self.stable[0]],
            min_samples=min_samples,
            bounds_us=observed.latency_bounds_us,
            canary_available=rev is not None and rev.available,
            hard_failure_error_rate=NO_HARD_FAILURE,
        )

    def _promote(self, now: float) -> None:
        assert self.canary is not None and self.stable is not None and self.total is not None
        old = self.stable
        self._retire(old, self._stable_now, now + self.scale_down_delay_s)
        self.stable = self.canary
        self.canary = None
        self.promote_full = False
        self.native_phase = "Healthy"
        self._outcome = models.RolloutPhase.COMPLETED
        self._note(f"promoted: {self.stable[0]} is the stable; {old[0]} scaled down later")

    # ------------------------------------------------------------------ the plan

    def _canary_weight(self, observed: Observed, canary: int, stable: int) -> int:
        assert self.canary is not None and self.total is not None
        ready = ready_of(observed, self.canary[0])
        if self.promote_full:
            if self.weight_before_ready:
                return 100
            if self.dynamic_stable_scale:
                return min(100, (100 * ready) // max(self.total, 1))
            return weight_of(observed, self.canary[0])
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
                applied = weight_of(observed, self.canary[0])
                stable_ready = ready_of(observed, self.stable[0])
                canary_weight = max(0, min(applied, 100 - (100 * stable_ready) // max(total, 1)))
                canary_replicas = ceil_pct(applied, total)
            else:
                late = now + EPS >= self._abort_time + self.abort_scale_down_delay_s
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
        phase = self._outcome if self.canary is None else phase_for(self.native_phase)
        return Plan(
            revisions=tuple(revisions),
            phase=phase,
            message=f"argo: {self.native_phase}; {self._message}".rstrip("; "),
            events=tuple(self._events),
        )
