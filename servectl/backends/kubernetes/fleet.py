"""A cluster as a :class:`~servectl.controller.driver.Fleet`: the ModelServices in the
controller's watch caches, one :class:`~.backend.KubeBackend` each per cycle, the cycle's
one Prometheus round, and faults reported in each ModelService's status.

Listing also does the object lifecycle around the loop: a ModelService being deleted has
what it owns deleted and then its finalizer removed (it is not listed); a new one gets
the finalizer; a spec the CRD schema let through but servectl refuses (no
``model.version``, a model source it cannot mount, a standby pool, which only the local
runtime parks yet) is listed with the reason, and the
driver sets ``Ready=False`` (``InvalidSpec``): nothing is created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from servectl.api import models
from servectl.autoscaling.config import Routing
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.backend import (
    Caches,
    KubeBackend,
    Memory,
    cpu_settle_s,
    parse,
    post_event,
)
from servectl.backends.kubernetes.cache import Key, key_of
from servectl.backends.kubernetes.kube import MODELSERVICES, SCALINGPOLICIES, Doc, Kube, KubeError
from servectl.controller import status as status_mod
from servectl.controller.backend import EventReason, EventType
from servectl.controller.driver import Listed, SnapshotRequest
from servectl.metrics.assemble import ALL_SIGNALS, MetricsSnapshot, Problem, Reason
from servectl.metrics.source import PrometheusSource

log = logging.getLogger("servectl.kubernetes")


def routing_for(traffic: str) -> Routing:
    """How requests reach a revision's pods, as the engine sizes for it: Gateway API
    implementations route least-request by default (Envoy Gateway's LeastRequest, Istio's
    LEAST_REQUEST); a plain Service (kube-proxy) spreads connections evenly."""
    if traffic == obj.TrafficProvider.GATEWAY:
        return Routing.LEAST_REQUEST
    return Routing.ROUND_ROBIN


class KubeFleet:
    """Every ModelService the controller watches (cluster-wide or per namespace)."""

    def __init__(
        self,
        kube: Kube,
        caches: dict[str | None, Caches],
        *,
        options: obj.Options,
        source: PrometheusSource | None,
        wall_clock: Callable[[], float],
        checkpoint_s: float,
    ) -> None:
        self.kube = kube
        self.caches = caches
        self.options = options
        self.source = source
        self.checkpoint_s = checkpoint_s
        self.memory: dict[Key, Memory] = {}
        self.resync = False  # this cycle re-applies everything (set by the controller)
        self.lifecycle_errors: dict[Key, str] = {}  # finalizer work that failed this cycle
        self._wall = wall_clock
        self._docs: dict[Key, tuple[Caches, Doc]] = {}

    @property
    def routing(self) -> Routing:
        return routing_for(self.options.traffic)

    # ------------------------------------------------------------------ listing

    def services(self) -> list[Listed]:
        self._docs = {}
        self.lifecycle_errors = {}
        listed = []
        for caches in self.caches.values():
            for doc in caches.modelservices.items():
                key = key_of(doc)
                meta = doc.get("metadata") or {}
                try:
                    if meta.get("deletionTimestamp"):
                        self._finalize(caches, doc)
                        continue
                    if obj.FINALIZER not in (meta.get("finalizers") or []):
                        self._add_finalizer(caches, doc)
                except KubeError as exc:
                    log.error("%s/%s: finalizer: %s", *key, exc)
                    self.lifecycle_errors[key] = f"{type(exc).__name__}: {exc}"
                    continue
                self._docs[key] = (caches, doc)
                generation = int(meta.get("generation") or 0)
                try:
                    service = parse(doc)
                    if service.spec.model.version is None:
                        raise ValueError(
                            "spec.model.version: required on Kubernetes (the controller "
                            "cannot list basePath); set the version to serve"
                        )
                    obj.model_source(service.spec.model.base_path)
                    obj.check_supported(service.spec)
                except ValueError as exc:
                    listed.append(Listed(key[0], key[1], generation, None, str(exc)))
                    continue
                listed.append(Listed(key[0], key[1], generation, service))
        live = {entry.key for entry in listed}
        for key in set(self.memory) - live:
            del self.memory[key]
        return listed

    def policies(self, namespace: str) -> dict[str, models.ScalingPolicy]:
        """ScalingPolicies of the namespace (the driver asks when a spec changes, not
        every cycle)."""
        try:
            found = self.kube.list(SCALINGPOLICIES, namespace)
        except KubeError as exc:
            log.warning("scalingpolicies in %s: %s", namespace, exc)
            return {}
        out = {}
        for item in found["items"]:
            meta = item.get("metadata") or {}
            try:
                out[str(meta.get("name"))] = models.ScalingPolicy.model_validate(
                    {
                        "apiVersion": item.get("apiVersion"),
                        "kind": "ScalingPolicy",
                        "metadata": {"name": meta.get("name"), "namespace": namespace},
                        "spec": item.get("spec") or {},
                    }
                )
            except ValueError as exc:
                log.warning("scalingpolicy %s/%s: %s", namespace, meta.get("name"), exc)
        return out

    # ------------------------------------------------------------------ one service

    def open(self, listed: Listed) -> KubeBackend:
        assert listed.service is not None
        caches, doc = self._docs[listed.key]
        if self.resync:
            self._mark_for_resync(caches, listed.key)
        return KubeBackend(
            kube=self.kube,
            caches=caches,
            doc=doc,
            service=listed.service,
            memory=self.memory.setdefault(listed.key, Memory()),
            options=self.options,
            wall_clock=self._wall,
            checkpoint_s=self.checkpoint_s,
            cpu_settle_s=cpu_settle_s(self.source.config if self.source is not None else None),
        )

    def _mark_for_resync(self, caches: Caches, key: Key) -> None:
        """Make the caches' copies differ from what servectl applies, so the cycle sends
        every object again (a hand edit of a field servectl owns reverts)."""
        for informer, _res in caches.owned():
            for item in informer.select(key[0], {obj.LABEL_SERVICE: key[1]}):
                meta = item.get("metadata") or {}
                annotations = {**(meta.get("annotations") or {}), obj.APPLIED: "resync"}
                informer.put({**item, "metadata": {**meta, "annotations": annotations}})

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot:
        if self.source is None:
            return MetricsSnapshot(
                time=self._wall(),
                revisions={},
                latency_bounds_us=(),
                problems=tuple(
                    Problem(
                        signal,
                        Reason.UNREACHABLE,
                        "no Prometheus configured: start the controller with --prometheus-url",
                    )
                    for signal in ALL_SIGNALS
                ),
            )
        return self.source.snapshot(
            expected=request.expected,
            analysis_services=request.analysis_services,
            custom=request.custom,
        )

    def refuse(self, listed: Listed, reason: EventReason, message: str, now: float) -> None:
        """``Ready=False`` with the reason in the ModelService's status (the rest of the
        status, its saved loop state included, is kept), and an event when that changes."""
        caches, doc = self._docs[listed.key]
        meta = doc["metadata"]
        live = dict(doc.get("status") or {})
        try:
            previous = models.ModelServiceStatus.model_validate(live) if live else None
        except ValueError:
            previous = None
        status, changed = status_mod.refused(previous, str(reason), message, now=now)
        if not changed:
            return
        log.warning("%s/%s: %s: %s", *listed.key, reason, message)
        body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["observedGeneration"] = listed.generation
        if "loop" in live:
            body["loop"] = live["loop"]
        out = self.kube.apply(
            {
                "apiVersion": MODELSERVICES.api_version,
                "kind": MODELSERVICES.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": body,
            },
            sub="status",
        )
        caches.modelservices.put(out)
        post_event(self.kube, doc, str(EventType.WARNING), str(reason), message, now)

    # ------------------------------------------------------------------ finalizer

    def _add_finalizer(self, caches: Caches, doc: Doc) -> None:
        meta = doc["metadata"]
        out = self.kube.apply(
            {
                "apiVersion": MODELSERVICES.api_version,
                "kind": MODELSERVICES.kind,
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "finalizers": [obj.FINALIZER],
                },
            },
            manager="servectl-finalizer",
        )
        caches.modelservices.put(out)

    def _finalize(self, caches: Caches, doc: Doc) -> None:
        """Delete what the service owns; drop the finalizer once it is all gone."""
        ns, name = key_of(doc)
        remaining = 0
        for informer, res in caches.owned():
            for item in informer.select(ns, {obj.LABEL_SERVICE: name}):
                remaining += 1
                item_name = str(item["metadata"]["name"])
                if not (item.get("metadata") or {}).get("deletionTimestamp"):
                    self.kube.delete(res, ns, item_name)
                informer.forget(ns, item_name)
        if remaining:
            return  # the next cycle checks again (the caches see the deletes)
        if obj.FINALIZER in ((doc.get("metadata") or {}).get("finalizers") or []):
            try:
                self.kube.apply(
                    {
                        "apiVersion": MODELSERVICES.api_version,
                        "kind": MODELSERVICES.kind,
                        "metadata": {"name": name, "namespace": ns, "finalizers": []},
                    },
                    manager="servectl-finalizer",
                )
            except KubeError as exc:
                if not exc.not_found:
                    raise
        self.memory.pop((ns, name), None)
