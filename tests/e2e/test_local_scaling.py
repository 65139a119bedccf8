"""A load step x5 on the local runtime: the service scales out, p99 comes back under the
SLO, and no request fails."""

from __future__ import annotations

import time
from pathlib import Path

from servectl.api import validation
from servectl.testing.load import Load
from tests import pace
from tests.e2e.conftest import LocalRuntime, deploy, predict, service_doc

STEP_AT_S = 120.0  # seconds into the load: the base load until then
NOMINAL_SLO_MS = 250.0
NOMINAL_BASE, NOMINAL_HIGH = 6.0, 30.0  # a step x5, scaled to this machine (tests/pace.py)


def test_a_load_step_scales_out_and_p99_comes_back_with_no_failed_request(
    runtime: LocalRuntime, demo_models: Path, tmp_path: Path
) -> None:
    doc = service_doc(demo_models)
    # Paced by a request's time alone: saturating the service's own replica (CI,
    # 2026-12-05) left the engine 3 replicas to shed before the step.
    port = deploy(runtime, doc)
    paced = pace.measure(lambda: predict(port), NOMINAL_BASE)
    base, high = paced.rps(NOMINAL_BASE), paced.rps(NOMINAL_HIGH)
    slo_ms = paced.slo_ms(NOMINAL_SLO_MS)
    print(f"\n{paced}: {base:g} -> {high:g} requests/s, SLO {slo_ms:g} ms")
    doc["spec"]["autoscaling"]["signals"] = [
        {"type": "cpu", "targetUtilization": 70},
        {"type": "latency", "percentile": 99, "targetMs": slo_ms},
    ]
    runtime.client.deploy(validation.load_model_service(doc))

    def total() -> int:
        return sum(r["desiredReplicas"] for r in runtime.status("cost")["revisions"])

    # Warm up on the base load until the service is steady on one replica: the step is
    # then the only change (a service's first seconds of traffic are not the test). One
    # Locust run throughout: a second one for the step left a gap with no traffic, and the
    # load coming back after it read as a second surge (burst memory: a scale-out before
    # the step, CI 2026-11-28).
    trace = [(0, 1), (15, base), (STEP_AT_S - 1, base), (STEP_AT_S, high), (3600, high)]
    load = Load(tmp_path / "load", port, trace, "step")
    started = time.time()
    p99: list[tuple[float, float]] = []  # (seconds after the step, p99 ms)
    try:
        time.sleep(20)
        runtime.wait(lambda: total() == 1, STEP_AT_S - 35, "one replica on the base load")
        time.sleep(max(0.0, STEP_AT_S - (time.time() - started)))
        assert total() == 1, [e.message for e in runtime.client.events("default", "cost")]

        def settled() -> bool:
            cycle = runtime.client.store.get_setting("cycle/default/cost") or {}
            value = (cycle.get("service", {}).get("latencyMs") or {}).get("p99")
            if value is not None:
                p99.append((time.time() - started - STEP_AT_S, value))
            status = runtime.status("cost")
            desired = sum(r["desiredReplicas"] for r in status["revisions"])
            ready = sum(r["readyReplicas"] for r in status["revisions"])
            recent = [v for t, v in p99[-5:]]
            return desired >= 2 and ready == desired and len(recent) == 5 and max(recent) < slo_ms

        try:
            runtime.wait(settled, 90, "the scale-out and p99 under the SLO")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\np99 after the step: {p99}") from None
    except BaseException:
        load.abandon()
        raise
    summary = load.finish()
    scaled = [e for e in runtime.client.events("default", "cost") if e.reason == "Scaled"]
    first_up = next(e.time for e in scaled if e.time >= started + STEP_AT_S)
    assert first_up - (started + STEP_AT_S) < 15, scaled  # docs/benchmarks.md has the figure
    assert summary.total.requests > 0.8 * base * (STEP_AT_S - 15)  # the base load's alone
    assert summary.total.failures == 0, summary.failures
