"""What the CLI does to the local runtime: :class:`servectl.backends.client.ServiceClient`
over the store.

The CLI never talks to the controller process: it writes the store (specs, the command
queue) and reads it back (status, the last cycle, events, rollout history), and the
controller picks the change up at its next tick. Every write validates first and changes
nothing on error, so a bad spec, a broken CEL policy or a version that is not on disk
leaves the running services as they are.

The reads (``get``, ``describe``, ``explain``, ``top``, ``events``, ``rollout status``)
take the spec and status as the store holds them: they import no resource model, no
policy and no controller, so ``servectl get`` starts fast; the writes import what they
check with when they are called.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl import processes
from servectl.backends import client as protocol
from servectl.backends.client import ClientError as ClientError  # the CLI catches it here too
from servectl.backends.client import Deployed as Deployed
from servectl.backends.local.paths import Paths
from servectl.backends.local.record import ServiceRecord
from servectl.backends.local.store import Service, Store, StoredEvent
from servectl.backends.local.versions import ModelPathError, check_version

if TYPE_CHECKING:
    from servectl.api import models
    from servectl.controller.decide import LoopState
    from servectl.rollout.machine import Op

HEARTBEAT_STALE_S = 5.0
"""A controller whose last tick is older than this is reported as not running."""
DEFAULT_NAMESPACE = "default"
POLL_S = 1.0
"""How often --watch and --follow read the store (the controller ticks every second)."""
NO_STATUS = "no status yet: the controller has not reconciled it (is it up? `servectl status`)"
NO_ENDPOINTS = "not given yet: the controller gives a service its ports at its next tick"
ENDPOINTS_POLL_S = 0.1
"""How often ``deploy`` looks for the ports of the service it created."""


@dataclass(frozen=True)
class Stale:
    """The services' status is the controller's last word, and it no longer speaks."""

    last_tick: float  # seconds since the epoch
    note: str  # what to tell the user


@dataclass(frozen=True)
class ControllerInfo:
    pid: int | None
    alive: bool
    last_tick: float | None
    tick_seconds: float | None
    errors: Mapping[str, str]


class LocalClient:
    """The local runtime's store, seen from the CLI (a
    :class:`~servectl.backends.client.ServiceClient`)."""

    namespace = DEFAULT_NAMESPACE
    poll_s = POLL_S

    def __init__(self, state_dir: Path) -> None:
        self.paths = Paths(Path(state_dir).expanduser().resolve())
        self.store = Store.open(self.paths.store)

    def close(self) -> None:
        self.store.close()

    # -- the controller

    def controller(self) -> ControllerInfo:
        pid: int | None = None
        try:
            pid = int(self.paths.pid.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pid = None
        beat = self.store.get_setting("heartbeat") or {}
        alive = pid is not None and processes.alive(pid)
        return ControllerInfo(
            pid=pid if alive else None,
            alive=alive,
            last_tick=beat.get("time"),
            tick_seconds=beat.get("tickSeconds"),
            errors=beat.get("errors") or {},
        )

    def stop_controller(self, timeout_s: float = 60.0) -> bool:
        """SIGTERM the controller and wait for it to exit; False if none was running."""
        info = self.controller()
        if info.pid is None:
            return False
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while processes.alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if processes.alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
        return True

    def stale(self) -> Stale | None:
        """Why what the store says of the services may no longer hold: the controller that
        writes it has run (its heartbeat is there) but is not running now, or has not
        ticked for :data:`HEARTBEAT_STALE_S`. None: it is up, or has never run."""
        info = self.controller()
        if info.last_tick is None:
            return None
        age = time.time() - info.last_tick
        if info.alive and age <= HEARTBEAT_STALE_S:
            return None
        what = (
            f"the controller (pid {info.pid}) has not ticked for {age:.0f} s"
            if info.alive
            else "the controller is not running"
        )
        return Stale(
            last_tick=info.last_tick,
            note=f"{what}: READY, WEIGHTS and ROLLOUT are as it last saw them, {age:.0f} s "
            "ago, not what runs now; `servectl status` says more, `servectl up` starts it",
        )

    def controller_warning(self) -> str | None:
        if self.controller().alive:
            return None
        return "note: the controller is not running; start it with `servectl up`"

    # -- specs

    def model_source(self, model_path: str, model_name: str | None) -> dict[str, Any]:
        """A directory on this machine: its absolute path, and its name for the model's."""
        local_path = Path(model_path)
        return {
            "name": model_name or local_path.resolve().name,
            "basePath": str(local_path.expanduser().resolve()),
        }

    def deploy(
        self,
        service: models.ModelService,
        policies: Sequence[models.ScalingPolicy] = (),
        *,
        base_dir: Path | None = None,
    ) -> Deployed:
        """Create or update a service (and the ScalingPolicies it may refer to).

        Checks before writing anything: the model path has the version (the latest when
        none is given, which is then written into the spec), the CEL policy compiles and
        works on a plain cycle, and on an update whose version changed, a rollout to it is
        queued."""
        from servectl.api import validation
        from servectl.controller.spec import PolicySpecError, policy_for
        from servectl.rollout.machine import Op

        meta, spec = service.metadata, service.spec
        base = Path(spec.model.base_path).expanduser()
        if not base.is_absolute():
            base = ((base_dir or Path.cwd()) / base).resolve()
        try:
            version = check_version(base, spec.model.version)
        except ModelPathError as exc:
            raise ClientError(str(exc)) from None
        spec = spec.model_copy(
            update={
                "model": spec.model.model_copy(update={"base_path": str(base), "version": version})
            }
        )
        service = service.model_copy(update={"spec": spec})
        library = dict(self.policies())
        library.update({p.metadata.name: p for p in policies})
        try:
            policy_for(service, library)
        except PolicySpecError as exc:
            raise ClientError(str(exc)) from None
        probed = validation.policy_issues(service, library)
        if probed:
            raise ClientError(str(validation.SpecError(probed)))
        for policy in policies:
            self.put_policy(policy)
        doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
        existing = self.store.get_spec(meta.namespace, meta.name)
        created = _created(existing)
        if created is not None:
            doc["metadata"]["creationTimestamp"] = created
        rollout_to: int | None = None
        if existing is not None:
            current = self._serving_version(meta.namespace, meta.name, existing)
            if current is not None and version != current:
                rollout_to = version
        generation = self.store.put_spec(meta.namespace, meta.name, doc)
        if rollout_to is not None:
            self.store.enqueue_command(meta.namespace, meta.name, str(Op.START), rollout_to)
        notes: tuple[str, ...] = ()
        if spec.runtime.pod is not None:
            notes = (
                "spec.runtime.pod is for Kubernetes (pods): the local runtime runs each replica "
                "as a process and ignores it",
            )
        return Deployed(
            meta.namespace,
            meta.name,
            generation,
            existing is None,
            rollout_to,
            queued=rollout_to is not None,
            notes=notes,
        )

    def deploy_resources(
        self,
        services: Sequence[models.ModelService],
        policies: Sequence[models.ScalingPolicy],
        *,
        base_dir: Path,
        namespace: str | None,
    ) -> Iterator[Deployed]:
        """Each service in turn, as :meth:`deploy`; a refused one stops the rest, its
        error naming it. Each resource stays in its own namespace (``namespace`` names
        the flag form's, which is in its metadata already)."""
        del namespace
        for service in services:
            try:
                yield self.deploy(service, policies, base_dir=base_dir)
            except ClientError as exc:
                raise ClientError(f"{service.metadata.name}: {exc}") from None

    def _serving_version(self, namespace: str, name: str, existing: Service) -> int | None:
        """The version the service runs or is rolling out to (the spec's otherwise)."""
        state = self.loop_state(namespace, name)
        if state is not None:
            rollout = state.rollout
            return rollout.canary if rollout.canary is not None else rollout.stable
        version = existing.spec.get("spec", {}).get("model", {}).get("version")
        return int(version) if version is not None else None

    def put_policy(self, policy: models.ScalingPolicy) -> None:
        policies = dict(self.store.get_setting("policies") or {})
        policies[policy.metadata.name] = policy.model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        self.store.put_setting("policies", policies)

    def policies(self) -> dict[str, models.ScalingPolicy]:
        from servectl.api import models

        return {
            name: models.ScalingPolicy.model_validate(doc)
            for name, doc in (self.store.get_setting("policies") or {}).items()
        }

    def get(self, namespace: str, name: str) -> models.ModelService:
        from servectl.api import models

        return models.ModelService.model_validate(self._spec(namespace, name).spec)

    def _spec(self, namespace: str, name: str) -> Service:
        """The stored spec, as written (no model built)."""
        row = self.store.get_spec(namespace, name)
        if row is None:
            raise ClientError(self._not_found(namespace, name))
        return row

    def require(self, namespace: str, name: str) -> None:
        self._spec(namespace, name)

    def _not_found(self, namespace: str, name: str) -> str:
        names = [s.name for s in self.store.list_services(namespace)]
        known = f"; services in {namespace}: {', '.join(names)}" if names else ""
        return f"no ModelService {name!r} in namespace {namespace!r}{known} (deploy it first)"

    def services(self, namespace: str | None = None) -> list[Service]:
        return self.store.list_services(namespace)

    def delete(self, namespace: str, name: str) -> None:
        if not self.store.delete_service(namespace, name):
            raise ClientError(self._not_found(namespace, name))

    def await_deletion(self, namespace: str, name: str, timeout_s: float) -> None:
        """Nothing to wait for: the store forgets a service at once (the controller
        stops its replicas at its next tick)."""

    def scale(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
    ) -> models.ModelService:
        """Change the replica bounds (``replicas`` pins both); refused, naming the field
        and the fix, as ``deploy`` would refuse them (``servectl.api.validation``)."""
        from servectl.api import validation

        service = self.get(namespace, name)
        auto = service.spec.autoscaling
        low = replicas if replicas is not None else min_replicas
        high = replicas if replicas is not None else max_replicas
        low = auto.min_replicas if low is None else low
        high = auto.max_replicas if high is None else high
        doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
        doc["spec"]["autoscaling"]["minReplicas"] = low
        doc["spec"]["autoscaling"]["maxReplicas"] = high
        try:
            updated = validation.load_model_service(doc)
        except validation.SpecError as exc:
            raise ClientError(str(exc)) from None
        self.store.put_spec(namespace, name, doc)
        return updated

    # -- rollouts

    def rollout(self, namespace: str, name: str, op: Op, version: int | None = None) -> int:
        """Queue a rollout command for the controller's next tick; returns its id.

        Refused at once, writing nothing, when the rollout's state as the controller last
        wrote it (with the commands queued ahead applied) already refuses it."""
        from servectl.controller.spec import service_spec
        from servectl.rollout.machine import Op

        service = self.get(namespace, name)
        if op is Op.START:
            if version is None:
                raise ClientError("rollout start needs --version N (the version to roll out)")
            try:
                check_version(Path(service.spec.model.base_path), version)
            except ModelPathError as exc:
                raise ClientError(str(exc).replace("spec.model.version", "--version")) from None
        ahead = []
        for queued in self.store.pending_commands(namespace, name):
            try:
                ahead.append((Op(queued.op), queued.version))
            except ValueError:
                continue  # the controller ignores it too
        refused = protocol.refusal(
            self.status(namespace, name),
            service_spec(service).rollout,
            ahead,
            op,
            version,
            time.time(),
        )
        if refused is not None:
            raise ClientError(refused)
        if op is Op.START:
            doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
            doc["spec"]["model"]["version"] = version
            self.store.put_spec(namespace, name, doc)
        return self.store.enqueue_command(namespace, name, str(op), version)

    def rollout_command(
        self, namespace: str, name: str, op: Op, version: int | None = None
    ) -> protocol.RolloutRequest:
        ident = self.rollout(namespace, name, op, version)
        return protocol.RolloutRequest(op, version, str(ident), queued=True)

    def command_outcome(
        self, namespace: str, name: str, request: protocol.RolloutRequest
    ) -> protocol.CommandOutcome:
        """From the command's row: the controller records the outcome at the end of the
        cycle that took it (``Store.settle_commands``)."""
        row = None if request.id is None else self.store.command(namespace, name, int(request.id))
        if row is None:
            return protocol.CommandOutcome(
                "refused", f"{namespace}/{name} was deleted: its commands went with it"
            )
        if row.outcome == "done":
            return protocol.CommandOutcome("done", row.message)
        if row.outcome is not None:  # refused, or failed with its cycle
            return protocol.CommandOutcome("refused", row.message)
        if self.controller().alive:
            return protocol.CommandOutcome("waiting")
        return protocol.CommandOutcome("stopped" if row.taken is None else "lost")

    def loop_state(self, namespace: str, name: str) -> LoopState | None:
        from servectl.controller import state as state_codec
        from servectl.controller.decide import LoopState

        text = self.store.get_loop_state(namespace, name)
        if text is None:
            return None
        state = state_codec.loads(text)
        return state if isinstance(state, LoopState) else None

    # -- reads

    def status(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get_status(namespace, name)

    def record(self, namespace: str, name: str) -> ServiceRecord | None:
        data = self.store.get_runtime(namespace, name)
        return ServiceRecord.from_dict(data) if data is not None else None

    def _endpoints(self, namespace: str, name: str) -> protocol.Endpoints | None:
        record = self.record(namespace, name)
        if record is None:
            return None
        return protocol.Endpoints(record.rest_port, record.grpc_port)

    def listing_namespace(self, namespace: str | None, every: bool) -> str | None:
        """-n, else every namespace (as -A)."""
        return None if every else namespace

    def list_services(
        self, namespace: str | None, name: str | None = None
    ) -> list[protocol.ServiceSummary]:
        rows = self.services(namespace)
        if name is not None:
            rows = [r for r in rows if r.name == name]
            if not rows:
                raise ClientError(self._not_found(namespace or DEFAULT_NAMESPACE, name))
        stale = self.stale()
        return [
            protocol.ServiceSummary(
                namespace=r.namespace,
                name=r.name,
                spec=r.spec,
                status=_as_last_seen(self.status(r.namespace, r.name) or {}, stale),
                generation=r.generation,
                # kubectl's AGE: since creation (a service from before servectl kept
                # its creation time: since its spec's last write).
                updated=protocol.timestamp(r.spec.get("metadata", {}).get("creationTimestamp"))
                or r.updated,
                endpoints=self._endpoints(r.namespace, r.name),
                stale=None if stale is None else stale.note,
            )
            for r in rows
        ]

    def no_services(self, listed: str | None, namespace: str) -> str:
        return "no services; deploy one with `servectl deploy NAME --model-path DIR`"

    def describe(self, namespace: str, name: str, *, events: int) -> protocol.Description:
        # The spec as deploy, scale and rollout wrote it (the model's own dump): no model
        # is built to show it.
        row = self._spec(namespace, name)
        status = _as_last_seen(self.status(namespace, name) or {}, self.stale())
        endpoints = self._endpoints(namespace, name)
        replicas = self.replica_statuses(namespace, name)
        document = protocol.resource_document(
            row.spec, status, generation=row.generation, endpoints=endpoints
        )
        if replicas:  # each one's process, restarts and last exit, as containerStatuses
            document["status"]["replicaStatuses"] = [r.to_record() for r in replicas]
        return protocol.Description(
            namespace=namespace,
            name=name,
            document=document,
            spec=row.spec,
            status=status,
            events=[_event(e) for e in self.events(namespace, name, limit=events)],
            no_status=NO_STATUS,
            endpoints=endpoints,
            no_endpoints=NO_ENDPOINTS,
            replicas=replicas,
        )

    def await_endpoints(
        self, namespace: str, name: str, timeout_s: float
    ) -> protocol.Endpoints | None:
        """The service's front ports, once the controller has given them (at its first
        tick with the service); waits only while a controller runs."""
        self.require(namespace, name)
        deadline = time.monotonic() + timeout_s
        while True:
            found = self._endpoints(namespace, name)
            if found is not None or time.monotonic() >= deadline:
                return found
            if not self.controller().alive:
                return None
            time.sleep(ENDPOINTS_POLL_S)

    def last_cycle(self, namespace: str, name: str) -> protocol.LastCycle | None:
        self.require(namespace, name)
        cycle = self.store.get_cycle(namespace, name)
        return None if cycle is None else protocol.LastCycle("cycle", cycle)

    def no_decision(self, namespace: str, name: str) -> ClientError:
        return ClientError(
            f"no decision recorded for {namespace}/{name} yet (is the controller up?)",
            environment=True,
        )

    def cycles(self, namespace: str, name: str | None) -> dict[str, protocol.LastCycle]:
        found = {}
        for row in self.services(namespace):
            if name is not None and row.name != name:
                continue
            cycle = self.store.get_cycle(row.namespace, row.name)
            if cycle is not None:
                found[row.name] = protocol.LastCycle("cycle", cycle)
        return found

    def events(
        self, namespace: str, name: str, *, since_id: int | None = None, limit: int = 100
    ) -> list[StoredEvent]:
        return self.store.events(namespace, name, since_id=since_id, limit=limit)

    def event_batches(
        self, namespace: str, name: str, *, limit: int, follow: bool
    ) -> Iterator[list[protocol.EventRecord]]:
        self.require(namespace, name)
        batch = self.events(namespace, name, limit=limit)
        yield [_event(e) for e in batch]
        last = batch[-1].id if batch else 0
        while follow:
            time.sleep(self.poll_s)
            batch = self.events(namespace, name, since_id=last)
            if batch:
                last = batch[-1].id
            yield [_event(e) for e in batch]

    def history(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [
            {"id": r.id, "time": r.time, **r.record}
            for r in self.store.rollout_history(namespace, name)
        ]

    def rollout_history(self, namespace: str, name: str) -> protocol.RolloutHistory:
        """Every finished (or aborted) rollout the store kept, oldest first."""
        records = self.history(namespace, name)
        return protocol.RolloutHistory(
            records=records,
            rollouts=[
                protocol.RolloutRecord(
                    id=r["id"],
                    time=r["time"],
                    from_version=r.get("fromVersion", r.get("stableVersion")),
                    to_version=r.get("toVersion"),
                    phase=str(r.get("phase")),
                    message=str(r.get("message", "")),
                )
                for r in records
            ],
        )

    def replicas(self) -> list[dict[str, Any]]:
        """The supervisor's replica records (``replicas/<pod>/replica.json``)."""
        import json

        found = []
        for path in sorted(self.paths.replicas.glob("*/replica.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def replica_statuses(self, namespace: str, name: str | None) -> list[protocol.ReplicaStatus]:
        """From the supervisor's records (``replicas/<pod>/replica.json``), by pod."""
        found = []
        for record in self.replicas():
            spec = record.get("spec") or {}
            if spec.get("namespace") != namespace or name not in (None, spec.get("service")):
                continue
            pid = record.get("pid")
            found.append(
                protocol.ReplicaStatus(
                    name=str(spec.get("pod")),
                    revision=str(spec.get("revision")),
                    phase=str(record.get("phase") or ("STARTING" if pid else "BACKOFF")),
                    pid=pid,
                    rest_port=record.get("rest_port") if pid else None,
                    grpc_port=record.get("grpc_port") if pid else None,
                    restarts=int(record.get("restarts") or 0),
                    last_exit=record.get("last_exit"),
                )
            )
        return sorted(found, key=lambda r: r.name)

    def _pods(self, namespace: str, name: str) -> list[str]:
        """The pods the supervisor runs for the service."""
        return [
            r["spec"]["pod"]
            for r in self.replicas()
            if r.get("spec", {}).get("service") == name and r["spec"].get("namespace") == namespace
        ]

    def logs(
        self, namespace: str, name: str, *, replica: str | None, tail: int, follow: bool = False
    ) -> list[protocol.LogTail]:
        """From ``logs/<pod>.log`` in the state directory: the replicas the supervisor
        runs, else every log the service's replicas left (``follow``: see follow_logs)."""
        pods = self._pods(namespace, name)
        logs_dir = self.paths.logs
        if replica is not None:
            pods = [replica]
        if not pods:
            pods = sorted(p.stem for p in logs_dir.glob(f"{name}-v*.log"))
        if not pods:
            raise ClientError(
                f"no replicas of {namespace}/{name} have logs in {logs_dir}", environment=True
            )
        tails = []
        for pod in sorted(pods):
            try:
                lines = (logs_dir / f"{pod}.log").read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                lines = ["(no log)"]
            tails.append(protocol.LogTail(pod, lines))
        return tails

    def follow_logs(
        self, namespace: str, name: str, *, replica: str | None
    ) -> Iterator[list[protocol.LogTail]]:
        """New lines of the logs :meth:`logs` showed, and of replicas started since, read
        every :attr:`poll_s` (``log_follow``)."""
        from servectl.backends.local.log_follow import LogFollower

        def pods() -> list[str]:
            return [replica] if replica is not None else self._pods(namespace, name)

        follower = LogFollower(self.paths.logs, pods())
        while True:
            time.sleep(self.poll_s)
            yield follower.read(pods())


def _created(existing: Service | None) -> str | None:
    """``metadata.creationTimestamp`` as Kubernetes sets it: now for a new service, else
    what it was (a service deployed before servectl kept one has none)."""
    if existing is None:
        return datetime.fromtimestamp(time.time(), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (existing.spec.get("metadata") or {}).get("creationTimestamp")


STALE_REASON = "ControllerNotRunning"
"""``Ready=Unknown``'s reason while the controller is down: a kubelet that stops posting
leaves its Node ``Ready=Unknown`` the same way (``NodeStatusUnknown``)."""


def _as_last_seen(status: dict[str, Any], stale: Stale | None) -> dict[str, Any]:
    """``status`` as reads show it: while the controller is down (``stale``), its
    ``Ready`` condition is ``Unknown`` (reason :data:`STALE_REASON`, since the last tick),
    so ``get -o json`` says the rest is as last seen; the store is left as it is."""
    if stale is None or not status:
        return status
    from datetime import UTC, datetime

    seen = datetime.fromtimestamp(stale.last_tick, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "Unknown",
        "reason": STALE_REASON,
        "message": f"the controller is not ticking (last tick {seen}): this status is as "
        "it last saw it; `servectl up` starts it",
        "lastTransitionTime": seen,
    }
    others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    return {**status, "conditions": [ready, *others]}


def _event(event: StoredEvent) -> protocol.EventRecord:
    return protocol.EventRecord(event.id, event.time, event.type, event.reason, event.message)
