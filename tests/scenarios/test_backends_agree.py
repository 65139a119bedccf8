"""One scenario, two backends: the local runtime's and the Kubernetes backend's adapters
turn the same world into the same observations, so servectl decides the same replicas and
weights on both (DESIGN §2: one loop for every backend).

Each backend acts on its own copy of a small simulated world: pods that become ready
``STARTUP_S`` after they are asked for, a router that applies the weights it is given,
and metrics computed from the world (load, weights, ready pods). What differs is only
what each backend reads and writes: for the local runtime the supervisor's replicas,
HAProxy's routes and the SQLite store; for Kubernetes Deployments, pods and an HTTPRoute
in its watch caches, the documents it applies, and the ModelService status. The
transports are stand-ins (a recording supervisor, an in-memory API); the backends' code
is the real one. The scenario: a load step that scales the service up, a canary rollout
(25 %, 50 %, 100 %), and the load falling back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servectl.api import models
from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.backends.kubernetes import objects as kobj
from servectl.backends.kubernetes.backend import Caches, KubeBackend, Memory
from servectl.backends.kubernetes.cache import Informer
from servectl.backends.kubernetes.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    GRPCROUTES,
    HTTPROUTES,
    MODELSERVICES,
    PODS,
    SERVICES,
    resource_of,
)
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, RevisionRecord, ServiceRecord, TickView
from servectl.backends.local.router_model import Endpoint, RevisionRoute, ServiceRoute
from servectl.backends.local.store import Store
from servectl.controller.decide import ServectlDecider
from servectl.controller.reconcile import reconcile_once
from servectl.controller.spec import policy_for, service_spec
from servectl.metrics.assemble import MetricsSnapshot, RevisionMetrics
from servectl.rollout.counters import Counters

NS, NAME = "ml", "svc"
PERIOD_S = 5.0
STARTUP_S = 10.0
T0 = 1_800_000_000.0
COST_CORES = 0.02  # CPU-seconds per request
SPEC = {
    "model": {"name": "svc", "basePath": "/models/svc", "version": 1},
    "runtime": {"resources": {"cpu": "1", "memory": "1Gi"}},
    "autoscaling": {
        "minReplicas": 2,
        "maxReplicas": 12,
        "signals": [{"type": "cpu", "targetUtilization": 60}],
    },
    "rollout": {
        "strategy": "canary",
        "steps": [{"setWeight": 25}, {"setWeight": 50}, {"setWeight": 100}],
        "drainSeconds": 10,
    },
}


def load(t: float) -> float:
    """Requests per second: 40, a step to 160 at 60 s, back to 40 at 400 s."""
    return 160.0 if 60.0 <= t - T0 < 400.0 else 40.0


@dataclass
class PodW:
    name: str
    revision: str
    created: float
    ready_at: float | None = None


@dataclass
class World:
    """What runs: pods per revision, the weights the router applies, the load's history."""

    pods: dict[str, PodW] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)  # cumulative requests
    ordinal: int = 0

    def add(self, revision: str, now: float) -> str:
        name = f"{revision}-{self.ordinal}"
        self.ordinal += 1
        self.pods[name] = PodW(name, revision, now)
        return name

    def tick(self, now: float) -> None:
        for pod in self.pods.values():
            if pod.ready_at is None and now - pod.created >= STARTUP_S:
                pod.ready_at = now

    def ready(self, revision: str) -> list[PodW]:
        return [p for p in self.pods.values() if p.revision == revision and p.ready_at]

    def metrics(self, now: float) -> MetricsSnapshot:
        revisions = {}
        total = load(now)
        for rev in sorted(self.versions):
            ready = self.ready(rev)
            rps = total * self.weights.get(rev, 0) / 100.0 if ready else 0.0
            cores = rps * COST_CORES
            self.served[rev] = self.served.get(rev, 0.0) + rps * PERIOD_S
            per_pod = cores / len(ready) if ready else 0.0
            revisions[(NS, NAME, rev)] = RevisionMetrics(
                key=(NS, NAME, rev),
                time=now,
                signals=Signals(
                    cpu_utilization=per_pod if ready else None,
                    cpu_usage_cores=cores,
                    rps=rps,
                    latency_ms={"p99": 20.0 + 40.0 * per_pod},
                    age_s=1.0,
                ),
                pods=tuple(
                    PodSample(
                        p.name, cpu_usage_cores=per_pod, cpu_request_cores=1.0, start_time=p.created
                    )
                    for p in ready
                ),
                counters=Counters(now, self.served[rev], 0.0, COST_CORES * self.served[rev]),
            )
        return MetricsSnapshot(time=now, revisions=revisions, latency_bounds_us=())


