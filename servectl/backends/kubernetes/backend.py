"""One ModelService in a cluster as a :class:`~servectl.controller.driver.FleetService`.

Each cycle the driver (:mod:`servectl.controller.driver`) has the cluster's fleet
(:mod:`.fleet`) open one :class:`KubeBackend` per ModelService over the watch caches,
hands it the cycle's one Prometheus snapshot, and runs ``reconcile_once`` on it:

- **observe**: each revision's Deployment (the replicas last applied), its pods (ready:
  the readiness probe passes, which needs the version AVAILABLE; starting; terminating,
  which is draining: the ``preStop`` sleep holds them while the route forgets them), the
  weights the HTTPRoute applies now (or, with the ``service`` provider, the weight last
  applied), the metrics and the custom analysis checks measured in that snapshot;
- **commands**: the rollout command the CLI left in the ``servectl.io/rollout-command``
  annotation (carried out once: its id is remembered in the status), and a rollout to
  ``spec.model.version`` when the user changed it;
- **apply**: server-side apply of each revision's ConfigMap, Deployment and Service, then
  the routes, then deletes of revisions the plan retired; only objects whose content
  changed are sent (the ``servectl.io/applied`` hash, replicas and weight), so a quiet
  cycle writes nothing. Before a Deployment shrinks, its pods get a
  ``pod-deletion-cost`` from their CPU, so the ReplicaSet removes the least busy ones;
- **state and status**: the status is written once per cycle through the status
  subresource, and only when it changed. The loop state rides along in ``status.loop``
  when the status changes anyway, when a command was carried out, or at least every
  ``checkpoint_s``; between checkpoints the controller keeps it in memory.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from servectl.api import models, names
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes import route_status
from servectl.backends.kubernetes.cache import Informer
from servectl.backends.kubernetes.kube import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    GRPCROUTES,
    HTTPROUTES,
    MODELSERVICES,
    PDBS,
    PODS,
    SERVICES,
    Doc,
    Kube,
    KubeError,
)
from servectl.controller import gitops
from servectl.controller import state as state_codec
from servectl.controller import status as status_conditions
from servectl.controller.backend import Event
from servectl.controller.decide import Command, LoopState
from servectl.controller.observe import RevisionState, observe
from servectl.metrics.assemble import MetricsSnapshot
from servectl.metrics.config import MetricsConfig
from servectl.planning.types import Observed, Plan
from servectl.rollout.machine import Op

log = logging.getLogger("servectl.kubernetes")

CPU_SETTLE_S = 30.0
"""A pod's CPU counts as load once it has been ready this long at least (the HPA's
--horizontal-pod-autoscaler-cpu-initialization-period is 5 min), and once its rate window
holds nothing from before it was ready (:func:`cpu_settle_s`)."""
CPU_SETTLE_MARGIN_S = 10.0
"""Beyond the rate window: a scrape's lag, and TF Serving's first requests (slower)."""


def cpu_settle_s(config: MetricsConfig | None) -> float:
    """How long a pod must have been ready before its CPU counts as load: the rate window
    and CPU_SETTLE_MARGIN_S, at least CPU_SETTLE_S. A rate over a window that reaches back
    before the pod was ready counts the CPU that loading its model burnt: on a real node a
    one-replica service read 0.21-0.28 cores (120-160 % of a 250m request at 70 %) while it
    served one request a second at 53 ms of CPU each, and scaled out to two (demo
    --kubernetes, 2026-12-05, with the default 1 m window and a 30 s settle)."""
    if config is None:
        return CPU_SETTLE_S
    return max(CPU_SETTLE_S, config.rate_window_seconds + CPU_SETTLE_MARGIN_S)


EVENT_MANAGER = "servectl"


@dataclass
class Caches:
    """The controller's watch caches."""

    modelservices: Informer
    deployments: Informer
    services: Informer
    configmaps: Informer
    pods: Informer
    httproutes: Informer | None = None
    grpcroutes: Informer | None = None
    pdbs: Informer | None = None  # None (caches some tests build): no PodDisruptionBudgets

    def owned(self) -> list[tuple[Informer, Any]]:
        out: list[tuple[Informer, Any]] = [
            (self.deployments, DEPLOYMENTS),
            (self.services, SERVICES),
            (self.configmaps, CONFIGMAPS),
        ]
        if self.httproutes is not None:
            out.append((self.httproutes, HTTPROUTES))
        if self.grpcroutes is not None:
            out.append((self.grpcroutes, GRPCROUTES))
        if self.pdbs is not None:
            out.append((self.pdbs, PDBS))
        return out


