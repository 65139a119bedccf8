"""Fixtures for the tests against a real Kubernetes control plane (every test here is
marked ``kubernetes``; see servectl.testing.k8s for what kwok's fake nodes do with pods).

- ``control_plane`` (session): a started `ControlPlane` (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok with 2 fake nodes), with servectl's CRDs
  (deploy/crds) and the Gateway API standard CRDs applied; stopped at session end.
  Starting takes ~4 s on 2 cores.
- ``k8s_bin_dir`` (session): the directory of the binaries, for tests that start their own
  `ControlPlane`.
- ``k8s_api``: a fresh ``kubernetes.client.ApiClient`` for it, closed at teardown.
- ``namespace``: a fresh namespace named after the test (its ``default`` service account
  already there, so pods can be created), deleted at teardown without waiting.

Missing binaries (``bash scripts/k8s-testbin``) or etcd (``apt-get install etcd-server``):
skipped, or failed when ``SERVECTL_REQUIRE_K8S=1`` (CI).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from servectl.testing.k8s import (
    BUILD_HINT,
    ETCD_HINT,
    ControlPlane,
    etcd_binary,
    find_binaries,
    gateway_api_crds,
    wait_for,
)
from tests.integration.k8s.harness import harness  # noqa: F401 (the fixture, for every module)

REQUIRE_ENV = "SERVECTL_REQUIRE_K8S"
CRDS = sorted((Path(__file__).resolve().parents[3] / "deploy" / "crds").glob("*.yaml"))
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.kubernetes)


def _require(ok: bool, message: str) -> None:
    if ok:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """The directory of kube-apiserver & co (skips or fails when they or etcd are missing)."""
    bin_dir = find_binaries(build=False)
    _require(bin_dir is not None, f"Kubernetes test binaries not found; {BUILD_HINT}")
    _require(etcd_binary() is not None, f"etcd not found; {ETCD_HINT}")
    assert bin_dir is not None
    return bin_dir


@pytest.fixture(scope="session")
def control_plane(
    k8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(
        tmp_path_factory.mktemp("k8s"),
        bin_dir=k8s_bin_dir,
        crds=[*CRDS, *gateway_api_crds(k8s_bin_dir)],
    )
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def k8s_api(control_plane: ControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    client = control_plane.api_client()
    try:
        yield client
    finally:
        client.close()


def namespace_name(test_name: str) -> str:
    """A DNS-1123 label (<= 63 chars) from the test's name, unique by a random suffix."""
    base = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:54].rstrip("-")
    return f"{base or 'test'}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest, k8s_api: kubernetes.client.ApiClient
) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(k8s_api)
    name = namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": name}})
    # The admission of pods needs the namespace's default service account, which the
    # controller manager creates a moment after the namespace.
    wait_for(
        lambda: core.read_namespaced_service_account("default", name),
        timeout_s=30,
        what=f"service account {name}/default",
        interval_s=0.05,
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)