def service(version: int) -> models.ModelService:
    spec = copy.deepcopy(SPEC)
    spec["model"]["version"] = version
    return models.ModelService.model_validate(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": spec,
        }
    )


def initial_world() -> World:
    world = World(weights={"svc-v1": 100}, versions={"svc-v1": 1})
    for _ in range(2):
        world.pods[world.add("svc-v1", T0 - 100)].ready_at = T0 - 90
    return world


# ------------------------------------------------------------------ the local runtime


class RecordingSupervisor:
    def __init__(self) -> None:
        self.started: list[sup.ReplicaSpec] = []

    def start(self, spec: sup.ReplicaSpec) -> sup.Replica:
        self.started.append(spec)
        return sup.Replica(
            spec=spec,
            phase=sup.Phase.STARTING,
            pid=None,
            rest_port=None,
            grpc_port=None,
            restarts=0,
            started_at=None,
            ready_at=None,
            message="",
            last_error=None,
            cgroup=None,
        )


class LocalSide:
    def __init__(self, tmp: Path) -> None:
        self.store = Store.open(tmp / "state.db")
        self.store.put_spec(NS, NAME, service(1).model_dump(mode="json", by_alias=True), now=T0)
        self.world = initial_world()
        self.record = ServiceRecord(
            rest_port=8501,
            grpc_port=8500,
            revisions={"svc-v1": RevisionRecord(version=1, replicas=2, weight=100)},
            next_ordinal=2,
        )
        self.loop = ServectlDecider(service_spec(service(1)), policy_for(service(1), {}))

    def replicas(self) -> list[sup.Replica]:
        out = []
        for i, pod in enumerate(sorted(self.world.pods.values(), key=lambda p: p.name)):
            spec = sup.ReplicaSpec(
                NS,
                NAME,
                pod.revision,
                pod.name,
                "svc",
                Path("/models/svc"),
                self.world.versions[pod.revision],
            )
            ready = pod.ready_at is not None
            out.append(
                sup.Replica(
                    spec=spec,
                    phase=sup.Phase.READY if ready else sup.Phase.STARTING,
                    pid=1000 + i,
                    rest_port=20000 + 2 * i,
                    grpc_port=20001 + 2 * i,
                    restarts=0,
                    started_at=pod.created,
                    ready_at=pod.ready_at,
                    message="",
                    last_error=None,
                    cgroup=None,
                )
            )
        return out

    def route(self, replicas: list[sup.Replica]) -> ServiceRoute:
        revisions = []
        for rev in sorted(self.world.versions):
            endpoints = tuple(
                Endpoint(r.spec.pod, r.rest_port or 0, r.grpc_port or 0)
                for r in replicas
                if r.spec.revision == rev and r.phase is sup.Phase.READY
            )
            revisions.append(RevisionRoute(rev, self.world.weights.get(rev, 0), endpoints))
        return ServiceRoute(NS, NAME, 8501, 8500, tuple(revisions))

    def cycle(self, now: float, version: int) -> Any:
        if version != 1 and not self.store.get_setting(f"started-{version}"):
            self.store.enqueue_command(NS, NAME, "start", version)  # what `deploy` queues
            self.store.put_setting(f"started-{version}", True)
        replicas = self.replicas()
        supervisor = RecordingSupervisor()
        backend = LocalBackend(
            store=self.store,
            service=service(version),
            record=self.record,
            view=TickView(replicas=replicas, routes={(NS, NAME): self.route(replicas)}),
            supervisor=supervisor,  # type: ignore[arg-type]
            wall_clock=lambda: now,
            metrics=self.world.metrics(now),
        )
        cycle = reconcile_once(backend, self.loop, now)
        self.record = backend.record
        # The world follows: new replicas start, drained ones go, HAProxy takes the weights.
        for spec in supervisor.started:
            self.world.versions[spec.revision] = spec.version
            self.world.pods[spec.pod] = PodW(spec.pod, spec.revision, now)
        for pod in self.record.draining:
            self.world.pods.pop(pod, None)
        self.record = ServiceRecord(
            rest_port=self.record.rest_port,
            grpc_port=self.record.grpc_port,
            revisions=self.record.revisions,
            header=self.record.header,
            draining={},
            next_ordinal=self.record.next_ordinal,
        )
        # HAProxy takes the route apply made (weights and endpoints), as the runtime sends it.
        assert backend.route is not None
        self.world.weights = {r.name: r.weight for r in backend.route.revisions}
        for rev in list(self.world.versions):
            if rev not in self.record.revisions:
                self.world.versions.pop(rev)
                for name in [p.name for p in self.world.pods.values() if p.revision == rev]:
                    self.world.pods.pop(name)
        return cycle


