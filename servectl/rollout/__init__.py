"""Pure: the rollout state machine and analysis verdicts."""
