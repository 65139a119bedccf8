"""Scaling on the real node under Locust load through the Gateway (issue 26, "Done when"):
a load step x5 scales the Deployment out, the new pods pass their probes, p99 (as servectl
reads it from the real Prometheus) comes back under the SLO, and no request fails; then,
back on the base load, at least three pods are removed with zero failed requests (the
pod's endpoint leaves the Gateway while its preStop drain still serves)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from servectl.metrics.config import MetricsConfig
from servectl.metrics.source import PrometheusSource
from servectl.testing.k8s import gateway, stack
from servectl.testing.k8s.monitoring import Monitoring
from servectl.testing.k8s.node import Node
from servectl.testing.load import Load
from tests import pace
from tests.integration.k8s_node.conftest import NS, get, until
from tests.integration.k8s_node.stack.conftest import start

NAME = "step"
# Nominal figures, scaled to this machine by the package's `paced` fixture (tests/pace.py).
SLO_MS = 500.0  # at 250 the latency signal asked 1.01 replicas on the base load (CI, 2026-12-05)
BASE, HIGH = 5.0, 25.0  # a step x5
PER_REPLICA = 8.0  # rps a replica is sized for: 1 replica at BASE, 4 (the most) at HIGH
# (BASE at 5/8 of PER_REPLICA: with 6 per replica the rps signal read 6.8-6.9 requests/s
# on a steady 4 or 5, once a run, and a replica count of 1.13 panicked to 2 before the step.)
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-v1"


def replicas(node: Node) -> tuple[int, int]:
    """The Deployment's (desired, ready) replicas."""
    doc = get(node, DEPLOYMENT)
    return int((doc.get("spec") or {}).get("replicas") or 0), int(
        (doc.get("status") or {}).get("readyReplicas") or 0
    )


def test_a_load_step_scales_out_and_scale_downs_drop_no_request(
    node: Node,
    traefik: gateway.Ports,
    monitoring: Monitoring,
    servectl_on_node: stack.Images,
    paced: pace.Pace,
    service: list[str],
    tmp_path: Path,
) -> None:
    base, high, slo_ms = paced.rps(BASE), paced.rps(HIGH), paced.slo_ms(SLO_MS)
    autoscaling = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "coldStartSeconds": 10,
        "signals": [
            {"type": "rps", "targetPerReplica": paced.rps(PER_REPLICA)},
            {"type": "latency", "percentile": 99, "targetMs": slo_ms},
        ],
        "behavior": {"scaleDown": {"stabilizationSeconds": 15}},
    }
    rollout = {"strategy": "canary", "drainSeconds": 5}
    service.append(NAME)
    start(node, servectl_on_node, NAME, rollout, traefik.web, autoscaling)
    source = PrometheusSource(monitoring.url, MetricsConfig())
    p99: list[tuple[float, float]] = []  # (seconds after the step, ms)
    sizes: list[tuple[float, int, int]] = []  # (seconds after the step, desired, ready)

    def sample(since: float) -> None:
        now = time.monotonic() - since
        sizes.append((now, *replicas(node)))
        found = [r for k, r in source.snapshot().revisions.items() if k[:2] == (NS, NAME)]
        value = found[0].signals.latency_ms.get("p99") if found else None
        if value is not None:
            p99.append((now, value))

    # One load from the start: the base load until the step, then x5. (A second Locust run
    # for the step left a gap with no traffic, and the base load coming back after it read
    # as a surge: the service scaled out before the step.)
    step_at = 60.0  # the rate window (1 m) full of the base load
    trace = [(0, base), (step_at - 1, base), (step_at, high), (3600, high)]
    load = Load(tmp_path / "load", traefik.web, trace, "step")
    began = time.monotonic()
    try:
        time.sleep(30)  # a rate window's worth of base load
        until(lambda: replicas(node) == (1, 1), "one replica on the base load", step_at - 40)
        time.sleep(max(0.0, step_at - (time.monotonic() - began)))
        stepped = time.monotonic()
        assert replicas(node) == (1, 1), scalings(node, NAME)

        def settled() -> bool:
            sample(stepped)
            desired, ready = sizes[-1][1:]
            recent = [v for _, v in p99[-5:]]
            return desired >= 2 and ready == desired and len(recent) == 5 and max(recent) < slo_ms

        try:
            until(settled, "the scale-out and p99 under the SLO", 150)
        except AssertionError as error:
            raise AssertionError(f"{error}; sizes {sizes}; p99 {p99}") from None
        settled_at = sizes[-1][0]
        first_up = next(t for t, desired, _ in sizes if desired >= 2)
        under_slo = p99[-5][0]
        peak = max(desired for _, desired, _ in sizes)
        until(lambda: replicas(node) == (4, 4), "four replicas Ready at the step's load", 120)
    except BaseException:
        load.abandon()
        raise
    summary = load.finish()
    print(
        f"\n{paced}: {base:g} -> {high:g} requests/s, SLO {slo_ms:g} ms\n"
        f"step x5: first scale-out {first_up:.1f} s after the step; scaled out, every pod "
        f"Ready and p99 under {slo_ms:g} ms for 5 samples (from {under_slo:.1f} s) at "
        f"{settled_at:.1f} s; {peak} replicas then; "
        f"{summary.total.requests} requests, {summary.total.failures} failed"
    )
    assert summary.total.failures == 0, summary.failures

    # Back on the base load: the service shrinks to one replica, pod by pod or at once.
    down = Load(tmp_path / "load", traefik.web, [(0, base), (3600, base)], "down")
    removed: list[int] = []
    try:
        began = time.monotonic()
        last = 4

        def shrunk() -> bool:
            nonlocal last
            desired, _ = replicas(node)
            if desired < last:
                removed.append(last - desired)
                last = desired
            return replicas(node) == (1, 1)

        until(shrunk, "back to one replica on the base load", 240)
        took = time.monotonic() - began
        time.sleep(5)  # the last removed pod's drain ends; its requests are all answered
    except BaseException:
        down.abandon()
        raise
    summary = down.finish()
    print(
        f"scale-downs {removed} (pods removed each time) in {took:.0f} s; "
        f"{summary.total.requests} requests, {summary.total.failures} failed"
    )
    assert sum(removed) >= 3
    assert summary.total.failures == 0, summary.failures


