"""The emulated peers (servectl.sim.peers): Argo Rollouts and Flagger, tick by tick.

Unit tests drive a controller with hand-built Observed values from a tiny world (``World``):
revisions with pods that turn ready ``cold_s`` after they are created, counters that grow
with each revision's weight, and per-pod CPU chosen by the test (0.7 cores of a 1-core
request is the HPA's 70 % target: it holds). The integration tests at the end run each
peer through the real simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from servectl.api import models
from servectl.autoscaling import hpa
from servectl.autoscaling.snapshot import PodSample, Replicas, Signals, Snapshot
from servectl.backends.sim import run as sim_run
from servectl.backends.sim.peers import ArgoStyle, FlaggerStyle, flagger_weights, peer_hpa_config
from servectl.backends.sim.peers.flagger import _RS, _Deployment, _split
from servectl.backends.sim.tick import TickDecider
from servectl.controller.decide import Command
from servectl.planning.types import Counters, Observed, ObservedRevision, Plan
from servectl.rollout import analysis
from servectl.rollout.machine import Op
from servectl.sim import model, traces, world
from servectl.sim import scenario as scenario_mod

START, ABORT, PAUSE, RESUME = (
    Op.START,
    Op.ABORT,
    Op.PAUSE,
    Op.RESUME,
)
PROMOTE, PROMOTE_FULL, RETRY = Op.PROMOTE, Op.PROMOTE_FULL, Op.RETRY

ERROR_RATE = models.AnalysisCheck(metric="errorRate", max=0.05)


def rollout(*steps: dict[str, Any], checks: Sequence[models.AnalysisCheck] = (ERROR_RATE,),
            interval: str = "30s", min_samples: int = 100) -> models.RolloutSpec:  # fmt: skip
    return models.RolloutSpec.model_validate(
        {
            "steps": list(steps),
            "analysis": {
                "interval": interval,
                "minSamples": min_samples,
                "checks": [c.model_dump(by_alias=True, exclude_none=True) for c in checks],
            },
        }
    )


# ----------------------------------------------------------------------------- the world


@dataclass
class Rev:
    name: str
    version: int
    created: list[float] = field(default_factory=list)  # one per pod, oldest first
    weight: int = 0
    requests: float = 0.0
    errors: float = 0.0

    def ready(self, now: float, cold_s: float) -> int:
        return sum(1 for c in self.created if c + cold_s <= now + 1e-9)


class World:
    """Revisions whose pods start ``cold_s`` after creation, routed by weight."""

    def __init__(self, replicas: int = 4, *, rps: float = 200.0, cold_s: float = 0.0) -> None:
        self.now = 0.0
        self.rps = rps
        self.cold_s = cold_s
        self.cpu: dict[str, float] = {}  # cores per ready pod (default 0.7: on target)
        self.error_rate: dict[int, float] = {}
        self.metrics_ok = True
        self.revs: dict[str, Rev] = {"model-v1": Rev("model-v1", 1, [-10_000.0] * replicas, 100)}
        self.plans: list[Plan] = []
        self.ticked: float | None = None  # the time of the last tick

    # what the controller sees
    def pods(self, rev: Rev) -> tuple[PodSample, ...]:
        cpu = self.cpu.get(rev.name, 0.7)
        out = []
        for i, created in enumerate(rev.created):
            ready = created + self.cold_s <= self.now + 1e-9
            out.append(
                PodSample(f"{rev.name}-{i}-{created:g}", ready, created, cpu if ready else None)
            )
        return tuple(out)

    def observed(self) -> Observed:
        revisions = []
        all_pods: list[PodSample] = []
        for rev in self.revs.values():
            pods = self.pods(rev)
            all_pods += pods
            ready = rev.ready(self.now, self.cold_s)
            snap = Snapshot(self.now, Replicas(len(rev.created), ready, 0, 100), pods=pods)
            revisions.append(
                ObservedRevision(
                    name=rev.name,
                    version=rev.version,
                    desired=len(rev.created),
                    ready=ready,
                    starting=len(rev.created) - ready,
                    weight=rev.weight,
                    available=ready > 0,
                    snapshot=snap,
                    counters=Counters(self.now, rev.requests, rev.errors, 0.0),
                )
            )
        ready_all = sum(r.ready for r in revisions)
        service = Snapshot(
            self.now,
            Replicas(sum(r.desired for r in revisions), ready_all, 1, 100),
            Signals(),
            tuple(all_pods),
        )
        return Observed(self.now, service, tuple(revisions), metrics_ok=self.metrics_ok)

    def apply(self, plan: Plan) -> None:
        assert sum(r.weight for r in plan.revisions) == 100, plan
        listed = {r.name for r in plan.revisions}
        assert len(listed) == len(plan.revisions)
        for name in [n for n in self.revs if n not in listed]:
            del self.revs[name]
        for rp in plan.revisions:
            rev = self.revs.setdefault(rp.name, Rev(rp.name, rp.version))
            if rp.replicas > len(rev.created):
                rev.created += [self.now] * (rp.replicas - len(rev.created))
            else:
                del rev.created[rp.replicas :]  # newest go first
            rev.weight = rp.weight
        self.plans.append(plan)

    def advance(self, dt: float) -> None:
        for rev in self.revs.values():
            served = self.rps * dt * rev.weight / 100.0
            rev.requests += served
            rev.errors += served * self.error_rate.get(rev.version, 0.0)
        self.now += dt

    def run(
        self,
        controller: ArgoStyle | FlaggerStyle,
        until: float,
        events: Mapping[float, Sequence[scenario_mod.Event]] | None = None,
    ) -> Plan:
        """Tick every ``period_s`` from now to ``until`` (inclusive); the last plan."""
        events = events or {}
        plan: Plan | None = None
        if self.ticked is not None and self.ticked >= self.now - 1e-9:
            self.advance(controller.period_s)  # this instant has had its tick
        while self.now <= until + 1e-9:
            due = [e for t, es in events.items() if abs(t - self.now) < 1e-9 for e in es]
            plan = controller.tick(self.observed(), due)
            self.apply(plan)
            self.ticked = self.now
            if self.now + controller.period_s > until + 1e-9:
                break
            self.advance(controller.period_s)
        assert plan is not None
        return plan

    def step(self, controller: ArgoStyle | FlaggerStyle, *events: scenario_mod.Event) -> Plan:
        """Advance one period and tick once."""
        self.advance(controller.period_s)
        plan = controller.tick(self.observed(), events)
        self.apply(plan)
        self.ticked = self.now
        return plan


def ev(op: Op, version: int | None = None) -> scenario_mod.Event:
    return scenario_mod.Event(0.0, op, version)


def weights(plan: Plan) -> dict[str, int]:
    return {r.name: r.weight for r in plan.revisions}


def replicas(plan: Plan) -> dict[str, int]:
    return {r.name: r.replicas for r in plan.revisions}


# ----------------------------------------------------------------------------- shared


def test_peer_hpa_is_the_benchmark_baseline() -> None:
    cfg = peer_hpa_config(2, 30)
    assert cfg.metrics == (hpa.ResourceMetric(70),)
    assert (cfg.min_replicas, cfg.max_replicas) == (2, 30)
    assert cfg.sync_period_s == 15.0 and cfg.tolerance == 0.1


def test_split_by_ready_pods() -> None:
    assert _split(40, [3, 1]) == [30, 10]
    assert _split(100, [1, 1, 1]) == [34, 33, 33]
    assert _split(13, [0, 0]) == [13, 0]
    assert sum(_split(37, [5, 2, 9])) == 37


def test_flagger_weights_from_set_weight_steps() -> None:
    spec = rollout({"setWeight": 10}, {"pause": {"seconds": 30}}, {"setWeight": 40},
                   {"setWeight": 100})  # fmt: skip
    assert flagger_weights(spec) == (10, 40)
    assert flagger_weights(rollout({"setWeight": 100})) == (100, 100)
    with pytest.raises(ValueError, match="needs a setWeight step"):
        flagger_weights(rollout({"pause": {}}))


# ----------------------------------------------------------------------------- Argo

ARGO_STEPS = (
    {"setWeight": 20},
    {"pause": {"seconds": 60}},
    {"setWeight": 50},
    {"pause": {"seconds": 60}},
)


def argo(*steps: dict[str, Any], **options: Any) -> ArgoStyle:
    return ArgoStyle(rollout(*(steps or ARGO_STEPS)), min_replicas=1, max_replicas=50, **options)


def test_argo_scales_the_canary_first_and_shifts_once_it_is_available() -> None:
    world, controller = World(replicas=4, cold_s=30), argo()
    world.run(controller, 0)
    plan = world.step(controller, ev(START, 2))  # t = 15
    assert replicas(plan) == {"model-v1": 4, "model-v2": 1}  # ceil(20 % x 4)
    assert weights(plan) == {"model-v1": 100, "model-v2": 0}  # no available canary pod yet
    assert plan.phase == "Progressing"
    assert weights(world.step(controller)) == {"model-v1": 100, "model-v2": 0}  # t = 30
    plan = world.step(controller)  # t = 45: the canary pod is ready (created at 15)
    assert weights(plan) == {"model-v1": 80, "model-v2": 20}
    assert controller.step_index == 1  # the setWeight step completed with the shift
    assert "step 0 done" in plan.events


def test_argo_weight_before_ready_moves_weight_and_canary_at_the_same_tick() -> None:
    world, controller = World(replicas=4, cold_s=30), argo(weight_before_ready=True)
    world.run(controller, 0)
    plan = world.step(controller, ev(START, 2))
    assert replicas(plan) == {"model-v1": 4, "model-v2": 1}
    assert weights(plan) == {"model-v1": 80, "model-v2": 20}  # to a canary with no ready pod


def test_argo_keeps_the_stable_at_t_by_default() -> None:
    world, controller = World(replicas=10), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    plan = world.run(controller, 150)
    assert controller.step_index == 3  # at the second pause, weight 50
    assert weights(plan) == {"model-v1": 50, "model-v2": 50}
    assert replicas(plan) == {"model-v1": 10, "model-v2": 5}  # stable stays at T = 10


def test_argo_dynamic_stable_scale_follows_the_applied_weight() -> None:
    world, controller = World(replicas=10), argo(dynamic_stable_scale=True)
    world.run(controller, 0)
    plan = world.step(controller, ev(START, 2))  # canary scaled, nothing applied yet
    assert replicas(plan) == {"model-v1": 10, "model-v2": 2}
    plan = world.step(controller)  # canary available: 20 % applied, stable still at 100 %
    assert weights(plan)["model-v2"] == 20
    assert replicas(plan)["model-v1"] == 10  # max(ceil(80 % x 10), ceil(100 % x 10))
    plan = world.step(controller)  # the stable's applied weight is 80 % now
    assert replicas(plan) == {"model-v1": 8, "model-v2": 2}


def test_argo_step_timing_pause_then_next_weight() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))  # t = 15: scaled
    world.step(controller)  # t = 30: 20 % applied, pause starts
    assert controller.step_index == 1
    world.run(controller, 75)
    assert controller.step_index == 1  # 45 s into the 60 s pause
    plan = world.run(controller, 90)
    assert controller.step_index == 2  # pause done, setWeight 50: scale first
    assert replicas(plan)["model-v2"] == 2 and weights(plan)["model-v2"] == 20
    plan = world.step(controller)
    assert weights(plan)["model-v2"] == 50 and controller.step_index == 3


def test_argo_promotion_scales_canary_to_t_then_switches_and_keeps_the_old_stable() -> None:
    world, controller = World(replicas=4, cold_s=30), argo({"setWeight": 50})
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.run(controller, 45)  # canary (2 pods) available, 50 % applied, last step done
    plan = world.step(controller)  # t = 60: past the steps: canary to T
    assert replicas(plan) == {"model-v1": 4, "model-v2": 4}
    assert weights(plan) == {"model-v1": 50, "model-v2": 50}  # held until available
    plan = world.run(controller, 90)
    assert weights(plan) == {"model-v2": 100, "model-v1": 0}
    assert replicas(plan) == {"model-v2": 4, "model-v1": 4}  # scaleDownDelaySeconds
    assert plan.phase == "Completed" and controller.stable == ("model-v2", 2)
    plan = world.run(controller, 120)
    assert replicas(plan) == {"model-v2": 4}


def test_argo_abort_moves_weight_at_once_and_scales_the_canary_down_30s_later() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller)
    plan = world.step(controller, ev(ABORT))  # t = 45
    assert weights(plan) == {"model-v1": 100, "model-v2": 0}
    assert replicas(plan) == {"model-v1": 4, "model-v2": 1}
    assert plan.phase == "Aborted" and controller.native_phase == "Degraded"
    assert replicas(world.step(controller)) == {"model-v1": 4, "model-v2": 1}  # t = 60
    assert replicas(world.step(controller)) == {"model-v1": 4}  # t = 75 >= 45 + 30


def test_argo_dynamic_abort_returns_traffic_as_the_stable_becomes_available() -> None:
    world, controller = World(replicas=10, cold_s=30), argo(dynamic_stable_scale=True)
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.run(controller, 150)  # 50 % applied at 135, the stable follows at 150
    assert weights(world.plans[-1])["model-v2"] == 50
    assert replicas(world.plans[-1])["model-v1"] == 5  # dynamically scaled down
    plan = world.step(controller, ev(ABORT))
    # stable back to T at once, but only 5 of 10 available: canary keeps 50 %
    assert replicas(plan) == {"model-v1": 10, "model-v2": 5}
    assert weights(plan)["model-v2"] == 50
    world.step(controller)
    plan = world.step(controller)  # 30 s later the stable is available
    assert weights(plan) == {"model-v1": 100, "model-v2": 0}
    plan = world.step(controller)  # the canary follows its applied weight down
    assert replicas(plan) == {"model-v1": 10}


def test_argo_start_mid_rollout_restarts_from_step_0_and_retires_the_old_canary() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.run(controller, 60)
    plan = world.step(controller, ev(START, 3))  # t = 75
    assert controller.canary == ("model-v3", 3) and controller.step_index == 0
    assert weights(plan) == {"model-v1": 100, "model-v3": 0, "model-v2": 0}
    assert replicas(plan) == {"model-v1": 4, "model-v3": 1, "model-v2": 1}
    world.run(controller, 90)
    # v3 is available, but an older ReplicaSet (v2) still has available pods: no shift
    assert weights(world.plans[-1])["model-v3"] == 0
    plan = world.run(controller, 105)  # v2 gone (75 + 30)
    assert weights(plan) == {"model-v1": 80, "model-v3": 20}


def test_argo_hpa_sees_every_pod_and_sizes_t() -> None:
    world, controller = World(replicas=10), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller)  # 10 stable + 2 canary pods, weight 20 %
    world.cpu = {"model-v1": 1.05, "model-v2": 1.05}  # 105 %: 1.5 x the 70 % target
    plan = world.step(controller)
    # ceil(1.5 x 12 pods) = 18 = T (not ceil(1.5 x 10)); the canary follows: ceil(20 % x 18)
    assert controller.total == 18
    assert replicas(plan) == {"model-v1": 18, "model-v2": 4}


def test_argo_indefinite_pause_waits_for_resume() -> None:
    world, controller = World(replicas=4), argo({"setWeight": 20}, {"pause": {}}, {"setWeight": 60})
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    plan = world.run(controller, 300)
    assert controller.step_index == 1 and plan.phase == "Paused"
    world.step(controller, ev(RESUME))
    assert controller.step_index == 2
    plan = world.step(controller)
    assert weights(plan)["model-v2"] == 60


def test_argo_user_pause_holds_the_steps() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller, ev(PAUSE))
    plan = world.run(controller, 300)
    assert controller.step_index == 0 and plan.phase == "Paused"
    world.step(controller, ev(RESUME))
    assert controller.step_index == 1


def test_argo_promote_skips_a_step_and_promote_full_skips_them_all() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller)  # 20 % applied, in the pause
    world.step(controller, ev(PROMOTE))
    assert controller.step_index == 2
    plan = world.step(controller, ev(PROMOTE_FULL))
    assert replicas(plan)["model-v2"] == 4  # scaled to T; weight held until available
    plan = world.step(controller)
    assert weights(plan) == {"model-v2": 100, "model-v1": 0}
    assert controller.canary is None and controller.stable == ("model-v2", 2)


def test_argo_retry_after_abort_restarts_the_steps() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller, ev(ABORT))
    plan = world.step(controller, ev(RETRY))  # the canary is still up: 20 % at once
    assert not controller.aborted and controller.step_index == 1
    assert plan.phase == "Progressing" and weights(plan)["model-v2"] == 20


def test_argo_start_of_the_stable_version_goes_back_to_it() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    plan = world.step(controller, ev(START, 1))
    assert controller.canary is None
    assert weights(plan) == {"model-v1": 100, "model-v2": 0}
    assert plan.phase == "Idle"


@pytest.mark.parametrize(
    ("error_rate", "verdict", "phase"),
    [(0.0, "Successful", "Progressing"), (0.2, "Failed", "Aborted")],
)
def test_argo_analysis_step(error_rate: float, verdict: str, phase: str) -> None:
    world = World(replicas=4)
    world.error_rate[2] = error_rate
    controller = argo({"setWeight": 20}, {"analysis": {}}, {"setWeight": 50})
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller)  # t = 30: 20 % applied, the analysis starts
    assert controller.step_index == 1
    world.step(controller)  # t = 45: 15 s of 30
    assert controller.verdicts == []
    plan = world.step(controller)  # t = 60: judged over [30, 60]: 20 % of 200 rps x 30 s
    ((_, step, result),) = controller.verdicts
    assert step == 1 and str(result.verdict) == verdict and result.samples == 1200
    assert plan.phase == phase


def test_argo_inconclusive_analysis_pauses_until_resumed() -> None:
    world = World(replicas=4, rps=2.0)  # 20 % of 2 rps x 30 s = 12 requests < 100
    controller = argo({"setWeight": 20}, {"analysis": {}}, {"setWeight": 50})
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    plan = world.run(controller, 120)
    assert str(controller.verdicts[0][2].verdict) == "Inconclusive"
    assert plan.phase == "Paused" and controller.step_index == 1
    world.step(controller, ev(RESUME))
    assert controller.step_index == 2


def test_argo_analysis_errors_abort_after_the_consecutive_error_limit() -> None:
    world = World(replicas=4)
    world.metrics_ok = False
    controller = argo({"setWeight": 20}, {"analysis": {}})
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    plan = world.run(controller, 400)
    assert [str(r.verdict) for _, _, r in controller.verdicts] == ["Error"] * 5
    assert plan.phase == "Aborted"


def test_argo_set_canary_scale() -> None:
    world = World(replicas=10)
    controller = argo({"setCanaryScale": {"replicas": 3}}, {"setWeight": 10}, {"pause": {}})
    world.run(controller, 0)
    plan = world.step(controller, ev(START, 2))
    assert replicas(plan)["model-v2"] == 3 and weights(plan)["model-v2"] == 0
    plan = world.run(controller, 60)
    assert replicas(plan)["model-v2"] == 3 and weights(plan)["model-v2"] == 10


def test_argo_ignores_commands_without_a_rollout() -> None:
    world, controller = World(replicas=4), argo()
    plan = world.run(controller, 30, {15.0: [ev(ABORT), ev(PAUSE), ev(PROMOTE_FULL)]})
    assert weights(plan) == {"model-v1": 100} and plan.phase == "Idle"
    assert controller.name == "argo-style" and controller.period_s == 15.0


# ----------------------------------------------------------------------------- Flagger


def flagger(*steps: dict[str, Any], **options: Any) -> FlaggerStyle:
    spec = rollout(*(steps or ({"setWeight": 10}, {"setWeight": 30})), interval="30s")
    return FlaggerStyle(spec, min_replicas=1, max_replicas=50, **options)


def start_flagger(world: World, controller: FlaggerStyle) -> None:
    """START at t = 0; the canary is scaled from zero at the t = 0 run."""
    world.run(controller, 0, {0.0: [ev(START, 2)]})
    assert replicas(world.plans[-1]) == {"model-v1": 4, "model-v2": 1}
    assert controller.native_phase == "Progressing" and controller.canary_weight == 0


def test_flagger_scales_from_zero_and_advances_without_analysis_first() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    world.step(controller)  # t = 15: no run (interval 30 s)
    assert controller.canary_weight == 0
    plan = world.step(controller)  # t = 30: canary ready: weight += stepWeight, no analysis
    assert weights(plan) == {"model-v1": 90, "model-v2": 10}
    assert controller.verdicts == []


def test_flagger_advances_only_on_passing_intervals() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    world.run(controller, 30)  # weight 10
    world.error_rate[2] = 0.2
    world.run(controller, 60)
    assert controller.canary_weight == 10 and controller.failed_checks == 1
    world.error_rate[2] = 0.0
    world.run(controller, 120)  # the 1-min window still holds the errors at t = 90
    assert controller.failed_checks == 2
    assert controller.canary_weight == 20  # passed at t = 120
    assert [str(r.verdict) for _, r in controller.verdicts] == ["Failed", "Failed", "Successful"]


def test_flagger_rolls_back_after_the_threshold() -> None:
    world, controller = World(replicas=4), flagger()
    world.error_rate[2] = 0.2
    start_flagger(world, controller)
    world.run(controller, 180)  # failed checks at 60, 90, 120, 150, 180
    assert controller.failed_checks == 5 and controller.native_phase == "Progressing"
    assert weights(world.plans[-1])["model-v2"] == 10
    plan = world.run(controller, 210)  # the next run rolls back
    assert weights(plan) == {"model-v1": 100} and replicas(plan) == {"model-v1": 4}
    assert plan.phase == "Aborted" and controller.native_phase == "Failed"


def test_flagger_hpas_are_independent() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    world.run(controller, 30)
    world.cpu = {"model-v2": 1.4}  # only the canary is hot
    plan = world.step(controller)
    assert replicas(plan) == {"model-v1": 4, "model-v2": 2}
    world.cpu = {"model-v1": 1.4}  # only the primary is hot
    plan = world.step(controller)
    assert replicas(plan) == {"model-v1": 8, "model-v2": 2}


def test_flagger_waits_for_a_ready_canary_without_counting_failures() -> None:
    world, controller = World(replicas=4, cold_s=100), flagger()
    start_flagger(world, controller)
    world.run(controller, 90)
    assert controller.canary_weight == 0 and controller.failed_checks == 0
    assert "canary not ready: waiting" in world.plans[-1].events
    world.run(controller, 120)
    assert controller.canary_weight == 10


def test_flagger_rolls_back_past_the_progress_deadline() -> None:
    world, controller = World(replicas=4, cold_s=10_000), flagger(progress_deadline_s=60)
    start_flagger(world, controller)
    plan = world.run(controller, 90)
    assert controller.native_phase == "Progressing"
    plan = world.run(controller, 120)  # unready since 30: 90 s > 60 s
    assert controller.native_phase == "Failed" and weights(plan) == {"model-v1": 100}


def test_flagger_promotion_rolls_the_primary_then_routes_and_scales_down() -> None:
    world, controller = World(replicas=4, cold_s=30), flagger()
    start_flagger(world, controller)
    world.run(controller, 90)  # ready at 30: weight 10 at 30... 30 at 90 (10, 20, 30)
    assert controller.canary_weight == 30
    world.run(controller, 120)  # passes at max weight: promote
    assert controller.native_phase == "Promoting"
    plan = world.step(controller)  # t = 135: the primary Deployment rolls (surge 1)
    assert replicas(plan) == {
        "model-v1": 4,
        "model-v2-primary": 1,
        "model-v2": replicas(plan)["model-v2"],
    }
    assert weights(plan)["model-v2"] == 30 and weights(plan)["model-v2-primary"] == 0
    plan = world.run(controller, 180)
    assert controller.primary is not None and controller.primary.rolling
    assert sum(w for n, w in weights(plan).items() if n != "model-v2") == 70
    plan = world.run(controller, 600)
    assert controller.native_phase == "Succeeded" and plan.phase == "Completed"
    assert replicas(plan) == {"model-v2-primary": 4}
    assert weights(plan) == {"model-v2-primary": 100}
    routed = [p for p in world.plans if "Routing all traffic to primary" in p.events]
    assert len(routed) == 1 and weights(routed[0])["model-v2"] == 0


def test_flagger_new_revision_mid_analysis_restarts() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    world.run(controller, 60)
    assert controller.canary_weight == 20
    plan = world.step(controller, ev(START, 3))  # t = 75: the canary Deployment rolls
    assert "model-v3" in replicas(plan)
    plan = world.run(controller, 90)
    assert controller.canary_weight == 0 and controller.failed_checks == 0
    assert "New revision detected! Restarting analysis" in plan.events


def test_flagger_pause_suspends_the_runs() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    world.run(controller, 30)
    plan = world.run(controller, 120, {45.0: [ev(PAUSE)]})
    assert controller.canary_weight == 10 and plan.phase == "Paused"
    world.run(controller, 150, {135.0: [ev(RESUME)]})
    assert controller.canary_weight == 20


def test_flagger_abort_is_the_rollback_gate() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    plan = world.run(controller, 60, {45.0: [ev(ABORT)]})
    assert controller.native_phase == "Failed" and weights(plan) == {"model-v1": 100}


def test_flagger_promote_full_skips_the_analysis() -> None:
    world, controller = World(replicas=4), flagger()
    start_flagger(world, controller)
    plan = world.run(controller, 30, {15.0: [ev(PROMOTE_FULL)]})
    assert controller.native_phase == "Succeeded"
    assert weights(plan) == {"model-v1": 100}  # the new primary pods are starting
    assert "model-v2" not in replicas(plan)
    plan = world.run(controller, 300)
    assert replicas(plan) == {"model-v2-primary": 4}


def test_flagger_ignores_promote_and_retry() -> None:
    world, controller = World(replicas=4), flagger()
    plan = world.run(controller, 0, {0.0: [ev(PROMOTE), ev(RETRY)]})
    assert "promote ignored (Flagger has no such operation)" in plan.events
    assert controller.name == "flagger-style"


# ----------------------------------------------------------------------------- Deployment


def test_deployment_rolling_update_respects_surge_and_unavailable() -> None:
    """D = 4: maxSurge 1, maxUnavailable 1 (25 % each): at most 5 pods, at least 3 ready."""
    world = World(replicas=4, cold_s=30)
    dep = _Deployment(4, new=_RS("model-v1", 1, 4))
    dep.set_template("model-v2", 2)
    dep.reconcile(world.observed())  # scale up the new RS within the surge
    assert (dep.olds[0].spec, dep.new.spec if dep.new else None) == (4, 1)
    dep.reconcile(world.observed())  # new pod not ready: old may lose 1 (5 - 3 - 1)
    assert (dep.olds[0].spec, dep.new.spec if dep.new else None) == (3, 1)
    assert dep.rolling and not dep.ready(world.observed())


# ----------------------------------------------------------------------------- simulator


def scenario(error_rate: float = 0.0, seconds: int = 600) -> scenario_mod.RolloutScenario:
    svc = model.ServiceModel()
    return scenario_mod.RolloutScenario(
        name="peers",
        trace=traces.Trace("flat", np.full(seconds, 200.0)),
        revisions={
            1: scenario_mod.RevisionModel(1, svc),
            2: scenario_mod.RevisionModel(2, svc, error_rate=error_rate),
        },
        stable_version=1,
        events=(scenario_mod.Event(120.0, START, 2),),
    )


SIM_SPEC = rollout(
    {"setWeight": 20}, {"pause": {"seconds": 60}}, {"analysis": {}}, {"setWeight": 50},
    {"pause": {"seconds": 60}},
)  # fmt: skip


def test_sim_accepts_a_second_pod_group_of_one_version() -> None:
    """``model-v1-primary`` is a revision of version 1 beside ``model-v1``."""
    result = sim_run.simulate_rollout(
        scenario(seconds=2),
        _Fixed(Plan((world.RevisionPlan("model-v1-primary", 1, 1, 100, "x"),))),
    )
    assert "model-v1-primary" in result.revisions
    with pytest.raises(ValueError, match="whose name is"):
        sim_run.simulate_rollout(
            scenario(seconds=2),
            _Fixed(Plan((world.RevisionPlan("other-v1", 1, 1, 100, "x"),))),
        )


@dataclass
class _Fixed(TickDecider):
    plan: Plan
    name: str = "fixed"
    period_s: float = 1.0

    def tick(self, observed: Observed, events: Sequence[Command]) -> Plan:
        return self.plan


def test_sim_argo_completes_and_loses_nothing_waiting_for_capacity() -> None:
    scen = scenario()
    result = sim_run.simulate_rollout(scen, ArgoStyle.for_scenario(SIM_SPEC, scen), seed=1)
    assert result.to_record()["final_phase"] == "Completed"
    assert result.lost == 0
    v2 = result.revisions["model-v2"]
    first = int(np.argmax(v2.weight > 0))
    assert v2.ready[first] >= 1  # the weight moved only once a canary pod was ready
    assert result.revisions["model-v1"].desired[-1] == 0


def test_sim_argo_weight_before_ready_loses_requests_at_the_first_set_weight() -> None:
    scen = scenario()
    controller = ArgoStyle.for_scenario(SIM_SPEC, scen, weight_before_ready=True)
    result = sim_run.simulate_rollout(scen, controller, seed=1)
    v2 = result.revisions["model-v2"]
    assert v2.lost_unready[120:150].sum() > 0  # 20 % to a canary still cold-starting
    assert v2.lost_unready[:120].sum() == 0
    assert result.to_record()["final_phase"] == "Completed"


def test_sim_argo_aborts_a_failing_canary() -> None:
    scen = scenario(error_rate=0.2)
    result = sim_run.simulate_rollout(scen, ArgoStyle.for_scenario(SIM_SPEC, scen), seed=1)
    assert result.to_record()["final_phase"] == "Aborted"
    assert result.revisions["model-v2"].desired[-1] == 0


def test_sim_flagger_rolls_back_a_failing_canary() -> None:
    scen = scenario(error_rate=0.2)
    result = sim_run.simulate_rollout(scen, FlaggerStyle.for_scenario(SIM_SPEC, scen), seed=1)
    assert result.to_record()["final_phase"] == "Aborted"
    v2 = result.revisions["model-v2"]
    assert v2.weight.max() == 20  # never advanced past the first step
    assert v2.desired[-1] == 0 and result.lost == 0


def test_sim_flagger_promotes_through_a_primary_rolling_update() -> None:
    scen = scenario()
    result = sim_run.simulate_rollout(scen, FlaggerStyle.for_scenario(SIM_SPEC, scen), seed=1)
    assert result.to_record()["final_phase"] == "Completed"
    assert result.revisions["model-v2-primary"].weight[-1] == 100
    assert result.lost == 0


def test_judge_is_the_one_from_rollout_analysis() -> None:
    from servectl.backends.sim.peers import argo, common, flagger

    assert argo.analysis.judge is analysis.judge
    assert flagger.analysis.judge is analysis.judge
    assert math.isinf(common.NO_HARD_FAILURE)


def test_flagger_uses_the_first_analysis_steps_checks_without_shared_ones() -> None:
    check = {"metric": "latencyP99", "max": 200.0}
    spec = models.RolloutSpec.model_validate(
        {"steps": [{"setWeight": 10}, {"analysis": {"checks": [check]}}, {"setWeight": 40}]}
    )
    controller = FlaggerStyle(spec)
    assert [c.metric for c in controller.checks] == ["latencyP99"]
    assert (controller.interval_s, controller.min_samples) == (30.0, 100)
    assert (controller.step_weight, controller.max_weight) == (10, 40)


@pytest.mark.parametrize("peer", [ArgoStyle, FlaggerStyle])
def test_period_must_be_positive(peer: Any) -> None:
    with pytest.raises(ValueError, match="period_s must be > 0"):
        peer(rollout({"setWeight": 10}), period_s=0)


def test_argo_start_of_the_canary_version_again_is_a_no_op() -> None:
    world, controller = World(replicas=4), argo()
    world.run(controller, 0)
    world.step(controller, ev(START, 2))
    world.step(controller)
    plan = world.step(controller, ev(START, 2))
    assert "v2 is already the canary" in plan.events and controller.step_index == 1


def test_flagger_abort_without_a_canary_is_ignored() -> None:
    world, controller = World(replicas=4), flagger()
    world.run(controller, 0, {0.0: [ev(ABORT)]})
    assert not controller.rollback_requested
    start_flagger_later = world.run(controller, 60, {30.0: [ev(START, 2)]})
    assert controller.native_phase == "Progressing"
    assert weights(start_flagger_later)["model-v2"] == 10
