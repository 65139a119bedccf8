"""The planner's rules on hand-built observations (no simulator)."""

from __future__ import annotations

from dataclasses import replace

from servectl.autoscaling.snapshot import Replicas, Signals, Snapshot
from servectl.planning import planner
from servectl.planning.types import Observed, ObservedRevision, RevisionNames
from servectl.rollout.machine import Intent, Phase

NAMES = RevisionNames({1: "m-v1", 2: "m-v2", 3: "m-v3"})


def rev(
    version: int,
    *,
    weight: int,
    desired: int,
    ready: int | None = None,
    available: bool | None = None,
    rps: float | None = None,
    cpu: float | None = None,
) -> ObservedRevision:
    ready = desired if ready is None else ready
    snap = Snapshot(
        time=0.0,
        replicas=Replicas(current=desired, ready=ready, min=0, max=100),
        signals=Signals(rps=rps, cpu_usage_cores=cpu),
    )
    return ObservedRevision(
        name=NAMES[version],
        version=version,
        desired=desired,
        ready=ready,
        weight=weight,
        available=ready > 0 if available is None else available,
        snapshot=snap,
    )


def observed(*revisions: ObservedRevision, now: float = 100.0, ok: bool = True) -> Observed:
    service = Snapshot(time=now, replicas=Replicas(current=0, ready=0), signals=Signals(rps=1000))
    return Observed(time=now, service=service, revisions=revisions, metrics_ok=ok)


def intent(weights: dict[int, int], *, canary: int | None = 2, **extra: object) -> Intent:
    return Intent(
        stable=1,
        canary=canary,
        weights=weights,
        phase=Phase.PROGRESSING,
        **extra,  # type: ignore[arg-type]
    )


def test_no_rollout_stable_gets_the_demand() -> None:
    result, _ = planner.plan(
        intent({1: 100}, canary=None),
        observed(rev(1, weight=100, desired=8)),
        10,
        planner.PlannerState(),
        NAMES,
    )
    (only,) = result.revisions
    assert (only.name, only.replicas, only.weight) == ("m-v1", 10, 100)
    assert only.reason == "Steady"


def test_alone_without_a_rollout_the_demand_passes_through_unchanged() -> None:
    """One revision, no rollout: the policy's count is applied as it is, even a small
    drop (no second hysteresis on top of the policy's own stabilization)."""
    state = planner.PlannerState(replicas={"m-v1": 10})
    result, _ = planner.plan(
        intent({1: 100}, canary=None), observed(rev(1, weight=100, desired=10)), 9, state, NAMES
    )
    assert [r.replicas for r in result.revisions] == [9]
    # A second revision that retires this cycle changes nothing: still 9.
    gone = planner.PlannerState(replicas={"m-v1": 10, "m-v2": 1})
    result, _ = planner.plan(
        intent({1: 100}, canary=None),
        observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=1)),
        9,
        gone,
        NAMES,
    )
    assert [(r.name, r.replicas) for r in result.revisions] == [("m-v1", 9)]
    # With a second revision still draining (held), small drops are held too.
    two = planner.PlannerState(
        replicas={"m-v1": 10, "m-v2": 1},
        lowered_at={"m-v2": 95.0},
        hold_s={"m-v2": 30.0},
        held_share={"m-v2": 0.1},
    )
    result, _ = planner.plan(
        intent({1: 100}, canary=None),
        observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=1)),
        10 - 1,
        two,
        NAMES,
    )
    assert result.revision("m-v1") is not None
    assert result.revision("m-v1").replicas == 10  # type: ignore[union-attr]


def test_scale_first_then_shift() -> None:
    # Canary wanted at 50 %, has no replica yet: weight stays, canary pre-scaled to 5.
    obs = observed(rev(1, weight=100, desired=10))
    result, state = planner.plan(intent({1: 50, 2: 50}), obs, 10, planner.PlannerState(), NAMES)
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    assert (stable.weight, stable.replicas) == (100, 10)
    assert (canary.weight, canary.replicas) == (0, 5)
    assert canary.reason == "WaitingForCapacity"
    # Two of five ready: the weight moves only as far as 2 replicas carry (20 %).
    obs = observed(
        rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=2, available=True)
    )
    result, state = planner.plan(intent({1: 50, 2: 50}), obs, 10, state, NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and canary.weight == 20
    stable = result.revision("m-v1")
    assert stable is not None and stable.weight == 80
    # The stable lost traffic: it keeps its 10 replicas while draining.
    assert stable.replicas == 10 and stable.reason == "Draining"


def test_not_available_blocks_the_shift_even_with_ready_replicas() -> None:
    obs = observed(
        rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=5, available=False)
    )
    result, _ = planner.plan(intent({1: 50, 2: 50}), obs, 10, planner.PlannerState(), NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and canary.weight == 0
    assert "AVAILABLE" in canary.message


def test_drain_then_shrink() -> None:
    state = planner.PlannerState()
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=5), now=100.0)
    result, state = planner.plan(intent({1: 50, 2: 50}, hold_s=30.0), obs, 10, state, NAMES)
    assert result.revision("m-v1").weight == 50  # type: ignore[union-attr]
    for now, expected in ((110.0, 10), (129.0, 10), (131.0, 5)):
        obs = observed(rev(1, weight=50, desired=10), rev(2, weight=50, desired=5), now=now)
        result, state = planner.plan(intent({1: 50, 2: 50}, hold_s=30.0), obs, 10, state, NAMES)
        assert result.revision("m-v1").replicas == expected, now  # type: ignore[union-attr]


