"""One stack for every module here (package scope: ~1 min of set-up saved per module): the
node, Traefik as the Gateway, Prometheus with kube-state-metrics, servectl installed by its
Helm chart (servectl.testing.k8s.stack.Stack, the stack ``servectl demo --kubernetes``
starts). Each test deletes the ModelServices it made, so the next finds the node's CPU
free."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servectl.testing.k8s import gateway, gateway_api_crds, stack
from servectl.testing.k8s.monitoring import Monitoring, MonitoringUnavailable
from servectl.testing.k8s.node import Node
from tests.integration.k8s_node.conftest import CRDS, NS, get, predict, require, until

MODELSERVICES = f"/apis/servectl.io/v1alpha1/namespaces/{NS}/modelservices"


@pytest.fixture(scope="package")
def shared(node_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.Stack]:
    """The stack, in `NS` with the demo models on its claim, two controller replicas."""
    require(gateway.traefik_binary() is not None, f"no Traefik binary; {gateway.BUILD_HINT}")
    from servectl.modelserver.demo import export_demo

    models = tmp_path_factory.mktemp("models")
    export_demo(models, cost=400)
    models.chmod(0o755)  # read by the model server's non-root user through the volume
    try:
        started = stack.Stack.start(
            tmp_path_factory.mktemp("stack"),
            bin_dir=node_bin_dir,
            crds=[*CRDS, *gateway_api_crds(node_bin_dir)],
            namespace=NS,
            models=models,
            controller_replicas=2,
            say=lambda line: print(f"\nstack: {line}", end=""),
        )
    except MonitoringUnavailable as why:
        require(False, str(why))
        raise
    print(f"\nstack started: {started.timings}")
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"the node did not put the host back: {left}"


@pytest.fixture(scope="package")
def node(shared: stack.Stack) -> Node:
    return shared.node


@pytest.fixture(scope="package")
def traefik(shared: stack.Stack) -> gateway.Ports:
    assert shared.ports is not None
    return shared.ports


@pytest.fixture(scope="package")
def monitoring(shared: stack.Stack) -> Monitoring:
    assert shared.monitoring is not None
    return shared.monitoring


@pytest.fixture(scope="package")
def servectl_on_node(shared: stack.Stack) -> stack.Images:
    assert shared.images is not None
    return shared.images


def service_doc(
    name: str, image: str, rollout: dict[str, Any], autoscaling: dict[str, Any] | None = None
) -> dict[str, Any]:
    """cost_model v1 from the models claim at 250m CPU, 1-3 replicas unless ``autoscaling``."""
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "model": {"name": "cost_model", "basePath": "pvc://models/cost_model", "version": 1},
            "runtime": {"image": image, "resources": {"cpu": "250m", "memory": "1Gi"}},
            "autoscaling": autoscaling or {"minReplicas": 1, "maxReplicas": 3},
            "rollout": rollout,
        },
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
) -> None:
    """Create the ModelService at v1 and wait until it answers through the Gateway."""
    node.apply([service_doc(name, images.model_server_ref, spec, autoscaling)])
    until(lambda: ready(node, f"{name}-v1"), f"{name}-v1 Ready", 120)
    until(lambda: weights(node, name) == {f"{name}-v1": 100}, f"{name}'s route at v1", 30)

    def answers() -> bool:
        try:
            return bool(predict(web))
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
