"""Rollouts on the real node under Locust load entering through the Gateway on 127.0.0.1
(issue 26, "Done when"): the split Traefik applies, counted by Traefik itself, within 2
percentage points of the canary's weights over at least 1,000 requests a step; an A/B
header rule that sends every matching request to B and no other; a failing canary aborted
with no dip in the stable revision's ready pods and no failed request other than those the
bad version fails itself."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from servectl.testing.k8s import gateway, stack
from servectl.testing.k8s.monitoring import Monitoring
from servectl.testing.k8s.node import Node
from servectl.testing.load import Load
from tests.integration.k8s_node.conftest import NS, get, predict, until
from tests.integration.k8s_node.stack.conftest import (
    MODELSERVICES,
    ready,
    set_version,
    start,
    weights,
)

INJECTED = "injected failure"  # what cost_model v3 answers for the requests it fails
RPS = 25.0
SPLIT_RPS = 60.0
"""The split test's rate, on half_plus_two (~1 ms a request): the split is Traefik's,
whatever the model, and 1,000 requests a step take 17 s instead of 40 at cost_model's 25."""
PER_HOST = 400  # requests per service in the shared-Gateway test
# A canary that stops at 30 % until told to go on (resume, or promote --full).
PAUSED_AT_30: dict[str, Any] = {
    "strategy": "canary",
    "steps": [{"setWeight": 30}, {"pause": {}}, {"setWeight": 100}],
    "drainSeconds": 3,
}