def test_cpu_heavy_canary_adds_canary_replicas_not_stable_ones() -> None:
    # Canary at 20 % costs 2x per request: demand 12 = 10 (stable-equivalent) x 1.2 mix.
    obs = observed(
        rev(1, weight=80, desired=8, rps=800, cpu=16.0),
        rev(2, weight=20, desired=4, rps=200, cpu=8.0),
    )
    result, _ = planner.plan(intent({1: 80, 2: 20}), obs, 12, planner.PlannerState(), NAMES)
    assert result.revision("m-v1").replicas == 8  # type: ignore[union-attr]
    assert result.revision("m-v2").replicas == 4  # type: ignore[union-attr]


def test_canary_without_samples_borrows_stable_cost() -> None:
    obs = observed(
        rev(1, weight=90, desired=9, rps=900, cpu=18.0),
        rev(2, weight=10, desired=1, rps=0.5, cpu=5.0),  # too few requests to measure
    )
    result, state = planner.plan(intent({1: 90, 2: 10}), obs, 10, planner.PlannerState(), NAMES)
    assert state.cost["m-v2"] == 1.0
    assert result.revision("m-v2").replicas == 1  # type: ignore[union-attr]


def test_surge_budget_limits_prescaling_and_counts_held_replicas() -> None:
    obs = observed(rev(1, weight=100, desired=10))
    limits = planner.Limits(surge_replicas=2)
    result, _ = planner.plan(intent({1: 50, 2: 50}), obs, 10, planner.PlannerState(), NAMES, limits)
    canary = result.revision("m-v2")
    assert canary is not None and canary.replicas == 2 and canary.reason == "SurgeLimited"


def test_missing_metrics_hold_weights_and_never_shrink() -> None:
    state = planner.PlannerState(replicas={"m-v1": 10})
    obs = observed(rev(1, weight=100, desired=10), ok=False)
    result, _ = planner.plan(intent({1: 100}, canary=None), obs, 4, state, NAMES)
    stable = result.revision("m-v1")
    assert stable is not None and stable.replicas == 10 and stable.reason == "MetricsMissing"
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=5), ok=False)
    result, _ = planner.plan(intent({1: 50, 2: 50}), obs, 10, state, NAMES)
    assert result.revision("m-v2").weight == 0  # type: ignore[union-attr]


def test_missing_metrics_say_what_the_held_traffic_waits_for() -> None:
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=5), ok=False)
    held, _ = planner.plan(intent({1: 50, 2: 50}), obs, 10, planner.PlannerState(), NAMES)
    assert held.waiting.startswith("metrics stale: traffic held"), held.waiting
    assert "promote --full is carried out" in held.waiting
    fresh = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=5, ready=5))
    moving, _ = planner.plan(intent({1: 50, 2: 50}), fresh, 10, planner.PlannerState(), NAMES)
    assert moving.waiting == ""


def test_a_users_full_promotion_moves_traffic_on_stale_metrics() -> None:
    """Issue 27, item 8: rule 8 holds the autoscaler, not the user's explicit decision.
    The shift still waits for ready capacity (rule 1)."""
    obs = observed(rev(1, weight=50, desired=5), rev(2, weight=50, desired=10), ok=False)
    result, _ = planner.plan(
        intent({2: 100}, explicit=True), obs, 10, planner.PlannerState(), NAMES
    )
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    assert (stable.weight, canary.weight) == (0, 100) and result.waiting == ""
    assert stable.replicas == 5  # drained first, and nothing shrinks on stale metrics meanwhile
    short = observed(rev(1, weight=50, desired=5), rev(2, weight=50, desired=5), ok=False)
    result, _ = planner.plan(
        intent({2: 100}, explicit=True), short, 10, planner.PlannerState(), NAMES
    )
    canary = result.revision("m-v2")
    assert canary is not None and canary.weight < 100 and canary.replicas == 10


def test_a_revision_with_no_traffic_goes_after_its_drain_on_stale_metrics() -> None:
    """An aborted canary at weight 0 serves nothing: rule 8 does not keep its pods (issue
    27, item 8: a GPU canary's pods stayed until Prometheus came back)."""
    state = planner.PlannerState(
        replicas={"m-v1": 10, "m-v2": 4},
        lowered_at={"m-v2": 0.0},
        hold_s={"m-v2": 30.0},
        held_share={"m-v2": 0.3},  # it carried 30 % before the abort
    )
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=4), now=20.0, ok=False)
    aborted = Intent(stable=1, canary=None, weights={1: 100}, phase=Phase.ABORTED)
    draining, _ = planner.plan(aborted, obs, 10, state, NAMES)
    assert draining.revision("m-v2").replicas == 4  # type: ignore[union-attr]
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=4), now=40.0, ok=False)
    drained, _ = planner.plan(aborted, obs, 2, state, NAMES)
    assert drained.revision("m-v2") is None
    assert drained.revision("m-v1").replicas == 10  # type: ignore[union-attr]  # rule 8
    # A header route's revision keeps its pods: its share is measured, and metrics are stale.
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=4), now=40.0, ok=False)
    with_header = replace(obs, header_revision="m-v2")
    ab = Intent(stable=1, canary=2, weights={1: 100}, header=2, phase=Phase.PROGRESSING)
    kept, _ = planner.plan(ab, with_header, 10, state, NAMES)
    assert kept.revision("m-v2").replicas == 4  # type: ignore[union-attr]


def test_abort_restores_stable_capacity_before_moving_traffic() -> None:
    # Canary at 50 %, stable shrunk to 5: abort pre-scales stable to 10 first.
    obs = observed(rev(1, weight=50, desired=5), rev(2, weight=50, desired=5))
    result, _ = planner.plan(intent({1: 100}, abort=True), obs, 10, planner.PlannerState(), NAMES)
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    assert stable.replicas == 10 and stable.weight == 50
    assert canary.weight == 50 and canary.replicas == 5


def test_hard_abort_moves_traffic_at_once() -> None:
    obs = observed(rev(1, weight=50, desired=5), rev(2, weight=50, desired=5))
    result, _ = planner.plan(
        intent({1: 100}, abort=True, hard=True), obs, 10, planner.PlannerState(), NAMES
    )
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    assert (stable.weight, stable.replicas) == (100, 10)
    assert canary.weight == 0 and canary.reason == "AbortedHard"


def test_promotion_keeps_the_current_size() -> None:
    obs = observed(rev(1, weight=50, desired=5), rev(2, weight=50, desired=5))
    result, _ = planner.plan(intent({2: 100}), obs, 10, planner.PlannerState(), NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and canary.replicas == 10


def test_header_route_waits_for_capacity() -> None:
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=0, ready=0))
    result, _ = planner.plan(intent({1: 100}, header=2), obs, 10, planner.PlannerState(), NAMES)
    assert result.header_revision is None
    assert result.revision("m-v2").replicas == 1  # type: ignore[union-attr]
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=1, ready=1))
    result, _ = planner.plan(intent({1: 100}, header=2), obs, 10, planner.PlannerState(), NAMES)
    assert result.header_revision == "m-v2"


def test_retired_revision_is_removed_after_the_hold() -> None:
    state = planner.PlannerState(
        replicas={"m-v1": 5, "m-v2": 5}, lowered_at={"m-v1": 0.0}, hold_s={"m-v1": 30.0}
    )
    obs = observed(rev(1, weight=0, desired=5), rev(2, weight=100, desired=5), now=40.0)
    result, _ = planner.plan(Intent(stable=2, canary=None, weights={2: 100}), obs, 5, state, NAMES)
    assert result.revision("m-v1") is None
    assert [r.name for r in result.revisions] == ["m-v2"]


