"""The service verbs' one seam: the ``ServiceClient`` protocol and the values it returns.

``servectl deploy``, ``get``, ``describe``, ``explain``, ``top``, ``scale``, ``delete``,
``events``, ``logs`` and ``rollout ...`` are written once, against this protocol
(``servectl/cli/*_cmd.py``, ``rollout_verbs.py``); two classes implement it:

- :class:`servectl.backends.local.client.LocalClient`: the local runtime's store;
- :class:`servectl.backends.kubernetes.client.KubeClient`: ModelService resources in a
  cluster (``--context``/``--kubeconfig``/``$SERVECTL_CONTEXT``).

This module is not a backend: it sits in ``servectl.backends`` so that both backends and
the CLI may import it (layers: cli > backends), while ``backends.local`` and
``backends.kubernetes`` never import each other. Where a runtime cannot do what a verb
asks (``logs`` and ``top`` on a cluster), its method raises :class:`Elsewhere`, whose
message names the command to use instead; where the two runtimes know different things
(the last cycle: the loop's own record locally, the decision in status on a cluster),
the value says which it is. No verb asks which runtime it talks to.

It imports nothing heavy (no pydantic models, no controller): ``servectl get`` imports
it, and must start fast (docs/benchmarks.md, "CLI latency").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from servectl.api import models
    from servectl.rollout.machine import Op


class ClientError(ValueError):
    """A request the runtime refuses; the message names the field or the fix.

    ``environment``: the runtime, not the input, is the problem (a cluster unreachable,
    credentials, CRDs missing; no decision recorded yet), so the CLI exits 1 rather than
    2 (bad input)."""

    def __init__(self, message: str, *, environment: bool = False) -> None:
        super().__init__(message)
        self.environment = environment

    @property
    def exit_code(self) -> int:
        return 1 if self.environment else 2


class Elsewhere(ClientError):
    """This runtime does not do what the verb asks; ``command`` does it (exit 1)."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message, environment=True)
        self.command = command


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Deployed:
    """One resource a deploy wrote: a ModelService, or a ScalingPolicy where policies
    are resources of their own (a cluster; the local runtime keeps them as a library)."""

    namespace: str
    name: str
    generation: int
    created: bool
    rollout_to: int | None  # the version a rollout was started (or requested) to, if any
    changed: bool = True  # False: the runtime already had exactly this
    queued: bool = False  # the rollout is a queued command (else: the spec's version asks)
    kind: str = "ModelService"
    notes: tuple[str, ...] = ()  # what the user should know: a part of the spec ignored here


@dataclass(frozen=True)
class Endpoints:
    """Where a service answers on this machine (the local runtime's front ports)."""

    rest_port: int
    grpc_port: int
    host: str = "127.0.0.1"

    @property
    def rest_url(self) -> str:
        """TF Serving's REST API: add ``/v1/models/<model>``."""
        return f"http://{self.host}:{self.rest_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"


@dataclass(frozen=True)
class ServiceSummary:
    """One ModelService as ``get`` lists it: the resource, its status, its endpoints."""

    namespace: str
    name: str
    spec: dict[str, Any]  # the resource without status (and without server bookkeeping)
    status: dict[str, Any]
    generation: int
    updated: float  # seconds since the epoch: the spec's last write, or the creation time
    endpoints: Endpoints | None = None
    stale: str | None = None  # why the status may no longer hold (its controller is down)

    @property
    def document(self) -> dict[str, Any]:
        """The resource as ``get -o json|yaml`` prints it (:func:`resource_document`)."""
        return resource_document(
            self.spec, self.status, generation=self.generation, endpoints=self.endpoints
        )


