"""``servectl explain``'s cycle record (servectl.controller.explain): every plan revision
names the cost it is sized at and the planner's estimate behind it."""

from __future__ import annotations

import json

from servectl.controller.explain import cycle_record
from tests.unit.controller.canary_run import canary_under_a_step


def test_each_planned_revision_carries_its_cost_as_sized_and_as_estimated() -> None:
    records = [json.loads(json.dumps(cycle_record(c))) for c in canary_under_a_step()]
    split = [r for r in records if len(r["plan"]["revisions"]) == 2]
    assert split, "the rollout ran"
    costed = [x for r in split for x in r["plan"]["revisions"] if "cost" in x]
    # Every revision the planner has a cost for (each one observed: a canary planned ahead
    # of its first replica has none yet); the canary's among them.
    assert {x["name"] for x in costed} == {"model-v1", "model-v2"}
    for revision in costed:
        assert revision["cost"] > 0 and revision["costEstimate"] > 0, revision
        # Held only within the tolerance: never further from the estimate than 10 %.
        off = abs(revision["costEstimate"] - revision["cost"])
        assert off <= 0.1 * revision["cost"] + 1e-3, revision
    assert {x["cost"] for x in costed if x["name"] == "model-v1"} == {1.0}
