"""``servectl demo`` on the local runtime: the demo SavedModels exported, the runtime started
under ``--out/state`` (HAProxy, Prometheus, model servers as processes with CPU quotas),
``cost_model`` v1 deployed; then the story (servectl.demo.story) through HAProxy."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servectl.backends.local.client import LocalClient
from servectl.demo import report
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

NAMESPACE = "default"
COLD_START_S = 6  # a local replica serves ~5 s after it starts (docs/local-runtime.md)


def state_dir(settings: DemoSettings) -> Path:
    return settings.out / "state"


def service_doc(settings: DemoSettings) -> dict[str, Any]:
    """The demo's ModelService on the local runtime: the models under ``--out/models``."""
    return {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": SERVICE},
        "spec": {
            "model": {
                "name": MODEL,
                "basePath": str((settings.models / MODEL).resolve()),
                "version": 1,
            },
            "runtime": {"resources": {"cpu": settings.cpu, "memory": "1Gi"}},
            "autoscaling": autoscaling(settings, COLD_START_S),
            "rollout": ROLLOUT,
        },
    }


def export_models(settings: DemoSettings, say: Callable[[str], None]) -> None:
    marker = settings.models / MODEL / "4" / "saved_model.pb"
    if marker.exists():
        say(f"demo models already in {settings.models}")
        return
    from servectl.modelserver.demo import export_demo

    say(f"exporting the demo SavedModels to {settings.models} ...")
    export_demo(settings.models, cost=settings.cost, force=True)


class LocalTarget:
    """The local runtime with the demo service (servectl.demo.story.Target)."""

    where = "the local runtime"

    def __init__(self, settings: DemoSettings, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.say = say
        self.controller: subprocess.Popen[bytes] | None = None
        self._clients = threading.local()  # SQLite: one connection per thread
        self._opened: list[LocalClient] = []
        self._last_event = 0

    @property
    def client(self) -> LocalClient:
        found: LocalClient | None = getattr(self._clients, "client", None)
        if found is None:
            found = LocalClient(state_dir(self.settings))
            self._clients.client = found
            self._opened.append(found)
        return found

    # -- set-up

    def start(self) -> None:
        state = state_dir(self.settings)
        state.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "servectl", "down", "--state-dir", str(state)],
            capture_output=True,
            check=False,
            timeout=120,
        )
        for stale in ("state.db", "state.db-wal", "state.db-shm"):
            with contextlib.suppress(FileNotFoundError):
                (state / stale).unlink()
        started = time.time()
        log = (state / "controller.log").open("ab")
        self.controller = subprocess.Popen(
            [sys.executable, "-m", "servectl", "controller", "--state-dir", str(state)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pid = self.controller.pid

        def ticked() -> bool:
            beat = self.client.store.get_setting("heartbeat") or {}
            return beat.get("pid") == pid and float(beat.get("time", 0)) >= started

        self._wait(ticked, 60, "the controller's first tick")
        self.say(f"runtime up (controller pid {pid}, state {state})")

    def deploy(self) -> None:
        from servectl.api import validation

        service = validation.load_model_service(service_doc(self.settings))
        self.client.deploy(service)
        self.say(
            f"deployed cost v1 (min 1, max {self.settings.max_replicas}, "
            f"{self.settings.cpu} CPU each); waiting for it to serve ..."
        )

        def ready() -> bool:
            revisions = self.status().get("revisions", [])
            return any(
                r["name"] == f"{SERVICE}-v1" and int(r.get("readyReplicas", 0)) >= 1
                for r in revisions
            )

        self._wait(ready, 120, "cost-v1 to be ready")
        if self.settings.standby:
            # Its pool loads beside it at full CPU: the pace (a request timed alone) waits
            # until it is parked, so it measures the machine as the step will find it.
            self.say(f"waiting for {self.settings.standby} standby replica(s) to park ...")
            self._wait(self._parked, 120, "the standby pool to park")

    def _parked(self) -> bool:
        """Whether the service's standby pool is whole and parked (the runtime's record)."""
        record = self.client.record(NAMESPACE, SERVICE)
        return (
            record is not None
            and len(record.parked) >= self.settings.standby
            and set(record.parked) <= set(record.standby)
        )

    def _wait(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(check, timeout_s, what, self.check)

    # -- the Target protocol

    def front_url(self) -> str:
        record = self.client.record(NAMESPACE, SERVICE)
        if record is None:
            raise DemoError("the service has no front port yet")
        return f"http://127.0.0.1:{record.rest_port}"

    def status(self) -> dict[str, Any]:
        return self.client.status(NAMESPACE, SERVICE) or {}

    def signals(self) -> dict[str, Any]:
        cycle = self.client.last_cycle(NAMESPACE, SERVICE)
        record = cycle.record if cycle is not None else {}
        return dict(record.get("service", {}))

    def new_events(self) -> list[dict[str, Any]]:
        found = []
        for event in self.client.events(NAMESPACE, SERVICE, since_id=self._last_event):
            found.append(
                {
                    "time": event.time,
                    "type": event.type,
                    "reason": event.reason,
                    "message": event.message,
                }
            )
            self._last_event = event.id
        return found

    def start_rollout(self, version: int) -> None:
        from servectl.rollout.machine import Op

        self.client.rollout(NAMESPACE, SERVICE, Op.START, version)

    def cpu_seconds(self) -> float | None:
        """CPU seconds the demo service's replicas have used, from their cgroups (or
        /proc), as the runtime's exporter reads them; None when none can be read. A
        request's time alone underrates its cost: TensorFlow uses two threads, and a
        base load paced by time alone kept one replica 74 % busy against the 70 % target
        (it scaled out before the step, 2026-12-05)."""
        from servectl.metrics.exporters.cgroup import CgroupError, CpuCollector, ReplicaGone
        from servectl.metrics.exporters.replicas import ReplicaFile

        source = ReplicaFile(state_dir(self.settings) / "replicas.json")
        collector = CpuCollector(source)
        used = []
        for replica in source.replicas():
            if replica.service != SERVICE:
                continue
            with contextlib.suppress(ReplicaGone, CgroupError, OSError):
                used.append(collector.cpu_seconds(replica))
        return sum(used) if used else None

    def set_slo(self, slo_ms: float) -> None:
        from servectl.api import validation

        self.settings = dataclasses.replace(self.settings, slo_ms=slo_ms)
        self.client.deploy(validation.load_model_service(service_doc(self.settings)))

    def check(self) -> None:
        if self.controller is not None and self.controller.poll() is not None:
            raise DemoError(
                f"the controller exited ({self.controller.returncode}); "
                f"see {state_dir(self.settings) / 'controller.log'}"
            )

    # -- tear-down

    def stop(self) -> None:
        for client in self._opened:
            with contextlib.suppress(Exception):
                client.close()
        self._opened.clear()
        self._clients = threading.local()
        if self.controller is not None and self.controller.poll() is None:
            os.kill(self.controller.pid, signal.SIGTERM)
            try:
                self.controller.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.controller.kill()
        self.say("runtime stopped (servectl demo --keep leaves it running)")


def run(settings: DemoSettings, say: Callable[[str], None]) -> DemoResult:
    """The whole demo on the local runtime: set-up, the story, the report."""
    started = time.monotonic()
    export_models(settings, say)
    target = LocalTarget(settings, say)
    target.start()
    try:
        target.deploy()
        result = Story(settings, target, say).run(started)
    finally:
        if not settings.keep:
            target.stop()
    report.write_report(result)
    return result
