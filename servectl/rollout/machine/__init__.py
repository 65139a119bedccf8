"""The rollout state machine: where a rollout stands and what it wants next.

Pure and persisted: :class:`RolloutState` is a value with a JSON form (``to_dict`` /
``from_dict``) kept in ``status.rollout.state``, so a restarted controller resumes
exactly where it was. Two entry points:

- :func:`command` applies a user's operation (start, pause, resume, promote, abort,
  retry, undo) or raises :class:`RolloutError` naming the problem and the fix; the state
  passed in is never modified (nothing is lost on a refused command);
- :func:`advance` moves the rollout on from what was observed (the weights the planner
  actually applied, readiness, counters) and returns an :class:`Intent`: the weights the
  rollout wants, the header route, the canary scale and whether it is aborting. The
  planner (``servectl.planning``) decides how fast the intent can safely be reached;
  a weight step completes only when the planner has applied it, so "scale first, then
  shift" holds by construction.

Strategies:

- ``canary``: the steps in order (setWeight, pause, analysis, setCanaryScale), then the
  promotion to 100 %.
- ``abTest``: requests matching the header or cookie go to the new revision (B); the
  rest stay on stable (A). The guard-rail checks run every interval; after
  ``abTest.durationSeconds`` the variants are compared on ``winnerMetric``.
- ``blueGreen``: the new revision is brought to full size at weight 0 (the preview),
  the pause/analysis steps run against it, then all traffic switches at once and the old
  revision is kept ``scaleDownDelaySeconds`` so that a rollback is instant.

The progress deadline measures how long the rollout waits, at one step, for the
revision receiving traffic to get ready capacity *without any new replica becoming
ready*: waits caused by autoscaling, where replicas keep arriving, never consume it;
pauses and analysis never do either.

Layout (each module imports only the ones above it, never this package):

- ``state``: the vocabulary: :class:`Op`, ``Phase`` (the API's RolloutPhase), ``ACTIVE``,
  :class:`RolloutError`, :class:`VerdictRecord`, :class:`RolloutState`, :class:`View`,
  :class:`Intent`;
- ``transitions``: transitions shared by commands and ``advance`` (abort, next step);
- ``commands``: :func:`initial` and :func:`command`;
- ``analysis_step``: pause and analysis steps: running an analysis when it is due,
  judging its window, recording and applying the verdict;
- ``strategies``: :func:`advance`, one function per strategy, the progress deadline and
  the intents;
- ``codec``: :func:`to_dict` / :func:`from_dict`.
"""

from __future__ import annotations

from servectl.rollout.machine.codec import from_dict, to_dict
from servectl.rollout.machine.commands import command, initial
from servectl.rollout.machine.state import (
    ACTIVE,
    Intent,
    Op,
    Phase,
    RolloutError,
    RolloutState,
    VerdictRecord,
    View,
)
from servectl.rollout.machine.strategies import advance

__all__ = [
    "ACTIVE",
    "Intent",
    "Op",
    "Phase",
    "RolloutError",
    "RolloutState",
    "VerdictRecord",
    "View",
    "advance",
    "command",
    "from_dict",
    "initial",
    "to_dict",
]
