"""What the CLI does to a cluster: :class:`servectl.backends.client.ServiceClient` over
``ModelService`` resources.

:class:`KubeClient` is the local runtime's ``LocalClient`` over the API server instead of
the local store: the same protocol, the same values, a :class:`ClientError` whose message
names the field or the fix. The CLI never talks to the controller: it writes the resource
and reads its ``status`` and Events back. ``logs`` and ``top`` read the local runtime's
files and per-cycle signals, which a cluster does not keep: here they raise
:class:`~servectl.backends.client.Elsewhere` naming the kubectl command to use instead.

- **deploy**: checked first exactly as on the local runtime (the resource model, the CEL
  policy with the namespace's ScalingPolicies), except that the model is not looked for on
  disk: ``basePath`` is ``s3://``, ``gs://``, ``pvc://<claim>/<path>`` or a path inside the
  image, and ``spec.model.version`` is required. Then a server-side apply with the field
  manager ``servectl-cli``: the CLI owns the spec fields it sets, the controller its status.
  A changed ``spec.model.version`` is how a rollout starts (the controller notices).
- **rollout commands**: a merge patch of the ``servectl.io/rollout-command`` annotation,
  ``{"op", "version", "id"}``; the controller carries each id out once and records it in
  ``status.loop.command``.
- **scale**: a merge patch of ``spec.autoscaling``'s bounds, guarded by the
  ``resourceVersion`` read (a concurrent writer makes it re-read and check again).
- **reads**: ``status`` (``ModelServiceStatus``) and core v1 Events whose involvedObject
  is the ModelService.

Errors from the API server become one readable :class:`ClientError`: unreachable server,
401/403, a missing ModelService (which names ``servectl get``), CRDs not installed (which
names how to install them), and the server's 422 validation messages.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from servectl.api import models, validation
from servectl.backends import client as protocol
from servectl.backends.client import ClientError as ClientError  # the CLI catches it here too
from servectl.backends.client import Deployed as Deployed
from servectl.backends.client import RolloutRequest as RolloutRequest
from servectl.backends.client import timestamp as timestamp
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes import resource_docs
from servectl.backends.kubernetes.backend import parse as parse  # the CLI reads it here
from servectl.backends.kubernetes.kube import (
    EVENTS,
    MODELSERVICES,
    SCALINGPOLICIES,
    Doc,
    Kube,
    KubeError,
    Resource,
    load_api_client,
)
from servectl.controller.spec import PolicySpecError, policy_for, service_spec
from servectl.rollout.machine import Op

FIELD_MANAGER = "servectl-cli"
"""The CLI's field manager: it owns the spec fields it applies, the controller the status."""
DEFAULT_NAMESPACE = resource_docs.DEFAULT_NAMESPACE
REQUEST_TIMEOUT_S = 15.0
POLL_S = 2.0
"""How often --watch and --follow read the cluster (the controller's cycle is 5 s)."""
CRD_HINT = (
    "install the CRDs: kubectl apply --server-side -f deploy/crds/ "
    "(or helm install servectl deploy/helm/servectl)"
)
HISTORY_NOTE = (
    "the history of finished rollouts is kept by the local runtime only; on Kubernetes this "
    "is the current (or last) rollout from status.rollout, and `servectl events NAME` lists "
    "each phase change"
)
EXPLAIN_CONDITIONS = ("MetricsAvailable", "ScalingLimited", "Ready")
"""The conditions ``explain`` shows beside the decision in status."""
CONTROLLER_PODS = ("get", "pods", "-A", "-l", "app.kubernetes.io/name=servectl")


ServiceRow = protocol.ServiceSummary
"""One ModelService as listed (no endpoints: a cluster's are its Gateway's)."""
KubeEvent = protocol.EventRecord
"""A core v1 Event about a ModelService (``id`` is its name)."""


# --------------------------------------------------------------------------- the client


