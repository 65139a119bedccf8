"""spec.model.version and what serves (servectl.controller.gitops, issue 27 item 7)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servectl.api import models
from servectl.controller import gitops
from servectl.controller import status as status_conditions
from servectl.rollout.machine import Op, Phase, RolloutError, RolloutState, command

C, S = models.ConditionType, models.ConditionStatus
SPEC = models.RolloutSpec()
ABORTED = RolloutState(stable=2, phase=Phase.ABORTED, canary=3, message="analysis failed")


def test_the_spec_reverted_after_an_abort_settles_once_the_traffic_is_back() -> None:
    assert gitops.command(2, ABORTED, canary_weight=10) is None  # still moving back
    assert gitops.command(2, ABORTED, canary_weight=0) == (Op.SETTLE, None)
    settled = command(ABORTED, Op.SETTLE, SPEC, 0.0)
    assert (settled.phase, settled.stable, settled.canary) == (Phase.IDLE, 2, None)
    assert "names v2 again" in settled.message and "v3 was aborted" in settled.message
    assert gitops.command(2, settled, canary_weight=0) is None  # once
    assert gitops.disagreement(2, settled) is None


def test_the_spec_reverted_mid_rollout_abandons_it() -> None:
    running = RolloutState(stable=2, phase=Phase.PROGRESSING, canary=3, step=1)
    assert gitops.command(2, running, canary_weight=20) == (Op.START, 2)
    abandoned = command(running, Op.START, SPEC, 0.0, 2)
    assert abandoned.phase is Phase.ABORTED and "abandoned" in abandoned.message
    assert gitops.command(3, running, canary_weight=20) is None  # toward the spec: go on
    assert gitops.disagreement(3, running) is None


@pytest.mark.parametrize("phase", [Phase.IDLE, Phase.COMPLETED, Phase.PROGRESSING])
def test_only_an_aborted_rollout_is_settled(phase: Phase) -> None:
    with pytest.raises(RolloutError, match="only an aborted rollout"):
        command(replace(ABORTED, phase=phase), Op.SETTLE, SPEC, 0.0)


def status_with_degraded(
    value: models.ConditionStatus, reason: str, message: str
) -> models.ModelServiceStatus:
    cond = status_conditions.condition(C.DEGRADED, value, reason, message, 0.0, None)
    return models.ModelServiceStatus(conditions=[cond])


def test_after_an_abort_degraded_keeps_its_reason_and_says_how_to_agree() -> None:
    built = status_with_degraded(S.TRUE, "RolloutAborted", "errorRate 0.1 > 0.01")
    out = gitops.degraded(built, 3, ABORTED, 10.0, None).condition(C.DEGRADED)
    assert out is not None and out.status is S.TRUE and out.reason == "RolloutAborted"
    assert out.message.startswith("errorRate 0.1 > 0.01; spec.model.version is 3 but v2 serves")
    assert "the rollout to it was aborted" in out.message
    assert "set spec.model.version to 2" in out.message and "rollout retry" in out.message


def test_after_an_undo_the_spec_naming_another_version_is_degraded() -> None:
    undone = RolloutState(stable=2, phase=Phase.COMPLETED, previous_stable=3)
    built = status_with_degraded(S.FALSE, "Healthy", "")
    out = gitops.degraded(built, 3, undone, 10.0, None).condition(C.DEGRADED)
    assert out is not None and out.status is S.TRUE and out.reason == gitops.SPEC_NOT_SERVED
    assert "undone or aborted" in out.message
    # Agreeing again: Degraded as the rollout says (False).
    assert gitops.degraded(built, 2, undone, 11.0, None) is built
    assert gitops.degraded(built, None, undone, 11.0, None) is built  # no version named


def test_starting_the_stable_version_after_an_abort_settles_it_and_otherwise_is_refused() -> None:
    settled = command(ABORTED, Op.START, SPEC, 0.0, 2)
    assert (settled.phase, settled.canary) == (Phase.IDLE, None)
    with pytest.raises(RolloutError, match="already the stable version"):
        command(settled, Op.START, SPEC, 1.0, 2)