def scalings(node: Node, name: str) -> list[str]:
    """The messages of the Scaled events about ModelService ``name``: each decision and why."""
    listed = get(node, f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name={name}")
    found = sorted(listed.get("items", []), key=lambda e: e["lastTimestamp"])
    return [e["message"] for e in found if e["reason"] == "Scaled"]


def events(node: Node, name: str) -> list[str]:
    """The reasons of the events about ModelService ``name``, oldest first."""
    listed = get(node, f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name={name}")
    return [e["reason"] for e in sorted(listed.get("items", []), key=lambda e: e["lastTimestamp"])]


def metrics_condition(node: Node, name: str) -> dict[str, str]:
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{name}"
    found = (get(node, path).get("status") or {}).get("conditions") or []
    return next((c for c in found if c["type"] == "MetricsAvailable"), {})


def test_with_prometheus_stopped_the_controller_holds_and_says_so_then_resumes(
    node: Node,
    traefik: gateway.Ports,
    monitoring: Monitoring,
    servectl_on_node: stack.Images,
    paced: pace.Pace,
    service: list[str],
    tmp_path: Path,
) -> None:
    """DESIGN §4 rule 8 on the real node: no signals, no scale-down and no guess; the
    ModelService says so (MetricsAvailable False, event MetricsUnavailable). Prometheus back:
    MetricsRestored, and the load that came meanwhile scales the service out."""
    name = "hold"
    autoscaling = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "signals": [{"type": "rps", "targetPerReplica": paced.rps(PER_REPLICA)}],
    }
    rollout = {"strategy": "canary", "drainSeconds": 5}
    service.append(name)
    start(node, servectl_on_node, name, rollout, traefik.web, autoscaling)
    deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}-v1"
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{name}"

    def desired() -> int:
        return int((get(node, deployment).get("spec") or {}).get("replicas") or 0)

    load = Load(
        tmp_path / "load", traefik.web, [(0, paced.rps(BASE)), (3600, paced.rps(BASE))], "base"
    )
    try:
        until(lambda: metrics_condition(node, name).get("status") == "True", "metrics", 90)
        # The size it holds is the one it has when the signals go: 1 at the base load, or
        # 2 where a fresh replica's first slow requests made it scale out at the start
        # (CI, 2026-12-06: held at 2 throughout, correctly, and the test expected 1).
        before = desired()
        monitoring.prometheus.stop()
        stopped = time.monotonic()
        until(
            lambda: metrics_condition(node, name).get("status") == "False",
            "MetricsAvailable False once Prometheus is gone",
            60,
        )
        said = time.monotonic() - stopped
        message = metrics_condition(node, name).get("message", "")
    except BaseException:
        load.abandon()
        if not monitoring.prometheus.running:
            monitoring.prometheus.start()
        raise
    load.abandon()
    high = Load(
        tmp_path / "load", traefik.web, [(0, paced.rps(HIGH)), (3600, paced.rps(HIGH))], "high"
    )
    try:
        held = []
        for _ in range(24):  # 12 s of x5 load with no signals (6 ticks): the size holds
            held.append(desired())
            time.sleep(0.5)
        monitoring.prometheus.start()
        restarted = time.monotonic()
        until(lambda: metrics_condition(node, name).get("status") == "True", "metrics back", 90)
        assert before < 3, f"at the most (3) before the outage: {scalings(node, name)}"
        try:
            until(lambda: desired() > before, "the scale-out once metrics are back", 90)
        except AssertionError as error:
            said = (get(node, path).get("status") or {}).get("autoscaling")
            raise AssertionError(f"{error}: {said}; {scalings(node, name)}") from None
        resumed = time.monotonic() - restarted
    except BaseException:
        high.abandon()
        raise
    summary = high.finish()
    print(
        f"\nPrometheus stopped: MetricsAvailable False after {said:.1f} s "
        f"({message!r}); replicas held at "
        f"{sorted(set(held))}; restarted: scaled out {resumed:.1f} s later"
    )
    assert set(held) == {before}, (held, before, scalings(node, name))
    reasons = events(node, name)
    assert "MetricsUnavailable" in reasons and "MetricsRestored" in reasons, reasons
    assert summary.total.failures == 0, summary.failures


