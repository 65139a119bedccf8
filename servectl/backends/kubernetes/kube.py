"""The Kubernetes API as servectl uses it: plain JSON documents over the official client.

:class:`Kube` sends every request through ``kubernetes.client.ApiClient`` (so kubeconfig,
in-cluster service-account tokens, exec plugins and TLS are the client's, not ours) but
reads and writes plain ``dict`` documents: the controller touches a handful of fields of
a few kinds, and the generated model classes cost more to build than the whole decision.

- ``apply``: server-side apply (``application/apply-patch+yaml``) with servectl's field
  manager, forced: servectl owns the fields it sets and nothing else, so another writer's
  labels or annotations survive, and a field servectl owns is put back.
- ``update``: a PUT guarded by ``metadata.resourceVersion``; a 409 re-reads and retries
  with the caller's change applied again (``mutate``), so no update is lost.
- every request is counted per verb, resource and status code (the controller exports
  the counts, and the scale bench reads them).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

FIELD_MANAGER = "servectl"
Doc = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One kind's REST location: ``/api/v1`` or ``/apis/<group>/<version>``, plural."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


MODELSERVICES = Resource("servectl.io", "v1alpha1", "modelservices", "ModelService")
SCALINGPOLICIES = Resource("servectl.io", "v1alpha1", "scalingpolicies", "ScalingPolicy")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
HTTPROUTES = Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
GRPCROUTES = Resource("gateway.networking.k8s.io", "v1", "grpcroutes", "GRPCRoute")


class KubeError(RuntimeError):
    """A request the API server refused (or could not be sent); ``status`` is the HTTP
    code (0: no answer), ``reason`` the Status reason (``Conflict``, ``NotFound``, ...)."""

    def __init__(self, status: int, reason: str, message: str, *, verb: str, path: str) -> None:
        super().__init__(f"{verb} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


def load_api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> k8s_client.ApiClient:
    """An API client from a kubeconfig (``$KUBECONFIG`` or ~/.kube/config), or the
    in-cluster service account when no kubeconfig is given and one is mounted."""
    configuration = k8s_client.Configuration()
    if kubeconfig is None and context is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return k8s_client.ApiClient(configuration)
        except k8s_config.ConfigException:
            pass
    try:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (k8s_config.ConfigException, OSError, TypeError) as exc:
        where = kubeconfig or "$KUBECONFIG or ~/.kube/config"
        raise KubeError(
            0, "NoConfig", f"cannot load a kubeconfig from {where}: {exc}", verb="LOAD", path=""
        ) from None
    return k8s_client.ApiClient(configuration)


class Kube:
    """JSON requests to one API server, counted."""

    def __init__(self, api: k8s_client.ApiClient, *, field_manager: str = FIELD_MANAGER) -> None:
        self.api = api
        self.field_manager = field_manager
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self.request_timeout_s = 30.0

    # ------------------------------------------------------------------ transport

    def _count(self, verb: str, resource: str, status: int) -> None:
        with self._lock:
            self.counts[(verb, resource, status)] += 1

    def writes(self) -> int:
        """Requests that could change something (everything but GET/LIST/WATCH)."""
        with self._lock:
            return sum(n for (verb, _r, _s), n in self.counts.items() if verb not in _READS)

    def requests(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        verb: str | None = None,
        resource: str = "",
        timeout_s: float | None = None,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            # The client serializes JSON (and apply-patch YAML, a superset) itself.
            headers["Content-Type"] = content_type
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        verb = verb or method.lower()
        try:
            serialized = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(
                *serialized, _request_timeout=timeout_s or self.request_timeout_s
            )
        except k8s_client.ApiException as exc:  # pragma: no cover - the client raises few
            self._count(verb, resource, int(exc.status or 0))
            raise _error(int(exc.status or 0), exc.body, verb=method, path=path) from None
        except Exception as exc:  # urllib3's connection and timeout errors
            self._count(verb, resource, 0)
            raise KubeError(0, type(exc).__name__, str(exc), verb=method, path=path) from None
        self._count(verb, resource, int(response.status))
        if stream:
            if response.status >= 400:
                raise _error(response.status, response.read(), verb=method, path=path)  # type: ignore[no-untyped-call]
            return response.response  # the urllib3 response, unread
        data = response.read()  # type: ignore[no-untyped-call]
        if response.status >= 400:
            raise _error(response.status, data, verb=method, path=path)
        if not data:
            return None
        return json.loads(data)

    # ------------------------------------------------------------------ verbs

    def get(self, res: Resource, namespace: str | None, name: str, sub: str = "") -> Doc:
        out: Doc = self.request(
            "GET", res.path(namespace, name, sub), verb="get", resource=res.plural
        )
        return out

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resource_version: str | None = None,
    ) -> Doc:
        """The whole list (``items`` and ``metadata.resourceVersion``), pages joined."""
        items: list[Doc] = []
        cont: str | None = None
        while True:
            page: Doc = self.request(
                "GET",
                res.path(namespace),
                query={
                    "labelSelector": label_selector,
                    "limit": 500,
                    "continue": cont,
                    "resourceVersion": resource_version if cont is None else None,
                },
                verb="list",
                resource=res.plural,
            )
            for item in page.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return {"items": items, "metadata": page.get("metadata") or {}}

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_s: int = 300,
    ) -> Iterator[Doc]:
        """Watch events (``{"type", "object"}``) from ``resource_version`` until the server
        ends the watch (``timeoutSeconds``); bookmarks included."""
        response = self.request(
            "GET",
            res.path(namespace),
            query={
                "watch": "true",
                "resourceVersion": resource_version,
                "labelSelector": label_selector,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": timeout_s,
            },
            verb="watch",
            resource=res.plural,
            timeout_s=timeout_s + 30,
            stream=True,
        )
        buffer = b""
        try:
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def apply(self, doc: Doc, *, sub: str = "", manager: str | None = None) -> Doc:
        """Server-side apply of ``doc`` (forced), to the object or its ``sub``resource."""
        res = resource_of(doc)
        meta = doc["metadata"]
        out: Doc = self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"], sub),
            query={"fieldManager": manager or self.field_manager, "force": "true"},
            body=doc,
            content_type="application/apply-patch+yaml",
            verb="apply" if not sub else f"apply/{sub}",
            resource=res.plural,
        )
        return out

    def create(self, res: Resource, namespace: str | None, doc: Doc) -> Doc:
        out: Doc = self.request(
            "POST",
            res.path(namespace),
            query={"fieldManager": self.field_manager},
            body=doc,
            verb="create",
            resource=res.plural,
        )
        return out

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        mutate: Callable[[Doc], Doc | None],
        *,
        sub: str = "",
        attempts: int = 5,
    ) -> Doc | None:
        """Read, ``mutate`` (returns the new document, or None: nothing to do), PUT with
        the read ``resourceVersion``; on 409 read again and retry, up to ``attempts``."""
        for attempt in range(attempts):
            current = self.get(res, namespace, name)
            new = mutate(current)
            if new is None:
                return current
            try:
                out: Doc = self.request(
                    "PUT",
                    res.path(namespace, name, sub),
                    query={"fieldManager": self.field_manager},
                    body=new,
                    verb="update" if not sub else f"update/{sub}",
                    resource=res.plural,
                )
                return out
            except KubeError as exc:
                if not exc.conflict or attempt == attempts - 1:
                    raise
        return None  # pragma: no cover - the loop returns or raises

    def delete(
        self, res: Resource, namespace: str | None, name: str, *, propagation: str = "Background"
    ) -> bool:
        """Delete; False when it was already gone."""
        try:
            self.request(
                "DELETE",
                res.path(namespace, name),
                body={"propagationPolicy": propagation},
                verb="delete",
                resource=res.plural,
            )
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def merge_patch(
        self, res: Resource, namespace: str | None, name: str, patch: Doc, *, sub: str = ""
    ) -> Doc:
        out: Doc = self.request(
            "PATCH",
            res.path(namespace, name, sub),
            query={"fieldManager": self.field_manager},
            body=patch,
            content_type="application/merge-patch+json",
            verb="patch" if not sub else f"patch/{sub}",
            resource=res.plural,
        )
        return out


_READS = frozenset({"get", "list", "watch"})
_BY_KIND = {
    r.api_version + "/" + r.kind: r
    for r in (
        MODELSERVICES,
        SCALINGPOLICIES,
        DEPLOYMENTS,
        SERVICES,
        CONFIGMAPS,
        PODS,
        EVENTS,
        NAMESPACES,
        LEASES,
        HTTPROUTES,
        GRPCROUTES,
        PDBS,
    )
}


def resource_of(doc: Mapping[str, Any]) -> Resource:
    key = f"{doc.get('apiVersion')}/{doc.get('kind')}"
    try:
        return _BY_KIND[key]
    except KeyError:
        raise ValueError(f"servectl does not write {key}") from None


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error(status: int, data: Any, *, verb: str, path: str) -> KubeError:
    reason, message = "", ""
    try:
        doc = json.loads(data) if data else {}
        reason = str(doc.get("reason") or "")
        message = str(doc.get("message") or "")
    except (ValueError, AttributeError, TypeError):
        message = (data.decode(errors="replace") if isinstance(data, bytes) else str(data))[:300]
    return KubeError(status, reason or _REASONS.get(status, "Error"), message, verb=verb, path=path)


_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Gone"}
