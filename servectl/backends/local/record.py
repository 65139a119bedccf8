"""What the local runtime keeps per service besides spec, status and loop state: the
revisions as last applied, the front ports, the header route and the replicas draining.

The CLI reads it (``servectl get`` shows the endpoint) without importing the runtime's
processes, so it lives apart from :mod:`~servectl.backends.local.backend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RevisionRecord:
    """One revision as last applied: its version, replica count and weight."""

    version: int
    replicas: int
    weight: int


@dataclass(frozen=True)
class ServiceRecord:
    """What the runtime keeps per service in the store (``runtime`` table), besides the
    spec, status and loop state: its front ports, revisions as applied, the header
    route, replicas draining (pod -> when the drain began, wall clock), the standby pool
    (pod -> when it was started for the pool) and which of it is parked (pod -> when its
    CPU quota was lowered), so that a restarted controller adopts the pool as it is; and
    the next replica ordinal (pod names are ``<revision>-<ordinal>``, never reused)."""

    rest_port: int
    grpc_port: int
    revisions: Mapping[str, RevisionRecord] = field(default_factory=dict)
    header: str | None = None
    draining: Mapping[str, float] = field(default_factory=dict)
    next_ordinal: int = 0
    standby: Mapping[str, float] = field(default_factory=dict)
    parked: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "restPort": self.rest_port,
            "grpcPort": self.grpc_port,
            "revisions": {
                name: {"version": r.version, "replicas": r.replicas, "weight": r.weight}
                for name, r in sorted(self.revisions.items())
            },
            "header": self.header,
            "draining": dict(sorted(self.draining.items())),
            "nextOrdinal": self.next_ordinal,
            "standby": dict(sorted(self.standby.items())),
            "parked": dict(sorted(self.parked.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServiceRecord:
        return cls(
            rest_port=int(data["restPort"]),
            grpc_port=int(data["grpcPort"]),
            revisions={
                str(name): RevisionRecord(
                    version=int(r["version"]), replicas=int(r["replicas"]), weight=int(r["weight"])
                )
                for name, r in dict(data.get("revisions", {})).items()
            },
            header=data.get("header"),
            draining={str(k): float(v) for k, v in dict(data.get("draining", {})).items()},
            next_ordinal=int(data.get("nextOrdinal", 0)),
            standby={str(k): float(v) for k, v in dict(data.get("standby", {})).items()},
            parked={str(k): float(v) for k, v in dict(data.get("parked", {})).items()},
        )
