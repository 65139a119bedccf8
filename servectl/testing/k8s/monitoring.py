"""Real metrics for the test node, as a cluster's monitoring gives them to servectl
(deploy/prometheus/README.md, "What must be scraped"):

- **Prometheus 3.16** (``scripts/metrics-build prometheus``: Debian's 2.42 has no Kubernetes
  discovery) on this machine, listening on the bridge's address `NODE_IP` so the controller's
  pods reach it, with a client identity of its own (user `PROMETHEUS_USER`, bound to
  `PROMETHEUS_RULES`: what kube-prometheus-stack's Prometheus may do, no more). It scrapes:
- the kubelet's ``/metrics/cadvisor`` over HTTPS with that client certificate
  (``container_cpu_usage_seconds_total`` with the pods' ``namespace``/``pod`` labels, kept
  with ``honor_labels``);
- **kube-state-metrics** v2.18 running as a pod (``scripts/metrics-build
  kube-state-metrics``, packed into an image here) with the allowlist the README names, found
  by pod discovery;
- every model server, with ``deploy/prometheus/scrape-config.yaml``'s job exactly as users
  install it, only told where the cluster is (``kubeconfig_file``: Prometheus runs outside
  the cluster);
- Traefik's ``/metrics`` on 127.0.0.1 (``traefik_service_*`` per backend of each route).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servectl.metrics.server import PrometheusServer
from servectl.testing.k8s import images
from servectl.testing.k8s.node import NODE_IP, NODE_NAME, Node
from servectl.testing.k8s.tools import KUBE_STATE_METRICS, PROMETHEUS, REPO

NAMESPACE = "monitoring"
KSM = "kube-state-metrics"
KSM_IMAGE = f"servectl.test/{KSM}:{KUBE_STATE_METRICS.version}"
KSM_PORT = 8080
PROMETHEUS_USER = "servectl-test:prometheus"
SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "scrape-config.yaml"

Doc = dict[str, Any]

# Pod discovery, node metrics through the kubelet: kube-prometheus-stack's Prometheus role
# less what these jobs never read (endpoints, services, ingresses, /metrics of the API).
PROMETHEUS_RULES: list[Doc] = [
    {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
]
KSM_RULES: list[Doc] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]


class MonitoringUnavailable(RuntimeError):
    """A binary is missing; the message says how to build it."""


def ksm_image(out: Path, binary: Path) -> images.Image:
    """kube-state-metrics' static binary as ``/kube-state-metrics``, its entrypoint."""
    layer: dict[str, images.Entry] = {
        KSM: images.File(binary, mode=0o755),
        "tmp": images.Dir(mode=0o1777),
    }
    return images.write_archive(out, KSM_IMAGE, [layer], images.Config(entrypoint=[f"/{KSM}"]))


def _cluster_role(name: str, rules: list[Doc], subject: Doc) -> list[Doc]:
    rbac = "rbac.authorization.k8s.io"
    return [
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": name},
            "subjects": [subject],
        },
    ]


def manifests(image: str = KSM_IMAGE) -> list[Doc]:
    """The namespace, Prometheus' RBAC, and kube-state-metrics (its ServiceAccount, RBAC
    and Deployment), in the order to apply them."""
    labels = {"app.kubernetes.io/name": KSM}
    probe = {"httpGet": {"path": "/healthz", "port": "http-metrics"}, "periodSeconds": 2}
    user = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PROMETHEUS_USER}
    account = {"kind": "ServiceAccount", "name": KSM, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        *_cluster_role("servectl-test-prometheus", PROMETHEUS_RULES, user),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": KSM, "namespace": NAMESPACE},
        },
        *_cluster_role(f"servectl-test-{KSM}", KSM_RULES, account),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": KSM, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": KSM,
                        "containers": [
                            {
                                "name": KSM,
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": [
                                    "--resources=pods",
                                    # kube_pod_labels with the two labels servectl joins on.
                                    "--metric-labels-allowlist="
                                    "pods=[servectl.io/service,servectl.io/revision]",
                                    "--host=0.0.0.0",
                                    f"--port={KSM_PORT}",
                                    # Its own metrics: not scraped, so on loopback only.
                                    "--telemetry-host=127.0.0.1",
                                    f"--telemetry-port={KSM_PORT + 1}",
                                ],
                                "ports": [{"name": "http-metrics", "containerPort": KSM_PORT}],
                                "readinessProbe": probe,
                                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True,
                                    "runAsUser": 65534,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                            }
                        ],
                    },
                },
            },
        },
    ]


