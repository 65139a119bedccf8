"""simulate_rollout(): routing, losses, cuts, errors, costs, metrics, plans, phases."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from servectl.autoscaling import decision, snapshot
from servectl.backends.sim import run as sim_run
from servectl.backends.sim.tick import TickDecider
from servectl.controller.decide import Command
from servectl.planning.types import Observed, Plan, RevisionPlan
from servectl.rollout.machine import Op
from servectl.sim import model, traces, world
from servectl.sim import scenario as scenario_mod

SERVICE = model.ServiceModel()
INSTANT = model.ServiceModel(cold_start_s=0)  # ready the second it is created


def plan(
    *revisions: tuple[int, int, int],
    header: int | None = None,
    phase: str = "Idle",
) -> Plan:
    """A plan from (version, replicas, weight) triples; ``header`` a version."""
    return Plan(
        revisions=tuple(
            RevisionPlan(name=f"model-v{v}", version=v, replicas=n, weight=w, reason="Script")
            for v, n, w in revisions
        ),
        header_revision=None if header is None else f"model-v{header}",
        phase=phase,
    )


@dataclass
class Script(TickDecider):
    """Plans from a schedule {from_second: plan}; records what it saw."""

    schedule: Mapping[float, Plan]
    period_s: float = 1.0
    name: str = "script"
    seen: list[Observed] = field(default_factory=list)
    events: list[tuple[float, Command]] = field(default_factory=list)

    def tick(self, observed: Observed, events: Sequence[Command]) -> Plan:
        self.seen.append(observed)
        self.events.extend((observed.time, event) for event in events)
        return self.schedule[max(at for at in self.schedule if at <= observed.time)]

    def at(self, t: float) -> Observed:
        return next(o for o in self.seen if o.time == t)


@dataclass
class Rollout(TickDecider):
    """Idle until a START, then Progressing (v2 at 50 %), Completed ``after_s`` later."""

    after_s: float = 150.0
    period_s: float = 10.0
    name: str = "rollout"
    started: float | None = None

    def tick(self, observed: Observed, events: Sequence[Command]) -> Plan:
        if any(e.op is Op.START for e in events):
            self.started = observed.time
        if self.started is None:
            return plan((1, 3, 100))
        if observed.time >= self.started + self.after_s:
            return plan((2, 3, 100), phase="Completed")
        return plan((1, 2, 50), (2, 2, 50), phase="Progressing")


def scenario(
    trace: traces.Trace,
    services: Mapping[int, model.ServiceModel] | None = None,
    *,
    error_rates: Mapping[int, float] | None = None,
    **kwargs: object,
) -> scenario_mod.RolloutScenario:
    services = services if services is not None else {1: SERVICE, 2: INSTANT}
    rates = error_rates or {}
    return scenario_mod.RolloutScenario(
        name="test",
        trace=trace,
        revisions={
            v: scenario_mod.RevisionModel(v, service, error_rate=rates.get(v, 0.0))
            for v, service in services.items()
        },
        stable_version=1,
        **kwargs,  # type: ignore[arg-type]
    )


def flat(rps: float, seconds: int) -> traces.Trace:
    return traces.Trace("flat", np.full(seconds, float(rps)))


def test_one_fixed_revision_is_runner_simulate() -> None:
    """Same trace and seed, one revision, the same replica schedule: the same requests,
    the same SLO verdicts, the same per-second p99 (scale-down drains within the grace)."""
    trace = traces.steady(250, 600, seed=2)
    schedule = {0: 4, 200: 6, 400: 4}
    controller = Script({at: plan((1, n, 100)) for at, n in schedule.items()})
    got = sim_run.simulate_rollout(scenario(trace), controller, seed=5)
    want = sim_run.simulate(trace, _RunnerScript(schedule), SERVICE, seed=5)
    assert got.requests == want.requests == int(want.arrivals.sum())
    assert got.met_slo == want.met_slo
    assert got.failed == want.failed == 0
    assert got.lost == 0
    np.testing.assert_array_equal(got.p99_ms, want.p99_ms)
    np.testing.assert_allclose(got.slo_met, want.slo_met)
    np.testing.assert_array_equal(got.revisions["model-v1"].desired, want.desired)
    np.testing.assert_array_equal(got.total_ready, want.ready)
    # Draining replicas are billed by the second here, by their backlog in runner.
    assert got.replica_seconds == pytest.approx(want.replica_seconds, rel=0.002)
    assert got.replica_seconds >= want.replica_seconds


@dataclass
class _RunnerScript:
    """runner.simulate's side of the comparison: the same schedule as a Policy."""

    schedule: dict[int, int]
    period_s: float = 1.0
    name: str = "script"

    def initial_state(self) -> dict[str, Any]:
        return {}

    def decide(
        self, snap: snapshot.Snapshot, state: dict[str, Any]
    ) -> tuple[decision.Decision, dict[str, Any]]:
        replicas = self.schedule[max(at for at in self.schedule if at <= snap.time)]
        return decision.Decision(replicas=replicas, reason=decision.Reason.POLICY), state


