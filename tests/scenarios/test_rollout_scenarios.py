"""Scenario replays of servectl's rollouts in the multi-revision simulator.

Each test runs servectl's whole loop (autoscaler -> rollout -> planner) on a short load
trace and asserts the replica/weight *timeline*, not only totals: when each weight is
reached, which revision holds how many replicas when, and that no request is lost.
Where a rule compares with "what autoscaling alone would do", the same trace and seed are
simulated without any rollout (the no-rollout run).

Timelines are per second (``RevisionTimeline``): the weight and desired replicas the plan
of that second applied, the replicas ready to take requests (after the plan), the
replicas billed. The controller ticks every 2 s.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from servectl.api import models
from servectl.rollout import machine
from servectl.rollout.machine import Op
from servectl.sim import scenario as scenario_mod
from servectl.sim import traces
from tests.scenarios import helpers as h
from tests.scenarios.helpers import Run

E, Op = scenario_mod.Event, Op
TICK_S = 2  # servectl's controller period
COLD_START_S = int(h.SVC.cold_start_s)  # 30 s
DRAIN_S = 30

CANARY_STEPS = [
    {"setWeight": 20},
    {"pause": {"seconds": 60}},
    {"setWeight": 50},
    {"analysis": {}},
    {"setWeight": 80},
    {"pause": {"seconds": 30}},
]


def assert_no_loss(run: Run) -> None:
    result = run.result
    assert (result.lost_unready, result.lost_cut) == (0, 0), (
        f"lost {result.lost_unready} at the router, {result.lost_cut} cut by kills"
    )
    for timeline in result.revisions.values():
        # A revision is sent traffic only while it has a replica taking requests.
        sent = timeline.routed > 0
        assert np.all(timeline.ready[sent] > 0), timeline.name


def assert_scale_first(run: Run, *, hard_abort_ok: bool = False) -> None:
    bad = run.shift_violations(hard_abort_ok=hard_abort_ok)
    assert not bad, "\n".join(bad[:10])


def reach_times(run: Run, version: int, weights: list[int]) -> list[int]:
    """The second at which ``version``'s weight first reached each of ``weights``."""
    times = []
    for w in weights:
        at = run.first(run.weight(version) >= w)
        assert at is not None, f"v{version} never reached {w} %\n{run.dump([1, version])}"
        times.append(at)
    return times


def verdicts_seen(run: Run) -> list[machine.VerdictRecord]:
    """Every verdict the rollout recorded, in order (the state keeps only the last per
    step; the recorded loop states keep them all)."""
    seen: list[machine.VerdictRecord] = []
    for state in run.controller.states:
        for verdict in state.rollout.verdicts:
            if verdict not in seen:
                seen.append(verdict)
    return seen


# ----------------------------------------------------------------------------- 1. promote


STEADY_300 = traces.steady(300, 900, seed=1)
GOOD_CANARY = h.spec(
    {
        "steps": CANARY_STEPS,
        "analysis": {
            "interval": "30s",
            "minSamples": 500,
            "checks": [
                {"metric": "errorRate", "max": 0.01},
                {"metric": "latencyP99", "maxRatioToStable": 1.5},
            ],
        },
        "drainSeconds": DRAIN_S,
    }
)


@pytest.fixture(scope="module")
def no_rollout_300() -> Run:
    return h.run(GOOD_CANARY, STEADY_300, {1: h.revision(1), 2: h.revision(2)})


def test_a_good_canary_is_promoted_step_by_step(no_rollout_300: Run) -> None:
    run = h.run(
        GOOD_CANARY, STEADY_300, {1: h.revision(1), 2: h.revision(2)}, [E(120, Op.START, 2)]
    )
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    done = run.phase_time("Completed")
    # Each setWeight is reached in order, no earlier than the steps between allow: the
    # 60 s pause after 20 %, one 30 s analysis interval after 50 %, the 30 s pause after 80 %.
    at20, at50, at80, at100 = reach_times(run, 2, [20, 50, 80, 100])
    assert 120 < at20 < at50 < at80 < at100 <= done
    assert at50 - at20 >= 60 and at80 - at50 >= 30 and at100 - at80 >= 30
    # v2's weight only goes up during the rollout, and ends at 100 % for good.
    weights = run.weight(2)[120 : int(done) + 1]
    assert np.all(np.diff(weights) >= 0)
    assert np.all(run.weight(2)[int(done) :] == 100) and np.all(run.weight(1)[int(done) :] == 0)
    # The analysis step passed once, on enough samples.
    (verdict,) = [v for v in verdicts_seen(run) if v.step == 3]
    assert verdict.verdict == "Successful" and verdict.samples >= 500
    # v1 lost its last traffic at `at100`; it keeps its replicas for drainSeconds, then
    # it is removed (its last replicas finish their queue within a few seconds).
    gone = run.first(run.desired(1) == 0, after=at100)
    assert gone is not None and at100 + DRAIN_S <= gone <= at100 + DRAIN_S + TICK_S
    assert np.all(run.desired(1)[at100:gone] > 0)
    assert np.all(run.desired(1)[gone:] == 0) and run.replicas(1)[-1] == 0
    # Scale first, then shift: every weight increase was carried by ready replicas.
    assert_scale_first(run)
    assert_no_loss(run)
    # The stable is never sized above what autoscaling alone gives it; the rollout costs
    # no SLO (within 0.5 pp of the no-rollout run on the same arrivals).
    assert np.all(run.desired(1) <= no_rollout_300.desired(1)), run.dump([1, 2])
    assert run.result.slo_attainment >= no_rollout_300.result.slo_attainment - 0.005
    # The promoted revision ends at the size autoscaling alone settles on.
    tail = slice(-120, None)
    assert abs(np.mean(run.desired(2)[tail]) - np.mean(no_rollout_300.desired(1)[tail])) <= 1.0


