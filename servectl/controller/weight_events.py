"""Which weight moves are worth a ``WeightsChanged`` event: where a shift goes, when it
begins and when it gets there, not each percent on the way (docs/rollouts.md, "Events").

The planner moves weights as far as ready capacity carries them, so one rollout step can
take many cycles (67 -> 66 -> ... -> 0, one event each, before). Per shift toward a
rollout's target there are now at most two events, one if it gets there in one cycle:

- **begins**: the rollout has a new target this cycle (a step, a promotion, an abort,
  a rollout's start) other than the weights routed now: ``cost-v1 80 -> 50 %, cost-v2
  20 -> 50 % (step 2): at cost-v1 77 %, cost-v2 23 % now, the rest as ready replicas
  carry it``, or ``cost-v1 80 -> 50 %, cost-v2 20 -> 50 % (step 2)`` when it is done at
  once;
- **reached**: the weights get to the target: ``cost-v1 50 %, cost-v2 50 % reached (step
  2)``;
- **back**: any move away from the target (the planner gives weight back when a
  revision's ready replicas no longer carry it) has its own event, with the planner's
  reason: rare, and worth knowing each time.

Pure. The rollout's target is the planner's intent (``Outcome.intent``); a decider
without one (the simulator's emulated peers) keeps one event per planner message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servectl.controller.decide import LoopState, Outcome
from servectl.planning.types import Observed


def _key(rollout: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What a rollout's target follows from, in its JSON form: a change is a new shift."""
    if not rollout:
        return None
    aborted = rollout.get("phase") == "Aborted"
    return (
        rollout.get("stable"),
        rollout.get("canary"),
        rollout.get("step"),
        bool(rollout.get("promoting")),
        aborted,
    )


def _text(weights: Mapping[str, int], order: Sequence[str]) -> str:
    return ", ".join(f"{name} {weights.get(name, 0)} %" for name in order)


def _moves(before: Mapping[str, int], after: Mapping[str, int], order: Sequence[str]) -> str:
    return ", ".join(
        f"{name} {before.get(name, 0)} -> {after.get(name, 0)} %"
        for name in order
        if before.get(name, 0) != after.get(name, 0)
    )


def coalesce(
    texts: Sequence[str],
    outcome: Outcome,
    observed: Observed,
    previous_rollout: Mapping[str, Any] | None,
) -> list[str]:
    """``texts`` (the plan's event messages) with the planner's per-revision weight
    messages replaced by the events above. ``previous_rollout``: the rollout state the
    previous status recorded (its JSON form), None before the first."""
    intent, names, state = outcome.intent, outcome.names, outcome.state
    if intent is None or names is None or not isinstance(state, LoopState):
        return list(texts)
    plan = outcome.plan
    known = {r.name for r in plan.revisions} | {r.name for r in observed.revisions}
    kept = [t for t in texts if not any(t.startswith(f"{n}: weight ") for n in known)]
    moved = len(kept) < len(texts)  # the planner says so for each revision it moved
    stable = names[intent.stable]
    # What the planner moved from (its rule: weights that do not add up to 100 are none).
    before = {r.name: r.weight for r in observed.revisions if r.weight > 0}
    if sum(before.values()) != 100:
        before = {stable: 100}
    after = {r.name: r.weight for r in plan.revisions if r.weight > 0}
    target = {names[v]: w for v, w in intent.weights.items() if w > 0}
    order = sorted(set(before) | set(after) | set(target), key=lambda n: (n != stable, n))
    rollout = state.rollout
    if intent.abort:
        why = "abort"
    elif rollout.canary is None:
        why = ""
    elif rollout.promoting:
        why = "promotion"
    else:
        why = f"step {rollout.step}"
    suffix = f" ({why})" if why else ""
    events: list[str] = []
    current = _key(
        {
            "stable": rollout.stable,
            "canary": rollout.canary,
            "step": rollout.step,
            "promoting": rollout.promoting,
            "phase": str(rollout.phase),
        }
    )
    before_key = _key(previous_rollout)
    begins = before_key is not None and before_key != current
    if begins and target != before:
        if after == target:
            events.append(_moves(before, target, order) + suffix)
        else:
            events.append(
                f"{_moves(before, target, order)}{suffix}: at {_text(after, order)} now, the "
                "rest as ready replicas carry it"
            )
    elif moved and after == target:
        events.append(f"{_text(target, order)} reached{suffix}")
    if moved:
        back = [
            name
            for name in order
            if (after.get(name, 0) - before.get(name, 0))
            * (target.get(name, 0) - before.get(name, 0))
            < 0
            or (before.get(name, 0) == target.get(name, 0) != after.get(name, 0))
        ]
        if back:
            why_back = "; ".join(  # the planner's reason, on the revision that gave
                f"{name}: {rev.message}"
                for name in back
                if after.get(name, 0) < before.get(name, 0)
                and (rev := plan.revision(name)) is not None
                and rev.message
            )
            events.append(
                f"{_moves(before, after, order)}: away from {_text(target, order)}"
                + (f" ({why_back})" if why_back else "")
            )
    return kept + events