def scrape_configs(
    kubeconfig: Path, client: tuple[Path, Path], kubelet_port: int, traefik_admin: int | None
) -> list[Doc]:
    """The four jobs (see the module's docstring)."""
    cert, key = client
    sd = {"role": "pod", "kubeconfig_file": str(kubeconfig)}
    users_jobs = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    for job in users_jobs:
        for discovery in job.get("kubernetes_sd_configs", []):
            discovery["kubeconfig_file"] = str(kubeconfig)
    jobs: list[Doc] = [
        {
            "job_name": "kubelet-cadvisor",
            "scheme": "https",
            "metrics_path": "/metrics/cadvisor",
            # The pods' namespace and pod labels are cAdvisor's, not the target's.
            "honor_labels": True,
            # The kubelet serves a certificate it signed itself (no serving certificate is
            # issued to it here), as kube-prometheus-stack's kubelet job assumes too.
            "tls_config": {
                "cert_file": str(cert),
                "key_file": str(key),
                "insecure_skip_verify": True,
            },
            "static_configs": [
                {"targets": [f"{NODE_IP}:{kubelet_port}"], "labels": {"node": NODE_NAME}}
            ],
        },
        {
            "job_name": KSM,
            "honor_labels": True,
            "kubernetes_sd_configs": [{**copy.deepcopy(sd), "namespaces": {"names": [NAMESPACE]}}],
            "relabel_configs": [
                {
                    "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                    "regex": KSM,
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": "http-metrics",
                    "action": "keep",
                },
            ],
        },
        *users_jobs,
    ]
    if traefik_admin is not None:
        jobs.append(
            {"job_name": "traefik", "static_configs": [{"targets": [f"127.0.0.1:{traefik_admin}"]}]}
        )
    return jobs


@dataclass
class Monitoring:
    """Prometheus running on this machine and kube-state-metrics in the cluster."""

    prometheus: PrometheusServer

    @classmethod
    def start(
        cls,
        node: Node,
        root: Path,
        *,
        traefik_admin: int | None = None,
        scrape_interval_s: float = 2.0,
    ) -> Monitoring:
        """Install kube-state-metrics and Prometheus' RBAC, start Prometheus with its
        data in ``root``; `MonitoringUnavailable` when a binary is not built."""
        found = {tool.name: tool.binary() for tool in (PROMETHEUS, KUBE_STATE_METRICS)}
        for tool in (PROMETHEUS, KUBE_STATE_METRICS):
            if found[tool.name] is None:
                raise MonitoringUnavailable(f"no {tool.name} binary; {tool.hint}")
        ksm, prometheus = found[KSM], found[PROMETHEUS.name]
        assert ksm is not None and prometheus is not None
        root.mkdir(parents=True, exist_ok=True)
        ksm_image(root / "kube-state-metrics.tar", ksm)
        node.load_image(root / "kube-state-metrics.tar")
        node.apply(manifests())
        kubeconfig = root / "prometheus.kubeconfig"
        client = node.cluster.write_kubeconfig(kubeconfig, PROMETHEUS_USER, "servectl-test")
        server = PrometheusServer(
            root / "prometheus",
            scrape_interval_s=scrape_interval_s,
            binary=str(prometheus),
            extra_scrape_configs=scrape_configs(
                kubeconfig, client, node.kubelet_port, traefik_admin
            ),
            host=NODE_IP,
        )
        server.start()
        return cls(server)

    @property
    def url(self) -> str:
        """Where the controller (in a pod) and the tests (on this machine) reach it."""
        return self.prometheus.url

    def stop(self) -> None:
        self.prometheus.stop()