def test_weights_split_the_requests() -> None:
    controller = Script({0: plan((1, 3, 70), (2, 2, 30))})
    result = sim_run.simulate_rollout(scenario(flat(200, 600)), controller, seed=1)
    a, b = result.revisions["model-v1"], result.revisions["model-v2"]
    assert int(a.routed.sum() + b.routed.sum()) == result.requests == int(result.arrivals.sum())
    assert b.routed.sum() / result.requests == pytest.approx(0.30, abs=0.005)
    assert (a.weight == 70).all() and (b.weight == 30).all()
    assert result.lost == 0 and result.failed == 0


def test_header_share_goes_to_the_header_revision() -> None:
    only_header = Script({0: plan((1, 3, 100), (2, 2, 0), header=2)})
    trace = flat(200, 600)
    result = sim_run.simulate_rollout(scenario(trace, header_share=0.2), only_header)
    share = result.revisions["model-v2"].routed.sum() / result.requests
    assert share == pytest.approx(0.2, abs=0.005)
    # The rest follows the weights: 0.2 + 0.8 x 50 %.
    half = Script({0: plan((1, 3, 50), (2, 3, 50), header=2)})
    result = sim_run.simulate_rollout(scenario(trace, header_share=0.2), half)
    share = result.revisions["model-v2"].routed.sum() / result.requests
    assert share == pytest.approx(0.6, abs=0.005)
    # Without a header route the matched requests follow the weights too.
    no_route = Script({0: plan((1, 3, 70), (2, 2, 30))})
    result = sim_run.simulate_rollout(scenario(trace, header_share=0.2), no_route)
    share = result.revisions["model-v2"].routed.sum() / result.requests
    assert share == pytest.approx(0.3, abs=0.005)


def test_a_revision_with_no_ready_replica_loses_what_it_is_sent() -> None:
    """v2 (30 s cold start) gets 30 % from t = 60: everything sent before it is ready at
    t = 90 is lost at once, counted failed and seen as errors in its counters."""
    services = {1: SERVICE, 2: SERVICE}
    controller = Script({0: plan((1, 3, 100)), 60: plan((1, 3, 70), (2, 2, 30))})
    result = sim_run.simulate_rollout(scenario(flat(150, 300), services), controller)
    b = result.revisions["model-v2"]
    assert (b.ready[60:90] == 0).all() and (b.ready[90:] == 2).all()
    lost = int(b.routed[60:90].sum())
    assert lost > 1000
    assert result.lost_unready == lost == int(b.lost_unready.sum())
    assert int(b.lost_unready[60:90].sum()) == lost
    assert result.failed == lost and result.lost_cut == 0
    assert result.met_slo <= result.requests - lost
    assert np.isinf(result.p99_ms[60:90]).all()
    assert np.isfinite(result.p99_ms[90:]).all()
    final = controller.seen[-1].revision("model-v2")
    assert final is not None and final.counters is not None
    assert final.counters.errors == lost
    before = controller.at(75).revision("model-v2")
    assert before is not None
    assert (before.ready, before.starting, before.available) == (0, 2, False)


def test_a_costlier_revision_uses_more_cpu_per_request() -> None:
    services = {1: INSTANT, 2: model.ServiceModel(service_time_ms=40.0, cold_start_s=0)}
    controller = Script({0: plan((1, 3, 50), (2, 5, 50))})
    sim_run.simulate_rollout(scenario(flat(200, 300), services), controller, seed=3)
    last = controller.seen[-1]
    a, b = last.revision("model-v1"), last.revision("model-v2")
    assert a is not None and b is not None and a.counters and b.counters
    per_request_a = a.counters.cpu_seconds / a.counters.requests
    per_request_b = b.counters.cpu_seconds / b.counters.requests
    assert per_request_a == pytest.approx(0.020, rel=0.03)
    assert per_request_b / per_request_a == pytest.approx(2.0, rel=0.03)