# ----------------------------------------------------------------------------- 2-3. abort


STEADY_300_SHORT = traces.steady(300, 700, seed=2)


def judged_canary(checks: list[dict[str, object]]) -> models.RolloutSpec:
    return h.spec(
        {
            "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 50}, {"analysis": {}}],
            "analysis": {"interval": "30s", "minSamples": 200, "checks": checks},
            "drainSeconds": DRAIN_S,
        }
    )


def assert_aborted_back_to_stable(run: Run) -> tuple[int, int]:
    """The abort's timeline: v2's weight falls to 0 and stays there, v2 is removed a
    drain later, v1 ends with all the traffic. Returns (abort time, v2 at 0 % time)."""
    assert run.phases() == ["Idle", "Progressing", "Aborted"]
    aborted = int(run.phase_time("Aborted"))
    assert run.weight(2)[aborted - 1] > 0  # the canary had traffic when it was judged
    zero = run.first(run.weight(2) == 0, after=aborted)
    assert zero is not None
    assert np.all(run.weight(2)[zero:] == 0) and np.all(run.weight(1)[zero:] == 100)
    # v2's weight only goes down from the abort on.
    assert np.all(np.diff(run.weight(2)[aborted - 1 :]) <= 0)
    gone = run.first(run.desired(2) == 0, after=zero)
    assert gone is not None and zero + DRAIN_S <= gone <= zero + DRAIN_S + TICK_S
    assert np.all(run.desired(2)[gone:] == 0) and run.replicas(2)[-1] == 0
    assert run.rollout.phase is machine.Phase.ABORTED and run.rollout.stable == 1
    return aborted, zero


def test_a_canary_with_5_percent_errors_is_aborted() -> None:
    run = h.run(
        judged_canary([{"metric": "errorRate", "max": 0.01}]),
        STEADY_300_SHORT,
        {1: h.revision(1), 2: h.revision(2, error_rate=0.05)},
        [E(120, Op.START, 2)],
    )
    assert_aborted_back_to_stable(run)
    # Judged at its first analysis (20 %): it never got to 50 %.
    assert run.weight(2).max() == 20
    failed = verdicts_seen(run)[-1]
    assert failed.verdict == "Failed" and failed.step == 1 and failed.samples >= 200
    assert failed.message.startswith("errorRate 0.05") and "above max 0.01" in failed.message
    assert not run.rollout.hard_abort  # 5 % is below hardFailureErrorRate (50 %)
    # Back to stable like any shift: v1's weight rose only as far as its ready replicas
    # carried it (the stable had shrunk to its 80 % share and is scaled back first).
    assert_scale_first(run)
    assert_no_loss(run)
    # Every error came from v2, at its 5 %.
    v2 = run.rev(2)
    assert run.result.errors == v2.errors
    assert v2.errors == pytest.approx(0.05 * v2.routed.sum(), rel=0.2)


def test_a_canary_40_percent_slower_is_aborted_on_the_latency_ratio() -> None:
    run = h.run(
        judged_canary(
            [
                {"metric": "errorRate", "max": 0.01},
                {"metric": "latencyP99", "maxRatioToStable": 1.2},
            ]
        ),
        STEADY_300_SHORT,
        {1: h.revision(1), 2: h.revision(2, cost=1.4)},
        [E(120, Op.START, 2)],
    )
    assert_aborted_back_to_stable(run)
    failed = verdicts_seen(run)[-1]
    assert failed.verdict == "Failed" and failed.step == 1
    # The failing check is the latency ratio, and the message says so with the values.
    assert failed.message.startswith("latencyP99 ") and "maxRatioToStable 1.2" in failed.message
    assert "errorRate" not in failed.message
    assert_scale_first(run)
    assert_no_loss(run)
    assert run.result.errors == 0


def test_a_canary_failing_hard_loses_its_traffic_at_once() -> None:
    run = h.run(
        judged_canary([{"metric": "errorRate", "max": 0.01}]),
        STEADY_300_SHORT,
        {1: h.revision(1), 2: h.revision(2, error_rate=0.6)},
        [E(120, Op.START, 2)],
    )
    aborted, zero = assert_aborted_back_to_stable(run)
    # At or above hardFailureErrorRate (50 %) the abort does not wait for stable
    # capacity: the canary's traffic moves in the very tick of the verdict.
    assert zero == aborted and run.weight(2)[aborted - 1] == 20
    assert run.rollout.hard_abort
    failed = verdicts_seen(run)[-1]
    assert failed.message.startswith("hard failure: error rate 0.6")
    assert_scale_first(run, hard_abort_ok=True)
    assert_no_loss(run)


