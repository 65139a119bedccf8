"""``servectl demo --kubernetes``'s story on the shared stack (the set-up the demo runs is
servectl.testing.k8s.stack.Stack, this package's own): a load step x5 scales out and p99
comes back under the SLO, a good v2 is promoted, a failing v3 is rolled back, the load
drops and so do the replicas; no request fails but v3's own, and the report is written."""

from __future__ import annotations

import time
from pathlib import Path

from servectl.demo import kubernetes as kube_demo
from servectl.demo import report
from servectl.demo.story import SERVICE, DemoSettings, Story
from servectl.testing.k8s import stack
from tests.integration.k8s_node.conftest import NS
from tests.integration.k8s_node.stack.conftest import MODELSERVICES


def test_the_demo_story_on_the_real_node(shared: stack.Stack, tmp_path: Path) -> None:
    settings = kube_demo.defaults(DemoSettings(out=tmp_path / "demo"))
    began = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - began:5.0f} s] {line}")

    target = kube_demo.KubeTarget(settings, say, namespace=NS)
    target.attach(shared)
    try:
        target.deploy()
        result = Story(settings, target, say).run(began)
    finally:
        shared.node.cluster.request("DELETE", f"{MODELSERVICES}/{SERVICE}")
    result.notes = target.notes()
    report.write_report(result)
    outcomes = {p.name: p.outcome for p in result.phases}
    assert outcomes == {
        "scale-up": "settled",
        "canary v2": "Completed",
        "failing v3": "Aborted",
        "scale-down": "scaled down",
    }
    caused = {p.name: p.failures - p.model_failures for p in result.phases}
    assert not any(caused.values()), caused
    assert result.phases[0].model_failures > 0  # v3 ran under the load and failed its share
    assert result.decision_s is not None and result.recovered_s is not None
    assert target.pod_ready_s, "no model pod was seen Ready"
    assert result.report is not None and "a real one-node Kubernetes cluster" in (
        result.report.read_text()
    )
    print(
        f"\ndemo on the node: step -> decision {result.decision_s:.1f} s, -> p99 under "
        f"{settings.slo_ms:g} ms {result.recovered_s:.1f} s; "
        + "; ".join(f"{p.name} {p.outcome} {p.end_t - p.start_t:.0f} s" for p in result.phases)
        + f"; requests {sum(p.requests for p in result.phases)}, failed "
        f"{sum(p.failures for p in result.phases)} (all v3's own); " + " ".join(target.notes()[-1:])
    )
