"""The harness of the controller tests on a real control plane: servectl's controller run
in-process against kube-apiserver and kwok, a namespace per test, a metrics mirror feeding
a real Prometheus, and the ``harness`` fixture (registered by this package's conftest)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.controller import Controller, ControllerConfig
from servectl.backends.kubernetes.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    GRPCROUTES,
    HTTPROUTES,
    MODELSERVICES,
    PDBS,
    PODS,
    SERVICES,
    Kube,
    KubeError,
    load_api_client,
)
from servectl.backends.kubernetes.leader import LeaseConfig
from servectl.metrics.config import MetricsConfig
from servectl.metrics.server import PrometheusServer
from servectl.testing.exporters import Pod, Scenario
from servectl.testing.k8s import ControlPlane, wait_for

METRICS = MetricsConfig(rateWindow="10s", timeoutSeconds=5, staleAfterSeconds=30)
HEALTHY = {"cpu_cores": 0.4, "rps": 20.0, "latency_ms": 20.0}

OWNED = (DEPLOYMENTS, SERVICES, CONFIGMAPS, PDBS, HTTPROUTES, GRPCROUTES)


def ms_doc(name: str, namespace: str, version: int = 1, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": name, "basePath": f"s3://models/{name}", "version": version},
        "autoscaling": {"minReplicas": 2, "maxReplicas": 6},
    }
    body.update(spec)
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


@dataclass
class Running:
    controller: Controller
    thread: threading.Thread
    kube: Kube
    stopped: bool = False

    def stop(self, release: bool = True) -> None:
        if self.stopped:
            return
        self.stopped = True
        if not release:
            self.controller.flush_on_stop = False  # a crash saves nothing more
        if not release and self.controller.elector is not None:
            # A crash: the Lease is not given back (the elector forgets it led).
            self.controller.elector._leader = False
        self.controller.stop()
        self.thread.join(timeout=30)


class MetricsMirror:
    """What a cluster's Prometheus would scrape from servectl's pods: every Running kwok
    pod of the namespace gets a fake TF Serving (and cAdvisor, kube-state-metrics series)
    in a live :class:`Scenario`, with the rates its revision is given, and a real
    Prometheus scrapes them with the labels the cluster's scrape config adds."""

    def __init__(self, kube: Kube, namespace: str, prometheus: PrometheusServer) -> None:
        self.kube = kube
        self.namespace = namespace
        self.prometheus = prometheus
        self.scenario = Scenario()
        self.scenario.start()
        self.rates: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(KubeError):
                self.sync()
            self._stop.wait(0.5)

    def sync(self) -> None:
        pods = self.kube.list(PODS, self.namespace, label_selector=obj.LABEL_REVISION)["items"]
        running = {
            p["metadata"]["name"]: p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running" and not obj.pod_terminating(p)
        }
        have = {p.name for p in self.scenario.pods}
        changed = False
        for name in have - set(running):
            self.scenario.remove_pod(name)
            changed = True
        for name, pod in running.items():
            labels = pod["metadata"]["labels"]
            revision = labels[obj.LABEL_REVISION]
            rates = self.rates.get(revision, HEALTHY)
            if name not in have:
                self.scenario.add_pod(
                    Pod(
                        name,
                        service=labels[obj.LABEL_SERVICE],
                        revision=revision,
                        namespace=self.namespace,
                        model_name=labels[obj.LABEL_SERVICE],
                        **rates,
                    )
                )
                changed = True
        if changed:
            self.prometheus.set_targets(self.scenario.targets())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.scenario.close()


