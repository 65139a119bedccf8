"""``servectl demo --kubernetes``: the demo's story on a real one-node cluster on this
machine, as a platform team would run servectl.

Set-up: what is missing is built first, said up front with its time
(servectl.demo.builds); then servectl.testing.k8s.stack.Stack (the node tests' set-up steps):

1. the demo SavedModels exported;
2. a node: etcd, kube-apiserver, controller manager, scheduler, containerd + runc, a
   kubelet and kube-proxy, pods on the bridge ``servectl0`` (servectl.testing.k8s.node);
3. Traefik as the Gateway ``traefik/servectl``, listening on 127.0.0.1 (Locust's way in);
4. Prometheus on this machine scraping the kubelet's cAdvisor, kube-state-metrics, the model
   servers and Traefik;
5. servectl's controller and model-server images imported, the controller installed by
   its Helm chart, the demo models on a volume claimed as ``pvc://models/cost_model``;
6. the ModelService ``cost`` in namespace `NAMESPACE`.

The story (servectl.demo.story) then reads the ModelService's status from the API, its
signals from that Prometheus (what the controller reads), and its events from core/v1
Events. ``--keep`` leaves it all running; :func:`stop` (``servectl demo --kubernetes
--stop``) ends it and puts the host back.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servectl.backends.kubernetes.backend import iso_seconds
from servectl.backends.kubernetes.objects import LABEL_SERVICE
from servectl.demo import builds, report
from servectl.demo.story import (
    MODEL,
    ROLLOUT,
    SERVICE,
    DemoError,
    DemoResult,
    DemoSettings,
    Story,
    autoscaling,
    wait_until,
)

NAMESPACE = "demo"
COLD_START_S = 10  # a pod serves ~6-9 s after it is created on the node (docs/kubernetes.md)
SIGNALS_TTL_S = 1.0  # the story and the recorder share one Prometheus read a second


def defaults(settings: DemoSettings) -> DemoSettings:
    """The demo's defaults on the node, where a quarter of a core a pod leaves room beside
    the cluster itself on 2 cores: 5 req/s stepping to 25 (the local runtime: 8 to 40 at
    half a core)."""
    return dataclasses.replace(settings, base_rps=5.0, cpu="250m")


def repo() -> Path:
    """The checkout this servectl runs from: the demo builds from its scripts/ and
    installs its deploy/ chart. DemoError when servectl is installed without one."""
    from servectl.testing.k8s import stack

    if not (stack.REPO / "scripts" / "build-images").is_file() or not stack.CHART.is_dir():
        raise DemoError(
            "servectl demo --kubernetes runs from a checkout of servectl's repository (it "
            "builds images with scripts/ and installs deploy/helm/servectl); this servectl "
            f"is installed at {stack.REPO} without them"
        )
    return stack.REPO


def plan() -> list[builds.Build]:
    """Everything the demo builds when missing, in the order it builds them."""
    from servectl.testing.k8s import find_binaries
    from servectl.testing.k8s.tools import KUBE_STATE_METRICS, PROMETHEUS, TRAEFIK, cache_root

    def clients() -> bool:
        return (cache_root() / "clients-2.2.2" / "helm").exists()

    return [
        builds.Build(
            "Kubernetes v1.34 (apiserver, controller manager, scheduler, kubelet, kube-proxy)",
            ("k8s-testbin",),
            8,
            lambda: find_binaries() is not None,
        ),
        builds.Build(
            "Traefik v3.6 (the Gateway)", ("traefik-build",), 11, lambda: bool(TRAEFIK.binary())
        ),
        builds.Build(
            "Prometheus 3", ("metrics-build", "prometheus"), 2, lambda: bool(PROMETHEUS.binary())
        ),
        builds.Build(
            "kube-state-metrics",
            ("metrics-build", "kube-state-metrics"),
            3,
            lambda: bool(KUBE_STATE_METRICS.binary()),
        ),
        builds.Build("Helm", ("k8s-clients",), 0.5, clients),
    ]


def preflight() -> None:
    """DemoError, in one line, when this machine cannot run the demo's node."""
    import importlib.util
    import shutil

    from servectl.testing.k8s import ETCD_HINT, etcd_binary

    if etcd_binary() is None:
        raise DemoError(f"no etcd: {ETCD_HINT}")
    if shutil.which("go") is None and any(not b.present() for b in plan()):
        raise DemoError("Go is needed to build the cluster's binaries the first time")
    if shutil.which("mmdebstrap") is None:
        raise DemoError("mmdebstrap not found (it builds the images): apt-get install mmdebstrap")
    if importlib.util.find_spec("tensorflow") is None:
        raise DemoError(
            "TensorFlow is needed to export the demo models: pip install 'servectl[serving]'"
        )


