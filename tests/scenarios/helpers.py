"""Building and reading servectl rollout scenarios in the multi-revision simulator.

:func:`run` simulates one scenario with servectl's loop (:class:`RecordingController`)
and keeps, next to the simulator's :class:`RolloutSimResult`, the controller's whole
loop state after every tick (``RecordingController.states``) and what it observed, so
a test can read the rollout state (verdicts, winner, step) and the planner's measured
costs at any tick. The
timeline helpers read the simulator's per-second arrays; the rule checks
(:meth:`Run.shift_violations`, :meth:`Run.carry_violations`) recompute, at every tick,
what the planner's sizing formula says the weights applied need.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servectl.api import models
from servectl.autoscaling import registry
from servectl.autoscaling.policy import Policy
from servectl.backends.sim import run as sim_run
from servectl.controller import decide as loop
from servectl.controller.decide import ServectlDecider
from servectl.controller.spec import ServiceSpec
from servectl.planning.types import Observed
from servectl.rollout import machine
from servectl.sim import model, results, suite, traces, world
from servectl.sim import scenario as scenario_mod

SERVICE = "m"
SVC = suite.service()  # 20 ms per request, 2 threads, 30 s cold start, SLO 150 ms


def name(version: int) -> str:
    return f"{SERVICE}-v{version}"


def spec(doc: Mapping[str, Any]) -> models.RolloutSpec:
    """A RolloutSpec from its YAML/JSON form (camelCase), validated like a user's."""
    return models.RolloutSpec.model_validate(doc)


def flat(rps: float, seconds: int, trace_name: str = "flat") -> traces.Trace:
    """Exactly ``rps`` every second (Poisson arrivals around it)."""
    return traces.Trace(trace_name, np.full(seconds, float(rps)))


def revision(
    version: int, *, cost: float = 1.0, error_rate: float = 0.0
) -> scenario_mod.RevisionModel:
    """Version ``version``: ``cost`` x the stable's CPU time per request, ``error_rate``."""
    svc = model.ServiceModel(service_time_ms=SVC.service_time_ms * cost)
    return scenario_mod.RevisionModel(version, svc, error_rate=error_rate)


def policy(*, latency: bool = True) -> Policy:
    """servectl's autoscaler with CPU 70 % plus latency p99 (or CPU alone): these
    scenarios test the planner's rules, at a utilization the CPU target pins, not the
    latency-led default's operating point (the bench measures that)."""
    return registry.build(
        "servectl", suite.autoscaling_config(SVC, latency=latency, cpu_target=suite.CPU_TARGET)
    )


@dataclass(frozen=True)
class TickRecord:
    time: float
    demand: int
    decided_by: str | None
    reason: str
    errors: tuple[str, ...]