# ----------------------------------------------------------------------------- 4. cost


STEADY_400 = traces.steady(400, 900, seed=3)
HELD_AT_20 = h.spec(
    {
        # Held at 20 % by an indefinite pause; the analysis checks errors only, so the
        # canary's latency (it is slower) never aborts it.
        "steps": [{"setWeight": 20}, {"analysis": {}}, {"pause": {}}],
        "analysis": {
            "interval": "30s",
            "minSamples": 200,
            "checks": [{"metric": "errorRate", "max": 0.01}],
        },
        "drainSeconds": DRAIN_S,
    }
)
CPU_HEAVY = {1: h.revision(1), 2: h.revision(2, cost=2.0)}


def test_a_cpu_heavy_canary_is_sized_on_its_own_cost() -> None:
    run = h.run(HELD_AT_20, STEADY_400, CPU_HEAVY, [E(60, Op.START, 2)])
    alone = h.run(HELD_AT_20, STEADY_400, CPU_HEAVY)
    assert run.phases() == ["Idle", "Progressing", "Paused"]
    assert run.rollout.step == 2 and run.rollout.phase is machine.Phase.PAUSED
    first = run.first(run.weight(2) > 0)
    assert first is not None
    # The transient: the canary's first share is sized at the stable's cost (it has no
    # requests to measure yet); measured at 2x, the weight its one ready replica cannot
    # carry goes back to the stable, and returns as its own replicas become ready. It is
    # over once the canary holds its 20 % for good: within three cold starts.
    off = np.flatnonzero(run.weight(2)[first:] != 20)
    settled = first + (int(off.max()) + 1 if off.size else 0)
    assert settled - first <= 3 * COLD_START_S, run.dump([1, 2], 4)
    assert np.all(run.weight(2)[first:settled] <= 20)
    # Once settled, ZERO extra stable replicas: the stable is never sized above what
    # autoscaling alone gives the same trace (it serves 80 % of it).
    extra = run.desired(1)[settled:] - alone.desired(1)[settled:]
    assert extra.max() <= 0, f"stable above the no-rollout run at t={settled + extra.argmax()}"
    # The canary's replicas follow its own cost: per unit of traffic share it holds about
    # twice the stable's replicas (ceil granularity at 3 vs 5 replicas: within 1.5x-3x),
    # well above what its share would need at the stable's cost.
    steady = slice(settled + 60, None)
    canary = float(np.mean(run.desired(2)[steady]))
    stable = float(np.mean(run.desired(1)[steady]))
    ratio = (canary / 0.2) / (stable / 0.8)
    assert 1.5 <= ratio <= 3.0, (canary, stable)
    assert canary >= 1.5 * 0.2 * float(np.mean(alone.desired(1)[steady]))
    assert_scale_first(run)
    assert_no_loss(run)
    # Discovering the cost times no request out (the weight went back meanwhile).
    assert run.result.failed == 0


# ----------------------------------------------------------------------------- 5. samples


def low_traffic_spec(**analysis: object) -> models.RolloutSpec:
    return h.spec(
        {
            "steps": [{"setWeight": 50}, {"analysis": {}}, {"setWeight": 100}],
            "analysis": {
                "interval": "30s",
                "minSamples": 100,
                "checks": [{"metric": "errorRate", "max": 0.01}],
                **analysis,
            },
            "drainSeconds": DRAIN_S,
        }
    )


def test_at_1_request_per_second_the_analysis_extends_until_it_has_the_samples() -> None:
    run = h.run(
        low_traffic_spec(),
        h.flat(1, 700),
        {1: h.revision(1), 2: h.revision(2)},
        [E(60, Op.START, 2)],
    )
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    verdicts = [v for v in verdicts_seen(run) if v.step == 1]
    # ~0.5 request/s reach the canary: Inconclusive every interval, each with more samples
    # (the window runs from the step's start across extensions), until 100 are there.
    *waiting, passed = verdicts
    assert len(waiting) >= 4
    assert all(v.verdict == "Inconclusive" and v.samples < 100 for v in waiting)
    assert all("of 100 requests" in v.message for v in waiting)
    assert [v.samples for v in waiting] == sorted(v.samples for v in waiting)
    assert [b.time - a.time for a, b in itertools.pairwise(verdicts)] == [30.0] * (
        len(verdicts) - 1
    )
    assert passed.verdict == "Successful" and passed.samples >= 100
    # Never Successful on fewer samples; the step did not pass while Inconclusive: the
    # weight stayed at 50 % until the Successful verdict, then went to 100 %.
    assert all(v.samples >= 100 for v in verdicts_seen(run) if v.verdict == "Successful")
    at50, at100 = reach_times(run, 2, [50, 100])
    assert np.all(run.weight(2)[at50 : int(passed.time)] == 50)
    assert passed.time <= at100 <= passed.time + 2 * TICK_S
    extensions = [s.rollout.extensions for s in run.controller.states if s.rollout.step == 1]
    assert max(extensions) == len(waiting)
    assert_no_loss(run)


