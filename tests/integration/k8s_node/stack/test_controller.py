"""servectl on the real node as a user runs it: the controller installed by the Helm chart
from its image, a ModelService whose model comes from a PersistentVolumeClaim, model
servers from the TF-Serving drop-in image passing their readiness probe once the version
is loaded, the HTTPRoute accepted by Traefik, and predictions entering on 127.0.0.1
through the Gateway."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.testing.k8s import gateway, stack
from servectl.testing.k8s.monitoring import Monitoring
from servectl.testing.k8s.node import Node
from tests.integration.k8s_node.conftest import NS, conditions, get, pod_logs, predict, until

SERVICE = "cost"
PART_OF = "app.kubernetes.io/part-of=servectl"


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Iterator[None]:
    """The node is shared with the other modules here: free its CPU afterwards."""
    yield
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{SERVICE}"
    node.cluster.request("DELETE", path)


POD_OPTIONS: dict[str, Any] = {
    "serviceAccountName": "model-reader",
    "env": [{"name": "MODEL_TEAM", "value": "ranking"}],
    "volumes": [{"name": "extras", "configMap": {"name": "model-extras"}}],
    "volumeMounts": [{"name": "extras", "mountPath": "/etc/extras", "readOnly": True}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "serving"}],
    "labels": {"team": "ranking"},
    "annotations": {"cost-center": "42"},
}
"""spec.runtime.pod as a platform team sets it (issue 27 item 5): the real kubelet must
run the pod with them (its ServiceAccount, a ConfigMap volume, the node selector)."""


def test_a_model_service_serves_through_the_gateway(
    node: Node, traefik: gateway.Ports, servectl_on_node: stack.Images
) -> None:
    node.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "model-reader", "namespace": NS},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "model-extras", "namespace": NS},
                "data": {"note": "mounted by the model server"},
            },
        ]
    )
    spec: Any = {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": SERVICE, "namespace": NS},
        "spec": {
            "model": {"name": "cost_model", "basePath": "pvc://models/cost_model", "version": 1},
            "runtime": {
                "image": servectl_on_node.model_server_ref,
                "resources": {"cpu": "250m", "memory": "1Gi"},
                "pod": POD_OPTIONS,
            },
            "autoscaling": {"minReplicas": 1, "maxReplicas": 2},
        },
    }
    began = time.monotonic()
    node.apply([spec])
    deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/{SERVICE}-v1"
    until(
        lambda: (get(node, deployment).get("status") or {}).get("readyReplicas"),
        "the first revision's model server Ready (its version loaded)",
        240,
    )
    print(f"ModelService applied -> model server Ready in {time.monotonic() - began:.0f} s")
    _runs_as_shaped(node)
    route = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/{SERVICE}"

    def accepted() -> bool:
        parents = (get(node, route).get("status") or {}).get("parents") or []
        found = {c["type"]: c["status"] for p in parents for c in p.get("conditions", [])}
        return found.get("Accepted") == "True" and found.get("ResolvedRefs") == "True"

    until(accepted, "the HTTPRoute Accepted by Traefik with its references resolved")
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{SERVICE}"
    # What Traefik says of both routes reaches the ModelService's conditions.
    until(
        lambda: conditions(get(node, path)).get("RoutesAccepted") == "True",
        "RoutesAccepted True on the ModelService",
        30,
    )

    last: list[str] = []

    def answers() -> dict[str, Any] | None:
        try:
            return predict(traefik.web)
        except urllib.error.HTTPError as error:
            last[:] = [f"{error.code} {error.read()[:300]!r}"]
        except OSError as error:
            last[:] = [str(error)]
        return None

    try:
        answer = until(answers, "a prediction through the Gateway on 127.0.0.1")
    except AssertionError:
        spec = json.dumps(get(node, route).get("spec"))
        raise AssertionError(f"last answer: {last}; route: {spec}\n{pod_logs(node)}") from None
    assert len(answer["predictions"]) == 1, answer
    served = [predict(traefik.web) for _ in range(50)]
    assert all(len(a["predictions"]) == 1 for a in served)
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{SERVICE}"
    # The controller's next cycle (every 5 s, or on a change it watches) says so.
    try:
        until(lambda: conditions(get(node, path)).get("Ready") == "True", "Ready", 30)
    except AssertionError:
        raise AssertionError((get(node, path).get("status") or {}).get("conditions")) from None


def _runs_as_shaped(node: Node) -> None:
    """The ready pod runs with the options, as restricted as servectl makes it (the
    namespace enforces restricted), and its revision's PodDisruptionBudget counts it."""
    selector = f"servectl.io/revision={SERVICE}-v1"
    pods = get(node, f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert running, [p["status"].get("phase") for p in pods]
    pod = running[0]
    assert pod["spec"]["serviceAccountName"] == "model-reader"
    assert pod["spec"]["nodeSelector"] == POD_OPTIONS["nodeSelector"]
    assert pod["metadata"]["labels"]["team"] == "ranking"
    assert pod["metadata"]["annotations"]["cost-center"] == "42"
    (server,) = pod["spec"]["containers"]
    assert {"name": "MODEL_TEAM", "value": "ranking"} in server["env"]
    assert any(m["mountPath"] == "/etc/extras" for m in server["volumeMounts"])
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True, status
    budget = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{SERVICE}-v1"
    # The cluster's disruption controller (kube-controller-manager) counts the pods it covers.
    until(
        lambda: (get(node, budget).get("status") or {}).get("expectedPods", 0) >= 1,
        "the revision's PodDisruptionBudget counting its pod",
        60,
    )
    assert get(node, budget)["spec"]["maxUnavailable"] == 1


def test_the_controller_runs_in_the_cluster(node: Node, servectl_on_node: stack.Images) -> None:
    pods = get(node, f"/api/v1/namespaces/{stack.CONTROLLER_NAMESPACE}/pods").get("items", [])
    assert pods, "no controller pod"
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["image"] == servectl_on_node.controller_ref
        assert pod["status"]["phase"] == "Running", pod["status"]
    assert Path(stack.CHART, "Chart.yaml").exists()


def test_the_controllers_own_token_writes_servectls_objects_and_nothing_else(
    node: Node, traefik: gateway.Ports, servectl_on_node: stack.Images
) -> None:
    """Issue 27, item 3, on the real node: with a token of the controller's ServiceAccount
    (the chart's), the chart's admission policy refuses a new image for servectl's own
    model pod and any write to others' objects (another team's Service beside servectl's,
    Traefik's Deployment), and
    lets through the one change servectl makes to pods: their deletion cost."""
    ns = stack.CONTROLLER_NAMESPACE
    accounts = get(node, f"/api/v1/namespaces/{ns}/serviceaccounts?labelSelector={PART_OF}")
    (account,) = [a["metadata"]["name"] for a in accounts["items"]]
    status, issued = node.cluster.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, issued
    token = issued["status"]["token"]
    selector = f"servectl.io/service={SERVICE}"
    (pod, *_) = get(node, f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")["items"]
    own_pod = f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
    container = pod["spec"]["containers"][0]["name"]
    image = {"spec": {"containers": [{"name": container, "image": "attacker.example/x:1"}]}}
    cost = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "3"}}}
    # Another team's Service beside servectl's, and Traefik's Deployment.
    other = {"name": "other-team", "namespace": NS, "labels": {"app": "other"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": other}
    node.apply([{**service, "spec": {"ports": [{"port": 80}]}}])
    foreign = f"/api/v1/namespaces/{NS}/services/other-team"
    uid = get(node, foreign)["metadata"]["uid"]
    deployments = f"/apis/apps/v1/namespaces/{gateway.NAMESPACE}/deployments"
    (traefik_deployment, *_) = get(node, deployments)["items"]
    traefik_path = f"{deployments}/{traefik_deployment['metadata']['name']}"
    template = traefik_deployment["spec"]["template"]
    changed = {"name": template["spec"]["containers"][0]["name"], "image": "attacker.example/x:1"}
    traefik_image = {"spec": {"template": {"spec": {"containers": [changed]}}}}
    merge, strategic = "application/merge-patch+json", "application/strategic-merge-patch+json"

    def as_token(method: str, path: str, body: Any = None, kind: str = merge) -> tuple[int, Any]:
        return node.cluster.request(method, path, body, content_type=kind, token=token)

    try:
        said = as_token("PATCH", own_pod, image, strategic)
        assert said[0] == 403 and "pod-deletion-cost" in str(said[1]), said
        assert as_token("PATCH", own_pod, cost)[0] == 200
        said = as_token("DELETE", foreign)
        assert said[0] == 403 and "managed-by=servectl" in str(said[1]), said
        adopt = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "servectl"}}}
        said = as_token("PATCH", foreign, adopt)
        assert said[0] == 403 and "managed-by=servectl" in str(said[1]), said
        said = as_token("PATCH", traefik_path, traefik_image, strategic)
        assert said[0] == 403, said
        assert get(node, foreign)["metadata"]["uid"] == uid
        served = get(node, own_pod)["spec"]["containers"][0]["image"]
        assert served == pod["spec"]["containers"][0]["image"]
        assert get(node, traefik_path)["spec"]["template"] == template
    finally:
        node.cluster.request("DELETE", foreign)