def test_a_canary_at_weight_zero_is_planned_from_its_scale() -> None:
    # A blue/green preview (or a setCanaryScale step before any setWeight) wants the
    # canary sized before it has traffic or even exists: it must be planned, not skipped.
    obs = observed(rev(1, weight=100, desired=8))
    preview = intent({1: 100}, canary_scale=("weight", 100))
    result, _ = planner.plan(preview, obs, 8, planner.PlannerState(), NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and (canary.replicas, canary.weight) == (8, 0)
    assert canary.reason == "PreScaling"
    fixed = intent({1: 100}, canary_scale=("replicas", 3))
    result, _ = planner.plan(fixed, obs, 8, planner.PlannerState(), NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and (canary.replicas, canary.weight) == (3, 0)
    # Without a scale the weight-0 canary gets nothing (it is not listed at all).
    result, _ = planner.plan(intent({1: 100}), obs, 8, planner.PlannerState(), NAMES)
    assert result.revision("m-v2") is None


def test_a_canary_scale_under_the_next_weights_need_is_a_floor_not_a_cap() -> None:
    # setCanaryScale {replicas: 2}, then setWeight 50 of demand 5: 3 replicas needed.
    # Held at 2, the weight would wait at 40 % for capacity that is never ordered.
    obs = observed(rev(1, weight=60, desired=3), rev(2, weight=40, desired=2))
    step = intent({1: 50, 2: 50}, canary_scale=("replicas", 2))
    result, _ = planner.plan(step, obs, 5, planner.PlannerState(), NAMES)
    canary = result.revision("m-v2")
    assert canary is not None and (canary.replicas, canary.weight) == (3, 40)
    # Above the need, the scale wins.
    step = intent({1: 50, 2: 50}, canary_scale=("replicas", 4))
    result, _ = planner.plan(step, obs, 5, planner.PlannerState(), NAMES)
    assert result.revision("m-v2").replicas == 4  # type: ignore[union-attr]


def test_a_weight_its_ready_replicas_no_longer_carry_goes_back_to_stable() -> None:
    # The canary got 20 % on 2 ready replicas at the borrowed cost 1; measured, it costs
    # 2.5x: 2 replicas carry ~14 % of demand 10 at that cost. The stable has 10 ready
    # replicas (it keeps its old size while draining): the excess goes back to it.
    heavy = planner.PlannerState(cost={"m-v2": 2.5})
    obs = observed(
        rev(1, weight=80, desired=10, rps=800, cpu=16.0),
        rev(2, weight=20, desired=2, rps=200, cpu=10.0),
    )
    result, _ = planner.plan(intent({1: 80, 2: 20}), obs, 10, heavy, NAMES)
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    # mix = 0.8 + 0.2 * 2.5 = 1.3; 2 replicas carry w with ceil(10 * w * 2.5 / 1.3) <= 2,
    # so w <= 10.4 %: it keeps 10 %, the stable's 10 ready replicas take the other 10 %.
    assert (stable.weight, canary.weight) == (90, 10)
    assert canary.reason == "WaitingForCapacity" and "gave 10 % back" in canary.message
    assert canary.replicas == 4  # pre-scaled for the 20 % it gets back once ready


def test_no_weight_goes_back_onto_a_stable_that_is_short_itself() -> None:
    heavy = planner.PlannerState(cost={"m-v2": 2.5})
    obs = observed(
        rev(1, weight=80, desired=6, rps=800, cpu=16.0),  # needs ceil(10 * 0.8 / 1.3) = 7
        rev(2, weight=20, desired=2, rps=200, cpu=10.0),
    )
    result, _ = planner.plan(intent({1: 80, 2: 20}), obs, 10, heavy, NAMES)
    assert result.revision("m-v2").weight == 20  # type: ignore[union-attr]


def test_cost_noise_within_the_carry_tolerance_moves_no_weight() -> None:
    # Measured 5 % dearer than its replicas were sized for: within the tolerance.
    obs = observed(
        rev(1, weight=80, desired=10, rps=800, cpu=16.0),
        rev(2, weight=20, desired=2, rps=200, cpu=4.2),
    )
    state = planner.PlannerState(cost={"m-v2": 1.05})
    result, _ = planner.plan(intent({1: 80, 2: 20}), obs, 10, state, NAMES)
    assert result.revision("m-v2").weight == 20  # type: ignore[union-attr]


def test_a_canary_measured_a_few_percent_dearer_is_sized_as_stable_at_a_rounding_edge() -> None:
    # 2 replicas of demand at 50/50: 1 each. Estimates 1.04, 0.97, 1.07 (noise on an
    # identical version) never make the canary's 1 replica 2, nor take one back.
    state = planner.PlannerState(cost={"m-v2": 1.0}, sizing_cost={"m-v2": 1.0})
    for cpu in (1.04, 0.97, 1.07, 1.0):
        obs = observed(
            rev(1, weight=50, desired=1, rps=10, cpu=1.0),
            rev(2, weight=50, desired=1, rps=10, cpu=cpu),
        )
        result, state = planner.plan(intent({1: 50, 2: 50}), obs, 2, state, NAMES)
        assert result.revision("m-v2").replicas == 1, (cpu, state.cost)  # type: ignore[union-attr]
        assert state.sizing_cost["m-v2"] == 1.0
    assert state.cost["m-v2"] != 1.0  # the estimate itself moved; sizing held


def test_a_canary_costlier_beyond_the_tolerance_is_sized_at_its_estimate() -> None:
    state = planner.PlannerState(cost={"m-v2": 1.0}, sizing_cost={"m-v2": 1.0})
    obs = observed(
        rev(1, weight=50, desired=5, rps=50, cpu=5.0),
        rev(2, weight=50, desired=5, rps=50, cpu=7.5),  # 1.5x: the estimate 1.15 at once
    )
    result, state = planner.plan(intent({1: 50, 2: 50}), obs, 10, state, NAMES)
    assert state.sizing_cost["m-v2"] == state.cost["m-v2"] > 1.1
    assert result.revision("m-v2").replicas == 6  # type: ignore[union-attr]  # ceil(10*.5*1.15/1.075)


def test_the_cost_sized_at_is_rebased_on_a_promotion() -> None:
    # v2 sized at 0.5 of v1; once v2 is stable, v1 is sized at 2 (not 1).
    state = planner.PlannerState(
        cost={"m-v1": 1.0, "m-v2": 0.5}, sizing_cost={"m-v1": 1.0, "m-v2": 0.5}
    )
    obs = observed(rev(1, weight=50, desired=4), rev(2, weight=50, desired=2))
    promoted = Intent(stable=2, canary=None, weights={2: 100}, phase=Phase.COMPLETED)
    _, state = planner.plan(promoted, obs, 4, state, NAMES)
    assert state.sizing_cost["m-v2"] == 1.0
    assert state.sizing_cost.get("m-v1", 2.0) == 2.0


def test_a_canary_that_lost_its_ready_replicas_gives_all_its_weight_back() -> None:
    obs = observed(
        rev(1, weight=80, desired=10, rps=800, cpu=16.0),
        rev(2, weight=20, desired=2, ready=0, available=False),
    )
    result, _ = planner.plan(intent({1: 80, 2: 20}), obs, 10, planner.PlannerState(), NAMES)
    assert result.revision("m-v1").weight == 100  # type: ignore[union-attr]
    canary = result.revision("m-v2")
    assert canary is not None and canary.weight == 0 and canary.replicas >= 2


def test_a_standby_pool_goes_to_each_revision_that_takes_traffic_and_no_other() -> None:
    pool = planner.Limits(standby=3)
    # A canary planned ahead of its traffic (weight 0) gets replicas, not a pool.
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=0, ready=0))
    result, _ = planner.plan(intent({1: 90, 2: 10}), obs, 10, planner.PlannerState(), NAMES, pool)
    stable, canary = result.revision("m-v1"), result.revision("m-v2")
    assert stable is not None and canary is not None
    assert (stable.standby, canary.weight, canary.standby) == (3, 0, 0)
    # Once it carries traffic it has its own.
    obs = observed(rev(1, weight=90, desired=10), rev(2, weight=10, desired=2))
    result, _ = planner.plan(intent({1: 90, 2: 10}), obs, 10, planner.PlannerState(), NAMES, pool)
    assert [(r.name, r.standby) for r in result.revisions] == [("m-v1", 3), ("m-v2", 3)]
    # The header route's revision takes traffic too (its matched requests).
    obs = observed(rev(1, weight=100, desired=10), rev(2, weight=0, desired=1, ready=1))
    result, _ = planner.plan(
        intent({1: 100}, header=2), obs, 10, planner.PlannerState(), NAMES, pool
    )
    assert result.header_revision == "m-v2" and result.revision("m-v2").standby == 3  # type: ignore[union-attr]
    # Without a pool asked for, none.
    result, _ = planner.plan(intent({1: 100}, header=2), obs, 10, planner.PlannerState(), NAMES)
    assert all(r.standby == 0 for r in result.revisions)


def test_a_drained_revision_loses_its_pool_with_its_last_weight() -> None:
    # v2 takes all the traffic (its replicas are ready); v1 keeps its replicas while it
    # drains (rule 2), but no pool: it takes no traffic any more.
    obs = observed(rev(1, weight=100, desired=5), rev(2, weight=0, desired=5))
    pool = planner.Limits(standby=2)
    result, _ = planner.plan(
        intent({2: 100}, hold_s=30.0), obs, 5, planner.PlannerState(), NAMES, pool
    )
    old, new = result.revision("m-v1"), result.revision("m-v2")
    assert old is not None and new is not None
    assert (old.weight, new.weight) == (0, 100)
    assert old.replicas == 5 and old.standby == 0
    assert new.standby == 2