@dataclass(frozen=True)
class EventRecord:
    """One event about a service, oldest first in a list; ``id`` orders them locally
    (an integer) and names them on a cluster (the Event's name)."""

    id: int | str
    time: float
    type: str
    reason: str
    message: str
    count: int = 1

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time,
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica as the local runtime's supervisor last recorded it (``describe``, ``top
    -o wide``): its process, ports, restarts and how its last process ended."""

    name: str  # the pod
    revision: str
    phase: str  # STARTING, READY, NOT_READY, BACKOFF, STOPPING
    pid: int | None
    rest_port: int | None
    grpc_port: int | None
    restarts: int
    last_exit: Mapping[str, Any] | None = None  # time, code, signal, reason

    def to_record(self) -> dict[str, Any]:
        """As ``describe -o json`` prints it: a pod's ``containerStatuses`` entry's words
        (``restartCount``, ``lastState.terminated``)."""
        record: dict[str, Any] = {
            "name": self.name,
            "revision": self.revision,
            "phase": self.phase,
            "pid": self.pid,
            "restPort": self.rest_port,
            "grpcPort": self.grpc_port,
            "restartCount": self.restarts,
        }
        if self.last_exit is not None:
            finished = self.last_exit.get("time")
            record["lastState"] = {
                "terminated": {
                    "exitCode": self.last_exit.get("code"),
                    "signal": self.last_exit.get("signal"),
                    "reason": self.last_exit.get("reason"),
                    "finishedAt": (
                        datetime.fromtimestamp(finished, UTC).isoformat()
                        if isinstance(finished, int | float)
                        else None
                    ),
                }
            }
        return record

    @property
    def exit_words(self) -> str:
        """The last exit in a few words (``signal 9``, ``code 1``), or ``-``."""
        if self.last_exit is None:
            return "-"
        if self.last_exit.get("signal") is not None:
            return f"signal {self.last_exit['signal']}"
        if self.last_exit.get("code") is not None:
            return f"code {self.last_exit['code']}"
        return "unknown"


@dataclass(frozen=True)
class Description:
    """What ``describe`` shows of one service."""

    namespace: str
    name: str
    document: dict[str, Any]  # what -o json|yaml prints: resource_document()
    spec: dict[str, Any] | None  # the resource as servectl reads it; None: it cannot
    status: dict[str, Any]
    events: list[EventRecord]
    no_status: str  # what to say when there is no status yet
    endpoints: Endpoints | None = None
    spec_error: str | None = None  # why servectl cannot read the spec
    no_endpoints: str | None = None  # what to say when endpoints is None; None: nothing
    replicas: list[ReplicaStatus] = field(default_factory=list)  # the local runtime's


@dataclass(frozen=True)
class LastCycle:
    """The last decision about a service, as ``explain`` and ``top`` show it.

    ``source`` says what it is: ``"cycle"``, the loop's own record of its last cycle (the
    signals seen, each signal's proposal, the decision, the bounds, the plan per
    revision: the local runtime keeps it); ``"status"``, what a cluster's controller
    wrote in status (the decision, the bounds, each revision's replicas and weight, the
    conditions that limit scaling)."""

    source: Literal["cycle", "status"]
    record: dict[str, Any]


@dataclass(frozen=True)
class RolloutRequest:
    """What a rollout command wrote: a queued command, a command annotation (``id``), or
    a new spec version (``id`` None, not queued)."""

    op: Op
    version: int | None
    id: str | None
    replaced: str | None = None  # a previous command not yet carried out, now replaced
    queued: bool = False  # in the local runtime's command queue


@dataclass(frozen=True)
class CommandOutcome:
    """What became of a rollout command the CLI wrote, as far as the runtime says now.

    ``state``: ``done`` (carried out; ``message`` says where the rollout stands),
    ``refused`` (``message``: the controller's reason), ``waiting`` (not decided yet, and
    a controller may still take it), ``stopped`` (not taken, and the controller is known
    to be down: it stays queued), ``lost`` (taken by a controller that stopped before it
    decided)."""

    state: Literal["done", "refused", "waiting", "stopped", "lost"]
    message: str = ""


@dataclass(frozen=True)
class RolloutRecord:
    """One rollout as ``rollout history`` lists it (None: the runtime does not know)."""

    id: int | None
    time: float | None
    from_version: Any
    to_version: Any
    phase: str
    message: str


@dataclass(frozen=True)
class RolloutHistory:
    """A service's rollouts, oldest first."""

    records: list[dict[str, Any]]  # what -o json|yaml prints
    rollouts: list[RolloutRecord]
    source: str | None = None  # where they come from, when it is not a kept history
    note: str | None = None  # what the user should know about them


@dataclass(frozen=True)
class LogTail:
    """The newest lines of one replica's log."""

    replica: str
    lines: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- pure helpers