def test_the_controller_reads_real_metrics(
    node: Node, traefik: gateway.Ports, monitoring: Monitoring, servectl_on_node: stack.Images
) -> None:
    """What the controller scales on comes from the real node: cAdvisor's CPU of the model
    server's container, its CPU request from kube-state-metrics, TF Serving's request and
    latency series labelled by the users' scrape job; and Traefik counts the route's
    requests. The controller in its pod reads them (MetricsAvailable True)."""
    from servectl.metrics.config import MetricsConfig
    from servectl.metrics.source import PrometheusSource

    served = [predict(traefik.web) for _ in range(100)]  # bounded: 100 requests
    assert all(len(a["predictions"]) == 1 for a in served)
    prometheus = monitoring.prometheus
    expected = {
        "cAdvisor CPU of the model server": (
            f'container_cpu_usage_seconds_total{{namespace="{NS}", pod=~"{SERVICE}-v1-.*", '
            'container!="", container!="POD"}'
        ),
        "kube-state-metrics CPU request": (
            f'kube_pod_container_resource_requests{{namespace="{NS}", resource="cpu"}}'
        ),
        "kube-state-metrics pod labels": (
            f'kube_pod_labels{{namespace="{NS}", label_servectl_io_service="{SERVICE}"}}'
        ),
        "TF Serving requests by the users' job": (
            f':tensorflow:serving:request_count{{namespace="{NS}", service="{SERVICE}"}}'
        ),
        "Traefik's requests for the route": (
            f'traefik_service_requests_total{{service=~".*{NS}-{SERVICE}.*"}}'
        ),
    }
    for what, promql in expected.items():
        try:
            prometheus.wait_for_series(promql, timeout_s=60)
        except Exception as error:
            targets = [(t.job, t.scrape_url, t.health, t.last_error) for t in prometheus.targets()]
            raise AssertionError(f"{what}: {promql}: {error}; targets {targets}") from None
    (request,) = prometheus.query(
        f'kube_pod_container_resource_requests{{namespace="{NS}", resource="cpu", '
        f'pod=~"{SERVICE}-v1-.*"}}'
    )
    assert request.value == 0.25
    # servectl's own queries, from this machine, see every signal of the revision.
    source = PrometheusSource(monitoring.url, MetricsConfig())

    last: list[Any] = []

    def complete() -> Any:
        for _ in range(5):  # bounded: 5 requests a poll, ~20 polls a minute at most
            predict(traefik.web)
        snap = source.snapshot()
        found = [r for k, r in snap.revisions.items() if k[:2] == (NS, SERVICE)]
        last[:] = [sorted(snap.revisions), [(r.missing, r.signals) for r in found], snap.problems]
        # No GPU here: its signal is missing and not required (DEFAULT_REQUIRED).
        if not found or set(found[0].missing) - {"gpu"} or not found[0].signals.rps:
            return None
        return found[0]

    try:
        revision = until(complete, "every signal of the revision through servectl's queries", 90)
    except AssertionError as error:
        raise AssertionError(f"{error}; last snapshot: {last}") from None
    assert revision.signals.cpu_usage_cores is not None and revision.signals.rps is not None
    assert [p.cpu_request_cores for p in revision.pods] == [0.25]
    path = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{SERVICE}"
    until(
        lambda: conditions(get(node, path)).get("MetricsAvailable") == "True",
        "MetricsAvailable True on the ModelService (the controller's pod reads Prometheus)",
        60,
    )


