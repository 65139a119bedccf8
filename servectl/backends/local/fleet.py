"""The local runtime as a :class:`~servectl.controller.driver.Fleet`: its services from
the store, one :class:`~servectl.backends.local.backend.LocalBackend` each per tick, the
tick's one Prometheus round, and faults reported in each service's own status.

The runtime (:mod:`servectl.backends.local.runtime`) sets :meth:`LocalFleet.begin` with
what it read once this tick (the supervisor's replicas, HAProxy's routes, the runtime
records) before the driver's tick, and takes the backends' routes after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from servectl.api import models
from servectl.autoscaling import config
from servectl.backends.local import supervisor as sup
from servectl.backends.local.backend import LocalBackend, TickView
from servectl.backends.local.record import ServiceRecord
from servectl.backends.local.store import Store
from servectl.controller import status as status_mod
from servectl.controller.backend import EventReason, EventType
from servectl.controller.driver import Listed, SnapshotRequest
from servectl.metrics.assemble import MetricsSnapshot
from servectl.metrics.source import PrometheusSource

log = logging.getLogger("servectl.runtime")

PortAllocator = Callable[[set[int]], tuple[int, int]]
"""(REST, gRPC) front ports free on the machine and not in the given set."""


class LocalFleet:
    """Every service in one local runtime's store."""

    def __init__(
        self,
        store: Store,
        supervisor: sup.Supervisor,
        *,
        wall_clock: Callable[[], float],
        allocate_ports: PortAllocator,
    ) -> None:
        self.store = store
        self.supervisor = supervisor
        self.source: PrometheusSource | None = None
        self._wall = wall_clock
        self._allocate_ports = allocate_ports
        self._view = TickView(replicas=(), routes={})
        self._records: dict[tuple[str, str], ServiceRecord] = {}
        self._claimed: set[int] = set()
        self._opened: dict[tuple[str, str], LocalBackend] = {}  # this tick's backends

    @property
    def routing(self) -> config.Routing:
        # HAProxy balances each revision's replicas with leastconn (docs/local-runtime.md).
        return config.Routing.LEAST_REQUEST

    def begin(self, view: TickView, records: Mapping[tuple[str, str], ServiceRecord]) -> None:
        """What the runtime read once for this tick."""
        self._view = view
        self._records = dict(records)
        self._claimed = set()
        self._opened = {}

    def services(self) -> list[Listed]:
        listed = []
        for row in self.store.list_services():
            try:
                service = models.ModelService.model_validate(row.spec)
            except ValueError as exc:
                listed.append(
                    Listed(
                        row.namespace,
                        row.name,
                        row.generation,
                        None,
                        f"spec no longer valid: {exc}",
                    )
                )
                continue
            listed.append(Listed(row.namespace, row.name, row.generation, service))
        return listed

    def policies(self, namespace: str) -> dict[str, models.ScalingPolicy]:
        # The local runtime keeps one library for every namespace.
        del namespace
        return {
            name: models.ScalingPolicy.model_validate(doc)
            for name, doc in (self.store.get_setting("policies") or {}).items()
        }

    def open(self, listed: Listed) -> LocalBackend:
        assert listed.service is not None
        backend = self._opened[listed.key] = LocalBackend(
            store=self.store,
            service=listed.service,
            record=self._records.get(listed.key),
            view=self._view,
            supervisor=self.supervisor,
            wall_clock=self._wall,
            allocate_ports=self._new_ports,
        )
        return backend

    def _new_ports(self) -> tuple[int, int]:
        taken = {p for r in self._records.values() for p in (r.rest_port, r.grpc_port)}
        rest, grpc = self._allocate_ports(taken | self._claimed)
        self._claimed |= {rest, grpc}  # a second new service this tick gets another pair
        return rest, grpc

    def snapshot(self, request: SnapshotRequest) -> MetricsSnapshot:
        if self.source is None:
            raise RuntimeError("the runtime has not started its Prometheus source")
        return self.source.snapshot(
            expected=request.expected,
            analysis_services=request.analysis_services,
            custom=request.custom,
        )

    def refuse(self, listed: Listed, reason: EventReason, message: str, now: float) -> None:
        log.error("%s/%s: %s: %s", listed.namespace, listed.name, reason, message)
        opened = self._opened.get(listed.key)
        if opened is not None:  # a cycle that failed after taking commands: answer them
            opened.fail_commands(message)
        previous = _status(self.store.get_status(listed.namespace, listed.name))
        status, changed = status_mod.refused(previous, str(reason), message, now=now)
        if not changed:
            return
        doc = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.store.put_status(listed.namespace, listed.name, doc, now=self._wall())
        self.store.append_events(
            listed.namespace,
            listed.name,
            [
                {
                    "time": now,
                    "type": str(EventType.WARNING),
                    "reason": str(reason),
                    "message": message,
                }
            ],
        )


def _status(doc: Mapping[str, Any] | None) -> models.ModelServiceStatus | None:
    if doc is None:
        return None
    try:
        return models.ModelServiceStatus.model_validate(doc)
    except ValueError:  # a status from another servectl version: start afresh
        return None