def timestamp(value: Any) -> float | None:
    """An RFC 3339 time (``2025-01-31T10:00:00Z``, with or without fractions) as epoch s."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# The metadata ``get -o yaml`` shows, in this order, where set: what kubectl shows but
# managedFields (which kubectl hides too) and the empty lists a model dump leaves.
SHOWN_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "finalizers",
)


def public_status(status: Mapping[str, Any], endpoints: Endpoints | None = None) -> dict[str, Any]:
    """A service's status as users read it: without what only the controller reads back.

    Left out: ``loop`` (the loop state a cluster's controller saves there to resume),
    ``autoscaling.policyState`` (the policy's history: a pair of numbers per cycle for
    its stabilization window, surges, peaks) and ``rollout.state`` (the rollout
    machine's own record; its phase, step, versions, message, winner and verdicts stay).
    With ``endpoints`` (the local runtime), where the service answers:
    ``endpoints: {rest: http://127.0.0.1:8501, grpc: 127.0.0.1:8500}``."""
    shown = {k: v for k, v in status.items() if k != "loop"}
    for part, internal in (("autoscaling", "policyState"), ("rollout", "state")):
        if isinstance(shown.get(part), Mapping):
            shown[part] = {k: v for k, v in shown[part].items() if k != internal}
    if endpoints is not None:
        shown["endpoints"] = {"rest": endpoints.rest_url, "grpc": endpoints.grpc_address}
    return shown


def resource_document(
    resource: Mapping[str, Any],
    status: Mapping[str, Any],
    *,
    generation: int | None = None,
    endpoints: Endpoints | None = None,
) -> dict[str, Any]:
    """A ModelService as ``get -o json|yaml`` and ``describe -o json|yaml`` print it, on
    either runtime, in kubectl's shape: ``apiVersion``, ``kind``, ``metadata`` (name,
    namespace, generation, creationTimestamp, and labels, annotations and the API
    server's fields where set: :data:`SHOWN_METADATA`), ``spec`` and ``status``
    (:func:`public_status`). ``resource`` is the resource without status; ``generation``
    is the runtime's count where the resource does not carry it (the local store's)."""
    meta = dict(resource.get("metadata") or {})
    if generation is not None:
        meta["generation"] = generation
    return {
        "apiVersion": resource.get("apiVersion", "servectl.io/v1alpha1"),
        "kind": resource.get("kind", "ModelService"),
        "metadata": {k: meta[k] for k in SHOWN_METADATA if meta.get(k) not in (None, "", {}, [])},
        "spec": resource.get("spec") or {},
        "status": public_status(status, endpoints),
    }


def rollout_where(phase: str, step: int, message: str) -> str:
    """Where a rollout stands, in a line: ``Progressing step 1: analysing``."""
    if message.startswith(f"step {step}"):  # the machine's messages often say it already
        return f"{phase} {message}"
    return f"{phase} step {step}" + (f": {message}" if message else "")


def refusal(
    status: Mapping[str, Any] | None,
    rollout_spec: models.RolloutSpec,
    pending: Sequence[tuple[Op, int | None]],
    op: Op,
    version: int | None,
    now: float,
) -> str | None:
    """Why the rollout machine would refuse ``op`` now, or None: asked of the machine
    itself (``servectl.rollout.machine.command``, pure), on the rollout state the
    controller last wrote in ``status`` (``status.rollout.state``) with the commands
    still ``pending`` ahead of this one applied first, as its next cycle will. None as
    well when there is no state to judge by (no cycle yet): the controller judges."""
    from servectl.rollout import machine

    saved = ((status or {}).get("rollout") or {}).get("state")
    if not isinstance(saved, Mapping):
        return None
    try:
        state = machine.from_dict(saved)
    except (KeyError, TypeError, ValueError):
        return None  # a state from another servectl: the controller judges
    for queued_op, queued_version in pending:
        try:
            state = machine.command(state, queued_op, rollout_spec, now, version=queued_version)
        except machine.RolloutError:
            continue  # refused in its turn; this one is judged without it
    try:
        machine.command(state, op, rollout_spec, now, version=version)
    except machine.RolloutError as exc:
        return f"{op} refused: {exc}"
    return None


# --------------------------------------------------------------------------- the protocol


class ServiceClient(Protocol):
    """What the service verbs do to a runtime. Reads raise :class:`ClientError` for a
    service that does not exist (the message names how to list them)."""

    @property
    def namespace(self) -> str:
        """The namespace a verb works in when -n is omitted."""
        ...

    @property
    def poll_s(self) -> float:
        """How often ``--watch`` and ``--follow`` read again."""
        ...

    def close(self) -> None: ...

    # -- writes

    def model_source(self, model_path: str, model_name: str | None) -> dict[str, Any]:
        """``spec.model``'s name and basePath for ``deploy --model-path`` as this runtime
        reads a path: a directory on this machine, or a location in the cluster."""
        ...

    def deploy_resources(
        self,
        services: Sequence[models.ModelService],
        policies: Sequence[models.ScalingPolicy],
        *,
        base_dir: Path,
        namespace: str | None,
    ) -> Iterator[Deployed]:
        """Check, then write the policies and the services, yielding each resource
        written (:class:`Deployed`); ``namespace`` is -n as given, ``base_dir`` what
        relative paths are relative to. A refused service raises, naming it."""
        ...

    def controller_warning(self) -> str | None:
        """A note after a write when the controller that acts on it is known to be down."""
        ...

    def scale(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
    ) -> models.ModelService:
        """Change the replica bounds (``replicas`` pins both); the updated service."""
        ...

    def delete(self, namespace: str, name: str) -> None: ...

    def await_deletion(self, namespace: str, name: str, timeout_s: float) -> None:
        """Return once the service is gone; raise (naming what holds it) at the timeout."""
        ...

    def rollout_command(
        self, namespace: str, name: str, op: Op, version: int | None = None
    ) -> RolloutRequest:
        """Write a rollout command for the controller; raises :class:`ClientError` (exit
        2) without writing when the rollout's current state already refuses it
        (:func:`refusal`)."""
        ...

    def command_outcome(self, namespace: str, name: str, request: RolloutRequest) -> CommandOutcome:
        """What became of ``request`` so far (one read: the CLI polls it while it waits)."""
        ...

    # -- reads

    def listing_namespace(self, namespace: str | None, every: bool) -> str | None:
        """The namespace ``get`` lists for -n (``namespace``) and -A (``every``); None:
        every namespace."""
        ...

    def list_services(self, namespace: str | None, name: str | None = None) -> list[ServiceSummary]:
        """The services of ``namespace`` (None: all), by namespace and name; with
        ``name``, that one (an error when there is none)."""
        ...

    def no_services(self, listed: str | None, namespace: str) -> str:
        """What ``get`` says when it lists nothing (``listed``: the namespace listed)."""
        ...

    def require(self, namespace: str, name: str) -> None:
        """Raise the not-found error unless the service exists."""
        ...

    def status(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The service's status; None when none has been written."""
        ...

    def describe(self, namespace: str, name: str, *, events: int) -> Description: ...

    def await_endpoints(self, namespace: str, name: str, timeout_s: float) -> Endpoints | None:
        """Where the service answers on this machine: the ports the runtime gave it, or
        None while it has not yet (waiting up to ``timeout_s`` for a running controller
        to give them). A runtime that gives none (a cluster: its Gateway routes the
        service) raises :class:`Elsewhere`."""
        ...

    def last_cycle(self, namespace: str, name: str) -> LastCycle | None:
        """The last decision; None when the controller has recorded none yet."""
        ...

    def no_decision(self, namespace: str, name: str) -> ClientError:
        """The error ``explain`` reports when :meth:`last_cycle` is None."""
        ...

    def cycles(self, namespace: str, name: str | None) -> dict[str, LastCycle]:
        """Each service's last cycle with per-revision signals (what ``top`` shows), by
        service name; services without one are left out."""
        ...

    def rollout_history(self, namespace: str, name: str) -> RolloutHistory: ...

    def event_batches(
        self, namespace: str, name: str, *, limit: int, follow: bool
    ) -> Iterator[list[EventRecord]]:
        """The newest ``limit`` events, then (``follow``) each batch of new ones as it
        comes, read every :attr:`poll_s` seconds, until the caller stops."""
        ...

    def logs(
        self, namespace: str, name: str, *, replica: str | None, tail: int, follow: bool = False
    ) -> list[LogTail]:
        """The newest ``tail`` lines of each replica's log (or of ``replica``); ``follow``:
        the caller goes on with :meth:`follow_logs` (a cluster names ``kubectl logs -f``)."""
        ...

    def follow_logs(
        self, namespace: str, name: str, *, replica: str | None
    ) -> Iterator[list[LogTail]]:
        """After :meth:`logs`: the lines each replica's log gets from now on (and the logs
        of replicas started meanwhile), a batch every :attr:`poll_s` seconds, until the
        caller stops."""
        ...

    def replica_statuses(self, namespace: str, name: str | None) -> list[ReplicaStatus]:
        """The replicas of ``name`` (None: of every service in ``namespace``) as the
        runtime runs them; empty where it does not know them (a cluster: kubectl's pods)."""
        ...
