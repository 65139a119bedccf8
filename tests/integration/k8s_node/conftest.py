"""Fixtures for the tests on a real node (every test here is marked ``node``): a control
plane and a kubelet that runs pods through containerd on a bridge of this machine
(servectl.testing.k8s.node).

- ``node`` (module): a started `Node` with servectl's CRDs and the Gateway API's, stopped
  (and the host put back) at the module's end;
  ~5-7 s to start on 2 cores, so each module gets its own.
- ``core``: a ``CoreV1Api`` on it.

A machine that cannot run a node (not root, no containerd, runc or CNI plugins, no kubelet
built): skipped, or failed when ``SERVECTL_REQUIRE_NODE=1`` (CI).
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from servectl import processes
from servectl.testing.k8s import BUILD_HINT, etcd_binary, find_binaries, gateway, gateway_api_crds
from servectl.testing.k8s.monitoring import Monitoring, MonitoringUnavailable
from servectl.testing.k8s.node import Node, NodeUnavailable, preflight

REQUIRE_ENV = "SERVECTL_REQUIRE_NODE"
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


@pytest.fixture(scope="module")
def node(node_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    crds = [*CRDS, *gateway_api_crds(node_bin_dir)]
    started = Node.start(tmp_path_factory.mktemp("node"), bin_dir=node_bin_dir, crds=crds)
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"the node did not put the host back: {left}"


@pytest.fixture
def core(node: Node) -> Iterator[kubernetes.client.CoreV1Api]:
    client = node.cluster.api_client()
    try:
        yield kubernetes.client.CoreV1Api(client)
    finally:
        client.close()


@pytest.fixture(scope="module")
def traefik(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gateway.Ports]:
    """Traefik installed on the module's node, the Gateway traefik/servectl; its ports."""
    binary = gateway.traefik_binary()
    require(binary is not None, f"no Traefik binary; {gateway.BUILD_HINT}")
    assert binary is not None
    made = tmp_path_factory.mktemp("gateway")
    gateway.traefik_image(made / "traefik.tar", binary)
    node.load_image(made / "traefik.tar")
    ports = gateway.Ports(web=processes.free_port(), admin=processes.free_port())
    node.apply(gateway.manifests(ports))
    until(lambda: ok(f"http://127.0.0.1:{ports.admin}/ping"), "Traefik answering /ping", 90)
    yield ports


@pytest.fixture(scope="module")
def monitoring(
    node: Node, traefik: gateway.Ports, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Monitoring]:
    """Prometheus on this machine scraping the node (kubelet cAdvisor, kube-state-metrics
    in a pod, the model servers with the users' scrape job, Traefik)."""
    try:
        started = Monitoring.start(
            node, tmp_path_factory.mktemp("monitoring"), traefik_admin=traefik.admin
        )
    except MonitoringUnavailable as why:
        require(False, str(why))
        raise
    try:
        yield started
    finally:
        started.stop()


def until(check: Any, what: str, timeout_s: float = 60.0) -> Any:
    """``check()``'s first true value, polled every 0.25 s; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
