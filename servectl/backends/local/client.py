"""What the CLI does to the local runtime: the same verbs the Kubernetes backend will offer.

The CLI never talks to the controller process: it writes the store (specs, the command
queue) and reads it back (status, events, rollout history), and the controller picks the
change up at its next tick. Every write validates first and changes nothing on error, so
a bad spec, a broken CEL policy or a version that is not on disk leaves the running
services as they are.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servectl.api import models
from servectl.backends.local.paths import Paths
from servectl.backends.local.record import ServiceRecord
from servectl.backends.local.store import Service, Store, StoredEvent
from servectl.backends.local.versions import ModelPathError, check_version
from servectl.controller import state as state_codec
from servectl.controller.decide import LoopState
from servectl.controller.spec import PolicySpecError, policy_for
from servectl.rollout.machine import Op

HEARTBEAT_STALE_S = 5.0
"""A controller whose last tick is older than this is reported as not running."""


class ClientError(ValueError):
    """A request the runtime refuses; the message names the field or the fix."""


@dataclass(frozen=True)
class Deployed:
    namespace: str
    name: str
    generation: int
    created: bool
    rollout_to: int | None  # the version a rollout was started to, if any


@dataclass(frozen=True)
class ControllerInfo:
    pid: int | None
    alive: bool
    last_tick: float | None
    tick_seconds: float | None
    errors: Mapping[str, str]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


class LocalClient:
    """The local runtime's store, seen from the CLI."""

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
        alive = pid is not None and _pid_alive(pid)
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
        while _pid_alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)
        return True

    # -- specs

    def deploy(
        self,
        service: models.ModelService,
        policies: Sequence[models.ScalingPolicy] = (),
        *,
        base_dir: Path | None = None,
    ) -> Deployed:
        """Create or update a service (and the ScalingPolicies it may refer to).

        Checks before writing anything: the model path has the version (the latest when
        none is given, which is then written into the spec), the CEL policy compiles, and
        on an update whose version changed, a rollout to it is queued."""
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
        for policy in policies:
            self.put_policy(policy)
        doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
        existing = self.store.get_spec(meta.namespace, meta.name)
        rollout_to: int | None = None
        if existing is not None:
            current = self._serving_version(meta.namespace, meta.name, existing)
            if current is not None and version != current:
                rollout_to = version
        generation = self.store.put_spec(meta.namespace, meta.name, doc)
        if rollout_to is not None:
            self.store.enqueue_command(meta.namespace, meta.name, str(Op.START), rollout_to)
        return Deployed(meta.namespace, meta.name, generation, existing is None, rollout_to)

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
        return {
            name: models.ScalingPolicy.model_validate(doc)
            for name, doc in (self.store.get_setting("policies") or {}).items()
        }

    def get(self, namespace: str, name: str) -> models.ModelService:
        row = self.store.get_spec(namespace, name)
        if row is None:
            raise ClientError(self._not_found(namespace, name))
        return models.ModelService.model_validate(row.spec)

    def _not_found(self, namespace: str, name: str) -> str:
        names = [s.name for s in self.store.list_services(namespace)]
        known = f"; services in {namespace}: {', '.join(names)}" if names else ""
        return f"no ModelService {name!r} in namespace {namespace!r}{known} (deploy it first)"

    def services(self, namespace: str | None = None) -> list[Service]:
        return self.store.list_services(namespace)

    def delete(self, namespace: str, name: str) -> None:
        if not self.store.delete_service(namespace, name):
            raise ClientError(self._not_found(namespace, name))

    def scale(
        self,
        namespace: str,
        name: str,
        *,
        replicas: int | None = None,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
    ) -> models.ModelService:
        """Change the replica bounds (``replicas`` pins both)."""
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
            updated = models.ModelService.model_validate(doc)
        except ValueError as exc:
            raise ClientError(f"spec.autoscaling: {exc}") from None
        self.store.put_spec(namespace, name, doc)
        return updated

    # -- rollouts

    def rollout(self, namespace: str, name: str, op: Op, version: int | None = None) -> int:
        """Queue a rollout command for the controller's next tick; returns its id."""
        service = self.get(namespace, name)
        if op is Op.START:
            if version is None:
                raise ClientError("rollout start needs --version N (the version to roll out)")
            try:
                check_version(Path(service.spec.model.base_path), version)
            except ModelPathError as exc:
                raise ClientError(str(exc).replace("spec.model.version", "--version")) from None
            doc = service.model_dump(mode="json", by_alias=True, exclude_none=True)
            doc["spec"]["model"]["version"] = version
            self.store.put_spec(namespace, name, doc)
        return self.store.enqueue_command(namespace, name, str(op), version)

    def loop_state(self, namespace: str, name: str) -> LoopState | None:
        text = self.store.get_loop_state(namespace, name)
        if text is None:
            return None
        state = state_codec.loads(text)
        return state if isinstance(state, LoopState) else None

    def status(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get_status(namespace, name)

    def record(self, namespace: str, name: str) -> ServiceRecord | None:
        data = self.store.get_runtime(namespace, name)
        return ServiceRecord.from_dict(data) if data is not None else None

    def events(
        self, namespace: str, name: str, *, since_id: int | None = None, limit: int = 100
    ) -> list[StoredEvent]:
        return self.store.events(namespace, name, since_id=since_id, limit=limit)

    def history(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [
            {"id": r.id, "time": r.time, **r.record}
            for r in self.store.rollout_history(namespace, name)
        ]

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
