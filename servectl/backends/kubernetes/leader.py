"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Only the holder of the Lease reconciles (writes); the others keep their watch caches warm
and take over when the holder stops renewing. The rules:

- a candidate acquires the Lease when it has no holder, or when the record it observed
  has not changed for ``lease_duration_s`` by the candidate's own monotonic clock (never
  by comparing the holder's ``renewTime`` with our wall clock: clocks differ between
  nodes);
- the holder renews every ``retry_period_s``; if it has not renewed for
  ``renew_deadline_s`` it stops acting as leader at once, before anyone else may acquire
  (``renew_deadline_s < lease_duration_s``);
- every write is a PUT guarded by the resourceVersion read, so two candidates racing
  for an expired Lease cannot both win: one gets a 409 and stays a follower;
- on a clean stop the holder releases the Lease (empty holder, duration 1 s), so a
  successor takes over at once rather than after a lease duration.

The official client ships a leaderelection module too; it runs the leader's work in a
callback thread it never stops on a lost lease, which is the one thing this must do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servectl.backends.kubernetes.kube import LEASES, Kube, KubeError

log = logging.getLogger("servectl.kubernetes.leader")


def _micro(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str = "servectl-controller"
    identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("renew deadline must be shorter than the lease duration")


class LeaderElector:
    """Call :meth:`tick` every ``retry_period_s``; :attr:`is_leader` says whether to act."""

    def __init__(
        self,
        kube: Kube,
        config: LeaseConfig,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self._wall = wall_clock
        self._mono = monotonic
        self.on_change = on_change
        self._observed: dict[str, Any] | None = None  # the Lease spec last read
        self._observed_at = -float("inf")  # monotonic time it last changed
        self._renewed_at = -float("inf")  # monotonic time we last renewed (as holder)
        self._leader = False
        self.holder: str | None = None
        self.transitions = 0

    @property
    def is_leader(self) -> bool:
        if self._leader and self._mono() - self._renewed_at > self.config.renew_deadline_s:
            self._set(False)
            log.warning(
                "lease %s: not renewed for %.0f s: stepping down",
                self.config.name,
                self.config.renew_deadline_s,
            )
        return self._leader

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            log.info(
                "lease %s/%s: %s is %s",
                self.config.namespace,
                self.config.name,
                self.config.identity,
                "the leader" if leader else "a follower",
            )
            if self.on_change is not None:
                self.on_change(leader)

    def tick(self) -> bool:
        """Try to acquire or renew once; returns :attr:`is_leader`."""
        try:
            self._try()
        except KubeError as exc:
            if not exc.conflict:
                log.warning("lease %s: %s", self.config.name, exc)
        return self.is_leader

    def _spec(self, acquire: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration_s)),
            "acquireTime": acquire,
            "renewTime": _micro(self._wall()),
            "leaseTransitions": transitions,
        }

    def _try(self) -> None:
        cfg = self.config
        now_mono = self._mono()
        try:
            lease = self.kube.get(LEASES, cfg.namespace, cfg.name)
        except KubeError as exc:
            if not exc.not_found:
                raise
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": self._spec(_micro(self._wall()), 0),
            }
            created = self.kube.create(LEASES, cfg.namespace, body)
            self._observe(created.get("spec") or {}, now_mono)
            self._renewed_at = now_mono
            self._set(True)
            return
        spec = dict(lease.get("spec") or {})
        self._observe(spec, now_mono)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or cfg.lease_duration_s)
        mine = holder == cfg.identity
        if holder and not mine and now_mono - self._observed_at < duration:
            self._set(False)  # someone else holds a live lease
            return
        transitions = int(spec.get("leaseTransitions") or 0)
        if not mine:
            transitions += 1
        acquire = str(spec.get("acquireTime") or "") if mine else _micro(self._wall())
        lease["spec"] = self._spec(acquire or _micro(self._wall()), transitions)
        updated = self.kube.request(
            "PUT",
            LEASES.path(cfg.namespace, cfg.name),
            body=lease,
            verb="update",
            resource=LEASES.plural,
        )
        self._observe(updated.get("spec") or {}, now_mono)
        self._renewed_at = now_mono
        self._set(True)

    def _observe(self, spec: dict[str, Any], now_mono: float) -> None:
        if spec != self._observed:
            self._observed = spec
            self._observed_at = now_mono
        self.holder = spec.get("holderIdentity") or None
        self.transitions = int(spec.get("leaseTransitions") or 0)

    def release(self) -> None:
        """Give the Lease up (a clean stop): empty holder, so a successor need not wait."""
        if not self._leader:
            return
        cfg = self.config

        def mutate(lease: dict[str, Any]) -> dict[str, Any] | None:
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != cfg.identity:
                return None
            lease["spec"] = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": _micro(self._wall()),
            }
            return lease

        try:
            self.kube.update(LEASES, cfg.namespace, cfg.name, mutate)
        except KubeError as exc:
            log.warning("lease %s: release failed: %s", cfg.name, exc)
        self._set(False)
