"""Pure: the coordination planner (DESIGN §4) turning demand, rollout state and observed
revisions into every revision's replicas and the traffic weights."""
