"""The local runtime's own events: what the supervisor did to replicas and what the runtime
did to HAProxy, Prometheus and itself, as events on the services (``servectl events``,
``describe``) and one line each in the controller's log (``controller.log``).

- A replica's happening (:mod:`~servectl.backends.local.replica_events`: a crash with its
  exit code or signal, a restart, a start, a stop, a SIGKILL, an adoption, readiness lost
  or regained) is an event on the replica's own service, Warning or Normal by its kind.
- What concerns the whole runtime (HAProxy or Prometheus found dead and restarted, the
  controller started or stopping, HAProxy that cannot be started) is an event on **every**
  service: the store keeps events per service, and a user looking at a service whose
  requests failed while HAProxy restarted should see why there. With no service, it is a
  log line only.

A service deleted since (its replicas still stopping) has no events left: its happenings
are log lines only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from servectl.backends.local.replica_events import Happening
from servectl.backends.local.store import Store, StoreError

log = logging.getLogger("servectl.runtime")

# The reasons of the runtime-wide events (each on every service).
CONTROLLER_STARTED = "ControllerStarted"
CONTROLLER_STOPPING = "ControllerStopping"
ROUTER_RESTARTED = "RouterRestarted"
ROUTER_FAILED = "RouterFailed"
PROMETHEUS_RESTARTED = "PrometheusRestarted"
PROMETHEUS_FAILED = "PrometheusFailed"


class Reporter:
    """Writes the runtime's events to ``store`` and their lines to the log."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._failures: dict[str, str] = {}  # reason -> the last message sent

    def happenings(self, happenings: Sequence[Happening]) -> None:
        """Each happening: a log line, and an event on its service (when it still exists)."""
        by_service: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for h in happenings:
            namespace, service = h.service_key
            level = logging.WARNING if h.warning else logging.INFO
            log.log(level, "%s/%s: %s %s: %s", namespace, service, h.event_type, h.kind, h.message)
            by_service.setdefault(h.service_key, []).append(
                {"time": h.time, "type": h.event_type, "reason": str(h.kind), "message": h.message}
            )
        known = {(s.namespace, s.name) for s in self.store.list_services()} if by_service else set()
        for key, events in by_service.items():
            if key in known:
                self._append(key, events)

    def runtime(self, reason: str, message: str, now: float, *, warning: bool) -> None:
        """One runtime-wide event: on every service, and a log line."""
        log.log(logging.WARNING if warning else logging.INFO, "%s: %s", reason, message)
        event = {
            "time": now,
            "type": "Warning" if warning else "Normal",
            "reason": reason,
            "message": message,
        }
        for service in self.store.list_services():
            self._append((service.namespace, service.name), [event])

    def failing(self, reason: str, message: str | None, now: float) -> None:
        """A runtime-wide failure that may last (HAProxy that cannot be started): an event
        when it begins or its message changes, not on every tick; ``None`` when it is over."""
        if message is None:
            self._failures.pop(reason, None)
            return
        if self._failures.get(reason) == message:
            return
        self._failures[reason] = message
        self.runtime(reason, message, now, warning=True)

    def _append(self, key: tuple[str, str], events: Sequence[Mapping[str, Any]]) -> None:
        try:
            self.store.append_events(*key, events)
        except StoreError as exc:  # deleted meanwhile, or the store is busy: the log has it
            log.warning("%s/%s: events not stored: %s", *key, exc)