def service_doc(settings: DemoSettings, image: str) -> dict[str, Any]:
    """The demo's ModelService on the node: the models from the claim, the imported image."""
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {
            "model": {"name": MODEL, "basePath": f"pvc://models/{MODEL}", "version": 1},
            "runtime": {"image": image, "resources": {"cpu": settings.cpu, "memory": "1Gi"}},
            "autoscaling": autoscaling(settings, COLD_START_S),
            "rollout": ROLLOUT,
        },
    }


class KubeTarget:
    """The demo service on a real node (servectl.demo.story.Target)."""

    where = "a real one-node Kubernetes cluster"

    def __init__(
        self, settings: DemoSettings, say: Callable[[str], None], namespace: str = NAMESPACE
    ) -> None:
        self.settings = settings
        self.say = say
        self.namespace = namespace
        self.node: Any = None
        self.monitoring: Any = None
        self.stack: Any = None
        self.images: Any = None
        self.web = 0
        self._seen_events: set[str] = set()
        self._signals: tuple[float, dict[str, Any]] = (0.0, {})
        self._lock = threading.Lock()
        self.pod_ready_s: dict[str, float] = {}  # pod -> created to Ready, seconds

    # -- set-up

    def start(self, repository: Path) -> None:
        from servectl.demo.local import export_models
        from servectl.testing.k8s import find_binaries, gateway_api_crds
        from servectl.testing.k8s.stack import Stack

        bin_dir = find_binaries()
        if bin_dir is None:
            raise DemoError("the Kubernetes binaries are missing after their build")
        self.clear()
        export_models(self.settings, self.say)
        models = self.settings.models.resolve()
        for directory in (models, *models.rglob("*")):
            if directory.is_dir():
                directory.chmod(0o755)  # read by the model server's non-root user
        crds = sorted((repository / "deploy" / "crds").glob("*.yaml"))
        self.stack = Stack.start(
            self.settings.out,
            bin_dir=bin_dir,
            crds=[*crds, *gateway_api_crds(bin_dir)],
            namespace=self.namespace,
            models=models,
            controller_replicas=1,
            say=self.say,
        )
        self.attach(self.stack)

    def clear(self) -> None:
        """Stop a cluster a run left up (``--keep``) and remove the last cluster's files
        under ``--out`` (its etcd data, logs, Prometheus' data); the models stay."""
        from servectl.testing.k8s.node import stop_kept

        left = stop_kept()
        if left is not None:
            self.say("stopped the cluster an earlier run left up")
        if left:
            raise DemoError(f"the cluster an earlier run left could not be put back: {left}")
        for part in ("node", "gateway", "monitoring"):
            shutil.rmtree(self.settings.out / part, ignore_errors=True)

    def attach(self, stack: Any) -> None:
        """Tell the story on a started `Stack` (the node tests' shared one, too)."""
        assert stack.ports is not None and stack.monitoring is not None
        self.node = stack.node
        self.web = stack.ports.web
        self.monitoring = stack.monitoring
        self.images = stack.images

    def deploy(self) -> None:
        doc = service_doc(self.settings, self.images.model_server_ref)
        doc["metadata"]["namespace"] = self.namespace
        self.node.apply([doc])
        self.say(
            f"deployed cost v1 (min 1, max {self.settings.max_replicas}, "
            f"{self.settings.cpu} CPU each); waiting for it to serve through the Gateway ..."
        )

        def serving() -> bool:
            weights = {r["name"]: r.get("weight", 0) for r in self.status().get("revisions", [])}
            return weights.get(f"{SERVICE}-v1") == 100 and _predicts(self.web)

        self._wait(serving, 180, "cost-v1 to serve through the Gateway")

    def _wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(check, timeout_s, what, self.check)

    def _get(self, path: str) -> dict[str, Any]:
        status, answer = self.node.cluster.request("GET", path)
        return answer if status == 200 and isinstance(answer, dict) else {}

    # -- the Target protocol

    def front_url(self) -> str:
        return f"http://127.0.0.1:{self.web}"

    def status(self) -> dict[str, Any]:
        doc = self._get(
            f"/apis/servectl.io/v1alpha1/namespaces/{self.namespace}/modelservices/{SERVICE}"
        )
        self._pods()
        return dict(doc.get("status") or {})

    def _pods(self) -> None:
        """Note each model pod's time from creation to Ready (1 s resolution: the API's)."""
        mine = f"labelSelector={LABEL_SERVICE}%3D{SERVICE}"
        pods = self._get(f"/api/v1/namespaces/{self.namespace}/pods?{mine}").get("items", [])
        for pod in pods:
            name = pod["metadata"]["name"]
            if name in self.pod_ready_s:
                continue
            created = iso_seconds(pod["metadata"].get("creationTimestamp"))
            ready = next(
                (
                    iso_seconds(c.get("lastTransitionTime"))
                    for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready" and c.get("status") == "True"
                ),
                None,
            )
            if created is not None and ready is not None:
                self.pod_ready_s[name] = ready - created

    def signals(self) -> dict[str, Any]:
        with self._lock:
            at, cached = self._signals
            if time.monotonic() - at < SIGNALS_TTL_S:
                return cached
            from servectl.autoscaling.snapshot import signals_doc
            from servectl.metrics.config import MetricsConfig
            from servectl.metrics.source import PrometheusSource

            serving = [
                r["name"] for r in self.status().get("revisions", []) if r.get("weight", 0) > 0
            ]
            source = PrometheusSource(
                self.monitoring.url, MetricsConfig(namespaces=(self.namespace,))
            )
            snapshot = source.snapshot()
            found = signals_doc(snapshot.service(self.namespace, SERVICE, serving or None).signals)
            self._signals = (time.monotonic(), found)
            return found

    def new_events(self) -> list[dict[str, Any]]:
        selector = f"involvedObject.kind=ModelService,involvedObject.name={SERVICE}"
        items = self._get(f"/api/v1/namespaces/{self.namespace}/events?fieldSelector={selector}")
        found: list[tuple[float, int, dict[str, Any]]] = []
        for event in items.get("items", []):
            name = event["metadata"]["name"]
            when = iso_seconds(event.get("lastTimestamp") or event.get("eventTime"))
            if name in self._seen_events or when is None:
                continue
            self._seen_events.add(name)
            try:  # etcd's revision at creation: the order servectl posted them in
                order = int(event["metadata"].get("resourceVersion") or 0)
            except ValueError:
                order = 0
            doc = {
                "time": when,
                "type": event.get("type", ""),
                "reason": event.get("reason", ""),
                "message": event.get("message", ""),
            }
            found.append((float(when), order, doc))
        # Events carry whole seconds: within one, the order they were posted in (a rollout
        # completed and the next begun in the same second read the other way round).
        found.sort(key=lambda e: e[:2])
        return [doc for _when, _order, doc in found]

    def start_rollout(self, version: int) -> None:
        status, answer = self.node.cluster.request(
            "PATCH",
            f"/apis/servectl.io/v1alpha1/namespaces/{self.namespace}/modelservices/{SERVICE}",
            {"spec": {"model": {"version": version}}},
            content_type="application/merge-patch+json",
        )
        if status != 200:
            raise DemoError(f"setting spec.model.version to {version} was refused: {answer}")

    def cpu_seconds(self) -> float | None:
        """The model pods' CPU so far, from their cgroups on this node (cgroup v1, the
        kubelet's cgroupfs driver under its cgroup root); None where one cannot be read."""
        from servectl.testing.k8s.node import CGROUP

        mine = f"labelSelector={LABEL_SERVICE}%3D{SERVICE}"
        pods = self._get(f"/api/v1/namespaces/{self.namespace}/pods?{mine}").get("items", [])
        total = 0.0
        for pod in pods:
            uid = pod["metadata"]["uid"]
            qos = str((pod.get("status") or {}).get("qosClass") or "Burstable").lower()
            tier = "" if qos == "guaranteed" else f"/{qos}"
            usage = Path(f"/sys/fs/cgroup/cpuacct{CGROUP}/kubepods{tier}/pod{uid}/cpuacct.usage")
            try:
                total += int(usage.read_text()) / 1e9
            except (OSError, ValueError):
                return None
        return total if pods else None

    def set_slo(self, slo_ms: float) -> None:
        self.settings = dataclasses.replace(self.settings, slo_ms=slo_ms)
        autoscaling = service_doc(self.settings, self.images.model_server_ref)["spec"][
            "autoscaling"
        ]
        status, answer = self.node.cluster.request(
            "PATCH",
            f"/apis/servectl.io/v1alpha1/namespaces/{self.namespace}/modelservices/{SERVICE}",
            {"spec": {"autoscaling": autoscaling}},
            content_type="application/merge-patch+json",
        )
        if status != 200:
            raise DemoError(f"setting the SLO to {slo_ms:g} ms was refused: {answer}")

    def check(self) -> None:
        if self.node is not None:
            failed = self.node.failed()
            if failed is not None:
                raise DemoError(f"the node's {failed}")

    def notes(self) -> list[str]:
        times = sorted(self.pod_ready_s.values())
        lines = [
            "Events carry whole seconds (core/v1 Event timestamps): the step to decision "
            "figure is to within a second.",
            "p99 and rps are what the controller reads: the model servers' TF Serving "
            "metrics in Prometheus, per revision, aggregated over the revisions with traffic.",
        ]
        if times:
            lines.append(
                f"Model pods, created to Ready (probes passed): median "
                f"{statistics.median(times):.0f} s, at most {times[-1]:.0f} s over "
                f"{len(times)} pods (the API's whole seconds)."
            )
        return lines

    # -- tear-down

    def how_to_reach(self) -> list[str]:
        kubeconfig = self.node.cluster.kubeconfig
        return [
            "the cluster stays up (--keep):",
            f"  kubeconfig:  {kubeconfig}",
            f"  Gateway:     http://127.0.0.1:{self.web}/v1/models/{MODEL}:predict",
            f"  Prometheus:  {self.monitoring.url}",
            f"  servectl get -n {self.namespace} --kubeconfig {kubeconfig}",
            f"  servectl rollout status {SERVICE} -n {self.namespace} --kubeconfig {kubeconfig}",
            "  stop it and put the host back: servectl demo --kubernetes --stop",
        ]

    def stop(self, keep: bool) -> None:
        if self.stack is None:
            return
        if keep:
            self.stack.keep()
            for line in self.how_to_reach():
                self.say(line)
            return
        left = self.stack.stop()
        self.say("cluster stopped, host put back" + (f" except: {'; '.join(left)}" if left else ""))


