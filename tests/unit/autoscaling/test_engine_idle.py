"""servectl's default policy on an idle service: what an idle, well-scraped revision now
reads as (issue 25, item 1): rps 0, no latency value, no error rate, a little CPU.

It must not crash, never go below minReplicas, hold minReplicas, and never add replicas
for a load of nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servectl.autoscaling import config, engine
from servectl.autoscaling.snapshot import Snapshot
from servectl.testing import drive, make_snapshot

CPU70 = config.SignalTarget(config.SignalType.CPU, 70.0)
P99 = config.SignalTarget(config.SignalType.LATENCY, 150.0, 99.0)
RPS10 = config.SignalTarget(config.SignalType.RPS, 10.0)
INFLIGHT2 = config.SignalTarget(config.SignalType.CONCURRENCY, 2.0)

SIGNAL_SETS = {
    "cpu": (CPU70,),
    "cpu+p99": (CPU70, P99),
    "rps": (RPS10,),
    "concurrency": (INFLIGHT2,),
    "all": (CPU70, P99, RPS10, INFLIGHT2),
}


def _idle(min_replicas: int) -> Callable[[float, int], Snapshot]:
    def snapshot_at(now: float, current: int) -> Snapshot:
        return make_snapshot(
            now,
            current=current,
            min_replicas=min_replicas,
            max_replicas=10,
            rps=0.0,
            cpu_usage_cores=0.01 * current,  # the servers' own idle CPU
            latency_ms={},
            concurrency=0.0,
            request_cores=0.5,
        )

    return snapshot_at


@pytest.mark.parametrize("signals", list(SIGNAL_SETS))
@pytest.mark.parametrize(("min_replicas", "initial"), [(1, 1), (2, 2), (1, 4), (2, 5)])
def test_an_idle_service_holds_at_least_min_and_never_grows(
    signals: str, min_replicas: int, initial: int
) -> None:
    cfg = config.AutoscalingConfig(
        min_replicas=min_replicas,
        max_replicas=10,
        signals=SIGNAL_SETS[signals],
        threads_per_replica=2,
        cold_start_s=6.0,
    )
    policy = engine.EnginePolicy(cfg)
    timeline = drive(policy, _idle(min_replicas), start=1000.0, ticks=300, initial=initial)
    replicas = [d.replicas for _, d in timeline]
    assert min(replicas) >= min_replicas
    assert max(replicas) <= initial
    if initial == min_replicas:
        assert set(replicas) == {min_replicas}  # minReplicas hold