def test_with_max_extensions_too_few_samples_pause_the_rollout() -> None:
    run = h.run(
        low_traffic_spec(maxExtensions=2),
        h.flat(1, 400),
        {1: h.revision(1), 2: h.revision(2)},
        [E(60, Op.START, 2)],
    )
    assert run.phases() == ["Idle", "Progressing", "Paused"]
    inconclusive = [v for v in verdicts_seen(run) if v.step == 1]
    assert [v.verdict for v in inconclusive] == ["Inconclusive"] * 3
    assert "generate load" in run.rollout.message and "2 extensions" in run.rollout.message
    # Paused at 50 %, nothing promoted, nothing aborted.
    assert run.weight(2)[-1] == 50 and run.rollout.step == 1


# ----------------------------------------------------------------------------- 6. spike


SPIKE_AT, SPIKE_S = 130, 240
SPIKE = traces.spike(100, 500, SPIKE_AT, SPIKE_S, 900)  # x5 for 4 minutes
PACED = h.spec(
    {
        "steps": [
            {"setWeight": 20},
            {"pause": {"seconds": 60}},
            {"setWeight": 50},
            {"pause": {"seconds": 60}},
            {"setWeight": 80},
            {"pause": {"seconds": 30}},
        ],
        "drainSeconds": DRAIN_S,
    }
)


@pytest.fixture(scope="module")
def no_rollout_spike() -> Run:
    return h.run(PACED, SPIKE, {1: h.revision(1), 2: h.revision(2)})


def test_a_load_spike_during_a_step_scales_first_and_holds_the_shift(
    no_rollout_spike: Run,
) -> None:
    run = h.run(PACED, SPIKE, {1: h.revision(1), 2: h.revision(2)}, [E(60, Op.START, 2)])
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    # Step 2 (setWeight 50) starts while the spike is on.
    step2 = next(t for t in run.tick_times if run.state_at(t).rollout.step == 2)
    assert SPIKE_AT < step2 < SPIKE_AT + SPIKE_S
    assert run.weight(2)[step2] == 20
    # Held: the canary has one ready replica for its 20 % of the spiking load; its weight
    # stays at 20 % until the replicas ordered for the spike and for 50 % (pre-scaling)
    # have cold-started...
    assert run.ready(2)[step2] == 1
    more = run.first(run.ready(2) > 1, after=step2)
    rise = run.first(run.weight(2) > 20, after=step2)
    assert more is not None and rise is not None and rise >= more
    assert np.all(run.weight(2)[step2:rise] == 20)
    assert np.all(run.desired(2)[step2 + TICK_S : rise] > run.ready(2)[step2 + TICK_S : rise])
    # ... and every increase is carried by ready replicas, during the spike and after.
    assert_scale_first(run)
    assert_no_loss(run)
    # No revision shrinks while the spike is on (the autoscaler's demand is up).
    spike = slice(SPIKE_AT, SPIKE_AT + SPIKE_S)
    for version in (1, 2):
        ready = run.ready(version)[spike]
        assert np.all(np.diff(ready[: np.argmax(ready) + 1]) >= 0)
    # The rollout does not make the spike worse than autoscaling alone does.
    assert run.result.slo_attainment >= no_rollout_spike.result.slo_attainment - 0.005
    assert run.result.failed <= no_rollout_spike.result.failed


# ----------------------------------------------------------------------------- 7-8. peak


PEAK_AT = 300  # 100 rps, a ramp to 400 rps over [200, 300), then 400 rps
PEAK = traces.Trace(
    "peak", np.concatenate([np.full(200, 100.0), np.linspace(100, 400, 100), np.full(400, 400.0)])
)
AT_50_PAUSED = h.spec(
    {
        "steps": [
            {"setWeight": 20},
            {"pause": {"seconds": 30}},
            {"setWeight": 50},
            {"pause": {}},
        ],
        "drainSeconds": DRAIN_S,
    }
)


@pytest.fixture(scope="module")
def no_rollout_peak() -> Run:
    return h.run(AT_50_PAUSED, PEAK, {1: h.revision(1), 2: h.revision(2)})


def test_an_abort_under_peak_load_never_dips_the_stable_capacity() -> None:
    run = h.run(
        AT_50_PAUSED,
        PEAK,
        {1: h.revision(1), 2: h.revision(2)},
        [E(30, Op.START, 2), E(400, Op.ABORT)],
    )
    assert run.phases() == ["Idle", "Progressing", "Paused", "Aborted"]
    assert run.phase_time("Aborted") == 400
    assert run.weight(2)[399] == 50 and PEAK.rps[399] == PEAK.peak_rps
    zero = run.first(run.weight(2) == 0, after=400)
    assert zero is not None
    # Stable first: its ready replicas only grow from the abort until it has all the
    # traffic back, and at every tick they carry the share it has (not only when it
    # rises), so the requests it serves never queue up behind a capacity dip.
    assert np.all(np.diff(run.ready(1)[400 : zero + 1]) >= 0)
    assert run.ready(1)[zero] > run.ready(1)[399]
    bad = run.carry_violations(1, 400, zero + DRAIN_S)
    assert not bad, bad
    assert np.all(np.diff(run.weight(2)[400:]) <= 0)
    assert_scale_first(run)
    assert_no_loss(run)
    # The aborted canary keeps its replicas while draining, then goes.
    gone = run.first(run.desired(2) == 0, after=zero)
    assert gone is not None and zero + DRAIN_S <= gone <= zero + DRAIN_S + TICK_S