@dataclass
class Harness:
    plane: ControlPlane
    namespace: str
    kube: Kube
    running: list[Running] = field(default_factory=list)
    mirror: MetricsMirror | None = None

    def metrics(self, prometheus: PrometheusServer) -> MetricsMirror:
        self.mirror = MetricsMirror(self.kube, self.namespace, prometheus)
        return self.mirror

    def controller(
        self,
        *,
        traffic: str = obj.TrafficProvider.GATEWAY,
        leader_elect: bool = False,
        lease: LeaseConfig | None = None,
        period_s: float = 0.3,
        grpc_listener: str | None = "grpc",
        **config: Any,
    ) -> Running:
        kube = Kube(load_api_client(str(self.plane.kubeconfig)))
        if self.mirror is not None:
            config.setdefault("prometheus_url", self.mirror.prometheus.url)
            config.setdefault("metrics", METRICS)
        controller = Controller(
            kube,
            ControllerConfig(
                namespaces=(self.namespace,),
                period_s=period_s,
                min_gap_s=0.1,
                # gRPC on a listener of its own, apart from REST (issue 27, item 1).
                options=obj.Options(
                    traffic=traffic, gateway=("", "public"), grpc_listener=grpc_listener
                ),
                leader_elect=leader_elect,
                lease=lease,
                **config,
            ),
        )
        controller.start(sync_timeout_s=30)
        thread = threading.Thread(target=controller.run, daemon=True)
        thread.start()
        running = Running(controller, thread, kube)
        self.running.append(running)
        return running

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        return self.kube.create(MODELSERVICES, self.namespace, doc)

    def ms(self, name: str) -> dict[str, Any]:
        return self.kube.get(MODELSERVICES, self.namespace, name)

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.kube.merge_patch(MODELSERVICES, self.namespace, name, {"spec": spec})

    def deployments(self) -> dict[str, dict[str, Any]]:
        items = self.kube.list(DEPLOYMENTS, self.namespace)["items"]
        return {d["metadata"]["name"]: d for d in items}

    def route(self, name: str) -> dict[str, Any]:
        return self.kube.get(HTTPROUTES, self.namespace, name)

    def weights(self, name: str) -> dict[str, int]:
        return obj.route_weights(self.route(name))[0]

    def owned(self) -> dict[tuple[str, str], str]:
        """(kind, name) -> resourceVersion of everything servectl made here."""
        out = {}
        for res in OWNED:
            for item in self.kube.list(
                res, self.namespace, label_selector=f"{obj.MANAGED_BY}=servectl"
            )["items"]:
                out[(res.kind, item["metadata"]["name"])] = item["metadata"]["resourceVersion"]
        return out

    def owned_specs(self) -> dict[tuple[str, str], str]:
        """(kind, name) -> what changes only when the object's spec is written: its
        ``generation`` where it has one (a Deployment's or a PodDisruptionBudget's status,
        which Kubernetes' own controllers write, moves its resourceVersion, not that),
        else its resourceVersion (Services and ConfigMaps: nobody else writes them here)."""
        out = {}
        for res in OWNED:
            for item in self.kube.list(
                res, self.namespace, label_selector=f"{obj.MANAGED_BY}=servectl"
            )["items"]:
                meta = item["metadata"]
                generation = meta.get("generation")
                key = f"generation {generation}" if generation else meta["resourceVersion"]
                out[(res.kind, meta["name"])] = key
        return out

    def rollout(self, name: str) -> dict[str, Any]:
        return (self.ms(name).get("status") or {}).get("rollout") or {}

    def ready_pods(self, revision: str) -> int:
        pods = self.kube.list(
            PODS, self.namespace, label_selector=f"{obj.LABEL_REVISION}={revision}"
        )["items"]
        return sum(1 for p in pods if obj.pod_ready(p))


@pytest.fixture
def harness(control_plane: ControlPlane, namespace: str) -> Iterator[Harness]:
    h = Harness(control_plane, namespace, Kube(load_api_client(str(control_plane.kubeconfig))))
    try:
        yield h
    finally:
        for running in h.running:
            running.stop()
        if h.mirror is not None:
            h.mirror.close()


def eventually(check: Callable[[], Any], what: str, timeout_s: float = 45.0) -> Any:
    return wait_for(check, timeout_s=timeout_s, what=what, interval_s=0.2)