def gateway_counts(traefik: gateway.Ports, service: str) -> Counter[str]:
    """Requests Traefik sent to each revision of ``service`` (its Service ``<service>-vN``)
    so far, from its own /metrics: the backends of the route's weighted service are
    ``<router>-svc-<namespace>-<Service>-<index>@kubernetesgateway``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{traefik.admin}/metrics", timeout=5) as page:
        text = page.read().decode()
    backend = re.compile(rf"-svc-{NS}-({re.escape(service)}-v\d+)-\d+@kubernetesgateway$")
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "traefik_service_requests":
            continue
        for sample in family.samples:
            found = backend.search(sample.labels.get("service", ""))
            if found and sample.name.endswith("_total"):
                counts[found.group(1)] += int(sample.value)
    return counts


def rollout(node: Node, name: str) -> dict[str, Any]:
    return dict((get(node, f"{MODELSERVICES}/{name}").get("status") or {}).get("rollout") or {})


def paused_at(node: Node, name: str, weight: int) -> None:
    """Wait (up to 180 s: the canary's pods start first) for the canary paused at ``weight``."""
    until(
        lambda: (
            rollout(node, name).get("phase") == "Paused"
            and weights(node, name).get(f"{name}-v2") == weight
        ),
        f"the canary paused at {weight} %",
        180,
    )


def servectl(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it against the node's cluster."""
    argv = [sys.executable, "-m", "servectl", *args, "--kubeconfig", str(node.cluster.kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def measure_split(
    traefik: gateway.Ports,
    service: str,
    at_least: int,
    during: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Each revision's share of the next ``at_least`` requests, as Traefik counts them;
    ``during()`` is called at each poll of the counts."""
    before = gateway_counts(traefik, service)

    def enough() -> Counter[str] | None:
        during()
        now = gateway_counts(traefik, service)
        now.subtract(before)
        return now if sum(now.values()) >= at_least else None

    counted = until(enough, f"{at_least} requests through the Gateway", 4 * at_least / SPLIT_RPS)
    total = sum(counted.values())
    return {revision: 100 * n / total for revision, n in counted.items() if n}


def measure_split_at(
    node: Node, traefik: gateway.Ports, service: str, target: dict[str, int], at_least: int
) -> tuple[dict[str, float], list[dict[str, int]]]:
    """The split Traefik applied over ``at_least`` requests while the route's weights were
    ``target`` at every poll (4 a second), and the other weights seen in windows that were
    measured again. The planner gives weight back when a revision's ready replicas stop
    carrying it (docs/rollouts.md), so a route can leave a paused step's weights for a
    while: a window in which it did says nothing of Traefik's split (up to 3 windows)."""
    moved: list[dict[str, int]] = []
    for _ in range(3):
        until(lambda: weights(node, service) == target, f"the route back at {target}", 120)
        time.sleep(3)  # Traefik applies a route change within a second or two
        seen: list[dict[str, int]] = []

        def route(seen: list[dict[str, int]] = seen) -> None:
            now = weights(node, service)
            if now != target:
                seen.append(now)

        share = measure_split(traefik, service, at_least, route)
        route()
        if not seen:
            return share, moved
        moved += seen
    raise AssertionError(f"the route left {target} in 3 windows of {at_least} requests: {moved}")


def test_a_canary_split_at_the_gateway_is_within_2_points_of_its_weights(
    node: Node,
    traefik: gateway.Ports,
    servectl_on_node: stack.Images,
    service: list[str],
    tmp_path: Path,
) -> None:
    name = "split"
    service.append(name)
    spec = {
        "strategy": "canary",
        "steps": [
            {"setWeight": 10},
            {"pause": {}},
            {"setWeight": 50},
            {"pause": {}},
            {"setWeight": 100},
        ],
        "drainSeconds": 3,
    }
    model = "half_plus_two"
    start(node, servectl_on_node, name, spec, traefik.web, model=model)
    rate = [(0, SPLIT_RPS), (3600, SPLIT_RPS)]
    load = Load(tmp_path / "load", traefik.web, rate, name, model=model)
    try:
        set_version(node, name, 2)
        shares: dict[int, dict[str, float]] = {}
        moved: dict[int, list[dict[str, int]]] = {}
        for weight in (10, 50):
            paused_at(node, name, weight)
            target = {f"{name}-v1": 100 - weight, f"{name}-v2": weight}
            shares[weight], moved[weight] = measure_split_at(node, traefik, name, target, 1000)
            done = servectl(node, "rollout", "resume", name, "-n", NS)
            assert done.returncode == 0, done.stdout + done.stderr
        until(lambda: rollout(node, name).get("phase") == "Completed", "the rollout completed", 120)
        until(lambda: weights(node, name) == {f"{name}-v2": 100}, "all traffic on v2", 30)
    finally:
        summary = load.finish()
    print(f"\nsplit at the Gateway: {shares}; Locust: {summary.total.requests} requests")
    print(f"weights seen in windows measured again: {moved}")
    if any(moved.values()):  # why the planner moved them (its cost estimate, the demand)
        listed = get(
            node, f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name={name}"
        )
        print(
            [
                e.get("message")
                for e in listed.get("items", [])
                if "back to" in str(e.get("message"))
            ]
        )
    for weight, share in shares.items():
        assert abs(share.get(f"{name}-v2", 0.0) - weight) <= 2.0, (weight, share)
    assert summary.total.failures == 0, summary.failures


def test_two_services_share_the_gateway_a_canary_and_an_ab_rule_each_on_its_own_host(
    node: Node,
    traefik: gateway.Ports,
    servectl_on_node: stack.Images,
    service: list[str],
) -> None:
    """Issue 27, item 1 (and issue 26's A/B criterion): two ModelServices of the same model
    on one Traefik Gateway, told apart by their hostnames. One canary paused at 30 %, one
    A/B test: each split measured at the Gateway by Traefik's own counts; the A/B header
    rule sends every matching request of its host to B, and no other (the canary's host
    sends the same header to the canary's revisions by weight); a host no route names gets
    a 404. Before, every rule matched /v1/ on every host: the older route took both
    services' traffic, and the A/B rule captured the header for both. In-cluster, the
    A/B service's front Service selects A's pods only (item 2)."""
    canary, ab = "host-a", "host-b"
    hosts = {canary: "a.models.test", ab: "b.models.test"}
    service += [canary, ab]
    ab_spec = {
        "strategy": "abTest",
        "abTest": {
            "match": {"header": {"name": "x-variant", "value": "b"}},
            "durationSeconds": 600,
        },
        "drainSeconds": 3,
    }
    for name, spec in ((canary, PAUSED_AT_30), (ab, ab_spec)):
        start(node, servectl_on_node, name, spec, traefik.web, routing={"hostnames": [hosts[name]]})
        set_version(node, name, 2)
    paused_at(node, canary, 30)
    until(lambda: ready(node, f"{ab}-v2"), "B Ready", 180)
    route = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/{ab}"
    until(
        lambda: any(
            m.get("headers")
            for r in get(node, route)["spec"]["rules"]
            for m in r.get("matches") or []
        ),
        "the header rule on the A/B route",
        60,
    )
    # In-cluster callers of the front Service <ab> reach A only, not the weight-0 B
    # (issue 27, item 2): its ready endpoints are A's pods.
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"

    def front_pods() -> set[str]:
        found = get(node, f"{slices}?labelSelector=kubernetes.io/service-name={ab}")
        return {
            str((e.get("targetRef") or {}).get("name"))
            for item in found.get("items") or []
            for e in item.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
        }

    until(
        lambda: (pods := front_pods()) and all(p.startswith(f"{ab}-v1-") for p in pods),
        f"the front Service {ab} on A's pods only",
        30,
    )
    time.sleep(3)  # Traefik applies a route change within a second or two
    before = {name: gateway_counts(traefik, name) for name in hosts}
    answered: Counter[str] = Counter()
    for i in range(PER_HOST):  # bounded: PER_HOST requests per host, every other with the header
        for name, host in hosts.items():
            header = {"x-variant": "b"} if i % 2 else {}
            answered[name] += bool(predict(traefik.web, host=host, headers=header))
    try:
        predict(traefik.web, host="nobody.models.test")
        stranger = 200
    except urllib.error.HTTPError as refused:
        stranger = refused.code
    time.sleep(1)
    counts = {}
    for name in hosts:
        counts[name] = gateway_counts(traefik, name)
        counts[name].subtract(before[name])
    print(f"\ntwo services on one Gateway: {counts}")
    assert answered == {canary: PER_HOST, ab: PER_HOST}, answered
    # Each host's requests reached its own service's revisions, all of them.
    assert sum(counts[canary].values()) == PER_HOST, counts
    assert sum(counts[ab].values()) == PER_HOST, counts
    # The canary's split, the header making no difference on its host.
    share = 100 * counts[canary][f"{canary}-v2"] / PER_HOST
    assert abs(share - 30) <= 3.0, (share, counts[canary])
    # The A/B rule: every request with the header to B, every other to A.
    assert counts[ab][f"{ab}-v2"] == PER_HOST // 2, counts[ab]
    assert counts[ab][f"{ab}-v1"] == PER_HOST // 2, counts[ab]
    assert stranger == 404


def test_a_failing_canary_is_aborted_under_load_with_no_dip_in_stable(
    node: Node,
    traefik: gateway.Ports,
    servectl_on_node: stack.Images,
    service: list[str],
    tmp_path: Path,
) -> None:
    name = "bad"
    service.append(name)
    spec = {
        "strategy": "canary",
        "steps": [{"setWeight": 20}, {"analysis": {}}, {"setWeight": 100}],
        "analysis": {
            "interval": "10s",
            "minSamples": 40,
            "checks": [{"metric": "errorRate", "max": 0.02}],
        },
        "drainSeconds": 3,
    }
    start(node, servectl_on_node, name, spec, traefik.web)
    stable_ready: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            stable_ready.append(ready(node, f"{name}-v1"))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    load = Load(tmp_path / "load", traefik.web, [(0, RPS), (3600, RPS)], name)
    try:
        until(lambda: ready(node, f"{name}-v1"), "stable ready")
        low = ready(node, f"{name}-v1")
        watcher.start()
        set_version(node, name, 3)
        until(lambda: rollout(node, name).get("phase") == "Aborted", "the canary aborted", 240)
        until(lambda: weights(node, name) == {f"{name}-v1": 100}, "all traffic back on v1", 30)
        time.sleep(5)  # requests in flight to the canary finish; then no more reach it
    finally:
        watching.set()
        summary = load.finish()
    verdicts = rollout(node, name).get("verdicts") or []
    assert any(v["verdict"] == "Failed" and "errorRate" in v["message"] for v in verdicts), verdicts
    assert min(stable_ready) >= low, stable_ready  # no capacity dip on stable
    caused_elsewhere = [f for f in summary.failures if INJECTED not in f.message]
    assert not caused_elsewhere, caused_elsewhere
    print(f"\nLocust: {summary.total.requests} requests, {summary.total.failures} failed by v3")


def lease_holder(node: Node) -> str:
    lease = get(
        node,
        f"/apis/coordination.k8s.io/v1/namespaces/{stack.CONTROLLER_NAMESPACE}/leases/"
        "servectl-controller",
    )
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def test_the_controller_pod_deleted_mid_rollout_the_other_takes_the_lease_and_goes_on(
    node: Node,
    traefik: gateway.Ports,
    servectl_on_node: stack.Images,
    service: list[str],
    tmp_path: Path,
) -> None:
    name = "lease"
    service.append(name)
    start(node, servectl_on_node, name, PAUSED_AT_30, traefik.web)
    load = Load(tmp_path / "load", traefik.web, [(0, RPS), (3600, RPS)], name)
    try:
        set_version(node, name, 2)
        paused_at(node, name, 30)
        step = rollout(node, name)["step"]
        leader = until(lambda: lease_holder(node), "a Lease holder")
        pods = f"/api/v1/namespaces/{stack.CONTROLLER_NAMESPACE}/pods"
        status, answer = node.cluster.request("DELETE", f"{pods}/{leader}")
        assert status == 200, answer
        deleted = time.monotonic()
        successor = until(
            lambda: (holder := lease_holder(node)) not in ("", leader) and holder,
            "another controller pod holding the Lease",
            60,
        )
        took = time.monotonic() - deleted
        # The new leader carries on from status: same step, same weights, still paused.
        time.sleep(10)
        assert rollout(node, name)["step"] == step
        assert rollout(node, name)["phase"] == "Paused"
        assert weights(node, name) == {f"{name}-v1": 70, f"{name}-v2": 30}
        done = servectl(node, "rollout", "resume", name, "-n", NS)
        assert done.returncode == 0, done.stdout + done.stderr
        until(lambda: rollout(node, name).get("phase") == "Completed", "the rollout completed", 120)
    finally:
        summary = load.finish()
    print(f"\nLease: {leader} deleted, {successor} took over in {took:.1f} s")
    assert summary.total.failures == 0, summary.failures


def metrics_available(node: Node, name: str) -> str:
    found = (get(node, f"{MODELSERVICES}/{name}").get("status") or {}).get("conditions") or []
    return next((c["status"] for c in found if c["type"] == "MetricsAvailable"), "")


def test_with_prometheus_stopped_a_full_promotion_and_an_abort_are_carried_out(
    node: Node,
    traefik: gateway.Ports,
    monitoring: Monitoring,
    servectl_on_node: stack.Images,
    service: list[str],
) -> None:
    """Issue 27, item 8, on the real node: metrics gone, the steps' traffic is held and the
    rollout's status says so, but the user's `promote --full` moves every request to v2,
    and after an `abort` the canary's pods go once drained, not when metrics come back."""
    name = "stale"
    service.append(name)
    start(node, servectl_on_node, name, PAUSED_AT_30, traefik.web)
    until(lambda: metrics_available(node, name) == "True", "MetricsAvailable True", 90)
    set_version(node, name, 2)
    until(lambda: weights(node, name).get(f"{name}-v2") == 30, "the canary paused at 30 %", 180)
    monitoring.prometheus.stop()
    try:
        until(lambda: metrics_available(node, name) == "False", "MetricsAvailable False", 60)
        done = servectl(node, "rollout", "promote", name, "--full", "-n", NS, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr
        until(
            lambda: weights(node, name) == {f"{name}-v2": 100},
            "every request on v2 with Prometheus stopped",
            90,
        )
        until(lambda: rollout(node, name).get("phase") == "Completed", "v2 completed", 60)
        # A new version: its first step waits for metrics, and the status says so.
        set_version(node, name, 3)
        until(
            lambda: "metrics stale: traffic held" in rollout(node, name).get("message", ""),
            "the rollout's status naming what it waits for",
            60,
        )
        held = weights(node, name)
        assert (held.get(f"{name}-v2"), held.get(f"{name}-v3", 0)) == (100, 0), held
        canary = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}-v3"
        until(lambda: get(node, canary), "v3's Deployment", 60)
        done = servectl(node, "rollout", "abort", name, "-n", NS, "--no-wait")
        assert done.returncode == 0, done.stdout + done.stderr
        until(lambda: rollout(node, name).get("phase") == "Aborted", "v3 aborted", 60)
        until(lambda: not get(node, canary), "v3's Deployment gone, metrics still stopped", 60)
        assert metrics_available(node, name) == "False"
    finally:
        if not monitoring.prometheus.running:
            monitoring.prometheus.start()
    until(lambda: metrics_available(node, name) == "True", "metrics back", 90)