def test_a_promotion_under_peak_load_hands_over_the_whole_demand(
    no_rollout_peak: Run,
) -> None:
    run = h.run(
        AT_50_PAUSED,
        PEAK,
        {1: h.revision(1), 2: h.revision(2)},
        [E(30, Op.START, 2), E(400, Op.PROMOTE_FULL)],
    )
    assert run.phases() == ["Idle", "Progressing", "Paused", "Progressing", "Completed"]
    assert run.weight(2)[399] == 50  # paused at 50 %
    done = int(run.phase_time("Completed"))
    # v2 takes the traffic as its replicas become ready, only ever more of it...
    assert np.all(np.diff(run.weight(2)[400 : done + 1]) >= 0)
    assert run.weight(2)[done] == 100
    assert_scale_first(run)
    assert_no_loss(run)
    # ... and ends sized on the whole demand: what autoscaling alone gives the service
    # (within one replica), never minReplicas.
    after = slice(done, None)
    assert np.all(run.desired(2)[after] >= no_rollout_peak.desired(1)[after] - 1)
    assert np.all(run.desired(2)[after] > 1)
    zero = run.first(run.weight(1) == 0, after=400)
    assert zero is not None
    gone = run.first(run.desired(1) == 0, after=zero)
    assert gone is not None and zero + DRAIN_S <= gone <= zero + DRAIN_S + TICK_S
    assert run.result.slo_attainment >= no_rollout_peak.result.slo_attainment - 0.005


# ----------------------------------------------------------------------------- 9. v3


def test_a_new_version_mid_rollout_restarts_from_step_0_against_stable() -> None:
    spec = h.spec(
        {
            "steps": [
                {"setWeight": 20},
                {"pause": {"seconds": 30}},
                {"setWeight": 50},
                {"pause": {"seconds": 60}},
            ],
            "drainSeconds": DRAIN_S,
        }
    )
    run = h.run(
        spec,
        traces.steady(300, 900, seed=4),
        {1: h.revision(1), 2: h.revision(2), 3: h.revision(3)},
        [E(30, Op.START, 2), E(100, Op.START, 3)],
    )
    # v2 was at step 2, on its way to 50 %, when v3 arrived.
    before = run.state_at(98).rollout
    assert (before.canary, before.step) == (2, 2) and 20 < run.weight(2)[99] < 50
    after = run.state_at(100).rollout
    assert (after.canary, after.stable, after.step) == (3, 1, 0)
    assert after.phase is machine.Phase.PROGRESSING
    # v2 only loses traffic from then on, down to 0, and is removed a drain later.
    assert np.all(np.diff(run.weight(2)[99:]) <= 0)
    v2_zero = run.first(run.weight(2) == 0, after=100)
    assert v2_zero is not None
    gone = run.first(run.desired(2) == 0, after=v2_zero)
    assert gone is not None and v2_zero + DRAIN_S <= gone <= v2_zero + DRAIN_S + TICK_S
    # v1, the stable, takes back what v3's first step does not want (80 % is v1's).
    assert run.weight(1)[100] >= run.weight(1)[99]
    # v3 goes through every step again: 20 %, the pause, 50 %, the pause, promotion.
    assert np.all(run.weight(3)[:100] == 0)
    at20, at50, at100 = reach_times(run, 3, [20, 50, 100])
    assert 100 < at20 < at50 < at100 and at50 - at20 >= 30 and at100 - at50 >= 60
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    final = run.rollout
    assert (final.stable, final.canary, final.previous_stable) == (3, None, 1)
    assert run.weight(3)[-1] == 100 and run.desired(1)[-1] == 0 and run.desired(2)[-1] == 0
    assert_scale_first(run)
    assert_no_loss(run)


# ----------------------------------------------------------------------------- 10. A/B


AB_SECONDS = 300
HEADER_SHARE = 0.2
STEADY_300_AB = traces.steady(300, 900, seed=5)


def ab_spec(metric: str) -> models.RolloutSpec:
    return h.spec(
        {
            "strategy": "abTest",
            "abTest": {
                "match": {"header": {"name": "x-variant", "value": "b"}},
                "durationSeconds": AB_SECONDS,
                "winnerMetric": metric,
            },
            # Guard rails while the test runs (B is aborted if it fails them).
            "analysis": {
                "interval": "30s",
                "minSamples": 200,
                "checks": [{"metric": "errorRate", "max": 0.05}],
            },
            "drainSeconds": DRAIN_S,
        }
    )


def header_times(run: Run) -> list[int]:
    """The seconds at which the plan routed the header to B."""
    return [int(t) for t, plan in run.result.plans if plan.header_revision == h.name(2)]