class KubeClient:
    """ModelServices in one cluster (one kubeconfig context), seen from the CLI (a
    :class:`~servectl.backends.client.ServiceClient`)."""

    poll_s = POLL_S

    def __init__(
        self,
        kube: Kube,
        *,
        context: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.context = context
        self.namespace = namespace  # the context's namespace: the default for -n
        self.kubeconfig: Path | None = None
        """The kubeconfig as the user named it (--kubeconfig), repeated in the kubectl
        and servectl commands this client prints; None: the default file."""
        self._sleep = sleep
        self._clock = clock
        self._crd: bool | None = None
        self._refused_before: set[str | int] = set()  # the Events before the last command
        self._seen_taken: frozenset[RolloutRequest] = frozenset()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
        """A client for ``context`` of ``kubeconfig`` ($KUBECONFIG, else ~/.kube/config;
        the kubeconfig's current context when ``context`` is None). Reads files only."""
        from kubernetes.config import ConfigException, list_kube_config_contexts

        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        source = (
            f"--kubeconfig {path}"
            if kubeconfig
            else f"$KUBECONFIG ({path})"
            if "KUBECONFIG" in os.environ
            else path
        )
        if os.pathsep not in path and not os.path.isfile(os.path.expanduser(path)):
            raise ClientError(
                f"{source}: no such file; give --kubeconfig PATH (or set $KUBECONFIG)"
            )
        try:
            contexts, current = list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError, ValueError, TypeError, AttributeError) as exc:
            raise ClientError(f"{source}: not a usable kubeconfig ({exc})") from None
        by_name = {str(c.get("name")): c for c in contexts or [] if isinstance(c, dict)}
        if context is None:
            if not current:
                raise ClientError(
                    f"--context: {path} has no current-context; give --context NAME "
                    f"(it has {', '.join(sorted(by_name)) or 'no contexts'})"
                )
            context = str(current["name"] if isinstance(current, dict) else current)
        if context not in by_name:
            raise ClientError(
                f"--context {context}: no such context in {path} "
                f"(it has {', '.join(sorted(by_name)) or 'no contexts'})"
            )
        default_ns = (by_name[context].get("context") or {}).get("namespace") or DEFAULT_NAMESPACE
        try:
            api = load_api_client(path, context)
        except KubeError as exc:
            raise ClientError(f"--context {context}: {exc.message}", environment=True) from None
        kube = Kube(api, field_manager=FIELD_MANAGER)
        kube.request_timeout_s = REQUEST_TIMEOUT_S
        return cls(kube, context=context, namespace=str(default_ns))

    def close(self) -> None:
        close = getattr(self.kube.api, "close", None)
        if close is not None:
            close()

    # -- commands for the user, with the same cluster flags

    def flags(self) -> str:
        """``--kubeconfig P --context C`` as given, for commands printed to the user."""
        parts: list[str] = []
        if self.kubeconfig is not None:
            parts += ["--kubeconfig", str(self.kubeconfig)]
        if self.context is not None:
            parts += ["--context", self.context]
        return shlex.join(parts)

    def kubectl(self, namespace: str | None, *args: str) -> str:
        """A kubectl command line for the same cluster (and ``namespace``, if not None)."""
        where = shlex.join(["-n", namespace]) if namespace is not None else ""
        return " ".join(p for p in ("kubectl", self.flags(), where, shlex.join(args)) if p)

    def servectl(self, namespace: str, *args: str) -> str:
        flags = self.flags()
        ns = shlex.join(["-n", namespace])
        return " ".join(p for p in ("servectl", shlex.join(args), ns, flags) if p)

    # -- errors

    @property
    def server(self) -> str:
        configuration = getattr(self.kube.api, "configuration", None)
        return str(getattr(configuration, "host", "") or "the API server")

    def _where(self) -> str:
        return f" (context {self.context})" if self.context else ""

    def _hint_flags(self) -> str:
        return f" --context {self.context}" if self.context else ""

    def error(self, exc: KubeError, namespace: str, what: str) -> ClientError:
        """``exc`` as one line that says what to do."""
        if exc.status == 0:
            if exc.reason == "NoConfig":
                return ClientError(exc.message, environment=True)
            return ClientError(
                f"cannot reach the Kubernetes API server {self.server}{self._where()}: "
                f"{resource_docs.connection_reason(exc.message)}; is the cluster up and the "
                "context right? "
                f"(kubectl{self._hint_flags()} cluster-info)",
                environment=True,
            )
        if exc.status == 401:
            return ClientError(
                f"the API server {self.server} refused the credentials{self._where()} "
                f"(401 Unauthorized): {exc.message or 'log in again'}",
                environment=True,
            )
        if exc.status == 403:
            return ClientError(
                f"forbidden{self._where()}: {exc.message}; the CLI needs get, list, create, "
                f"patch and delete on modelservices.servectl.io (and scalingpolicies), and "
                f"list on events, in namespace {namespace}",
                environment=True,
            )
        if exc.status == 404 and not self.crd_installed():
            return self._no_crd()
        if exc.status == 404 and exc.message.startswith('namespaces "'):
            return ClientError(
                f"namespace {namespace} does not exist{self._where()} "
                f"(kubectl{self._hint_flags()} create namespace {namespace}, or give -n)"
            )
        if exc.status in (400, 422):
            refused = resource_docs.readable(exc.message)
            return ClientError(f"the API server refused {what}: {refused}")
        if exc.status == 409:
            return ClientError(f"{what}: changed by someone else meanwhile ({exc.message}); retry")
        return ClientError(
            f"{what}: {exc.status} {exc.reason}: {exc.message}", environment=exc.status >= 500
        )

    def _no_crd(self) -> ClientError:
        return ClientError(
            f"the ModelService CRD (modelservices.servectl.io) is not installed at "
            f"{self.server}{self._where()}: {CRD_HINT}",
            environment=True,
        )

    def crd_installed(self) -> bool:
        """Does the API server serve modelservices.servectl.io/v1alpha1? (asked once)"""
        if self._crd is None:
            try:
                found = self.kube.request(
                    "GET",
                    f"/apis/{MODELSERVICES.group}/{MODELSERVICES.version}",
                    verb="get",
                    resource="discovery",
                )
            except KubeError as exc:
                if exc.status != 404:
                    return True  # cannot tell; report the original error
                self._crd = False
            else:
                names = {r.get("name") for r in (found or {}).get("resources") or []}
                self._crd = MODELSERVICES.plural in names
        return self._crd

    def _not_found(self, namespace: str, name: str) -> ClientError:
        if not self.crd_installed():
            return self._no_crd()
        return ClientError(
            f"no ModelService {namespace}/{name}; "
            f"`servectl get -n {namespace}{self._hint_flags()}` lists them"
        )

    def _get(self, res: Resource, namespace: str, name: str) -> Doc | None:
        try:
            return self.kube.get(res, namespace, name)
        except KubeError as exc:
            if exc.not_found and self.crd_installed():
                return None
            raise self.error(exc, namespace, f"{res.kind} {namespace}/{name}") from None

    def object(self, namespace: str, name: str) -> Doc:
        """The live ModelService (spec, status, metadata)."""
        doc = self._get(MODELSERVICES, namespace, name)
        if doc is None:
            raise self._not_found(namespace, name)
        return doc

    # -- specs

    def check(
        self,
        service: models.ModelService,
        policies: Sequence[models.ScalingPolicy] = (),
        *,
        namespace: str | None = None,
    ) -> None:
        """Everything ``deploy`` checks before it writes; raises ClientError naming the field."""
        spec = service.spec
        if spec.model.version is None:
            raise ClientError(
                "spec.model.version: required on Kubernetes (the controller cannot list "
                "basePath to find the latest version); set the version to serve, e.g. "
                "`version: 1` (or --version N)"
            )
        try:
            obj.model_source(spec.model.base_path)
            obj.check_supported(spec)
        except ValueError as exc:
            raise ClientError(str(exc)) from None
        library: dict[str, models.ScalingPolicy] = {}
        policy = spec.autoscaling.policy
        wanted = None if policy is None else policy.ref
        given = {p.metadata.name: p for p in policies}
        if wanted is not None and wanted not in given:
            library.update(self.policies(namespace or service.metadata.namespace))
        library.update(given)
        try:
            policy_for(service, library)
        except PolicySpecError as exc:
            raise ClientError(str(exc)) from None
        probed = validation.policy_issues(service, library)
        if probed:
            raise ClientError(str(validation.SpecError(probed)))

    def policies(self, namespace: str) -> dict[str, models.ScalingPolicy]:
        """The namespace's ScalingPolicies (the ones a ``policy.ref`` may name)."""
        try:
            listed = self.kube.list(SCALINGPOLICIES, namespace)
        except KubeError as exc:
            raise self.error(exc, namespace, f"ScalingPolicies in {namespace}") from None
        found: dict[str, models.ScalingPolicy] = {}
        for item in listed.get("items") or []:
            meta = item.get("metadata") or {}
            try:
                found[str(meta.get("name"))] = models.ScalingPolicy.model_validate(
                    {
                        "apiVersion": SCALINGPOLICIES.api_version,
                        "kind": "ScalingPolicy",
                        "metadata": {"name": meta.get("name"), "namespace": namespace},
                        "spec": item.get("spec") or {},
                    }
                )
            except ValueError:
                continue  # a broken one is the controller's to report; a ref to it fails
        return found

    def deploy(
        self,
        service: models.ModelService,
        policies: Sequence[models.ScalingPolicy] = (),
        *,
        namespace: str | None = None,
    ) -> Deployed:
        """Check, then apply the ScalingPolicies and the ModelService (``namespace`` given:
        where to put them, else each one's own)."""
        return self.deploy_all([service], policies, namespace=namespace)[0]

    def deploy_all(
        self,
        services: Sequence[models.ModelService],
        policies: Sequence[models.ScalingPolicy] = (),
        *,
        namespace: str | None = None,
    ) -> list[Deployed]:
        """Check every service first (nothing is written if one is refused), then apply
        the policies and the services; a changed ``spec.model.version`` requests a rollout."""
        for service in services:
            try:
                self.check(service, policies, namespace=namespace)
            except ClientError as exc:
                raise ClientError(f"{service.metadata.name}: {exc}") from None
        for policy in policies:
            ns = namespace or policy.metadata.namespace
            try:
                self.kube.apply(resource_docs.apply_document(policy, ns), manager=FIELD_MANAGER)
            except KubeError as exc:
                raise self.error(exc, ns, f"ScalingPolicy {ns}/{policy.metadata.name}") from None
        return [self._apply(service, namespace) for service in services]

    def _apply(self, service: models.ModelService, namespace: str | None) -> Deployed:
        ns = namespace or service.metadata.namespace
        name = service.metadata.name
        existing = self._get(MODELSERVICES, ns, name)
        try:
            out = self.kube.apply(resource_docs.apply_document(service, ns), manager=FIELD_MANAGER)
        except KubeError as exc:
            raise self.error(exc, ns, f"ModelService {ns}/{name}") from None
        version = service.spec.model.version
        rollout_to: int | None = None
        if existing is not None:
            before = ((existing.get("spec") or {}).get("model") or {}).get("version")
            if before != version:
                rollout_to = version
        meta = out.get("metadata") or {}
        changed = existing is None or meta.get("resourceVersion") != (
            (existing.get("metadata") or {}).get("resourceVersion")
        )
        return Deployed(
            ns, name, int(meta.get("generation") or 0), existing is None, rollout_to, changed
        )

    def get(self, namespace: str, name: str) -> models.ModelService:
        return parse(self.object(namespace, name))

    def services(self, namespace: str | None = None) -> list[ServiceRow]:
        """ModelServices of ``namespace`` (None: every namespace), by namespace and name."""
        try:
            listed = self.kube.list(MODELSERVICES, namespace)
        except KubeError as exc:
            where = namespace or "all namespaces"
            raise self.error(exc, namespace or "(all)", f"ModelServices in {where}") from None
        rows = [resource_docs.row(item) for item in listed.get("items") or []]
        return sorted(rows, key=lambda r: (r.namespace, r.name))

    def delete(self, namespace: str, name: str) -> None:
        try:
            gone = self.kube.delete(MODELSERVICES, namespace, name)
        except KubeError as exc:
            raise self.error(exc, namespace, f"ModelService {namespace}/{name}") from None
        if not gone:
            raise self._not_found(namespace, name)

    def wait_deleted(self, namespace: str, name: str, timeout_s: float) -> bool:
        """Poll until the ModelService is gone (its finalizer done); False on timeout."""
        deadline = self._clock() + timeout_s
        while True:
            if self._get(MODELSERVICES, namespace, name) is None:
                return True
            if self._clock() >= deadline:
                return False
            self._sleep(1.0)

    def scale(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        attempts: int = 3,
    ) -> models.ModelService:
        """Change the replica bounds (``replicas`` pins both): checked, then a merge patch
        guarded by the resourceVersion read."""
        for attempt in range(attempts):
            doc = self.object(namespace, name)
            auto = parse(doc).spec.autoscaling
            low = replicas if replicas is not None else min_replicas
            high = replicas if replicas is not None else max_replicas
            low = auto.min_replicas if low is None else low
            high = auto.max_replicas if high is None else high
            candidate = parse(doc).model_dump(mode="json", by_alias=True, exclude_none=True)
            candidate["spec"]["autoscaling"]["minReplicas"] = low
            candidate["spec"]["autoscaling"]["maxReplicas"] = high
            try:
                updated = validation.load_model_service(candidate)
            except validation.SpecError as exc:
                raise ClientError(str(exc)) from None
            patch = {
                "metadata": {"resourceVersion": (doc.get("metadata") or {}).get("resourceVersion")},
                "spec": {"autoscaling": {"minReplicas": low, "maxReplicas": high}},
            }
            try:
                self.kube.merge_patch(MODELSERVICES, namespace, name, patch)
            except KubeError as exc:
                if exc.conflict and attempt < attempts - 1:
                    continue
                raise self.error(exc, namespace, f"ModelService {namespace}/{name}") from None
            return updated
        raise AssertionError("unreachable")  # pragma: no cover

    # -- rollouts

    def rollout(
        self, namespace: str, name: str, op: Op, version: int | None = None
    ) -> RolloutRequest:
        """Ask the controller for a rollout operation.

        ``start`` to a version other than ``spec.model.version`` writes that version into
        the spec, which is how the controller starts a rollout (as a ``deploy`` of it
        would; a start only in the annotation would leave the spec naming another version,
        which the controller would roll back to later). ``start`` to the spec's own version
        (after an abort or an undo), and every other operation, is a command annotation.
        """
        doc = self.object(namespace, name)
        current = ((doc.get("spec") or {}).get("model") or {}).get("version")
        if op is Op.START:
            if version is None:
                raise ClientError("rollout start needs --version N (the version to roll out)")
            if version < 1:
                raise ClientError(
                    f"--version: {version} is not a model version (versions are >= 1)"
                )
        try:  # refused at once where the state refuses it (unless servectl cannot read it)
            refused = resource_docs.refusal(doc, service_spec(parse(doc)), op, version, time.time())
        except ValueError:
            refused = None
        if refused is not None:
            raise ClientError(refused)
        try:  # the Events before it: a CommandRefused one after it is its refusal
            self._refused_before = {e.id for e in self.events(namespace, name)}
        except ClientError:  # Events not readable: the wait sees it carried out only
            self._refused_before = set()
        if op is Op.START and current != version:
            self._patch(namespace, name, {"spec": {"model": {"version": version}}})
            return RolloutRequest(op, version, None)
        pending = resource_docs.pending_command(doc)
        ident = resource_docs.new_command_id()
        command = resource_docs.command_annotation(op, version, ident)
        patch = {"metadata": {"annotations": {obj.COMMAND: command}}}
        self._patch(namespace, name, patch)
        return RolloutRequest(
            op, version, ident, None if pending is None else str(pending.get("op"))
        )

    def command_outcome(
        self, namespace: str, name: str, request: RolloutRequest
    ) -> protocol.CommandOutcome:
        """:func:`resource_docs.outcome` of the object, and its Events once it is taken."""
        doc = self.object(namespace, name)
        taken = resource_docs.command_taken(doc, request.id, request.version)
        events = self.events(namespace, name) if taken else []
        seen = request in self._seen_taken
        self._seen_taken |= {request} if taken else set()
        return resource_docs.outcome(doc, events, self._refused_before, request, seen=seen)

    def _patch(self, namespace: str, name: str, patch: Doc) -> Doc:
        try:
            return self.kube.merge_patch(MODELSERVICES, namespace, name, patch)
        except KubeError as exc:
            if exc.not_found:
                raise self._not_found(namespace, name) from None
            raise self.error(exc, namespace, f"ModelService {namespace}/{name}") from None

    def status(self, namespace: str, name: str) -> dict[str, Any] | None:
        return dict(self.object(namespace, name).get("status") or {}) or None

    def record(self, namespace: str, name: str) -> None:
        """The local runtime's per-service record (front ports): none in a cluster."""
        return None

    def events(
        self, namespace: str, name: str, *, since_id: str | None = None, limit: int = 100
    ) -> list[KubeEvent]:
        """The ModelService's Events, oldest first (the newest ``limit``)."""
        del since_id  # Event names are not ordered; the CLI follows by what it has seen
        selector = f"involvedObject.name={name},involvedObject.kind={MODELSERVICES.kind}"
        try:
            listed = self.kube.request(
                "GET",
                EVENTS.path(namespace),
                query={"fieldSelector": selector},
                verb="list",
                resource=EVENTS.plural,
            )
        except KubeError as exc:
            raise self.error(exc, namespace, f"Events of {namespace}/{name}") from None
        found = [resource_docs.event(item) for item in (listed or {}).get("items") or []]
        found.sort(key=lambda e: (e.time, e.id))
        return found[-limit:] if limit > 0 else found

    def history(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return resource_docs.history(self.status(namespace, name) or {})

    # -- the CLI's protocol (servectl.backends.client.ServiceClient)

    def model_source(self, model_path: str, model_name: str | None) -> dict[str, Any]:
        """A location in the cluster, not on this machine: taken as written."""
        return {
            "name": model_name or model_path.rstrip("/").rsplit("/", 1)[-1],
            "basePath": model_path,
        }

    def deploy_resources(
        self,
        services: Sequence[models.ModelService],
        policies: Sequence[models.ScalingPolicy],
        *,
        base_dir: Path,
        namespace: str | None,
    ) -> Iterator[protocol.Deployed]:
        """:meth:`deploy_all`, each resource placed in the namespace it names, else -n
        (``namespace``), else the context's; a file's namespace that -n contradicts is
        refused, as kubectl does. Nothing is yielded before everything is applied: the
        ScalingPolicies first (resources of their own here), then the ModelServices."""
        del base_dir  # a cluster's basePath is not a path on this machine
        where = namespace or self.namespace
        placed = [_in_namespace(s, where, namespace) for s in services]
        placed_policies = [_in_namespace(p, where, namespace) for p in policies]
        done = self.deploy_all(placed, placed_policies)
        for policy in placed_policies:
            meta = policy.metadata
            yield protocol.Deployed(meta.namespace, meta.name, 0, False, None, kind=policy.kind)
        yield from done

    def controller_warning(self) -> str | None:
        """None: the cluster's controller is not looked for (``describe`` says where)."""
        return None

    def await_deletion(self, namespace: str, name: str, timeout_s: float) -> None:
        if not self.wait_deleted(namespace, name, timeout_s):
            raise ClientError(
                f"{namespace}/{name} is still there after {timeout_s:g} s: its finalizer "
                "(servectl.io/cleanup) waits for servectl's controller to remove what it ran; "
                "is the controller running in the cluster?",
                environment=True,
            )

    def rollout_command(
        self, namespace: str, name: str, op: Op, version: int | None = None
    ) -> RolloutRequest:
        return self.rollout(namespace, name, op, version)

    def listing_namespace(self, namespace: str | None, every: bool) -> str | None:
        """-n, else the context's; every namespace with -A."""
        return None if every else (namespace or self.namespace)

    def list_services(self, namespace: str | None, name: str | None = None) -> list[ServiceRow]:
        if name is not None and namespace is not None:
            return [resource_docs.row(self.object(namespace, name))]
        rows = [r for r in self.services(namespace) if name in (None, r.name)]
        if name is not None and not rows:
            raise ClientError(f"no ModelService {name} in any namespace")
        return rows

    def no_services(self, listed: str | None, namespace: str) -> str:
        where = f"namespace {listed}" if listed is not None else "any namespace"
        return (
            f"no ModelServices in {where}; deploy one with "
            f"`{self.servectl(namespace, 'deploy', '-f', 'FILE')}`"
        )

    def require(self, namespace: str, name: str) -> None:
        self.object(namespace, name)

    def describe(self, namespace: str, name: str, *, events: int) -> protocol.Description:
        live = self.object(namespace, name)
        found = self.events(namespace, name, limit=events)
        listed = resource_docs.row(live)
        spec: dict[str, Any] | None = None
        spec_error: str | None = None
        try:
            spec = parse(live).model_dump(mode="json", by_alias=True, exclude_none=True)
        except ValueError as exc:  # another writer's spec that servectl would refuse
            spec_error = str(exc)
        return protocol.Description(
            namespace=namespace,
            name=name,
            document=listed.document,
            spec=spec,
            status=listed.status,
            events=found,
            no_status="no status yet: the controller has not reconciled it (is servectl's "
            f"controller running in the cluster? {self.kubectl(None, *CONTROLLER_PODS)})",
            spec_error=spec_error,
        )

    def await_endpoints(
        self, namespace: str, name: str, timeout_s: float
    ) -> protocol.Endpoints | None:
        """No ports on this machine: the Gateway routes the service (an HTTPRoute NAME
        and a GRPCRoute NAME-grpc)."""
        command = self.kubectl(namespace, "get", "httproute,grpcroute")
        raise protocol.Elsewhere(
            f"{namespace}/{name} answers through the cluster's Gateway; its routes: {command}",
            command,
        )

    def last_cycle(self, namespace: str, name: str) -> protocol.LastCycle | None:
        """The decision the cluster's controller wrote in status; the per-cycle signals
        and each signal's proposal are the local runtime's only."""
        listed = resource_docs.row(self.object(namespace, name))
        status = listed.status
        auto = status.get("autoscaling") or {}
        if not auto:
            return None
        bounds = (listed.spec.get("spec") or {}).get("autoscaling") or {}
        return protocol.LastCycle(
            "status",
            {
                "source": "status",
                "observedGeneration": status.get("observedGeneration"),
                "autoscaling": auto,
                "min": bounds.get("minReplicas"),
                "max": bounds.get("maxReplicas"),
                "mode": bounds.get("mode", "active"),
                "revisions": status.get("revisions", []),
                "conditions": [
                    c for c in status.get("conditions", []) if c.get("type") in EXPLAIN_CONDITIONS
                ],
            },
        )

    def no_decision(self, namespace: str, name: str) -> ClientError:
        return ClientError(
            f"no decision recorded for {namespace}/{name} yet (is servectl's controller "
            "running in the cluster?)",
            environment=True,
        )

    def cycles(self, namespace: str, name: str | None) -> dict[str, protocol.LastCycle]:
        """Per-revision signals are not kept in a cluster: kubectl top shows the pods."""
        selector = f"{obj.LABEL_SERVICE}={name}" if name is not None else obj.LABEL_SERVICE
        raise _elsewhere("top", self.kubectl(namespace, "top", "pods", "-l", selector))

    def rollout_history(self, namespace: str, name: str) -> protocol.RolloutHistory:
        """The current (or last) rollout from status (:data:`HISTORY_NOTE`)."""
        records = self.history(namespace, name)
        return protocol.RolloutHistory(
            records=records,
            rollouts=[
                protocol.RolloutRecord(
                    id=None,
                    time=None,
                    from_version=r.get("stableVersion"),
                    to_version=r.get("canaryVersion"),
                    phase=str(r.get("phase")),
                    message=str(r.get("message", "")),
                )
                for r in records
            ],
            source="status.rollout",
            note=HISTORY_NOTE,
        )

    def event_batches(
        self, namespace: str, name: str, *, limit: int, follow: bool
    ) -> Iterator[list[protocol.EventRecord]]:
        """Event names are not ordered: each read is the newest ``limit``, less those seen
        (by name, count and time)."""
        seen: set[tuple[str | int, int, float]] = set()

        def fresh() -> list[protocol.EventRecord]:
            batch = [
                e
                for e in self.events(namespace, name, limit=limit)
                if (e.id, e.count, e.time) not in seen
            ]
            seen.update((e.id, e.count, e.time) for e in batch)
            return batch

        self.require(namespace, name)
        yield fresh()
        while follow:
            self._sleep(self.poll_s)
            yield fresh()

    def logs(
        self, namespace: str, name: str, *, replica: str | None, tail: int, follow: bool = False
    ) -> list[protocol.LogTail]:
        """The pods' logs are the cluster's: kubectl logs shows them (``-f`` to follow)."""
        args = (
            ["logs", replica, "--all-containers", f"--tail={tail}"]
            if replica is not None
            else [
                "logs",
                "-l",
                f"{obj.LABEL_SERVICE}={name}",
                "--all-containers",
                "--prefix",
                f"--tail={tail}",
            ]
        )
        raise _elsewhere("logs", self.kubectl(namespace, *args, *(["-f"] if follow else [])))

    def follow_logs(
        self, namespace: str, name: str, *, replica: str | None
    ) -> Iterator[list[protocol.LogTail]]:
        """As :meth:`logs` with ``follow``: kubectl logs -f follows the pods."""
        self.logs(namespace, name, replica=replica, tail=10, follow=True)  # raises Elsewhere
        return iter(())

    def replica_statuses(self, namespace: str, name: str | None) -> list[protocol.ReplicaStatus]:
        """The replicas are the cluster's pods (``kubectl get pods`` shows their restarts)."""
        return []


def _elsewhere(verb: str, command: str) -> protocol.Elsewhere:
    return protocol.Elsewhere(
        f"servectl {verb} reads the local runtime; on a cluster use:\n  {command}", command
    )


def _in_namespace(resource: Any, namespace: str, flag: str | None) -> Any:
    """``resource`` placed in the namespace it names, else ``namespace`` (-n or the
    context's); a file's namespace that -n contradicts is refused, as kubectl does."""
    meta = resource.metadata
    if "namespace" in meta.model_fields_set:
        if flag is not None and flag != meta.namespace:
            raise ClientError(
                f"{resource.kind} {meta.name}: metadata.namespace is {meta.namespace} but -n "
                f"says {flag}; drop one of them"
            )
        return resource
    return resource.model_copy(
        update={"metadata": meta.model_copy(update={"namespace": namespace})}
    )
