"""Uninstall as docs/deploy.md tells users (issue 27, item 9), on the real node, with the
commands it shows run by ``kubectl`` and Helm: the ModelServices deleted while the
controller runs (it drains and removes what it made: real pods stop, the Gateway stops
routing), the release uninstalled (its pods, RBAC, admission policy and binding go), the
CRDs deleted. And the case the docs warn of: a ModelService deleted with no controller
running waits on its finalizer, serving, until the documented patch removes the finalizer;
Kubernetes' garbage collector then deletes what servectl made, through the ownerReferences.

The last module of the package (alphabetically): it leaves servectl installed again, as
it found it, for any test that would run after it."""

from __future__ import annotations

import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Any

from servectl.testing.k8s import gateway, stack
from servectl.testing.k8s.monitoring import Monitoring
from servectl.testing.k8s.node import Node
from tests.integration.k8s_node.conftest import CRDS, NS, get, predict, until
from tests.integration.k8s_node.stack.conftest import MODELSERVICES, start

REPO = Path(__file__).resolve().parents[4]
HOSTS = {"leaving": "leaving.models.test", "orphan": "orphan.models.test"}
GRPC_HOSTS = {name: f"grpc.{host}" for name, host in HOSTS.items()}
MANAGED = "app.kubernetes.io/managed-by=servectl"
PART_OF = "app.kubernetes.io/part-of=servectl"
# What servectl makes for a ModelService, in its namespace.
MADE = {
    "Deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Services": "/api/v1/namespaces/{ns}/services",
    "ConfigMaps": "/api/v1/namespaces/{ns}/configmaps",
    "PodDisruptionBudgets": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "HTTPRoutes": "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes",
    "GRPCRoutes": "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/grpcroutes",
}
# What the chart installs: in its namespace, and cluster-wide.
CHART_NAMESPACED = {
    "Deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "ServiceAccounts": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Roles": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBindings": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Services": "/api/v1/namespaces/{ns}/services",
    "NetworkPolicies": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
}
CHART_CLUSTER = {
    "ClusterRoles": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBindings": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ValidatingAdmissionPolicies": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBindings": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
OK = "OK"
UNROUTED = "UNIMPLEMENTED"  # gRPC's status for the Gateway's HTTP 404: no route


def kubectl(node: Node, *args: str, timeout_s: float = 150) -> subprocess.CompletedProcess[str]:
    """``kubectl`` (scripts/k8s-clients) against the node, as a user runs it."""
    binary = stack.helm_binary().parent / "kubectl"
    argv = [str(binary), "--kubeconfig", str(node.cluster.kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def helm(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(stack.helm_binary()), "--kubeconfig", str(node.cluster.kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=200, check=False)


def names(node: Node, kinds: dict[str, str], ns: str, selector: str) -> dict[str, list[str]]:
    """The objects of ``kinds`` matching ``selector`` (label selector), by kind."""
    found: dict[str, list[str]] = {}
    for kind, path in kinds.items():
        items = get(node, f"{path.format(ns=ns)}?labelSelector={selector}").get("items") or []
        if items:
            found[kind] = sorted(i["metadata"]["name"] for i in items)
    return found


def made_for(node: Node, service: str) -> dict[str, list[str]]:
    """What servectl made for ``service`` and is there now, pods included."""
    found = names(node, MADE, NS, f"{MANAGED},servectl.io/service={service}")
    pods = get(node, f"/api/v1/namespaces/{NS}/pods?labelSelector=servectl.io/service={service}")
    if pods.get("items"):
        found["Pods"] = sorted(p["metadata"]["name"] for p in pods["items"])
    return found


def routed(web: int, host: str) -> bool:
    """Whether the Gateway answers a prediction for ``host`` (a 404 when no route names it)."""
    try:
        return bool(predict(web, host=host))
    except urllib.error.HTTPError as error:
        assert error.code == 404, f"{host}: {error.code} from the Gateway"
        return False


def grpc_predict(web: int, host: str) -> Any:
    """One gRPC Predict of cost_model through the Gateway's web listener (h2c) on
    127.0.0.1, with ``host`` as the :authority a GRPCRoute's hostnames match: the
    ``grpc.StatusCode``, OK or not."""
    import grpc
    import numpy as np
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from servectl.loadtest.payload import tensor_proto

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "cost_model"
    request.inputs["x"].CopyFrom(tensor_proto(np.ones((1, 8), dtype=np.float32)))
    options = [("grpc.default_authority", host)]
    with grpc.insecure_channel(f"127.0.0.1:{web}", options=options) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            answer = stub.Predict(request, timeout=10)
        except grpc.RpcError as error:
            return str(error.code().name)
    assert answer.outputs, answer
    return OK


def done(what: str, result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{what}: {result.returncode}\n{result.stdout}{result.stderr}"
    return result.stdout


def test_uninstall_as_documented_leaves_nothing_and_a_stuck_delete_is_freed_as_documented(
    node: Node,
    traefik: gateway.Ports,
    monitoring: Monitoring,
    servectl_on_node: stack.Images,
) -> None:
    leaving, orphan = "leaving", "orphan"
    try:
        for name in (leaving, orphan):
            routing = {"hostnames": [HOSTS[name]], "grpcHostnames": [GRPC_HOSTS[name]]}
            start(node, servectl_on_node, name, {"strategy": "canary"}, traefik.web, None, routing)
        assert made_for(node, leaving).get("Pods") and made_for(node, orphan).get("Pods")
        # gRPC on each service's own gRPC hostname, through the same listener as REST.
        for name in (leaving, orphan):
            ok = lambda name=name: grpc_predict(traefik.web, GRPC_HOSTS[name]) == OK  # noqa: E731
            until(ok, f"a gRPC prediction on {GRPC_HOSTS[name]} through the Gateway", 30)

        # 1. `kubectl delete modelservices ... --wait` while the controller runs: it returns
        # once the controller drained and removed everything and took its finalizer off.
        # (One service here: the docs' `--all -A` would take the other one too.)
        began = time.monotonic()
        done(
            "kubectl delete modelservice",
            kubectl(node, "delete", "modelservice", leaving, "-n", NS, "--wait", "--timeout=120s"),
        )
        print(
            f"\nkubectl delete --wait with the controller running: {time.monotonic() - began:.0f} s"
        )
        assert not get(node, f"{MODELSERVICES}/{leaving}")
        until(lambda: not made_for(node, leaving), f"everything made for {leaving} gone", 60)
        assert not routed(traefik.web, HOSTS[leaving])
        assert grpc_predict(traefik.web, GRPC_HOSTS[leaving]) == UNROUTED
        assert routed(traefik.web, HOSTS[orphan]), "the other service lost its route"
        assert grpc_predict(traefik.web, GRPC_HOSTS[orphan]) == OK

        # 2. The release uninstalled first (the order the docs warn against): the controller's
        # pods and everything the chart installed go.
        done(
            "helm uninstall",
            helm(node, "uninstall", stack.RELEASE, "-n", stack.CONTROLLER_NAMESPACE, "--wait"),
        )
        ns = stack.CONTROLLER_NAMESPACE
        until(
            lambda: not get(node, f"/api/v1/namespaces/{ns}/pods").get("items"),
            "the controller's pods gone",
            90,
        )
        assert names(node, CHART_NAMESPACED, ns, PART_OF) == {}
        assert names(node, CHART_CLUSTER, "", PART_OF) == {}

        # 3. Deleting a ModelService with no controller: it waits on its finalizer and its
        # revision keeps serving...
        deleting = kubectl(node, "delete", "modelservice", orphan, "-n", NS, "--wait=false")
        done("kubectl delete --wait=false", deleting)
        time.sleep(5)
        doc = get(node, f"{MODELSERVICES}/{orphan}")
        assert doc["metadata"].get("deletionTimestamp"), doc["metadata"]
        assert doc["metadata"].get("finalizers") == ["servectl.io/cleanup"], doc["metadata"]
        assert made_for(node, orphan).get("Deployments") == [f"{orphan}-v1"]
        assert routed(traefik.web, HOSTS[orphan])

        # ...until the documented patch: the garbage collector deletes what servectl made.
        patch = '{"metadata":{"finalizers":null}}'
        done(
            "kubectl patch",
            kubectl(node, "patch", "modelservice", orphan, "-n", NS, "--type=merge", "-p", patch),
        )
        until(lambda: not get(node, f"{MODELSERVICES}/{orphan}"), f"{orphan} deleted", 30)
        until(lambda: not made_for(node, orphan), f"what was made for {orphan} collected", 90)
        until(lambda: not routed(traefik.web, HOSTS[orphan]), f"{HOSTS[orphan]} unrouted", 30)
        assert grpc_predict(traefik.web, GRPC_HOSTS[orphan]) == UNROUTED

        # 4. The CRDs (Helm never deletes them).
        done(
            "kubectl delete -f deploy/crds/",
            kubectl(node, "delete", "-f", str(REPO / "deploy" / "crds")),
        )
        for crd in ("modelservices.servectl.io", "scalingpolicies.servectl.io"):
            until(lambda crd=crd: not get(node, CRD_PATH + crd), f"the CRD {crd} gone", 60)
        leftovers = names(node, MADE, NS, MANAGED)
        assert leftovers == {}, leftovers
    finally:
        reinstall(node, monitoring, servectl_on_node)


def reinstall(node: Node, monitoring: Monitoring, images: stack.Images) -> None:
    """servectl as the package's fixtures installed it: the CRDs, then the chart."""
    for path in CRDS:
        kubectl(node, "apply", "--server-side", "-f", str(path))
    for path in CRDS:
        crd = _name(path)
        until(lambda crd=crd: _established(get(node, CRD_PATH + crd)), f"{crd} established", 60)
    stack.install_controller(
        node,
        images,
        gateway=f"{gateway.NAMESPACE}/{gateway.GATEWAY}",
        prometheus_url=monitoring.url,
        replicas=2,
    )


def _name(path: Path) -> str:
    import yaml

    return str(yaml.safe_load(path.read_text())["metadata"]["name"])


def _established(doc: dict[str, Any]) -> bool:
    conditions = (doc.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