def test_a_batching_change_rolls_the_revisions_pods_in_place(
    node: Node, traefik: gateway.Ports, servectl_on_node: stack.Images
) -> None:
    """Issue 27, item 6: TF Serving reads its batching file at start, so a change to it
    must replace the pods (a rolling update of the same revision, no new version)."""
    from servectl.backends.kubernetes import objects

    deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/{SERVICE}-v1"
    pods = f"/api/v1/namespaces/{NS}/pods?labelSelector=servectl.io/revision={SERVICE}-v1"
    until(lambda: (get(node, deployment).get("status") or {}).get("readyReplicas"), "v1 Ready")
    before = {p["metadata"]["name"] for p in get(node, pods).get("items", [])}
    old_hash = get(node, deployment)["spec"]["template"]["metadata"]["annotations"][
        objects.CONFIG_HASH
    ]
    status, answer = node.cluster.request(
        "PATCH",
        f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices/{SERVICE}",
        {"spec": {"runtime": {"batching": {"maxBatchSize": 4, "batchTimeoutMicros": 1000}}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer

    def rolled() -> list[dict[str, Any]] | None:
        """The new pods, once as many are Ready as the Deployment wants and every old
        one is going (Deployment status alone counts an old Ready pod in readyReplicas)."""
        wanted = get(node, deployment)["spec"]["replicas"]
        listed = [p for p in get(node, pods).get("items", []) if not objects.pod_terminating(p)]
        new = [p for p in listed if p["metadata"]["name"] not in before]
        old = [p for p in listed if p["metadata"]["name"] in before]
        fresh = [p for p in new if objects.pod_ready(p)]
        return fresh if len(fresh) == wanted and not old else None

    def config_hash() -> str:
        template = get(node, deployment)["spec"]["template"]
        return str(template["metadata"]["annotations"][objects.CONFIG_HASH])

    began = time.monotonic()
    until(lambda: config_hash() != old_hash, "the controller's new pod template", 60)
    ready = until(rolled, "the revision's pods replaced by pods with batching on", 180)
    print(f"batching changed -> pods rolled in {time.monotonic() - began:.0f} s")
    for pod in ready:
        assert pod["metadata"]["name"] not in before, (pod["metadata"]["name"], before)
        assert "--enable_batching" in pod["spec"]["containers"][0]["args"]
    config = get(node, f"/api/v1/namespaces/{NS}/configmaps/{SERVICE}-v1-config")
    assert "max_batch_size { value: 4 }" in config["data"]["batching.config"]
    served = [predict(traefik.web) for _ in range(20)]  # bounded: 20 requests
    assert all(len(a["predictions"]) == 1 for a in served)
