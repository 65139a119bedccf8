"""One node for every module here (package scope: ~1 min of set-up saved per module): Traefik
as the Gateway, Prometheus with kube-state-metrics, servectl installed by its Helm chart.
Each test deletes the ModelServices it made, so the next finds the node's CPU free."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from servectl.testing.k8s import gateway, stack
from servectl.testing.k8s.monitoring import Monitoring
from servectl.testing.k8s.node import CGROUP, Node
from tests import pace
from tests.integration.k8s_node.conftest import (
    NS,
    get,
    install_servectl,
    install_traefik,
    load_servectl_images,
    predict,
    started_monitoring,
    started_node,
    until,
)

MODELSERVICES = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices"


@pytest.fixture(scope="package")
def node(node_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with started_node(node_bin_dir, tmp_path_factory) as started:
        yield started


@pytest.fixture(scope="package")
def servectl_images(node: Node) -> Iterator[Future[stack.Images]]:
    """servectl's images built and imported in the background from the node's start, while
    Traefik and the monitoring start (~1 min saved): `servectl_on_node` waits for them. At
    the end the import is waited for, so that it never outlives the node."""
    with ThreadPoolExecutor(1, thread_name_prefix="servectl-images") as pool:
        loading = pool.submit(load_servectl_images, node)
        yield loading
        wait([loading], timeout=900)


@pytest.fixture(scope="package")
def traefik(
    node: Node,
    servectl_images: Future[stack.Images],
    tmp_path_factory: pytest.TempPathFactory,
) -> gateway.Ports:
    return install_traefik(node, tmp_path_factory)


@pytest.fixture(scope="package")
def monitoring(
    node: Node, traefik: gateway.Ports, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Monitoring]:
    with started_monitoring(node, traefik, tmp_path_factory) as started:
        yield started


@pytest.fixture(scope="package")
def servectl_on_node(
    node: Node,
    monitoring: Monitoring,
    servectl_images: Future[stack.Images],
    tmp_path_factory: pytest.TempPathFactory,
) -> stack.Images:
    return install_servectl(node, monitoring, tmp_path_factory, servectl_images)


@pytest.fixture
def core(node: Node) -> Iterator[kubernetes.client.CoreV1Api]:
    client = node.cluster.api_client()
    try:
        yield kubernetes.client.CoreV1Api(client)
    finally:
        client.close()


@pytest.fixture
def service(node: Node) -> Iterator[list[str]]:
    """Names of the ModelServices a test creates, deleted after it, failed or not (freeing
    the node's CPU, and the Gateway: every service here routes cost_model's paths, so one
    left behind takes the next one's traffic)."""
    created: list[str] = []
    yield created
    for name in created:
        node.cluster.request("DELETE", f"{MODELSERVICES}/{name}")


@pytest.fixture(scope="package")
def paced(node: Node, traefik: gateway.Ports, servectl_on_node: stack.Images) -> pace.Pace:
    """This machine's pace (tests/pace.py) for 5 requests/s on one replica of cost_model at
    250m CPU, timed through the Gateway on a ModelService of one replica made for it, its
    CPU read from the pod's cgroup (cgroup v1, the kubelet's cgroupfs driver)."""
    name = "pace"
    start(
        node,
        servectl_on_node,
        name,
        {"strategy": "canary"},
        traefik.web,
        {"minReplicas": 1, "maxReplicas": 1},
    )
    found = get(node, f"/api/v1/namespaces/{NS}/pods?labelSelector=servectl.io/service={name}")
    uid = found["items"][0]["metadata"]["uid"]
    usage = Path(f"/sys/fs/cgroup/cpuacct{CGROUP}/kubepods/burstable/pod{uid}/cpuacct.usage")

    def cpu_s() -> float:
        return int(usage.read_text()) / 1e9

    try:
        measured = pace.measure(lambda: predict(traefik.web), 5.0, cpu_s=cpu_s, cores=0.25)
    finally:
        node.cluster.request("DELETE", f"{MODELSERVICES}/{name}")
        until(
            lambda: (
                not get(
                    node, f"/api/v1/namespaces/{NS}/pods?labelSelector=servectl.io/service={name}"
                ).get("items")
            ),
            "the pace service's pods gone",
            60,
        )
    print(f"\npace: {measured}")
    return measured


def service_doc(
    name: str,
    image: str,
    rollout: dict[str, Any],
    autoscaling: dict[str, Any] | None = None,
    routing: dict[str, Any] | None = None,
    model: str = "cost_model",
) -> dict[str, Any]:
    """``model`` v1 (cost_model unless told) from the models claim at 250m CPU, 1-3
    replicas unless ``autoscaling``."""
    spec: dict[str, Any] = {
        "model": {"name": model, "basePath": f"pvc://models/{model}", "version": 1},
        "runtime": {"image": image, "resources": {"cpu": "250m", "memory": "1Gi"}},
        "autoscaling": autoscaling or {"minReplicas": 1, "maxReplicas": 3},
        "rollout": rollout,
    }
    if routing is not None:
        spec["routing"] = routing
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def weights(node: Node, name: str) -> dict[str, int]:
    from servectl.backends.kubernetes import objects

    route = get(node, f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/{name}")
    return objects.route_weights(route or None)[0]


def ready(node: Node, deployment: str) -> int:
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/{deployment}"
    return int((get(node, path).get("status") or {}).get("readyReplicas") or 0)


def start(
    node: Node,
    images: stack.Images,
    name: str,
    spec: dict[str, Any],
    web: int,
    autoscaling: dict[str, Any] | None = None,
    routing: dict[str, Any] | None = None,
    model: str = "cost_model",
) -> None:
    """Create the ModelService at v1 and wait until it answers through the Gateway (on its
    first hostname, when ``routing`` names some)."""
    node.apply([service_doc(name, images.model_server_ref, spec, autoscaling, routing, model)])
    until(lambda: ready(node, f"{name}-v1"), f"{name}-v1 Ready", 120)
    until(lambda: weights(node, name) == {f"{name}-v1": 100}, f"{name}'s route at v1", 30)
    host = ((routing or {}).get("hostnames") or [None])[0]

    def answers() -> bool:
        try:
            return bool(predict(web, host=host, model=model))
        except OSError:
            return False

    until(answers, "predictions through the Gateway", 30)


def set_version(node: Node, name: str, version: int) -> None:
    status, answer = node.cluster.request(
        "PATCH",
        f"{MODELSERVICES}/{name}",
        {"spec": {"model": {"version": version}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer
