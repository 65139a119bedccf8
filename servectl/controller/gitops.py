"""The contract between ``spec.model.version`` and what servectl serves (issue 27 item 7).

The spec says which version the user wants served; Argo CD or Flux keep it as Git has it.
A rollout servectl aborts (a failed analysis, the user's ``rollout abort``) or undoes
(``rollout undo``) leaves it naming a version that no longer serves. As Argo Rollouts does,
servectl does not rewrite the spec (a GitOps tool would put it back): the service stays
``Degraded`` until the spec agrees again, and says how:

- the spec reverted to the served version (a Git revert): the aborted rollout is settled
  (phase ``Idle``) and ``Degraded`` turns False;
- the spec names a new version: that version rolls out;
- ``servectl rollout retry`` (after an abort) or ``rollout start --version`` of the spec's
  version tries it again;
- the spec reverted to the stable version while a rollout runs: the rollout is abandoned
  (an abort), then settled.

Pure: no I/O, no clock; the backend passes the spec's version and the loop's state.
"""

from __future__ import annotations

from servectl.api import models
from servectl.controller import status as status_conditions
from servectl.rollout.machine import Op, Phase, RolloutState

SPEC_NOT_SERVED = "SpecNotServed"
"""``Degraded``'s reason while the spec names a version servectl does not serve."""


def command(
    wanted: int | None, rollout: RolloutState, canary_weight: int
) -> tuple[Op, int | None] | None:
    """What the spec asks of the rollout, beyond starting a new version: abandon a rollout
    whose spec went back to the stable version, or settle an aborted one when it has and
    the aborted version's traffic (``canary_weight``, applied) is all back."""
    if wanted is None or wanted != rollout.stable:
        return None
    if rollout.active:
        return (Op.START, wanted)  # to the stable version: the rollout is abandoned
    if rollout.phase is Phase.ABORTED and canary_weight == 0:
        return (Op.SETTLE, None)
    return None


def disagreement(wanted: int | None, rollout: RolloutState) -> str | None:
    """Why the spec and what serves disagree, with the fix; None when they agree (or a
    rollout toward the spec's version runs)."""
    if wanted is None or rollout.active or wanted == rollout.stable:
        return None
    how = (
        "the rollout to it was aborted"
        if rollout.phase is Phase.ABORTED and rollout.canary == wanted
        else "it was undone or aborted"
    )
    return (
        f"spec.model.version is {wanted} but v{rollout.stable} serves ({how}): set "
        f"spec.model.version to {rollout.stable} to agree (with GitOps, revert the commit), "
        f"or to a new version to roll it out; `servectl rollout retry` or `rollout start "
        f"--version {wanted}` tries v{wanted} again"
    )


def degraded(
    status: models.ModelServiceStatus,
    wanted: int | None,
    rollout: RolloutState,
    now: float,
    previous: models.ModelServiceStatus | None,
) -> models.ModelServiceStatus:
    """``status`` with ``Degraded=True`` while the spec and what serves disagree (its
    reason kept where the rollout's own, an abort, already says Degraded)."""
    why = disagreement(wanted, rollout)
    if why is None:
        return status
    kind = models.ConditionType.DEGRADED
    old = status.condition(kind)
    degraded_already = old is not None and old.status is models.ConditionStatus.TRUE
    reason = old.reason if degraded_already and old is not None else SPEC_NOT_SERVED
    message = f"{old.message}; {why}" if degraded_already and old and old.message else why
    condition = status_conditions.condition(
        kind, models.ConditionStatus.TRUE, reason, message, now, previous
    )
    kept = [c for c in status.conditions if c.type is not kind]
    return status.model_copy(update={"conditions": [*kept, condition]})