def test_error_rate_shows_in_that_revisions_counters() -> None:
    controller = Script({0: plan((1, 3, 50), (2, 3, 50))})
    result = sim_run.simulate_rollout(
        scenario(flat(200, 600), error_rates={2: 0.05}), controller, seed=4
    )
    last = controller.seen[-1]
    a, b = last.revision("model-v1"), last.revision("model-v2")
    assert a is not None and b is not None and a.counters and b.counters
    assert a.counters.errors == 0
    assert b.counters.errors / b.counters.requests == pytest.approx(0.05, abs=0.004)
    assert result.errors == result.revisions["model-v2"].errors
    assert result.failed == result.errors  # nothing else failed
    assert result.met_slo <= result.requests - result.errors
    # The service's error rate is the mix: ~2.5 %.
    assert last.service.signals.error_rate == pytest.approx(0.025, abs=0.015)


def test_errors_do_not_depend_on_the_controller() -> None:
    """The same request is an error whichever split sends it to the erring revision."""
    trace = flat(100, 200)
    rates = {1: 0.1, 2: 0.1}
    one = sim_run.simulate_rollout(
        scenario(trace, error_rates=rates), Script({0: plan((1, 3, 100))})
    )
    split = sim_run.simulate_rollout(
        scenario(trace, error_rates=rates), Script({0: plan((1, 2, 40), (2, 2, 60))})
    )
    assert one.errors == split.errors > 1000


def _backlog_then_shrink(grace_s: float) -> tuple[world.RolloutSimResult, Script]:
    """330 rps on 3 replicas (300 rps capacity) for a minute builds ~6 s of backlog, then
    the load drops to 100 rps and one replica is removed."""
    trace = traces.Trace("shrink", np.where(np.arange(240) < 60, 330.0, 100.0))
    controller = Script({0: plan((1, 3, 100)), 60: plan((1, 2, 100))})
    sim = scenario(trace, {1: SERVICE}, grace_s=grace_s, initial_replicas=3)
    return sim_run.simulate_rollout(sim, controller, seed=2), controller


def _in_system_at_kills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    killed: list[int] = []
    original = model.Fleet.kill

    def spy(self: model.Fleet, now: float, ids: np.ndarray) -> int:
        lost = original(self, now, ids)
        killed.append(lost)
        return lost

    monkeypatch.setattr(model.Fleet, "kill", spy)
    return killed


def test_no_grace_cuts_the_backlog_of_a_removed_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed = _in_system_at_kills(monkeypatch)
    result, controller = _backlog_then_shrink(0.0)
    a = result.revisions["model-v1"]
    assert result.lost_cut > 300
    assert killed == [result.lost_cut]  # exactly what was still in the replica
    assert int(a.lost_cut.sum()) == int(a.lost_cut[60]) == result.lost_cut
    assert a.replicas[60] == 2  # gone at once
    # The cut requests are the only failures, and analysis sees them as errors.
    assert result.failed == result.lost_cut == result.lost
    counters = controller.seen[-1].revision("model-v1")
    assert counters is not None and counters.counters is not None
    assert counters.counters.errors == result.lost_cut
    # Per-second SLO fractions stay consistent with the corrected totals.
    met = np.nansum(result.slo_met * result.arrivals)
    assert met == pytest.approx(result.met_slo, abs=1e-6)
    # A third of the requests of the last seconds before the cut were still queued.
    assert np.isinf(result.p99_ms[56:60]).all()
    assert np.isfinite(result.p99_ms[:50]).all() and np.isfinite(result.p99_ms[60:]).all()


def test_a_grace_period_kills_later_and_cuts_only_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed = _in_system_at_kills(monkeypatch)
    nograce, _ = _backlog_then_shrink(0.0)
    result, controller = _backlog_then_shrink(3.0)
    a = result.revisions["model-v1"]
    assert 0 < result.lost_cut < nograce.lost_cut
    assert killed[-1] == result.lost_cut
    assert int(a.lost_cut[63]) == result.lost_cut
    assert (a.replicas[60:63] == 3).all() and a.replicas[63] == 2  # billed while draining
    draining = controller.at(61).revisions[0]
    assert (draining.desired, draining.ready, draining.draining) == (2, 2, 1)
    assert controller.at(63).revisions[0].draining == 0