class RecordingController(ServectlDecider):
    """servectl's loop, keeping its loop state (and what it observed) after each cycle."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.states: list[loop.LoopState] = []
        self.observed: list[Observed] = []
        self.ticks: list[TickRecord] = []

    def decide(
        self, observed: Observed, commands: Sequence[loop.Command], state: Any
    ) -> loop.Outcome:
        outcome = super().decide(observed, commands, state)
        self.states.append(outcome.state)
        self.observed.append(observed)
        self.ticks.append(
            TickRecord(
                observed.time, outcome.demand, outcome.decided_by, outcome.reason, outcome.errors
            )
        )
        return outcome


@dataclass(frozen=True)
class Run:
    """One simulated scenario: the simulator's result and the controller's records."""

    result: world.RolloutSimResult
    controller: RecordingController

    # ------------------------------------------------------------------ per revision

    def rev(self, version: int) -> world.RevisionTimeline:
        return self.result.revisions[name(version)]

    def has(self, version: int) -> bool:
        return name(version) in self.result.revisions

    def weight(self, version: int) -> np.ndarray:
        return self.rev(version).weight if self.has(version) else np.zeros(self.duration, int)

    def desired(self, version: int) -> np.ndarray:
        return self.rev(version).desired if self.has(version) else np.zeros(self.duration, int)

    def ready(self, version: int) -> np.ndarray:
        return self.rev(version).ready if self.has(version) else np.zeros(self.duration, int)

    def replicas(self, version: int) -> np.ndarray:
        return self.rev(version).replicas if self.has(version) else np.zeros(self.duration, int)

    @property
    def duration(self) -> int:
        return self.result.duration_s

    # ------------------------------------------------------------------ controller ticks

    @property
    def tick_times(self) -> list[int]:
        return [int(record.time) for record in self.controller.ticks]

    def state_at(self, t: float) -> loop.LoopState:
        """The loop state after the last tick at or before ``t``."""
        index = max(i for i, record in enumerate(self.controller.ticks) if record.time <= t)
        return self.controller.states[index]

    @property
    def rollout(self) -> machine.RolloutState:
        """The rollout state at the end of the run."""
        return self.controller.states[-1].rollout

    def phases(self) -> list[str]:
        """The phase sequence (each change once)."""
        return [phase for _, phase in self.result.phases]

    def phase_time(self, phase: str, after: float = 0.0) -> float:
        """When the plan's phase first became ``phase`` at or after ``after``."""
        return next(t for t, p in self.result.phases if p == phase and t >= after)

    def first(self, condition: np.ndarray, after: float = 0.0) -> int | None:
        """The first second >= ``after`` where ``condition`` holds (None: never)."""
        hits = np.flatnonzero(condition[int(after) :])
        return int(hits[0]) + int(after) if hits.size else None

    def events(self) -> list[tuple[float, str]]:
        """Every plan event with its time (weight changes, header moves, refused commands)."""
        return [(t, event) for t, plan in self.result.plans for event in plan.events]

    def messages(self) -> list[tuple[float, str]]:
        """The plan messages, each change once."""
        out: list[tuple[float, str]] = []
        for t, plan in self.result.plans:
            if not out or out[-1][1] != plan.message:
                out.append((t, plan.message))
        return out

    def dump(self, versions: Iterable[int], every: int = 10) -> str:
        """A table for failure messages: (weight, desired, ready) of each version."""
        lines = []
        for t in range(0, self.duration, every):
            cells = " ".join(
                f"v{v}=({self.weight(v)[t]:3d},{self.desired(v)[t]:2d},{self.ready(v)[t]:2d})"
                for v in versions
            )
            lines.append(f"{t:5d} {self.result.phase_at(t):12s} {cells}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ rules

    def shift_violations(self, *, hard_abort_ok: bool = False) -> list[str]:
        """Ticks where a revision's weight rose beyond what its ready replicas carry.

        Scale first, then shift: at a tick where revision X's weight rises to ``w``,
        X must have ``ceil(demand * w/100 * cost_X / mix)`` ready replicas (demand: the
        autoscaler's replicas for the whole traffic mix that tick; cost_X: X's CPU per
        request relative to stable, as the planner measured it; mix: the traffic-weighted
        mean cost before the change) and TF Serving must report it AVAILABLE. ``ready`` is
        the simulator's own count of replicas taking requests after the plan was applied.
        A hard abort (the canary failing hard) is the one allowed exception.
        """
        bad: list[str] = []
        ticks = self.controller.ticks
        previous_weights: dict[str, int] = {}
        for i, record in enumerate(ticks):
            t = int(record.time)
            state = self.controller.states[i]
            plan = self.result.plans[i][1]
            weights = {r.name: r.weight for r in plan.revisions if r.weight > 0}
            before = previous_weights or dict(weights)
            costs = state.planner.sizing_cost  # what the planner sizes at (rule 3)
            mix = sum(w / 100.0 * costs.get(n, 1.0) for n, w in before.items()) or 1.0
            hard = state.rollout.hard_abort and state.rollout.phase is machine.Phase.ABORTED
            for rev_name, w in weights.items():
                if w <= before.get(rev_name, 0) or (hard and hard_abort_ok):
                    continue
                if plan.header_revision is not None:
                    continue  # an A/B header share is not in the weights: see the A/B tests
                cost = costs.get(rev_name, 1.0)
                needed = max(1, math.ceil(record.demand * w / 100.0 * cost / mix - 1e-6))
                ready = int(self.result.revisions[rev_name].ready[t])
                if ready < needed:
                    bad.append(
                        f"t={t}: {rev_name} weight {before.get(rev_name, 0)} -> {w} with "
                        f"{ready} ready replicas; needs {needed} (demand {record.demand}, "
                        f"cost {cost:.2f}, mix {mix:.2f})"
                    )
            previous_weights = weights
        return bad

    def carry_violations(self, version: int, start: float, end: float) -> list[str]:
        """Ticks in [start, end) where ``version``'s ready replicas did not carry its
        weight: ``ceil(demand * w/100 * cost / mix)`` with the weights applied at that
        tick (not only when the weight rose)."""
        bad: list[str] = []
        rev_name = name(version)
        for i, record in enumerate(self.controller.ticks):
            t = int(record.time)
            if not start <= t < end:
                continue
            plan = self.result.plans[i][1]
            weights = {r.name: r.weight for r in plan.revisions if r.weight > 0}
            costs = self.controller.states[i].planner.sizing_cost
            mix = sum(w / 100.0 * costs.get(n, 1.0) for n, w in weights.items()) or 1.0
            w = weights.get(rev_name, 0)
            if w == 0:
                continue
            cost = costs.get(rev_name, 1.0)
            needed = max(1, math.ceil(record.demand * w / 100.0 * cost / mix - 1e-6))
            ready = int(self.result.revisions[rev_name].ready[t])
            if ready < needed:
                bad.append(f"t={t}: {rev_name} at {w} % with {ready} ready; needs {needed}")
        return bad


def scenario(
    trace: traces.Trace,
    revisions: Mapping[int, scenario_mod.RevisionModel],
    events: Sequence[scenario_mod.Event] = (),
    **kwargs: Any,
) -> scenario_mod.RolloutScenario:
    return scenario_mod.RolloutScenario(
        name=kwargs.pop("scenario_name", "scenario"),
        trace=trace,
        revisions=dict(revisions),
        stable_version=kwargs.pop("stable_version", 1),
        events=tuple(events),
        service_name=SERVICE,
        min_replicas=kwargs.pop("min_replicas", suite.MIN_REPLICAS),
        max_replicas=kwargs.pop("max_replicas", suite.MAX_REPLICAS),
        **kwargs,
    )


def run(
    rollout: models.RolloutSpec,
    trace: traces.Trace,
    revisions: Mapping[int, scenario_mod.RevisionModel],
    events: Sequence[scenario_mod.Event] = (),
    *,
    latency: bool = True,
    seed: int = 0,
    initial_replicas: int | None = None,
    **scenario_kwargs: Any,
) -> Run:
    """Simulate ``trace`` with servectl's loop running ``rollout`` on the given versions.

    The service starts on v1 (``stable_version`` otherwise) with ``initial_replicas``
    (default: enough for the first minute at 70 %, like every simulator run).
    """
    min_replicas = scenario_kwargs.get("min_replicas", suite.MIN_REPLICAS)
    max_replicas = scenario_kwargs.get("max_replicas", suite.MAX_REPLICAS)
    if initial_replicas is None:
        initial_replicas = results.initial_replicas_for(trace, SVC, min_replicas, max_replicas)
    sc = scenario(trace, revisions, events, initial_replicas=initial_replicas, **scenario_kwargs)
    svc_spec = ServiceSpec(
        name=SERVICE,
        rollout=rollout,
        min_replicas=sc.min_replicas,
        max_replicas=sc.max_replicas,
    )
    controller = RecordingController(svc_spec, policy(latency=latency))
    result = sim_run.simulate_rollout(sc, controller, seed=seed)
    return Run(result=result, controller=controller)
