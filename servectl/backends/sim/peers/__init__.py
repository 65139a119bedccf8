"""The peers, emulated as deciders: Argo Rollouts (:mod:`.argo`) and Flagger (:mod:`.flagger`),
each with the Kubernetes HPA next to it, as the benchmark compares them with servectl."""

from servectl.backends.sim.peers.argo import ArgoStyle
from servectl.backends.sim.peers.common import (
    ABORT_SCALE_DOWN_DELAY_S,
    CONSECUTIVE_ERROR_LIMIT,
    CPU_TARGET,
    FLAGGER_METRIC_INTERVAL_S,
    FLAGGER_PROGRESS_DEADLINE_S,
    FLAGGER_THRESHOLD,
    MAX_SURGE,
    MAX_UNAVAILABLE,
    SCALE_DOWN_DELAY_S,
    Peer,
    peer_hpa_config,
)
from servectl.backends.sim.peers.flagger import FlaggerStyle, flagger_weights

__all__ = [
    "ABORT_SCALE_DOWN_DELAY_S",
    "CONSECUTIVE_ERROR_LIMIT",
    "CPU_TARGET",
    "FLAGGER_METRIC_INTERVAL_S",
    "FLAGGER_PROGRESS_DEADLINE_S",
    "FLAGGER_THRESHOLD",
    "MAX_SURGE",
    "MAX_UNAVAILABLE",
    "SCALE_DOWN_DELAY_S",
    "ArgoStyle",
    "FlaggerStyle",
    "Peer",
    "flagger_weights",
    "peer_hpa_config",
]