@dataclass
class Memory:
    """What the controller keeps per service between cycles (lost on restart: each
    field is also in ``status.loop`` as of the last checkpoint)."""

    state: LoopState | None = None
    saved_at: float = -math.inf  # wall clock of the last checkpoint
    header: str | None = None  # the header route last applied (service provider)
    command: str | None = None  # id of the last rollout command carried out
    start_version: int | None = None  # the version a spec change last started a rollout to
    force_checkpoint: bool = False
    grpc_noted: bool = False  # the GRPCNotRouted event was sent
    accepted: dict[str, int] | None = None  # the weights of the route generation last in force


@dataclass
class Applied:
    """What one cycle's ``apply`` did, for the controller's metrics and log."""

    writes: int = 0  # writes and deletes
    errors: list[str] = field(default_factory=list)


def iso_seconds(value: str | None) -> float | None:
    """An API timestamp ("2026-11-28T10:00:00Z") as epoch seconds; None if absent or bad."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class KubeBackend:
    """One ModelService, for one ``reconcile_once``."""

    def __init__(
        self,
        *,
        kube: Kube,
        caches: Caches,
        doc: Doc,
        service: models.ModelService,
        memory: Memory,
        options: obj.Options,
        wall_clock: Callable[[], float],
        metrics: MetricsSnapshot | None = None,
        checkpoint_s: float = 60.0,
        cpu_settle_s: float = CPU_SETTLE_S,
    ) -> None:
        self.kube = kube
        self.caches = caches
        self.doc = doc
        self.service = service
        self.namespace = service.metadata.namespace
        self.name = service.metadata.name
        self.metrics = metrics
        self.memory = memory
        self.options = options
        self._wall = wall_clock
        self.checkpoint_s = checkpoint_s
        self.cpu_settle_s = cpu_settle_s
        self.applied = Applied()
        self._loop_doc: Doc = dict(((doc.get("status") or {}).get("loop")) or {})

    # ------------------------------------------------------------------ reads

    def _mine(self, informer: Informer | None) -> list[Doc]:
        if informer is None:
            return []
        return informer.select(self.namespace, {obj.LABEL_SERVICE: self.name})

    def deployments(self) -> dict[str, Doc]:
        out = {}
        for d in self._mine(self.caches.deployments):
            rev = ((d.get("metadata") or {}).get("labels") or {}).get(obj.LABEL_REVISION)
            if rev:
                out[str(rev)] = d
        return out

    def route(self) -> Doc | None:
        if self.options.traffic != obj.TrafficProvider.GATEWAY or self.caches.httproutes is None:
            return None
        return self.caches.httproutes.get(self.namespace, self.name)

    def revision_states(self) -> list[RevisionState]:
        wall = self._wall()
        pods_by_rev: dict[str, list[Doc]] = {}
        for pod in self._mine(self.caches.pods):
            rev = ((pod.get("metadata") or {}).get("labels") or {}).get(obj.LABEL_REVISION)
            if rev and not obj.pod_finished(pod):
                pods_by_rev.setdefault(str(rev), []).append(pod)
        weights = self.applied_weights()
        use_route = self.route() is not None
        states = []
        for rev, dep in sorted(self.deployments().items()):
            meta = dep.get("metadata") or {}
            try:
                version = int((meta.get("labels") or {})[obj.LABEL_VERSION])
            except (KeyError, ValueError):
                continue  # not one of ours after all
            pods = pods_by_rev.get(rev, [])
            ready = [p for p in pods if obj.pod_ready(p)]
            draining = [p for p in pods if obj.pod_terminating(p)]
            starting = [p for p in pods if not obj.pod_ready(p) and not obj.pod_terminating(p)]
            if use_route:
                weight = weights.get(rev, 0)
            else:
                try:
                    weight = int((meta.get("annotations") or {}).get(obj.WEIGHT, "0"))
                except ValueError:
                    weight = 0
            settled = frozenset(
                str(p["metadata"]["name"])
                for p in ready
                if (since := iso_seconds(obj.pod_ready_since(p))) is not None
                and wall - since >= self.cpu_settle_s
            )
            states.append(
                RevisionState(
                    name=rev,
                    version=version,
                    desired=int((dep.get("spec") or {}).get("replicas") or 0),
                    ready=len(ready),
                    starting=len(starting),
                    draining=len(draining),
                    weight=weight,
                    available=bool(ready),
                    ready_pods=settled,
                    # Not ready, not leaving: loading (one that was ready and failed its
                    # probe since may have served in the window; rare, and only a tick's
                    # cost estimate).
                    loading_pods=frozenset(str(p["metadata"]["name"]) for p in starting),
                    refused=obj.pods_refused(dep),
                )
            )
        return states

    def _parent(self) -> tuple[str, str] | None:
        gw = self.options.gateway
        return None if gw is None else (gw[0] or self.namespace, gw[1])

    def applied_weights(self) -> dict[str, int]:
        """The weights traffic follows: the HTTPRoute's, once its Gateway accepted that
        generation of it (``status.parents``); until then those of the generation last seen
        in force. A controller that never saw one in force (just started, or no Gateway
        implementation answering: RoutesAccepted says which) reads the route's spec."""
        route = self.route()
        weights, _header = obj.route_weights(route)
        if route is None:
            return weights
        if route_status.in_force(route, namespace=self.namespace, gateway=self._parent()):
            self.memory.accepted = weights
            return weights
        return weights if self.memory.accepted is None else dict(self.memory.accepted)

    def header_revision(self) -> str | None:
        route = self.route()
        if route is not None:
            return obj.route_weights(route)[1]
        if self.memory.header is not None:
            return self.memory.header
        header = self._loop_doc.get("header")
        return str(header) if header else None

    # ------------------------------------------------------------------ Backend

    def revisions(self) -> list[str]:
        return sorted(self.deployments())

    def first_version(self) -> int:
        version = self.service.spec.model.version
        if version is None:  # the fleet lists such a spec as refused; kept for safety
            raise ValueError("spec.model.version: required on Kubernetes; set the version")
        return version

    def use_metrics(self, metrics: MetricsSnapshot) -> None:
        self.metrics = metrics

    def observe(self, now: float) -> Observed:
        spec = self.service.spec
        if self.metrics is None:
            raise RuntimeError("observe before use_metrics: the driver gives the cycle's metrics")
        return observe(
            now,
            self.metrics,
            self.revision_states(),
            namespace=self.namespace,
            service=self.name,
            min_replicas=spec.autoscaling.min_replicas,
            max_replicas=spec.autoscaling.max_replicas,
            header_revision=self.header_revision(),
            custom=self.metrics.custom_for(self.namespace, self.name),
        )

    def commands(self, now: float) -> list[Command]:
        commands: list[Command] = []
        annotations = (self.doc.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(obj.COMMAND)
        last = self.memory.command or self._loop_doc.get("command")
        if raw:
            try:
                request = json.loads(raw)
                ident = str(request["id"])
            except (ValueError, KeyError, TypeError):
                ident, request = f"invalid:{raw}", None
            if ident != last:
                self.memory.command = ident
                self.memory.force_checkpoint = True
                if request is not None:
                    try:
                        version = request.get("version")
                        commands.append(
                            Command(
                                Op(str(request["op"])), None if version is None else int(version)
                            )
                        )
                    except (ValueError, KeyError, TypeError):
                        self.applied.errors.append(f"{obj.COMMAND}: cannot read {raw!r}")
                else:
                    self.applied.errors.append(f"{obj.COMMAND}: not JSON with an id: {raw!r}")
        wanted = self.service.spec.model.version
        state = self.load_state()
        started = self.memory.start_version
        if started is None:
            value = self._loop_doc.get("startVersion")
            started = int(value) if isinstance(value, int) else None
        if (
            wanted is not None
            and isinstance(state, LoopState)
            and wanted not in (state.rollout.stable, state.rollout.canary)
            and wanted != started
            and not any(c.op is Op.START for c in commands)
        ):
            commands.append(Command(Op.START, wanted))
            self.memory.start_version = wanted
            self.memory.force_checkpoint = True
        if isinstance(state, LoopState) and not commands:
            canary = state.rollout.canary
            weight = 0 if canary is None else self.applied_weights().get(self._rev(canary), 0)
            asked = gitops.command(wanted, state.rollout, weight)
            if asked is not None:
                commands.append(Command(*asked))
        return commands

    def _rev(self, version: int) -> str:
        return names.revision_name(self.name, version)

    # -- apply

    def _put(self, informer: Informer | None, doc: Doc, *, sub: str = "") -> Doc | None:
        try:
            out = self.kube.apply(doc, sub=sub)
        except KubeError as exc:
            self.applied.errors.append(f"apply {doc['kind']} {doc['metadata']['name']}: {exc}")
            return None
        self.applied.writes += 1
        if informer is not None and out is not None:
            out.setdefault("apiVersion", doc["apiVersion"])
            out.setdefault("kind", doc["kind"])
            informer.put(out)
        return out

    def _apply_if_changed(self, informer: Informer | None, doc: Doc) -> None:
        live = informer.get(self.namespace, doc["metadata"]["name"]) if informer else None
        if live is not None and obj.applied_hash(live) == obj.applied_hash(doc):
            return
        self._put(informer, doc)

    def apply(self, plan: Plan, now: float) -> None:
        spec = self.service.spec
        caches = self.caches
        live = self.deployments()
        for rp in plan.revisions:
            self._apply_if_changed(
                caches.configmaps, obj.revision_config(self.doc, spec, rp.name, rp.version)
            )
            want = obj.deployment(
                self.doc, spec, rp.name, rp.version, rp.replicas, weight=rp.weight
            )
            have = live.get(rp.name)
            if (
                have is None
                or obj.applied_hash(have) != obj.applied_hash(want)
                or int((have.get("spec") or {}).get("replicas") or 0) != rp.replicas
                or ((have.get("metadata") or {}).get("annotations") or {}).get(obj.WEIGHT)
                != str(rp.weight)
            ):
                if have is not None:
                    self._deletion_costs(
                        rp.name, int((have.get("spec") or {}).get("replicas") or 0), rp.replicas
                    )
                self._put(caches.deployments, want)
            self._apply_if_changed(
                caches.services, obj.revision_service(self.doc, rp.name, rp.version)
            )
            if caches.pdbs is not None:
                self._apply_if_changed(caches.pdbs, obj.revision_pdb(self.doc, rp.name, rp.version))
        front = None
        if self.options.traffic == obj.TrafficProvider.GATEWAY:
            front = obj.front_revision([(rp.name, rp.version, rp.weight) for rp in plan.revisions])
        self._apply_if_changed(caches.services, obj.front_service(self.doc, front))
        self.memory.header = plan.header_revision
        if self.options.traffic == obj.TrafficProvider.GATEWAY:
            weights = [(rp.name, rp.weight) for rp in plan.revisions]
            match = obj.match_of(spec)
            unrouted = obj.grpc_unrouted(self.doc, self.options)
            for grpc, informer in ((False, caches.httproutes), (True, caches.grpcroutes)):
                if grpc and unrouted is not None:
                    self._drop_grpc_route(unrouted)
                    continue
                self._apply_if_changed(
                    informer,
                    obj.route(
                        self.doc,
                        weights,
                        header_revision=plan.header_revision,
                        match=match,
                        options=self.options,
                        grpc=grpc,
                    ),
                )
        keep = {rp.name for rp in plan.revisions}
        for rev in sorted(set(live) - keep):
            self._retire(rev)

    def _drop_grpc_route(self, why: str) -> None:
        """No GRPCRoute where it would share a listener and hosts with the HTTPRoute: one
        made before (an older controller, or hostnames since removed) is deleted, and an
        event says why gRPC is not routed and what routes it."""
        informer = self.caches.grpcroutes
        name = obj.route_name(self.name, grpc=True)
        if informer is None or informer.get(self.namespace, name) is None:
            if not self.memory.grpc_noted:  # said once per controller process
                self.memory.grpc_noted = True
                self.event("Normal", "GRPCNotRouted", why, self._wall())
            return
        try:
            self.kube.delete(GRPCROUTES, self.namespace, name)
        except KubeError as exc:
            self.applied.errors.append(f"delete GRPCRoute {name}: {exc}")
            return
        self.applied.writes += 1
        informer.forget(self.namespace, name)
        self.memory.grpc_noted = True
        self.event("Warning", "GRPCRouteRemoved", why, self._wall())

    def _retire(self, revision: str) -> None:
        for informer, res, name in (
            (self.caches.deployments, DEPLOYMENTS, revision),
            (self.caches.services, SERVICES, revision),
            (self.caches.configmaps, CONFIGMAPS, f"{revision}-config"),
            (self.caches.pdbs, PDBS, revision),
        ):
            if informer is None:
                continue
            try:
                self.kube.delete(res, self.namespace, name)
                self.applied.writes += 1
            except KubeError as exc:
                self.applied.errors.append(f"delete {res.kind} {name}: {exc}")
                continue
            informer.forget(self.namespace, name)

    def _deletion_costs(self, revision: str, current: int, target: int) -> None:
        """Before a scale-down: each pod's cost is its CPU in millicores (not-ready pods
        -1), so the ReplicaSet deletes the least busy pods first."""
        if target >= current:
            return
        cpu: dict[str, float] = {}
        metrics = self.metrics
        samples = metrics.revision(self.namespace, self.name, revision).pods if metrics else ()
        for sample in samples:
            if sample.cpu_usage_cores is not None:
                cpu[sample.name] = sample.cpu_usage_cores
        for pod in self._mine(self.caches.pods):
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get(obj.LABEL_REVISION) != revision:
                continue
            if obj.pod_terminating(pod):
                continue
            name = str(meta["name"])
            cost = -1 if not obj.pod_ready(pod) else round(cpu.get(name, 0.0) * 1000)
            if (meta.get("annotations") or {}).get(obj.DELETION_COST) == str(cost):
                continue
            try:
                self.kube.merge_patch(
                    PODS,
                    self.namespace,
                    name,
                    {"metadata": {"annotations": {obj.DELETION_COST: str(cost)}}},
                )
                self.applied.writes += 1
            except KubeError as exc:
                if not exc.not_found:
                    self.applied.errors.append(f"pod {name}: deletion cost: {exc}")

    # -- state and status

    def load_state(self) -> Any:
        if self.memory.state is not None:
            return self.memory.state
        saved = self._loop_doc.get("state")
        if not saved:
            return None
        try:
            self.memory.state = state_codec.from_dict(saved)
        except state_codec.StateError as exc:
            self.applied.errors.append(f"status.loop.state: {exc}; starting afresh")
            return None
        return self.memory.state

    def save_state(self, state: Any) -> None:
        self.memory.state = state

    def load_status(self) -> models.ModelServiceStatus | None:
        status = self.doc.get("status")
        if not status:
            return None
        try:
            return models.ModelServiceStatus.model_validate(status)
        except ValueError:
            return None

    def _loop(self) -> Doc:
        state = self.memory.state
        doc: Doc = {}
        if isinstance(state, LoopState):
            doc["state"] = state_codec.to_dict(state)
        if self.memory.command is not None or self._loop_doc.get("command"):
            doc["command"] = self.memory.command or self._loop_doc.get("command")
        start = self.memory.start_version
        if start is None and isinstance(self._loop_doc.get("startVersion"), int):
            start = self._loop_doc["startVersion"]
        if start is not None:
            doc["startVersion"] = start
        header = self.memory.header
        if header is not None:
            doc["header"] = header
        return doc

    def routes_condition(self, status: models.ModelServiceStatus) -> models.ModelServiceStatus:
        """``status`` with ``RoutesAccepted`` from the routes' own status (route_status),
        its transition time kept while it holds; an event when it turns False or back."""
        if self.options.traffic != obj.TrafficProvider.GATEWAY:
            return status
        routes = [
            (
                kind,
                None
                if cache is None
                else cache.get(self.namespace, obj.route_name(self.name, grpc=grpc)),
            )
            for kind, cache, grpc in (
                ("HTTPRoute", self.caches.httproutes, False),
                ("GRPCRoute", self.caches.grpcroutes, True),
            )
        ]
        found = route_status.verdict(routes, namespace=self.namespace, gateway=self._parent())
        if found is None:
            return status
        kind = models.ConditionType.ROUTES_ACCEPTED
        live = self.load_status()
        old = live.condition(kind) if live is not None else None
        wall = self._wall()
        condition = status_conditions.condition(
            kind, models.ConditionStatus(found.status), found.reason, found.message, wall, live
        )
        if old is None or old.status is not condition.status:
            if condition.status is models.ConditionStatus.FALSE:
                self.event("Warning", route_status.NOT_ACCEPTED, found.message, wall)
            elif old is not None and old.status is models.ConditionStatus.FALSE:
                self.event("Normal", route_status.ACCEPTED, "every route is accepted again", wall)
        kept = [c for c in status.conditions if c.type is not kind]
        return status.model_copy(update={"conditions": [*kept, condition]})

    def write_status(self, status: models.ModelServiceStatus) -> None:
        status = self.routes_condition(status)
        if isinstance(self.memory.state, LoopState):
            wanted = self.service.spec.model.version
            rollout = self.memory.state.rollout
            before = self.load_status()
            status = gitops.degraded(status, wanted, rollout, self._wall(), before)
        generation = (self.doc.get("metadata") or {}).get("generation")
        body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if generation is not None:
            body["observedGeneration"] = int(generation)
        # The policy's history changes every cycle; it is saved with the loop state (at
        # checkpoints), not in the status users read, so a quiet cycle writes nothing.
        if isinstance(body.get("autoscaling"), dict):
            body["autoscaling"].pop("policyState", None)
        live = dict(self.doc.get("status") or {})
        old_loop = live.pop("loop", None) or {}
        body.pop("loop", None)
        wall = self._wall()
        due = (
            self.memory.force_checkpoint
            or wall - self.memory.saved_at >= self.checkpoint_s
            or not old_loop
        )
        changed = body != live
        if changed or due:
            body["loop"] = self._loop()
        else:
            return
        if not changed and body["loop"] == old_loop:
            self.memory.saved_at = wall
            return
        out = self._put(
            self.caches.modelservices,
            {
                "apiVersion": MODELSERVICES.api_version,
                "kind": MODELSERVICES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "status": body,
            },
            sub="status",
        )
        if out is not None:
            self.memory.saved_at = wall
            self.memory.force_checkpoint = False

    def emit(self, events: Sequence[Event]) -> None:
        for event in events:
            self.event(str(event.type), str(event.reason), event.message, event.time)

    def event(self, type_: str, reason: str, message: str, when: float | None = None) -> None:
        when = when if when is not None and math.isfinite(when) else self._wall()
        try:
            post_event(self.kube, self.doc, type_, reason, message, when)
            self.applied.writes += 1
        except KubeError as exc:
            self.applied.errors.append(f"event {reason}: {exc}")


def post_event(
    kube: Kube, doc: Mapping[str, Any], type_: str, reason: str, message: str, when: float
) -> None:
    """A core/v1 Event about the ModelService ``doc`` (what ``kubectl describe`` shows)."""
    meta = doc.get("metadata") or {}
    stamp = datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    kube.create(
        EVENTS,
        namespace,
        {
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": MODELSERVICES.api_version,
                "kind": MODELSERVICES.kind,
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "servectl-controller"},
            "reportingComponent": "servectl.io/controller",
            "reportingInstance": "servectl-controller",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        },
    )


def parse(doc: Mapping[str, Any]) -> models.ModelService:
    """The ModelService servectl reads from a live object (status and server fields aside)."""
    meta = doc.get("metadata") or {}
    return models.ModelService.model_validate(
        {
            "apiVersion": doc.get("apiVersion", MODELSERVICES.api_version),
            "kind": "ModelService",
            "metadata": {
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "default",
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
            },
            "spec": doc.get("spec") or {},
        }
    )
