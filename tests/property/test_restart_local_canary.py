"""A controller killed at any tick of a canary under load and started again: no churn, no
weight moving back, no request without a replica (issue 25, item 5).

Through the code a ``kill -9`` of ``servectl controller`` and ``servectl up`` exercise
(:mod:`tests.property.local_world`: the store, the supervisor's records and adoption, the
fleet, the local backend and the driver, on a simulated machine): a service of two
identical versions under a constant load rolls out a canary (20 %, a pause, 50 %, a
pause, 100 %); the controller is killed at any tick of it, stays down for up to 20 s, and
comes back. Invariants, from the rollout's start to its end:

1. no replica started for the rollout is stopped before it has served as long as it
   took to start (a cold start): an ordered replica is not cut again on noise;
2. no weight moves away from the rollout's direction: the canary's never falls, the
   stable's never rises;
3. no request meets a revision with weight and no replica to serve it (HAProxy answers
   503): a restarted controller takes no replica out of the router.

Before the fix (``git worktree`` of the commit before), 118 of 200 random cases broke 1
or 2, with or without a restart (a replica settling, draining or just stopped made CPU
per request read wrong, so the planner moved replicas and weight between two identical
versions), and with replicas slow to answer their status check, 26 of 60 broke 3 after a
restart (adopted as STARTING, they left HAProxy for 2-4 s).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.property.local_world import COLD_S, Controller, Machine, running

SPEC: dict[str, Any] = {
    "runtime": {"resources": {"cpu": "500m", "memory": "1Gi"}},
    "autoscaling": {
        "minReplicas": 1,
        "maxReplicas": 10,
        "coldStartSeconds": 10,
        "signals": [{"type": "cpu", "targetUtilization": 70}],
        "behavior": {"scaleDown": {"stabilizationSeconds": 30}},
    },
    "rollout": {
        "strategy": "canary",
        "steps": [
            {"setWeight": 20},
            {"pause": {"seconds": 20}},
            {"setWeight": 50},
            {"pause": {"seconds": 20}},
            {"setWeight": 100},
        ],
        "drainSeconds": 5,
    },
}
WARM_S = 60  # the load is on and the service sized before the rollout starts
LIMIT_S = 400


def run(rps: float, restart_after: int, gap_s: int, status_s: float) -> list[str]:
    """The invariants' violations, in words."""
    machine = Machine(rps=rps, status_s=status_s)
    with running(machine) as root:
        controller = Controller(root, machine, SPEC)
        start = machine.now + WARM_S
        for tick in range(LIMIT_S):
            if tick == WARM_S:
                controller.command("start", 2)
            if tick == WARM_S + restart_after:
                controller.restart(gap_s)
            cycle = controller.tick()
            if tick > WARM_S and cycle is not None and cycle.outcome.plan.phase == "Completed":
                break
        timeline = controller.timeline
    problems = []
    phases = [str(c.outcome.plan.phase) for c in timeline.cycles]
    if "Completed" not in phases:
        problems.append(f"the rollout did not complete: {phases[-1]}")
    for pod, started in sorted(timeline.started.items()):
        stopped = timeline.drained.get(pod)
        if started >= start and stopped is not None and stopped - started < 2 * COLD_S:
            problems.append(
                f"{pod} started at t={started - start:.0f} s, drained at "
                f"t={stopped - start:.0f} s (before it served a cold start)"
            )
    weights = [
        (c.time, {r.name: r.weight for r in c.outcome.plan.revisions})
        for c in timeline.cycles
        if c.time >= start
    ]
    for (_, before), (t, after) in pairwise(weights):
        if after.get("cost-v2", 0) < before.get("cost-v2", 0) or after.get(
            "cost-v1", 0
        ) > before.get("cost-v1", 0):
            problems.append(f"t={t - start:.0f} s: weights went back {before} -> {after}")
    for t, revision, lost in machine.lost:
        if t >= start:
            problems.append(f"t={t - start:.0f} s: {lost:.0f} req/s to {revision}, no replica")
    return problems


@example(rps=15.0, restart_after=35, gap_s=14, status_s=0.5)  # the issue's: 80/20, 14 s
@example(rps=80.0, restart_after=0, gap_s=3, status_s=0.01)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rps=st.floats(10.0, 95.0),
    restart_after=st.integers(0, 110),
    gap_s=st.integers(1, 20),
    status_s=st.sampled_from([0.01, 0.5]),
)
def test_a_controller_restarted_mid_canary_causes_no_churn(
    rps: float, restart_after: int, gap_s: int, status_s: float
) -> None:
    problems = run(rps, restart_after, gap_s, status_s)
    assert not problems, "\n".join(problems)
