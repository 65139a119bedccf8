"""A real node runs real pods: containers start from images imported offline, readiness
probes fire, pod addresses on the node's bridge answer, Services answer through kube-proxy
from this machine and from inside a pod, pods reach the apiserver, and logs come back
through the apiserver. The same things kwok only pretends (tests/integration/k8s)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from servectl.testing.k8s import images
from servectl.testing.k8s.node import NODE_IP, POD_CIDR, Node
from tests.integration.k8s_node.conftest import until

HTTPD = "servectl.test/httpd:1"


@pytest.fixture(scope="module", autouse=True)
def httpd_image(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test image imported; at the end, what the tests made deleted (the node goes on
    serving the package's other tests)."""
    tarball = tmp_path_factory.mktemp("images") / "httpd.tar"
    images.httpd_test_image(tarball, HTTPD)
    node.load_image(tarball)
    yield
    for name in ("web-0", "web-1", "server", "client", "parked"):
        node.cluster.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")
    for name in ("web", "echo"):
        node.cluster.request("DELETE", f"/api/v1/namespaces/default/services/{name}")


def pod(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": HTTPD,
        "imagePullPolicy": "Never",
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 1, **spec},
    }


def ready(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    status = core.read_namespaced_pod(name, "default").status
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:
        body: bytes = answer.read()
    return body


def test_pods_pass_their_probes_and_serve_on_the_bridge_and_through_a_service(
    node: Node, core: kubernetes.client.CoreV1Api
) -> None:
    probe = {"httpGet": {"path": "/healthz", "port": images.HTTPD_PORT}, "periodSeconds": 1}
    for i in range(2):
        core.create_namespaced_pod(
            "default", pod(f"web-{i}", {"app": "web"}, container={"readinessProbe": probe})
        )
    began = time.monotonic()
    until(lambda: ready(core, "web-0") and ready(core, "web-1"), "both pods Ready")
    print(f"2 pods Ready {time.monotonic() - began:.1f} s after they were created")
    addresses = [core.read_namespaced_pod(f"web-{i}", "default").status.pod_ip for i in (0, 1)]
    prefix = POD_CIDR.rsplit(".", 1)[0] + "."
    assert all(a.startswith(prefix) for a in addresses), addresses
    for address in addresses:
        assert get(f"http://{address}:{images.HTTPD_PORT}/") == images.HTTPD_INDEX
    core.create_namespaced_service(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"port": 80, "targetPort": images.HTTPD_PORT}],
            },
        },
    )
    cluster_ip = core.read_namespaced_service("web", "default").spec.cluster_ip

    def answers() -> bool:
        try:
            return get(f"http://{cluster_ip}/") == images.HTTPD_INDEX
        except OSError:
            return False  # kube-proxy has not written the Service's rules yet

    until(answers, f"the Service at {cluster_ip} answering from this machine")
    # The kubelet's probes reached the container: busybox httpd logs each request.
    log = core.read_namespaced_pod_log("web-0", "default")
    assert "/healthz" in log or "response:200" in log, log


def test_a_pod_reaches_a_service_and_the_apiserver(
    node: Node, core: kubernetes.client.CoreV1Api
) -> None:
    """From inside a pod: the Service of the first test (env vars the kubelet sets for
    Services that exist before the pod) and the ``kubernetes`` Service, whose endpoint is
    the apiserver on the bridge's address."""
    core.create_namespaced_pod("default", pod("server", {"app": "echo"}))
    core.create_namespaced_service(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    until(lambda: ready(core, "server"), "the server pod Ready")
    until(
        lambda: core.read_namespaced_endpoints("echo", "default").subsets or [],
        "the echo Service's endpoints",
    )
    time.sleep(1.0)  # kube-proxy's sync after the endpoint appears (its minSyncPeriod)
    script = (
        "set -e; wget -q -O- http://$ECHO_SERVICE_HOST:$ECHO_SERVICE_PORT/; "
        "echo | nc -w 3 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT && echo apiserver-ok"
    )
    client = pod(
        "client",
        {"app": "client"},
        restartPolicy="Never",
        container={"command": ["/bin/busybox", "sh", "-c", script]},
    )
    core.create_namespaced_pod("default", client)

    def finished() -> str | None:
        phase: str | None = core.read_namespaced_pod("client", "default").status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = until(finished, "the client pod finished")
    log = core.read_namespaced_pod_log("client", "default")
    assert phase == "Succeeded", log
    assert images.HTTPD_INDEX.decode() in log and "apiserver-ok" in log, log


def test_the_node_is_the_bridge_address_and_reports_real_capacity(
    node: Node, core: kubernetes.client.CoreV1Api
) -> None:
    (item,) = core.list_node().items
    assert {a.type: a.address for a in item.status.addresses}["InternalIP"] == NODE_IP
    assert int(item.status.capacity["cpu"]) >= 1  # this machine's, not kwok's 32
    assert Path(f"/sys/class/net/{node_bridge()}").exists()


def node_bridge() -> str:
    from servectl.testing.k8s.node import BRIDGE

    return BRIDGE


def test_a_running_pods_cpu_is_resized_in_place_without_a_restart(
    node: Node, core: kubernetes.client.CoreV1Api
) -> None:
    """The ``resize`` subresource (in-place pod resize, beta and on since 1.33) on this
    node's cgroup v1 and containerd 1.6: a running container's CPU limit goes from 500m
    to 20m and back, its CFS quota follows, and it is never restarted. What warm standby
    replicas park on (issue 28); measured ~2 s each way here."""
    from servectl.testing.k8s.node import CGROUP

    cpu = {
        "requests": {"cpu": "500m", "memory": "64Mi"},
        "limits": {"cpu": "500m", "memory": "64Mi"},
    }
    resize_policy = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    core.create_namespaced_pod(
        "default",
        pod(
            "parked", {"app": "parked"}, container={"resources": cpu, "resizePolicy": resize_policy}
        ),
    )
    until(lambda: ready(core, "parked"), "the pod Ready")
    status = core.read_namespaced_pod("parked", "default")
    assert status.status.qos_class == "Guaranteed"
    container = status.status.container_statuses[0].container_id.split("://")[-1]
    quota = Path(
        f"/sys/fs/cgroup/cpu{CGROUP}/kubepods/pod{status.metadata.uid}/{container}/cpu.cfs_quota_us"
    )
    assert int(quota.read_text()) == 50_000  # 500m of a 100 ms period

    def resize(millicores: int) -> float:
        value = f"{millicores}m"
        body = {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "resources": {"requests": {"cpu": value}, "limits": {"cpu": value}},
                    }
                ]
            }
        }
        began = time.monotonic()
        status, answer = node.cluster.request(
            "PATCH",
            "/api/v1/namespaces/default/pods/parked/resize",
            body,
            content_type="application/strategic-merge-patch+json",
        )
        assert status == 200, answer

        def applied() -> bool:
            found = core.read_namespaced_pod("parked", "default").status.container_statuses[0]
            limits = (found.resources.limits or {}) if found.resources else {}
            return limits.get("cpu") == value and int(quota.read_text()) == millicores * 100

        until(applied, f"the CPU limit at {value} in the status and the cgroup", 30)
        return time.monotonic() - began

    down, up = resize(20), resize(500)
    print(f"\nin-place resize 500m -> 20m in {down:.1f} s, back in {up:.1f} s")
    assert (
        core.read_namespaced_pod("parked", "default").status.container_statuses[0].restart_count
        == 0
    )
