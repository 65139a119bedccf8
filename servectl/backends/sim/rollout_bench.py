"""``servectl bench --rollouts``: a rollout in the middle of step, spike and diurnal load.

For every trace, each controller runs twice on the same arrivals (same seed): once
without a rollout and once with a new version started in the middle of the trace (two
minutes before the load change, for traces that have one). Reported per controller:
SLO attainment with and without the rollout, requests lost to unready capacity
(routed to a revision with no ready replica) and cut by a shrink (still queued when
their replica was killed), the peak of extra replicas the rollout held (replicas with
the rollout minus replicas without, second by second, over the rollout's window) and the
rollout's duration.

Controllers: servectl (its autoscaling engine + rollout + planner), ``argo-style`` (one
HPA over stable+canary pods, canary replicas = ceil(weight x total)) and
``flagger-style`` (independent HPAs for primary and canary); docs/peers.md says how the
peers are emulated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servectl.api import models
from servectl.autoscaling import registry
from servectl.backends.sim import peers
from servectl.backends.sim.run import simulate_rollout
from servectl.controller.backend import Decider
from servectl.controller.decide import ServectlDecider
from servectl.controller.spec import ServiceSpec
from servectl.rollout.machine import Op
from servectl.sim import model, results, suite, traces
from servectl.sim import scenario as control
from servectl.sim.world import RolloutSimResult

ROLLOUT_TRACES = ("step", "spike", "diurnal")
CONTROLLERS = ("servectl", "argo-style", "flagger-style")
LEAD_S = 120
"""The rollout starts this long before the load change (or mid-trace without one)."""


def bench_rollout_spec() -> models.RolloutSpec:
    """The canary every controller runs: four weight steps, two analyses, two pauses."""
    return models.RolloutSpec.model_validate(
        {
            "strategy": "canary",
            "steps": [
                {"setWeight": 10},
                {"pause": {"seconds": 120}},
                {"setWeight": 25},
                {"analysis": {}},
                {"setWeight": 50},
                {"pause": {"seconds": 120}},
                {"setWeight": 75},
                {"analysis": {}},
            ],
            "analysis": {
                "interval": "30s",
                "minSamples": 500,
                "checks": [
                    {"metric": "errorRate", "max": 0.01},
                    {"metric": "latencyP99", "maxRatioToStable": 2.0},
                ],
            },
            "drainSeconds": 30,
        }
    )


def start_time(trace: traces.Trace) -> int:
    """Two minutes before the largest abrupt rise, else the middle minus five minutes."""
    rise = results.largest_rise(np.asarray(trace.rps, dtype=np.float64))
    if rise is not None:
        return max(60, rise - LEAD_S)
    return max(60, trace.duration_s // 2 - 300)


@dataclass(frozen=True)
class RolloutRecord:
    trace: str
    controller: str
    seed: int
    with_rollout: RolloutSimResult
    without: RolloutSimResult
    routing: str = model.Routing.ROUND_ROBIN.value

    @property
    def slo_delta_pp(self) -> float:
        return (self.with_rollout.slo_attainment - self.without.slo_attainment) * 100.0

    def _extra(self) -> npt.NDArray[np.int64]:
        """Replicas with the rollout minus without, each second of the rollout's window
        (to the end of the trace if it never ended)."""
        run = self.with_rollout
        window = run.rollout_window()
        start = int(window[0]) if window else int(run.starts[0]) if run.starts else 0
        end = int(window[1]) + 1 if window else run.duration_s
        with_rollout = run.total_replicas[start:end].astype(np.int64)
        return with_rollout - self.without.total_replicas[start:end].astype(np.int64)

    @property
    def peak_extra_replicas(self) -> int:
        """The largest second-by-second excess. Sensitive to the two runs' autoscalers
        acting a few seconds apart under fast load changes; see extra_replica_seconds."""
        delta = self._extra()
        return int(delta.max()) if delta.size else 0

    @property
    def extra_replica_seconds(self) -> float:
        """Replica-seconds the rollout cost over the same run without it, in its window."""
        return float(self._extra().sum())

    def to_record(self) -> dict[str, Any]:
        window = self.with_rollout.rollout_window()
        duration = None if window is None else float(window[1] - window[0])
        started = self.with_rollout.starts[0] if self.with_rollout.starts else None
        return {
            "trace": self.trace,
            "controller": self.controller,
            "seed": self.seed,
            "requests": self.with_rollout.requests,
            "slo_attainment": self.with_rollout.slo_attainment,
            "slo_attainment_no_rollout": self.without.slo_attainment,
            "slo_delta_pp": self.slo_delta_pp,
            "lost_unready": self.with_rollout.lost_unready,
            "lost_cut": self.with_rollout.lost_cut,
            "lost": self.with_rollout.lost,
            "lost_no_rollout": self.without.lost,
            "peak_extra_replicas": self.peak_extra_replicas,
            "extra_replica_seconds": self.extra_replica_seconds,
            "replica_seconds": self.with_rollout.replica_seconds,
            "replica_seconds_no_rollout": self.without.replica_seconds,
            "rollout_start_s": started,
            "rollout_duration_s": duration,
            "final_phase": self.with_rollout.phase_at(self.with_rollout.duration_s - 1),
            "routing": self.routing,
        }


ControllerFactory = Callable[[control.RolloutScenario], Decider]


def controller_factories(
    svc: model.ServiceModel, spec: models.RolloutSpec
) -> dict[str, ControllerFactory]:
    cfg = suite.autoscaling_config(svc)
    hpa_cfg = peers.peer_hpa_config(suite.MIN_REPLICAS, suite.MAX_REPLICAS, suite.CPU_TARGET)

    def servectl(scenario: control.RolloutScenario) -> Decider:
        service = ServiceSpec(
            name=scenario.service_name,
            rollout=spec,
            min_replicas=scenario.min_replicas,
            max_replicas=scenario.max_replicas,
        )
        told = dataclasses.replace(cfg, routing=suite.engine_routing(scenario.routing))
        return ServectlDecider(service, registry.build("servectl", told))

    def argo(scenario: control.RolloutScenario) -> Decider:
        return peers.ArgoStyle.for_scenario(spec, scenario, hpa_config=hpa_cfg)

    def flagger(scenario: control.RolloutScenario) -> Decider:
        return peers.FlaggerStyle.for_scenario(spec, scenario, hpa_config=hpa_cfg)

    return {"servectl": servectl, "argo-style": argo, "flagger-style": flagger}


def scenario_for(
    trace: traces.Trace,
    svc: model.ServiceModel,
    *,
    with_rollout: bool,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
) -> control.RolloutScenario:
    events = (control.Event(float(start_time(trace)), Op.START, 2),) if with_rollout else ()
    return control.RolloutScenario(
        name=trace.name,
        trace=trace,
        revisions={1: control.RevisionModel(1, svc), 2: control.RevisionModel(2, svc)},
        stable_version=1,
        events=events,
        service_name="model",
        min_replicas=suite.MIN_REPLICAS,
        max_replicas=suite.MAX_REPLICAS,
        routing=routing,
    )


def run_rollout_bench(
    trace_names: Sequence[str] = ROLLOUT_TRACES,
    controllers: Sequence[str] = CONTROLLERS,
    *,
    seed: int = 0,
    progress: Callable[[str, str, int, int], None] | None = None,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
) -> list[RolloutRecord]:
    svc = suite.service()
    spec = bench_rollout_spec()
    factories = controller_factories(svc, spec)
    unknown = [c for c in controllers if c not in factories]
    if unknown:
        raise ValueError(
            f"unknown controller {', '.join(unknown)}; choose from {', '.join(factories)}"
        )
    by_name = {t.name: t for t in traces.standard_suite(seed)}
    missing = [t for t in trace_names if t not in by_name]
    if missing:
        raise ValueError(f"unknown trace {', '.join(missing)}; choose from {', '.join(by_name)}")
    records = []
    total = len(trace_names) * len(controllers)
    index = 0
    for trace_name in trace_names:
        trace = by_name[trace_name]
        for name in controllers:
            index += 1
            if progress is not None:
                progress(trace_name, name, index, total)
            runs = []
            for with_rollout in (True, False):
                scenario = scenario_for(trace, svc, with_rollout=with_rollout, routing=routing)
                decider = factories[name](scenario)
                runs.append(simulate_rollout(scenario, decider, seed=seed, record_plans=False))
            records.append(RolloutRecord(trace_name, name, seed, runs[0], runs[1], routing.value))
    return records


def table(records: Sequence[RolloutRecord]) -> tuple[list[str], list[list[str]]]:
    header = [
        "trace",
        "controller",
        "SLO %",
        "no rollout",
        "Δ pp",
        "lost unready",
        "lost cut",
        "peak extra",
        "extra rep·s",
        "duration s",
        "phase",
    ]
    rows = []
    for r in records:
        rec = r.to_record()
        duration = rec["rollout_duration_s"]
        rows.append(
            [
                r.trace,
                r.controller,
                f"{rec['slo_attainment'] * 100:.3f}",
                f"{rec['slo_attainment_no_rollout'] * 100:.3f}",
                f"{rec['slo_delta_pp']:+.3f}",
                str(rec["lost_unready"]),
                str(rec["lost_cut"]),
                str(rec["peak_extra_replicas"]),
                f"{rec['extra_replica_seconds']:.0f}",
                "never ended" if duration is None else f"{duration:.0f}",
                str(rec["final_phase"]),
            ]
        )
    return header, rows


def wide_columns(records: Sequence[RolloutRecord]) -> tuple[list[str], list[list[str]]]:
    """Extra columns for ``-o wide``: requests, all lost requests, cost, when it started."""
    header = ["requests", "lost", "lost no rollout", "replica·s", "started s"]
    rows = []
    for r in records:
        rec = r.to_record()
        started = rec["rollout_start_s"]
        rows.append(
            [
                f"{rec['requests']:,}",
                str(rec["lost"]),
                str(rec["lost_no_rollout"]),
                f"{rec['replica_seconds']:,.0f}",
                "—" if started is None else f"{started:.0f}",
            ]
        )
    return header, rows