def _predicts(port: int) -> bool:
    body = b'{"instances": [[1, 2, 3, 4, 5, 6, 7, 8]]}'
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/{MODEL}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def run(settings: DemoSettings, say: Callable[[str], None]) -> DemoResult:
    """The whole demo on a real node: builds, set-up, the story, the report."""
    started = time.monotonic()
    repository = repo()
    preflight()
    needed = plan()
    for line in builds.plan_lines(needed):
        say(line)
    for build in needed:
        if not build.present():
            builds.run_script(repository, build, say, settings.out / "logs")
    from servectl.testing.k8s import find_binaries
    from servectl.testing.k8s.node import NodeUnavailable
    from servectl.testing.k8s.node import preflight as node_preflight

    bin_dir = find_binaries()
    if bin_dir is None:
        raise DemoError("the Kubernetes binaries are missing after their build")
    try:
        node_preflight(bin_dir)
    except NodeUnavailable as why:
        raise DemoError(str(why)) from None
    from servectl.testing.k8s import ControlPlaneError
    from servectl.testing.k8s.monitoring import MonitoringUnavailable
    from servectl.testing.k8s.stack import StackError

    target = KubeTarget(settings, say)
    try:
        try:
            target.start(repository)
            target.deploy()
        except (ControlPlaneError, MonitoringUnavailable, NodeUnavailable, StackError) as exc:
            raise DemoError(str(exc)) from None
        result = Story(settings, target, say).run(started)
        result.notes = target.notes()
    finally:
        target.stop(settings.keep)  # kept after a failure too: to look at what went wrong
    report.write_report(result)
    return result


def stop() -> list[str] | None:
    """Stop a cluster ``--keep`` left running (None: there was none)."""
    from servectl.testing.k8s.node import stop_kept

    return stop_kept()
