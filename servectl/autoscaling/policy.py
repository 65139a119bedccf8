"""The Policy protocol: ``decide(snapshot, state) -> (decision, new_state)``.

A policy is a pure function of a snapshot and its own persisted state (Ray Serve's
shape). State is a JSON-compatible dict so the controller can persist it in status or
the local store and resume after a restart; a policy must accept the state it
returned before, and ``initial_state()`` for a fresh start.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from servectl.autoscaling import decision, snapshot

State = dict[str, Any]


class UnknownPolicyError(ValueError, LookupError):
    """A policy name that names no policy: a built-in one (``registry.build``), or the
    ScalingPolicy a ModelService's ``policy.ref`` names (``AutoscalingSpec.resolve_policy``).

    Both a ValueError (a bad argument) and a LookupError (a name not found), so callers
    that catch either keep catching it.
    """


@runtime_checkable
class Policy(Protocol):
    """Anything that turns snapshots into replica decisions."""

    @property
    def name(self) -> str: ...

    @property
    def period_s(self) -> float:
        """How often the policy expects to be asked (its reconcile tick)."""
        ...

    def initial_state(self) -> State: ...

    def decide(self, snap: snapshot.Snapshot, state: State) -> tuple[decision.Decision, State]: ...