def assert_ab_test_ran(run: Run) -> tuple[int, int]:
    """The header route went to B once B had a ready replica, ~20 % of the requests
    reached B for the whole test and B had no weight meanwhile. Returns (route applied,
    winner picked)."""
    routed = header_times(run)
    assert routed, "the header route was never applied"
    applied = routed[0]
    assert run.ready(2)[applied] >= 1 and run.ready(2)[applied - TICK_S] == 0
    started = run.state_at(applied + TICK_S).rollout.ab_started
    assert started is not None and applied <= started <= applied + TICK_S
    decided = next(t for t in run.tick_times if run.state_at(t).rollout.winner is not None)
    assert decided >= started + AB_SECONDS
    test = slice(applied, decided)
    assert np.all(run.weight(2)[test] == 0) and np.all(run.weight(1)[test] == 100)
    share = run.rev(2).routed[test].sum() / run.result.arrivals[test].sum()
    assert share == pytest.approx(HEADER_SHARE, abs=0.01)
    # Before the route, B got nothing.
    assert run.rev(2).routed[:applied].sum() == 0
    return applied, int(decided)


@pytest.mark.parametrize(
    ("metric", "a", "b"),
    [
        ("errorRate", h.revision(1, error_rate=0.02), h.revision(2, error_rate=0.005)),
        ("latencyP99", h.revision(1), h.revision(2, cost=0.6)),
    ],
    ids=["fewer-errors", "faster"],
)
def test_an_ab_test_declares_b_the_winner_and_promotes_it(
    metric: str, a: scenario_mod.RevisionModel, b: scenario_mod.RevisionModel
) -> None:
    run = h.run(
        ab_spec(metric),
        STEADY_300_AB,
        {1: a, 2: b},
        [E(60, Op.START, 2)],
        header_share=HEADER_SHARE,
    )
    _, decided = assert_ab_test_ran(run)
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    decision = run.state_at(decided).rollout
    assert decision.winner == "B" and decision.promoting
    assert f"B wins on {metric}" in decision.message
    # Promotion: B's weight rises as its replicas become ready, to 100 %; then the header
    # route goes (everyone is on B) and A is drained and removed.
    done = int(run.phase_time("Completed"))
    assert np.all(np.diff(run.weight(2)[decided : done + 1]) >= 0) and run.weight(2)[done] == 100
    assert not [t for t in header_times(run) if t > done]
    final = run.rollout
    assert (final.winner, final.stable, final.phase) == ("B", 2, machine.Phase.COMPLETED)
    a_zero = run.first(run.weight(1) == 0, after=decided)
    assert a_zero is not None
    gone = run.first(run.desired(1) == 0, after=a_zero)
    assert gone is not None and a_zero + DRAIN_S <= gone <= a_zero + DRAIN_S + TICK_S
    assert_scale_first(run)
    assert_no_loss(run)


def test_an_ab_test_that_a_wins_removes_b() -> None:
    run = h.run(
        ab_spec("errorRate"),
        STEADY_300_AB,
        {1: h.revision(1, error_rate=0.005), 2: h.revision(2, error_rate=0.02)},
        [E(60, Op.START, 2)],
        header_share=HEADER_SHARE,
    )
    _, decided = assert_ab_test_ran(run)
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    final = run.rollout
    assert (final.winner, final.stable, final.phase) == ("A", 1, machine.Phase.COMPLETED)
    assert "A wins on errorRate" in final.message and "B removed" in final.message
    # B never got weight; its header users go back to A once A's ready replicas carry
    # them, then B is drained and removed.
    assert run.weight(2).max() == 0
    unrouted = max(header_times(run)) + TICK_S
    assert decided <= unrouted and run.rev(2).routed[unrouted:].sum() == 0
    assert not run.carry_violations(1, unrouted, run.duration)
    gone = run.first(run.desired(2) == 0, after=unrouted)
    assert gone is not None and unrouted + DRAIN_S - TICK_S <= gone <= unrouted + DRAIN_S + TICK_S
    assert np.all(run.desired(2)[gone:] == 0)
    assert_no_loss(run)


# ----------------------------------------------------------------------------- 11. blue/green


DELAY_S = 120
STEADY_300_BG = traces.steady(300, 600, seed=6)


def blue_green(**settings: object) -> models.RolloutSpec:
    return h.spec(
        {
            "strategy": "blueGreen",
            "blueGreen": {"scaleDownDelaySeconds": DELAY_S, **settings},
            "steps": [{"pause": {"seconds": 30}}],
            "drainSeconds": DRAIN_S,
        }
    )


def switch_time(run: Run, to: int, after: float = 0.0) -> int:
    at = run.first(run.weight(to) > 0, after=after)
    assert at is not None, f"never switched to v{to}"
    return at


def test_blue_green_switches_at_once_to_a_full_size_preview() -> None:
    run = h.run(
        blue_green(), STEADY_300_BG, {1: h.revision(1), 2: h.revision(2)}, [E(60, Op.START, 2)]
    )
    assert run.phases() == ["Idle", "Progressing", "Completed"]
    switched = switch_time(run, 2)
    # The preview: ordered at full size (v1's size, the whole demand) at weight 0...
    preview = slice(60 + TICK_S, switched)
    assert np.all(run.weight(2)[preview] == 0)
    assert np.all(run.desired(2)[preview] >= run.desired(1)[preview])
    # ... the 30 s pause runs once it is all ready (not while it was starting) ...
    ready = run.first(run.ready(2) >= run.desired(1), after=60)
    assert ready is not None and switched >= ready + 30
    # ... then all traffic switches in one plan.
    assert (run.weight(1)[switched - 1], run.weight(2)[switched - 1]) == (100, 0)
    assert (run.weight(1)[switched], run.weight(2)[switched]) == (0, 100)
    assert np.all(run.weight(2)[switched:] == 100)
    # The old revision keeps the capacity for all the traffic for scaleDownDelaySeconds
    # (an instant rollback), then goes.
    kept = slice(switched, switched + DELAY_S - TICK_S)
    assert np.all(run.ready(1)[kept] >= run.desired(2)[kept] - 1)
    gone = run.first(run.desired(1) == 0, after=switched)
    assert gone is not None and switched + DELAY_S <= gone <= switched + DELAY_S + TICK_S
    assert_scale_first(run)
    assert_no_loss(run)