def test_pods_keep_running_through_a_kubelet_restart(
    node: Node,
    traefik: gateway.Ports,
    servectl_on_node: stack.Images,
    paced: pace.Pace,
    service: list[str],
    tmp_path: Path,
) -> None:
    """The kubelet restarted under load: the model server's pod keeps running (same pod, no
    container restart). Kubernetes 1.34's kubelet starts every readiness probe afresh at
    Failure and probes first after a random part of the period (pkg/kubelet/prober), so the
    pod is NotReady for up to a probe period and a Gateway with no other endpoint answers
    503 then (docs/kubernetes.md): the only failures are those, while it is NotReady."""
    name = "steady"
    service.append(name)
    start(node, servectl_on_node, name, {"strategy": "canary"}, traefik.web)
    pods = f"/api/v1/namespaces/{NS}/pods?labelSelector=servectl.io/service={name}"

    slices = (
        f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
        f"?labelSelector=kubernetes.io/service-name={name}-v1"
    )

    def ready_now() -> bool:
        """Every endpoint of the revision's Service ready: what the Gateway routes to."""
        found = [e for s in get(node, slices).get("items", []) for e in s.get("endpoints") or []]
        return bool(found) and all((e.get("conditions") or {}).get("ready") for e in found)

    before = {p["metadata"]["uid"] for p in get(node, pods)["items"]}
    not_ready: list[float] = []  # moments the pod was seen NotReady
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            if not ready_now():
                not_ready.append(time.monotonic())
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    base = paced.rps(BASE)
    load = Load(tmp_path / "load", traefik.web, [(0, base), (3600, base)], "kubelet")
    began = time.monotonic()
    try:
        time.sleep(5)
        watcher.start()
        node.restart("kubelet")
        until(ready_now, "the endpoint ready again", 30)
        time.sleep(10)
    except BaseException:
        load.abandon()
        raise
    finally:
        watching.set()
    summary = load.finish()
    loaded = time.monotonic() - began
    after = get(node, pods)["items"]
    window = (not_ready[-1] - not_ready[0] + 0.1) if not_ready else 0.0
    print(
        f"\nkubelet restart: endpoint not ready for {window:.1f} s ({len(not_ready)} samples); "
        f"{summary.total.requests} "
        f"requests, {summary.total.failures} failed ({[f.message for f in summary.failures]})"
    )
    assert {p["metadata"]["uid"] for p in after} == before  # the same pods, not new ones
    assert all(c["restartCount"] == 0 for p in after for c in p["status"]["containerStatuses"])
    # The load ran through the restart: at least 2/3 of its rate over the time it ran
    # (Locust takes a second or two to start its users).
    assert summary.total.requests >= base * loaded * 2 / 3, (loaded, summary.total)
    assert all("503" in f.message for f in summary.failures), summary.failures
    # Failures only around the moment it is not ready: the load's rate over that window and
    # Traefik's 2 s throttle, plus a second.
    assert summary.total.failures <= base * (window + 3.0), (window, summary.failures)