# ------------------------------------------------------------------ Kubernetes


class MemoryApi:
    """The API calls the backend makes, answered from memory (server-side apply merges
    only what the document sets, as the real one does for servectl's own fields)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 0

    def apply(self, doc: dict[str, Any], *, sub: str = "", manager: str | None = None) -> Any:
        self.rv += 1
        key = (doc["kind"], doc["metadata"]["name"])
        have = self.objects.get(key, {"metadata": {}})
        new = {**have, **copy.deepcopy(doc)}
        new["metadata"] = {
            **have.get("metadata", {}),
            **copy.deepcopy(doc["metadata"]),
            "resourceVersion": str(self.rv),
        }
        self.objects[key] = new
        return copy.deepcopy(new)

    def delete(self, res: Any, namespace: str, name: str, **_: Any) -> bool:
        return self.objects.pop((res.kind, name), None) is not None

    def create(self, res: Any, namespace: str | None, doc: dict[str, Any]) -> Any:
        return doc  # events

    def merge_patch(self, *args: Any, **kwargs: Any) -> Any:
        return {}


class KubeSide:
    def __init__(self) -> None:
        self.world = initial_world()
        self.api = MemoryApi()
        self.memory = Memory()
        self.status: dict[str, Any] = {}
        self.loop = ServectlDecider(service_spec(service(1)), policy_for(service(1), {}))
        self.ms_doc = {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": NAME, "namespace": NS, "uid": "u1", "generation": 1},
        }
        self.replicas = {"svc-v1": 2}
        # What the controller's first cycle created (its bootstrap of the first revision).
        spec = service(1).spec
        self.api.apply(kobj.deployment(self.ms_doc, spec, "svc-v1", 1, 2, weight=100))
        self.api.apply(
            kobj.route(
                self.ms_doc,
                [("svc-v1", 100)],
                header_revision=None,
                match=None,
                options=kobj.Options(),
            )
        )

    def caches(self, version: int) -> Caches:
        def informer(res: Any) -> Informer:
            return Informer(self.api, res)  # type: ignore[arg-type]

        caches = Caches(
            modelservices=informer(MODELSERVICES),
            deployments=informer(DEPLOYMENTS),
            services=informer(SERVICES),
            configmaps=informer(CONFIGMAPS),
            pods=informer(PODS),
            httproutes=informer(HTTPROUTES),
            grpcroutes=informer(GRPCROUTES),
        )
        spec = service(version).spec
        for rev, replicas in self.replicas.items():
            caches.deployments.put(
                kobj.deployment(
                    self.ms_doc,
                    spec,
                    rev,
                    self.world.versions[rev],
                    replicas,
                    weight=self.world.weights.get(rev, 0),
                )
            )
        for pod in self.world.pods.values():
            conditions = []
            if pod.ready_at is not None:
                stamp = datetime.fromtimestamp(pod.ready_at, tz=UTC).isoformat()
                conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": stamp})
            caches.pods.put(
                {
                    "metadata": {
                        "name": pod.name,
                        "namespace": NS,
                        "labels": kobj.labels(
                            NAME, pod.revision, self.world.versions[pod.revision]
                        ),
                    },
                    "status": {"phase": "Running", "conditions": conditions},
                }
            )
        route = self.api.objects.get(("HTTPRoute", NAME))
        if route is not None:
            caches.httproutes.put(copy.deepcopy(route))  # type: ignore[union-attr]
        return caches

    def cycle(self, now: float, version: int) -> Any:
        doc = {
            **self.ms_doc,
            "spec": service(version).spec.model_dump(by_alias=True, mode="json"),
            "status": self.status,
        }
        backend = KubeBackend(
            kube=self.api,  # type: ignore[arg-type]
            caches=self.caches(version),
            doc=doc,
            service=service(version),
            metrics=self.world.metrics(now),
            memory=self.memory,
            options=kobj.Options(),
            wall_clock=lambda: now,
            cpu_settle_s=8.0,  # the local runtime's (its rate window is 5 s)
        )
        cycle = reconcile_once(backend, self.loop, now)
        status = self.api.objects.get(("ModelService", NAME))
        if status is not None:
            self.status = status.get("status", {})
        # The world follows: ReplicaSets create and delete pods, the gateway takes weights.
        deployments = {n: d for (k, n), d in self.api.objects.items() if k == "Deployment"}
        self.replicas = {n: int(d["spec"]["replicas"]) for n, d in deployments.items()}
        for name, dep in deployments.items():
            self.world.versions[name] = int(dep["metadata"]["labels"][kobj.LABEL_VERSION])
            pods = sorted(
                (p for p in self.world.pods.values() if p.revision == name),
                key=lambda p: (p.ready_at is not None, p.created),
                reverse=False,
            )
            while len(pods) > self.replicas[name]:
                self.world.pods.pop(pods.pop(0).name)
            for _ in range(self.replicas[name] - len(pods)):
                self.world.add(name, now)
        for rev in list(self.world.versions):
            if rev not in deployments:
                self.world.versions.pop(rev)
                for name in [p.name for p in self.world.pods.values() if p.revision == rev]:
                    self.world.pods.pop(name)
        self.world.weights = kobj.route_weights(self.api.objects.get(("HTTPRoute", NAME)))[0]
        return cycle


def view(cycle: Any) -> list[tuple[Any, ...]]:
    return [(r.name, r.desired, r.ready, r.starting, r.weight) for r in cycle.observed.revisions]


def plan(cycle: Any) -> list[tuple[Any, ...]]:
    return [(r.name, r.replicas, r.weight) for r in cycle.outcome.plan.revisions]


def test_the_local_and_kubernetes_backends_decide_the_same(tmp_path: Path) -> None:
    local, kube = LocalSide(tmp_path), KubeSide()
    history: list[tuple[float, Any, Any]] = []
    version_at: Callable[[float], int] = lambda t: 2 if t - T0 >= 150.0 else 1  # noqa: E731
    for tick in range(120):
        now = T0 + tick * PERIOD_S
        for side in (local, kube):
            side.world.tick(now)
        a = local.cycle(now, version_at(now))
        b = kube.cycle(now, version_at(now))
        assert view(a) == view(b), f"t={now - T0:.0f} s: the backends observe differently"
        assert plan(a) == plan(b), f"t={now - T0:.0f} s: the backends decide differently"
        assert a.outcome.plan.phase == b.outcome.plan.phase
        history.append((now - T0, plan(a), a.outcome.plan.phase))
    # The scenario did what it says: scaled up under the step, rolled v2 out, scaled down.
    peak = max(sum(r[1] for r in p) for _t, p, _ph in history)
    assert peak >= 5
    weights = [dict((r[0], r[2]) for r in p).get("svc-v2", 0) for _t, p, _ph in history]
    assert {25, 50, 100} <= set(weights)
    assert history[-1][1][0][0] == "svc-v2"
    assert str(history[-1][2]) == "Completed"
    assert sum(r[1] for r in history[-1][1]) < peak
    assert resource_of({"apiVersion": "apps/v1", "kind": "Deployment"}) is DEPLOYMENTS
