"""A controller killed (``kill -9``) at a canary's 80/20 step under load and started again
(issue 25, item 5): no replica churn, no weight moving back, one or two WeightsChanged
events per step. Real processes: the controller, model servers on the demo SavedModels,
HAProxy, Prometheus, Locust (about 2 minutes)."""

from __future__ import annotations

import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from servectl.rollout.machine import Op
from servectl.testing.load import Load
from tests.e2e.conftest import LocalRuntime, deploy, service_doc

CANARY: dict[str, Any] = {
    "strategy": "canary",
    "steps": [
        {"setWeight": 20},
        {"pause": {"seconds": 15}},
        {"setWeight": 50},
        {"pause": {"seconds": 10}},
        {"setWeight": 100},
    ],
    "drainSeconds": 5,
}
DOWN_S = 10.0  # the controller stays down this long
KEPT_S = 20.0
"""A replica started for the rollout serves at least this long: as long as it took to
start (9-11 s for the demo's model at half a core) and as long again."""


class Watch:
    """Samples, every 0.25 s, the replicas the supervisor records and the weights the
    status shows."""

    def __init__(self, rt: LocalRuntime) -> None:
        self.rt = rt
        self.seen: dict[str, tuple[float, float]] = {}  # pod -> (first seen, last seen)
        self.weights: list[tuple[float, dict[str, int]]] = []
        # What decided the replicas, each time it changed: the demand, each revision's
        # desired/ready/weight and the planner's cost estimates (shown when a check fails).
        self.trace: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from servectl.backends.local.client import LocalClient

        client = LocalClient(self.rt.state_dir)  # its own connection, in this thread
        try:
            while not self.stop.is_set():
                now = time.time()
                for record in client.replicas():
                    pod = record["spec"]["pod"]
                    first = self.seen.get(pod, (now, now))[0]
                    self.seen[pod] = (first, now)
                status = client.status("default", "cost") or {}
                weights = {r["name"]: r.get("weight", 0) for r in status.get("revisions", [])}
                if not self.weights or self.weights[-1][1] != weights:
                    self.weights.append((now, weights))
                self._note(now, client, status)
                self.stop.wait(0.25)
        finally:
            client.close()

    def _note(self, now: float, client: Any, status: dict[str, Any]) -> None:
        state = client.loop_state("default", "cost")
        costs = {} if state is None else {k: round(v, 2) for k, v in state.planner.cost.items()}
        sized = {} if state is None else dict(state.planner.sizing_cost)
        revs = " ".join(
            f"{r['name']}={r.get('desiredReplicas', 0)}/{r.get('readyReplicas', 0)}"
            f"@{r.get('weight', 0)}"
            for r in status.get("revisions", [])
        )
        scaling = status.get("autoscaling") or {}
        line = f"demand={scaling.get('desiredReplicas')} {revs} cost={costs} sized at {sized}"
        if not self.trace or not self.trace[-1].endswith(line):
            self.trace.append(f"{time.strftime('%H:%M:%S', time.localtime(now))} {line}")

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _phase(rt: LocalRuntime) -> str:
    return str((rt.status("cost").get("rollout") or {}).get("phase", "Idle"))


def _weights(rt: LocalRuntime) -> dict[str, int]:
    return {r["name"]: r.get("weight", 0) for r in rt.status("cost").get("revisions", [])}


def test_a_controller_killed_at_80_20_and_started_again_causes_no_churn(
    runtime: LocalRuntime, demo_models: Path, tmp_path: Path
) -> None:
    autoscaling = {
        "minReplicas": 2,
        "maxReplicas": 4,
        "coldStartSeconds": 10,
        "signals": [{"type": "cpu", "targetUtilization": 70}],
        "behavior": {"scaleDown": {"stabilizationSeconds": 30}},
    }
    port = deploy(runtime, service_doc(demo_models, autoscaling=autoscaling, rollout=CANARY))
    runtime.wait(lambda: runtime.ready("cost").get("cost-v1", 0) >= 2, 90, "two v1 replicas")
    # A load the service carries at its minimum with room to spare: 8 requests/s of
    # cost_model (cost 400: 54-70 ms of CPU each, by the day) is 0.4-0.6 cores, under two
    # 500m replicas at 70 %. (CI failed here three times on 2026-12-05/06, at 20/s and at
    # 8/s: the planner sized an identical canary at its noisy cost estimate, and 1.01x at
    # an exact rounding edge, 2 replicas of demand at 50/50 or at 100 %, ordered a replica
    # it took back a cycle later; costs are now sized within a 10 % tolerance.)
    load = Load(tmp_path / "load", port, [(0, 4), (10, 8), (3600, 8)], "restart")
    watch: Watch | None = None
    try:
        time.sleep(15)  # the load on, the rates over it
        watch = Watch(runtime)
        started = time.time()
        runtime.client.rollout("default", "cost", Op.START, 2)
        runtime.wait(lambda: _weights(runtime).get("cost-v2") == 20, 90, "the 80/20 step")
        runtime.kill_controller()
        time.sleep(DOWN_S)
        restarted = time.time()
        runtime.start()
        runtime.wait(lambda: _phase(runtime) == "Completed", 150, "the rollout to complete")
        # Not watched much past the completion: once alone, the promoted revision gets
        # the autoscaler's demand, and a canary measured costlier than stable (1.12x on a
        # loaded machine: fresh replicas' first requests) was sized 3 at the last step and
        # given 2 once alone, 4 s after it completed (docs/rollouts.md, "Sizing at the
        # promotion"): a rollout's sizing, not the restart's churn this test is about.
        time.sleep(2)
    except BaseException:
        load.abandon()
        if watch is not None:
            watch.finish()
        raise
    watch.finish()
    summary = load.finish()
    assert _weights(runtime).get("cost-v2") == 100

    # 1. No churn: every replica started for the rollout served before it went.
    ended = time.time()
    churned = {
        pod: round(last - first)
        for pod, (first, last) in watch.seen.items()
        if first >= started and last < ended - 3 and last - first < KEPT_S
    }
    trace = "\n".join(watch.trace)
    assert not churned, f"started then stopped within {KEPT_S:g} s: {churned}\n{trace}"
    after = sorted(pod for pod, (first, _) in watch.seen.items() if first >= restarted)
    assert all(pod.startswith("cost-v2-") for pod in after), after

    # 2. No weight moved back: the canary's only rose, the stable's only fell.
    moves = [(a, b) for (_, a), (_, b) in pairwise(watch.weights) if a and b]
    back = [
        (a, b)
        for a, b in moves
        if b.get("cost-v2", 0) < a.get("cost-v2", 0) or b.get("cost-v1", 0) > a.get("cost-v1", 0)
    ]
    assert not back, back

    # 3. Coalesced events: three weight steps, at most a begin and an end each.
    events = [
        e
        for e in runtime.client.store.events("default", "cost", limit=500)
        if e.reason == "WeightsChanged" and e.time >= started
    ]
    assert 3 <= len(events) <= 6, [e.message for e in events]
    assert not any("away from" in e.message for e in events), [e.message for e in events]
    assert summary.total.requests > 500
    assert summary.total.failures == 0, summary.failures