def test_blue_green_rollback_within_the_delay_is_instant() -> None:
    undo_at = 200
    run = h.run(
        blue_green(),
        STEADY_300_BG,
        {1: h.revision(1), 2: h.revision(2)},
        [E(60, Op.START, 2), E(undo_at - TICK_S, Op.ABORT), E(undo_at, Op.UNDO)],
    )
    switched = switch_time(run, 2)
    assert switched + DELAY_S > undo_at  # within the delay: v1 is still full size
    # After the switch the rollout is Completed: abort is refused (the fix: undo) and
    # changes nothing.
    refused = [r for r in run.controller.ticks if r.errors]
    assert [r.time for r in refused] == [undo_at - TICK_S]
    assert (
        "nothing to abort" in refused[0].errors[0]
        and "roll out that version again" in refused[0].errors[0]
    )
    assert run.weight(2)[undo_at - 1] == 100
    # Undo: back to v1 in the very tick of the command, all of it, nothing lost.
    assert (run.weight(1)[undo_at], run.weight(2)[undo_at]) == (100, 0)
    assert run.phases() == ["Idle", "Progressing", "Completed", "Progressing", "Completed"]
    final = run.rollout
    assert (final.stable, final.previous_stable) == (1, 2)
    # v2 now gets the scale-down delay, then goes.
    gone = run.first(run.desired(2) == 0, after=undo_at)
    assert gone is not None and undo_at + DELAY_S <= gone <= undo_at + DELAY_S + TICK_S
    assert_scale_first(run)
    assert_no_loss(run)


def test_blue_green_without_auto_promote_waits_at_the_preview() -> None:
    run = h.run(
        blue_green(autoPromote=False),
        STEADY_300_BG,
        {1: h.revision(1), 2: h.revision(2)},
        [E(60, Op.START, 2), E(250, Op.PROMOTE)],
    )
    assert run.phases() == ["Idle", "Progressing", "Paused", "Progressing", "Completed"]
    paused = run.phase_time("Paused")
    assert "promote to switch" in dict(run.messages())[paused]
    assert np.all(run.weight(2)[:250] == 0)
    assert switch_time(run, 2) == 250 and run.weight(2)[250] == 100
    assert_no_loss(run)


def test_blue_green_abort_at_the_preview_removes_it() -> None:
    run = h.run(
        blue_green(),
        STEADY_300_BG,
        {1: h.revision(1), 2: h.revision(2)},
        [E(60, Op.START, 2), E(80, Op.ABORT)],
    )
    assert run.phases() == ["Idle", "Progressing", "Aborted"]
    assert run.weight(2).max() == 0 and np.all(run.weight(1) == 100)
    gone = run.first(run.desired(2) == 0, after=80)
    assert gone is not None and gone <= 80 + TICK_S  # it never had traffic to drain
    assert_no_loss(run)


# ----------------------------------------------------------------------------- refusals


def test_refused_commands_are_reported_and_change_nothing() -> None:
    spec = h.spec({"steps": [*CANARY_STEPS[:2], {"setWeight": 50}], "drainSeconds": DRAIN_S})
    trace = traces.steady(200, 500, seed=7)
    versions = {1: h.revision(1), 2: h.revision(2)}
    plain = h.run(spec, trace, versions, [E(60, Op.START, 2)])
    refused = [
        E(20, Op.ABORT),  # nothing is rolling out
        E(30, Op.RESUME),  # nothing is paused
        E(40, Op.UNDO),  # no previous version
        E(50, Op.START, 1),  # v1 is already the stable version
        E(100, Op.RESUME),  # progressing, not paused
        E(110, Op.START, 2),  # v2 is already rolling out
        E(120, Op.RETRY),  # only an aborted rollout can be retried
    ]
    run = h.run(spec, trace, versions, [E(60, Op.START, 2), *refused])
    errors = {int(r.time): r.errors for r in run.controller.ticks if r.errors}
    assert sorted(errors) == [int(e.time) for e in refused]
    assert all(len(e) == 1 for e in errors.values())
    expected = {
        20: ("abort: no rollout is running", "roll out that version again"),
        30: ("resume: the rollout is not paused", "nothing to resume"),
        40: ("undo: there is no previous version", "the version you want"),
        50: ("start: v1 is already the stable version", "pick another"),
        100: ("resume: the rollout is not paused (phase Progressing)", "status.rollout.phase"),
        110: ("start: v2 is already rolling out", "promote, pause or abort"),
        120: ("retry: only an aborted rollout can be retried", "a new version instead"),
    }
    for at, (message, fix) in expected.items():
        assert errors[at][0].startswith(message) and fix in errors[at][0], errors[at]
    # Each also appears among the plan's events of that tick.
    events = run.events()
    for at, (message, _) in expected.items():
        assert any(t == at and e.startswith(message) for t, e in events)
    # And nothing changed: the same timelines, phases and final state as without them.
    for version in (1, 2):
        assert np.array_equal(run.weight(version), plain.weight(version))
        assert np.array_equal(run.desired(version), plain.desired(version))
    assert run.result.phases == plain.result.phases
    assert run.rollout == plain.rollout


