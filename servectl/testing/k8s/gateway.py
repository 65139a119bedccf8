"""Traefik as the test node's Gateway API implementation, installed the way a user
installs it: its own namespace, ServiceAccount and RBAC, a Deployment running the image,
a GatewayClass and a Gateway. It runs with the host's network and listens on 127.0.0.1
only: load enters there and nowhere else (the node's pods are on the bridge).

The binary comes from ``scripts/traefik-build`` (Traefik v3.6.x, the newest the Go module
proxy serves that builds as a dependency), packed into an image by `traefik_image`. What
each flag and rule is for is in docs/kubernetes.md ("The Gateway on the real node").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.testing.k8s import images
from servectl.testing.k8s.tools import TRAEFIK

TRAEFIK_VERSION = TRAEFIK.version
NAMESPACE = "traefik"
GATEWAY_CLASS = "traefik"
GATEWAY = "servectl"
CONTROLLER_NAME = "traefik.io/gateway-controller"
IMAGE = f"servectl.test/traefik:{TRAEFIK_VERSION}"
BUILD_HINT = "build it with: bash scripts/traefik-build (needs Go; ~11 min the first time)"

Doc = dict[str, Any]


def traefik_binary(*, build: bool = False) -> Path | None:
    """The Traefik binary ``scripts/traefik-build`` made (``SERVECTL_TRAEFIK`` names another
    one); with ``build``, run the script when it is missing. None when there is none."""
    return TRAEFIK.binary(build=build)


def traefik_image(out: Path, binary: Path) -> images.Image:
    """Traefik's static binary as ``/traefik``, its entrypoint; /tmp for its own files."""
    layer: dict[str, images.Entry] = {
        "traefik": images.File(binary, mode=0o755),
        "tmp": images.Dir(mode=0o1777),
    }
    return images.write_archive(out, IMAGE, [layer], images.Config(entrypoint=["/traefik"]))


@dataclass(frozen=True)
class Ports:
    """Where Traefik listens on 127.0.0.1: ``web`` for traffic (the Gateway's listener
    has the same port number, which is how Traefik ties a listener to an entrypoint) and
    ``admin`` for /ping and /metrics."""

    web: int
    admin: int


# What Traefik's Gateway provider reads and writes (its watches in v3.6; status updates).
RULES: list[Doc] = [
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["services", "secrets", "configmaps"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["gateway.networking.k8s.io"],
        "resources": [
            "gatewayclasses",
            "gateways",
            "httproutes",
            "grpcroutes",
            "referencegrants",
            "backendtlspolicies",
        ],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["gateway.networking.k8s.io"],
        "resources": [
            "gatewayclasses/status",
            "gateways/status",
            "httproutes/status",
            "grpcroutes/status",
            "backendtlspolicies/status",
        ],
        "verbs": ["update"],
    },
]

# Latency buckets fine enough for a p99 target in tens of milliseconds (Traefik's default
# 0.1, 0.3, 1.2, 5 s says nothing below 100 ms).
BUCKETS = "0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5"


def traefik_args(ports: Ports) -> list[str]:
    return [
        "--providers.kubernetesgateway=true",
        # Only the standard channel: the experimental one watches v1alpha2 TCPRoute and
        # TLSRoute, which the v1.6 standard CRDs do not serve, and would never sync.
        "--providers.kubernetesgateway.experimentalchannel=false",
        "--providers.kubernetesgateway.statusaddress.ip=127.0.0.1",
        f"--entrypoints.web.address=127.0.0.1:{ports.web}",
        # Not :8080 on every interface (its default) for ping, metrics and the API.
        f"--entrypoints.traefik.address=127.0.0.1:{ports.admin}",
        "--ping=true",
        "--metrics.prometheus=true",
        "--metrics.prometheus.addrouterslabels=true",
        "--metrics.prometheus.addserviceslabels=true",
        f"--metrics.prometheus.buckets={BUCKETS}",
        "--accesslog=true",
        "--accesslog.format=json",
        "--global.checknewversion=false",
        "--global.sendanonymoususage=false",
        "--log.level=INFO",
    ]


def manifests(ports: Ports, image: str = IMAGE) -> list[Doc]:
    """Everything that installs Traefik and the Gateway ``traefik/servectl``, in the
    order to apply it."""
    meta = {"namespace": NAMESPACE}
    labels = {"app.kubernetes.io/name": "traefik"}
    probe = {
        "httpGet": {"host": "127.0.0.1", "path": "/ping", "port": ports.admin},
        "periodSeconds": 2,
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "traefik", **meta},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "traefik-gateway"},
            "rules": RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "traefik-gateway"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "traefik-gateway",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "traefik", "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "traefik", **meta, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                # One host port pair: the old pod must go before the new one binds.
                "strategy": {"type": "Recreate"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "traefik",
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirstWithHostNet",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {
                                "name": "traefik",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": traefik_args(ports),
                                "readinessProbe": probe,
                                "livenessProbe": {**probe, "periodSeconds": 10},
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True,
                                    "runAsUser": 65532,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": GATEWAY, **meta},
            "spec": {
                "gatewayClassName": GATEWAY_CLASS,
                "listeners": [
                    {
                        "name": "web",
                        "protocol": "HTTP",
                        "port": ports.web,
                        # Routes live in the services' namespaces.
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    }
                ],
            },
        },
    ]
