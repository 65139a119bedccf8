"""The planner's messages name a moment as an RFC 3339 time, never as raw epoch seconds
(issue 25, item 10: ``explain`` printed ``until t=1795805059``)."""

from __future__ import annotations

import re

from servectl.planning import planner
from tests.unit.planning.test_planner import NAMES, intent, observed, rev

NOW = 1_795_805_059.0  # 2026-11-27T18:44:19Z


def test_a_draining_revision_says_until_when_as_a_time() -> None:
    obs = observed(rev(1, weight=100, desired=10), now=NOW)
    _, state = planner.plan(intent({1: 50, 2: 50}), obs, 10, planner.PlannerState(), NAMES)
    obs = observed(
        rev(1, weight=100, desired=10),
        rev(2, weight=0, desired=5, ready=2, available=True),
        now=NOW + 1,
    )
    result, _ = planner.plan(intent({1: 50, 2: 50}, hold_s=600.0), obs, 10, state, NAMES)
    stable = result.revision("m-v1")
    assert stable is not None and stable.reason == "Draining"
    assert stable.message == (
        "keeps 10 replicas until 2026-11-27T18:54:20Z (600 s after losing traffic), then shrinks"
    )
    assert not re.search(r"t=\d", stable.message)
