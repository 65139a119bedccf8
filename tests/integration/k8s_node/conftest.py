"""Fixtures for the tests on a real node (every test here is marked ``node``): a control
plane and a kubelet that runs pods through containerd on a bridge of this machine
(servectl.testing.k8s.node).

``stack/`` shares one node for all its modules (package scope), with Traefik, Prometheus
and kube-state-metrics (servectl.testing.k8s.monitoring), and servectl installed by its
Helm chart: `started_node`, `install_traefik`, `started_monitoring` and
`install_servectl` are the steps. The tests of the node itself, of Traefik and of
servectl share it (a node of its own per module cost ~25 s of start and stop each);
test_node_host.py starts and crashes nodes of its own, one at a time, after it.

A machine that cannot run a node (not root, no containerd, runc or CNI plugins, no kubelet
built): skipped, or failed when ``SERVECTL_REQUIRE_NODE=1`` (CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from servectl import processes
from servectl.testing.k8s import (
    BUILD_HINT,
    etcd_binary,
    find_binaries,
    gateway,
    gateway_api_crds,
    stack,
)
from servectl.testing.k8s.monitoring import Monitoring, MonitoringUnavailable
from servectl.testing.k8s.node import Node, NodeUnavailable, preflight

REQUIRE_ENV = "SERVECTL_REQUIRE_NODE"
NS = "ml"
"""The namespace of the ModelServices (and of the models' claim)."""
_HERE = Path(__file__).parent
CRDS = sorted((_HERE.parents[2] / "deploy" / "crds").glob("*.yaml"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.node)


def require(ok: bool, message: str) -> None:
    """Skip with ``message`` unless CI asks for the node tests to run (then fail)."""
    if ok:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def node_bin_dir() -> Path:
    bin_dir = find_binaries()
    require(bin_dir is not None, f"no Kubernetes binaries; {BUILD_HINT}")
    assert bin_dir is not None
    require(etcd_binary() is not None, "no etcd: apt-get install etcd-server")
    try:
        preflight(bin_dir)
    except NodeUnavailable as why:
        require(False, str(why))
    return bin_dir


@contextlib.contextmanager
def started_node(bin_dir: Path, factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A node with servectl's CRDs and the Gateway API's; stopped, the host put back."""
    crds = [*CRDS, *gateway_api_crds(bin_dir)]
    started = Node.start(factory.mktemp("node"), bin_dir=bin_dir, crds=crds)
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"the node did not put the host back: {left}"


def install_traefik(node: Node, factory: pytest.TempPathFactory) -> gateway.Ports:
    """Traefik installed on ``node``, the Gateway traefik/servectl; its ports."""
    binary = gateway.traefik_binary()
    require(binary is not None, f"no Traefik binary; {gateway.BUILD_HINT}")
    assert binary is not None
    made = factory.mktemp("gateway")
    gateway.traefik_image(made / "traefik.tar", binary)
    node.load_image(made / "traefik.tar")
    ports = gateway.Ports(web=processes.free_port(), admin=processes.free_port())
    node.apply(gateway.manifests(ports))
    until(lambda: ok(f"http://127.0.0.1:{ports.admin}/ping"), "Traefik answering /ping", 90)
    return ports


@contextlib.contextmanager
def started_monitoring(
    node: Node, traefik: gateway.Ports, factory: pytest.TempPathFactory
) -> Iterator[Monitoring]:
    """Prometheus on this machine scraping the node (kubelet cAdvisor, kube-state-metrics
    in a pod, the model servers with the users' scrape job, Traefik)."""
    try:
        started = Monitoring.start(node, factory.mktemp("monitoring"), traefik_admin=traefik.admin)
    except MonitoringUnavailable as why:
        require(False, str(why))
        raise
    try:
        yield started
    finally:
        started.stop()


def load_servectl_images(node: Node) -> stack.Images:
    """servectl's two images built (scripts/build-images: seconds when its cache has them)
    and imported into ``node``'s containerd, both at once (the model server's alone took
    ~50 s on 2 cores)."""
    began = time.monotonic()
    built = stack.build_images()
    print(f"\nimages ready in {time.monotonic() - began:.0f} s")

    def load(tarball: Path) -> str:
        started = time.monotonic()
        node.load_image(tarball)
        return f"{tarball.name} imported in {time.monotonic() - started:.0f} s"

    with ThreadPoolExecutor(2) as pool:
        for said in pool.map(load, (built.controller, built.model_server)):
            print(said)
    return built


def install_servectl(
    node: Node,
    monitoring: Monitoring,
    factory: pytest.TempPathFactory,
    loaded: Future[stack.Images] | None = None,
) -> stack.Images:
    """The images imported (by ``loaded``, started earlier, or now), the demo models on a
    volume claimed in `NS`, the chart installed (two controller replicas) reading
    ``monitoring``'s Prometheus."""
    built = loaded.result() if loaded is not None else load_servectl_images(node)
    from servectl.modelserver.demo import export_demo

    models = factory.mktemp("models")
    export_demo(models, cost=400)
    models.chmod(0o755)  # read by the model server's non-root user through the volume
    # Pod Security "restricted" enforced where the model pods run (issue 27 item 4): every
    # node test then runs servectl's pods as the policy admits them.
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    namespace = {"name": NS, "labels": restricted}
    node.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": namespace}])
    node.apply(stack.models_volume(node, models, NS))
    began = time.monotonic()
    stack.install_controller(
        node,
        built,
        gateway=f"{gateway.NAMESPACE}/{gateway.GATEWAY}",
        prometheus_url=monitoring.url,
        replicas=2,
    )
    print(f"helm install --wait took {time.monotonic() - began:.0f} s")
    return built


def get(node: Node, path: str) -> dict[str, Any]:
    status, answer = node.cluster.request("GET", path)
    return answer if status == 200 and isinstance(answer, dict) else {}


def conditions(doc: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (doc.get("status") or {}).get("conditions") or []}


def pod_logs(node: Node) -> str:
    """The last lines of every model server's and Traefik's log, to say why."""
    logs = []
    for ns in (NS, gateway.NAMESPACE):
        for pod in get(node, f"/api/v1/namespaces/{ns}/pods").get("items", []):
            name, address = pod["metadata"]["name"], pod["status"].get("podIP")
            path = f"/api/v1/namespaces/{ns}/pods/{name}/log?tailLines=15"
            logs.append(f"--- {ns}/{name} ({address}):\n{node.cluster.request('GET', path)[1]}")
    return "\n".join(logs)


def predict(
    port: int,
    host: str | None = None,
    headers: dict[str, str] | None = None,
    model: str = "cost_model",
) -> dict[str, Any]:
    """One REST prediction of ``model`` (a demo model) through the Gateway on 127.0.0.1
    (``host``: the Host header a route's hostnames match; the connection still goes to
    127.0.0.1)."""
    from servectl.loadtest.payload import DEFAULT_PAYLOADS

    body = json.dumps(DEFAULT_PAYLOADS[model]).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if host is not None:
        sent["Host"] = host
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/{model}:predict", data=body, headers=sent
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        decoded: dict[str, Any] = json.loads(answer.read())
    return decoded


def until(check: Any, what: str, timeout_s: float = 60.0) -> Any:
    """``check()``'s first true value, polled every 0.25 s; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


ok = stack.answers
"""A GET answers 200 within 2 s."""
