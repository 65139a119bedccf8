"""Policies by name, and one stable way to evaluate any of them.

``build("servectl" | "hpa" | "kpa", cfg)`` gives a Policy from one AutoscalingConfig,
so the baselines run with the same per-replica targets servectl is given and their
own documented defaults for everything else. ``evaluate`` and ``replay`` are the
Python face of ``servectl policy eval`` and ``servectl policy replay``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servectl.autoscaling import config, engine, hpa, kpa
from servectl.autoscaling.decision import Decision
from servectl.autoscaling.policy import Policy, State
from servectl.autoscaling.policy import UnknownPolicyError as UnknownPolicyError  # re-exported
from servectl.autoscaling.snapshot import Snapshot

BUILDERS: dict[str, Callable[[config.AutoscalingConfig], Policy]] = {
    "servectl": engine.EnginePolicy,
    "hpa": hpa.from_config,
    "kpa": kpa.from_config,
}


def names() -> list[str]:
    return sorted(BUILDERS)


def build(
    name: str, cfg: config.AutoscalingConfig, custom: engine.CustomPolicy | None = None
) -> Policy:
    """A policy by name; ``custom`` (a CEL policy) applies to ``servectl`` only."""
    if name not in BUILDERS:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of: {', '.join(names())}")
    if custom is not None:
        if name != "servectl":
            raise UnknownPolicyError(
                f"a custom CEL policy wraps servectl's engine, not the {name} baseline"
            )
        return engine.EnginePolicy(cfg, custom)
    return BUILDERS[name](cfg)


@dataclass(frozen=True)
class Step:
    time: float
    decision: Decision
    state: State


def evaluate(policy: Policy, snap: Snapshot, state: State | None = None) -> Step:
    """One decision on one snapshot (fresh state unless given)."""
    decision, new_state = policy.decide(snap, dict(state) if state else policy.initial_state())
    return Step(snap.time, decision, new_state)


def replay(policy: Policy, snapshots: Iterable[Snapshot], state: State | None = None) -> list[Step]:
    """Decisions over a sequence of snapshots, carrying state; each snapshot's
    ``replicas.current`` is replaced by the previous decision, as a controller would."""
    steps: list[Step] = []
    current_state = dict(state) if state else policy.initial_state()
    applied: int | None = None
    for snap in snapshots:
        if applied is not None:
            snap = snap.with_replicas(current=applied)
        decision, current_state = policy.decide(snap, current_state)
        applied = decision.replicas
        steps.append(Step(snap.time, decision, current_state))
    return steps