def test_every_request_is_accounted_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A messy run (overload, timeouts, errors, a header route, unready and killed
    replicas), then silence so every observation lands: the counters analysis sees add up
    to the totals, request by request."""
    killed = _in_system_at_kills(monkeypatch)
    load = np.concatenate([np.full(100, 300.0), np.full(60, 600.0), np.full(60, 150.0)])
    trace = traces.Trace("messy", np.concatenate([load, np.zeros(60)]))
    costly = model.ServiceModel(service_time_ms=30, threads_per_replica=4, cold_start_s=10)
    sim = scenario(
        trace,
        {1: SERVICE, 2: costly},
        error_rates={2: 0.1},
        header_share=0.3,
        grace_s=5.0,
        initial_replicas=4,
    )
    controller = Script(
        {
            0: plan((1, 4, 100)),
            50: plan((1, 4, 80), (2, 2, 20), header=2),
            120: plan((1, 2, 50), (2, 1, 50), header=2),
            170: plan((2, 1, 100)),
            200: plan((2, 3, 100), header=2),
            230: plan((1, 1, 0), (2, 0, 100), header=1),
        }
    )
    result = sim_run.simulate_rollout(sim, controller, seed=1)
    assert result.lost_unready > 0 and result.lost_cut > 0 and result.errors > 0
    assert sum(killed) == result.lost_cut
    assert result.failed > result.lost + result.errors  # timeouts too
    final = controller.seen[-1].revisions
    assert [r.name for r in final] == ["model-v1", "model-v2"]
    counters = [r.counters for r in final]
    assert all(c is not None for c in counters)
    assert sum(c.requests for c in counters if c) == result.requests
    assert sum(c.errors for c in counters if c) == result.failed
    served = sum(sum(c.latency_buckets) for c in counters if c)
    assert served == result.requests - result.lost
    assert np.nansum(result.slo_met * result.arrivals) == pytest.approx(result.met_slo)


def test_a_grace_period_at_light_load_cuts_nothing() -> None:
    controller = Script({0: plan((1, 4, 100)), 100: plan((1, 2, 100))})
    result = sim_run.simulate_rollout(
        scenario(flat(100, 300), {1: SERVICE}, grace_s=30.0, initial_replicas=4), controller
    )
    assert result.lost == 0 and result.failed == 0
    assert (result.revisions["model-v1"].replicas[101:] == 2).all()  # drained within 1 s


def test_removing_a_revision_drains_it_and_drops_it_from_observed() -> None:
    controller = Script(
        {0: plan((1, 3, 50), (2, 3, 50)), 100: plan((1, 3, 100))},
        period_s=2.0,
    )
    result = sim_run.simulate_rollout(scenario(flat(200, 200)), controller)
    b = result.revisions["model-v2"]
    assert (b.weight[100:] == 0).all() and (b.desired[100:] == 0).all()
    assert (b.replicas[110:] == 0).all() and result.lost == 0
    assert controller.at(98).revision("model-v2") is not None
    assert controller.at(120).revision("model-v2") is None
    assert [r.name for r in controller.at(120).revisions] == ["model-v1"]


def test_with_nothing_to_route_to_every_request_is_lost() -> None:
    """Scaled to zero at weight 100, then no revision at all: the router answers 503."""
    controller = Script({0: plan((1, 0, 100)), 10: plan()})
    trace = flat(100, 40)
    result = sim_run.simulate_rollout(scenario(trace, {1: INSTANT}), controller)
    assert result.lost_unready == result.requests == result.failed
    assert int(result.revisions["model-v1"].routed.sum()) == int(result.arrivals[:10].sum())
    assert controller.at(20).revisions == ()
    assert controller.at(20).service.signals.error_rate == pytest.approx(1.0)
    assert (result.total_replicas[2:] == 0).all()


def test_observed_has_unique_pods_and_per_revision_views() -> None:
    controller = Script({0: plan((1, 3, 60), (2, 2, 40), header=2)}, period_s=2.0)
    sim_run.simulate_rollout(scenario(flat(200, 60), header_share=0.1), controller)
    seen = controller.at(40)
    assert seen.metrics_ok
    assert seen.header_revision == "model-v2"
    assert seen.latency_bounds_us == tuple(model.LATENCY_BUCKETS_US)
    names = [p.name for p in seen.service.pods]
    assert len(names) == len(set(names)) == 5
    assert seen.service.replicas.current == 5 and seen.service.replicas.ready == 5
    a, b = seen.revision("model-v1"), seen.revision("model-v2")
    assert a is not None and b is not None
    assert (a.desired, a.ready, a.weight, a.available) == (3, 3, 60, True)
    assert (b.desired, b.ready, b.weight, b.starting, b.draining) == (2, 2, 40, 0, 0)
    assert b.snapshot is not None and b.snapshot.replicas.current == 2
    assert len(b.snapshot.pods) == 2
    assert b.snapshot.signals.rps == pytest.approx(0.46 * 200, rel=0.15)
    rps = seen.service.signals.rps
    assert rps == pytest.approx(200, rel=0.1)
    assert a.counters is not None and a.counters.time == 40
    assert len(a.counters.latency_buckets) == model.LATENCY_BUCKET_COUNT


def test_a_metrics_outage_freezes_counters_and_flags_metrics() -> None:
    controller = Script({0: plan((1, 3, 100))})
    sim = scenario(flat(150, 200), metrics_outages=((100.0, 130.0),))
    sim_run.simulate_rollout(sim, controller)
    before = controller.at(99)
    assert before.metrics_ok
    frozen = [controller.at(t) for t in range(100, 130)]
    assert not any(o.metrics_ok for o in frozen)
    counters = {o.revisions[0].counters for o in frozen}
    assert len(counters) == 1
    (last,) = counters
    assert last is not None and last.time == 98
    after = controller.at(130)
    assert after.metrics_ok
    assert after.revisions[0].counters is not None
    assert after.revisions[0].counters.time == 130
    assert after.revisions[0].counters.requests > last.requests


def test_billing_counts_every_revision() -> None:
    controller = Script({0: plan((1, 3, 70), (2, 2, 30))})
    result = sim_run.simulate_rollout(scenario(flat(100, 120)), controller)
    assert (result.total_replicas == 5).all()
    assert result.replica_seconds == 5 * 120
    summed = sum(r.replicas for r in result.revisions.values())
    np.testing.assert_array_equal(summed, result.total_replicas)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (plan((1, 3, 60), (2, 2, 30)), "sum to 100"),
        (plan((1, 3, 100), (99, 1, 0)), "version 99"),
        (plan((1, -1, 100)), "replicas must be"),
        (plan((1, 3, 100), header=2), "header_revision"),
        (plan((1, 3, 100), (1, 2, 0)), "twice"),
    ],
)
def test_an_invalid_plan_is_refused(bad: Plan, message: str) -> None:
    controller = Script({0: plan((1, 3, 100)), 5: bad})
    with pytest.raises(ValueError, match=message):
        sim_run.simulate_rollout(scenario(flat(100, 20)), controller)


def test_an_invalid_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="stable_version"):
        sim_run.simulate_rollout(
            scenario_mod.RolloutScenario(
                name="x",
                trace=flat(10, 10),
                revisions={2: scenario_mod.RevisionModel(2)},
                stable_version=1,
            ),
            Script({0: plan((1, 1, 100))}),
        )


def test_same_seed_same_result() -> None:
    trace = traces.steady(200, 300, seed=1)
    sim = scenario(trace, header_share=0.1, error_rates={2: 0.02})

    def run(seed: int) -> world.RolloutSimResult:
        controller = Script({0: plan((1, 3, 100)), 100: plan((1, 2, 80), (2, 2, 20), header=2)})
        return sim_run.simulate_rollout(sim, controller, seed=seed)

    first, second, other = run(7), run(7), run(8)
    assert first.to_record() == second.to_record()
    for name in ("p99_ms", "slo_met", "total_replicas", "total_ready", "arrivals"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    for name, timeline in first.revisions.items():
        np.testing.assert_array_equal(timeline.routed, second.revisions[name].routed)
    assert first.to_record() != other.to_record()


def test_rollout_window_and_phases_come_from_plans_and_events() -> None:
    sim = scenario(
        flat(100, 400),
        events=(scenario_mod.Event(time=105.0, op=Op.START, version=2),),
    )
    controller = Rollout(after_s=150.0)
    result = sim_run.simulate_rollout(sim, controller)
    assert result.starts == (105.0,)
    assert controller.started == 110.0  # delivered on the next tick
    assert result.phases == ((0.0, "Idle"), (110.0, "Progressing"), (260.0, "Completed"))
    assert result.rollout_window() == (105.0, 260.0)
    assert result.phase_at(50) == "Idle"
    assert result.phase_at(110) == "Progressing"
    assert result.phase_at(399) == "Completed"
    record = result.to_record()
    assert record["rollout_duration_s"] == 155.0
    assert record["final_phase"] == "Completed"
    json.dumps(record)
    assert len(result.plans) == 40
    assert (result.revisions["model-v1"].desired[260:] == 0).all()
    assert result.lost == 0


def test_no_start_means_no_rollout_window() -> None:
    result = sim_run.simulate_rollout(
        scenario(flat(50, 60)), Script({0: plan((1, 2, 100))}), record_plans=False
    )
    assert result.rollout_window() is None
    assert result.plans == ()
    assert result.to_record()["rollout_start_s"] is None
