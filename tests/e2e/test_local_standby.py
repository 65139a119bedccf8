"""Warm standby on the local runtime (issue 28, docs/standby.md), with real processes: the
controller, model servers on the demo SavedModels, HAProxy, Prometheus, Locust (about two
minutes).

A service with ``standby: {replicas: 1}`` keeps one replica loaded beside the serving one,
parked (its cgroup's CPU quota at 20m) and out of HAProxy. A load step takes it first: the
same process serves (no cold start), and a new standby replica is started and parked
behind it. A controller killed and started again adopts the pool as it is: no process
started, the quota still parked. No request fails throughout. The step's timings are
printed (``-s``); ``servectl bench --local`` publishes them beside a run without standby.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from servectl.testing.load import Load
from tests.e2e.conftest import LocalRuntime, deploy, service_doc

AUTOSCALING: dict[str, Any] = {
    "minReplicas": 1,
    "maxReplicas": 3,
    "coldStartSeconds": 10,
    "signals": [{"type": "cpu", "targetUtilization": 70}],
    "behavior": {"scaleDown": {"stabilizationSeconds": 300}},  # no scale-down in the test
    "standby": {"replicas": 1},
}
PARKED_QUOTA_US = "2000"  # 20m of a 100,000 us period


def _processes(rt: LocalRuntime) -> dict[str, dict[str, Any]]:
    """The supervisor's records of the service's replicas that are not stopping, by pod."""
    return {
        r["spec"]["pod"]: r
        for r in rt.client.replicas()
        if r["spec"]["service"] == "cost" and r.get("stop_deadline") is None
    }


def _quota(record: dict[str, Any]) -> str | None:
    group = record.get("cgroup_cpu")
    if group is None:
        return None
    try:
        return (Path(group) / "cpu.cfs_quota_us").read_text().strip()
    except OSError:
        return None


def _pool(rt: LocalRuntime) -> tuple[dict[str, float], dict[str, float]]:
    record = rt.client.record("default", "cost")
    assert record is not None
    return dict(record.standby), dict(record.parked)


def _revision(rt: LocalRuntime) -> dict[str, Any]:
    for r in rt.status("cost").get("revisions", []):
        if r["name"] == "cost-v1":
            return dict(r)
    return {}


def _parked_pool(rt: LocalRuntime) -> str | None:
    """The pool's one member once it is parked (its quota lowered), else None."""
    pool, parked = _pool(rt)
    if len(pool) != 1 or set(pool) != set(parked):
        return None
    pod = next(iter(pool))
    record = _processes(rt).get(pod)
    if record is None or record.get("phase") != "READY":
        return None
    quota = _quota(record)
    return pod if quota in (None, PARKED_QUOTA_US) else None


def _events(rt: LocalRuntime, since: float) -> str:
    """The service's events from 20 s before ``since`` (wall clock), timed from it."""
    return "\n".join(
        f"  {e.time - since:+6.1f} s {e.reason}: {e.message}"
        for e in rt.client.store.events("default", "cost", limit=100)
        if e.time >= since - 20
    )


def test_a_standby_replica_is_parked_taken_by_a_step_refilled_and_adopted(
    runtime: LocalRuntime, demo_models: Path, tmp_path: Path
) -> None:
    port = deploy(runtime, service_doc(demo_models, autoscaling=AUTOSCALING))
    first = runtime.wait(lambda: _parked_pool(runtime), 90, "a parked standby replica")
    pid = _processes(runtime)[first]["pid"]
    runtime.wait(lambda: _revision(runtime).get("standbyReplicas") == 1, 15, "standbyReplicas")
    parked_quota = _quota(_processes(runtime)[first])
    assert parked_quota in (None, PARKED_QUOTA_US), parked_quota

    # A step from 3 to 24 requests/s (version 1 of cost_model takes ~21 ms of CPU a
    # request: 0.06 cores to 0.5, past one 500m replica at 70 % and within two).
    step_wall = time.time() + 15
    load = Load(tmp_path / "load", port, [(0, 3), (15, 3), (15.01, 24), (3600, 24)], "standby")
    try:
        time.sleep(13)
        serving_before = {p for p in _processes(runtime) if p not in _pool(runtime)[0]}
        # Sampled in the step (it comes at 15 s): what serves, and when the pool member
        # began to (it leaves the pool, its quota goes back, HAProxy routes it).
        step, step_wall = time.monotonic() + 2, time.time() + 2
        activated_at = None
        while time.monotonic() < step + 60:
            if first not in _pool(runtime)[0] and activated_at is None:
                activated_at = time.monotonic()
            if activated_at is not None and _revision(runtime).get("readyReplicas", 0) >= 2:
                break
            time.sleep(0.1)
        routed_at = time.monotonic()
        assert activated_at is not None, "the step never took the standby replica"
        print(
            f"\nstep -> standby replica taken: {activated_at - step:.1f} s; "
            f"-> 2 ready replicas: {routed_at - step:.1f} s"
        )
        print(_events(runtime, step_wall))
        taken = _processes(runtime)[first]
        assert taken["pid"] == pid, "the standby replica's process was replaced"
        assert _quota(taken) in (None, "50000"), "its CPU did not come back"
        assert routed_at - activated_at < 5, "a taken standby replica was not routed at once"

        # Refilled behind it: a new replica started for the pool, parked once loaded.
        refill = runtime.wait(
            lambda: (p := _parked_pool(runtime)) not in (None, first) and p, 90, "the refill"
        )
        assert refill not in serving_before
    except BaseException:
        load.abandon()
        print(_events(runtime, step_wall))
        print(runtime.status("cost"))
        raise

    # A controller killed and started again adopts the pool: no process started.
    before = {pod: r["pid"] for pod, r in _processes(runtime).items()}
    runtime.kill_controller()
    time.sleep(3)
    runtime.start()
    time.sleep(8)
    summary = load.finish()
    after = {pod: r["pid"] for pod, r in _processes(runtime).items()}
    assert after == before, f"replicas changed over the restart: {before} -> {after}"
    assert _parked_pool(runtime) == refill
    assert _revision(runtime).get("standbyReplicas") == 1
    assert summary.total.requests > 300
    assert summary.total.failures == 0, summary.failures