# ----------------------------------------------------------------------------- outage


def test_a_metrics_outage_during_a_rollout_holds_weights_and_shrinks_nothing() -> None:
    outage = (140, 230)
    spec = h.spec(
        {
            "steps": [
                {"setWeight": 20},
                {"pause": {"seconds": 30}},
                {"setWeight": 60},
                {"analysis": {}},
            ],
            "analysis": {
                "interval": "30s",
                "minSamples": 200,
                "checks": [{"metric": "errorRate", "max": 0.01}],
            },
            "drainSeconds": DRAIN_S,
        }
    )
    # The load halves at 100 s: the autoscaler would scale down during the outage.
    trace = traces.Trace("fall", np.concatenate([np.full(100, 300.0), np.full(500, 150.0)]))
    versions = {1: h.revision(1), 2: h.revision(2)}
    run = h.run(spec, trace, versions, [E(60, Op.START, 2)], metrics_outages=(outage,))
    seeing = h.run(spec, trace, versions, [E(60, Op.START, 2)])
    blind = [
        int(o.time) for o in run.controller.observed if not o.metrics_ok
    ]  # ticks with stale metrics
    assert blind and blind[0] >= outage[0] and blind[-1] < outage[1] + TICK_S
    start, end = blind[0], blind[-1]
    # The rollout was mid-shift when the metrics went; with metrics, the same run moves
    # weights and shrinks replicas in that window.
    assert 0 < run.weight(2)[start - 1] < 100
    window = slice(start, end + 1)
    assert np.any(np.diff(seeing.weight(2)[window]) != 0)
    assert any(np.any(np.diff(seeing.desired(v)[window]) < 0) for v in (1, 2))
    # Without: the weights hold for the whole outage and nothing shrinks.
    for version in (1, 2):
        held = run.weight(version)[start : end + 1]
        assert np.all(held == run.weight(version)[start - 1]), version
        desired = run.desired(version)[start - 1 : end + 1]
        assert np.all(np.diff(desired) >= 0), (version, desired)
    # The analysis step, if due meanwhile, is Inconclusive, never judged on stale data.
    for verdict in verdicts_seen(run):
        if start <= verdict.time <= end:
            assert verdict.verdict == "Inconclusive" and "stale" in verdict.message
    # Back to normal after the outage: the rollout carries on and completes.
    assert run.phases()[-1] == "Completed" and run.weight(2)[-1] == 100
    assert_scale_first(run)
    assert_no_loss(run)


# ----------------------------------------------------------------------------- known gaps


def test_a_canary_at_the_stables_load_passes_a_latency_ratio_check() -> None:
    """The documented workaround: setCanaryScale before the first setWeight gives the
    canary the stable's load per replica, and the same check passes (seeds 2 and 4 abort
    without it)."""
    spec = h.spec(
        {
            "steps": [
                {"setCanaryScale": {"replicas": 2}},
                {"setWeight": 20},
                {"analysis": {}},
                {"setWeight": 50},
                {"analysis": {}},
            ],
            "analysis": {
                "interval": "30s",
                "minSamples": 200,
                "checks": [{"metric": "latencyP99", "maxRatioToStable": 1.2}],
            },
            "drainSeconds": DRAIN_S,
        }
    )
    for seed in (2, 4):
        run = h.run(
            spec,
            traces.steady(300, 600, seed=seed),
            {1: h.revision(1), 2: h.revision(2)},
            [E(120, Op.START, 2)],
            seed=seed,
        )
        assert run.phases() == ["Idle", "Progressing", "Completed"], verdicts_seen(run)


@pytest.mark.xfail(
    strict=True,
    reason="an identical canary at 20 % runs on 1 replica at the demand's target "
    "utilization while the stable spreads 80 % over 5 replicas with rounding headroom "
    "and round-robin smoothing: its p99 is ~1.7x the stable's, so a latency ratio check "
    "of 1.2 (DESIGN's example) aborts a good version (4 of 8 seeds at 300 rps); "
    "docs/rollouts.md 'Latency ratio checks on a small canary' measures it and the fix",
)
def test_an_identical_canary_passes_a_latency_ratio_check() -> None:
    run = h.run(
        judged_canary([{"metric": "latencyP99", "maxRatioToStable": 1.2}]),
        traces.steady(300, 600, seed=2),
        {1: h.revision(1), 2: h.revision(2)},
        [E(120, Op.START, 2)],
        seed=2,
    )
    assert run.phases() == ["Idle", "Progressing", "Completed"], verdicts_seen(run)
