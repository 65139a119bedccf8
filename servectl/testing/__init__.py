"""Public test helpers, for servectl's tests and yours; none of them needs pytest.

- here: :func:`make_snapshot` builds a policy's input, :func:`drive` runs a policy over
  time without a clock;
- :mod:`servectl.testing.exposition`: Prometheus text shaped like cAdvisor,
  kube-state-metrics, dcgm-exporter and TF Serving, and a reader for exposition;
- :mod:`servectl.testing.exporters`: fake exporters on loopback ports, and
  :class:`~servectl.testing.exporters.Scenario`, pods whose counters grow at set rates
  for a real Prometheus to scrape;
- :mod:`servectl.testing.replicas`: fake model-server replicas (REST and gRPC answering
  their name) for router tests and benches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from servectl.autoscaling.decision import Decision
from servectl.autoscaling.policy import Policy, State
from servectl.autoscaling.snapshot import PodSample, Replicas, Signals, Snapshot


def make_snapshot(
    time: float = 1_000.0,
    *,
    current: int = 4,
    ready: int | None = None,
    min_replicas: int = 1,
    max_replicas: int = 50,
    rps: float | None = None,
    cpu_usage_cores: float | None = None,
    cpu_utilization: float | None = None,
    concurrency: float | None = None,
    gpu_duty_cycle: float | None = None,
    latency_ms: Mapping[str, float] | None = None,
    error_rate: float | None = None,
    age_s: float = 0.0,
    request_cores: float = 2.0,
    pods: tuple[PodSample, ...] | None = None,
) -> Snapshot:
    """A snapshot with ``ready`` identical pods (``current`` by default)."""
    ready = current if ready is None else ready
    if pods is None:
        per_pod = None if cpu_usage_cores is None or ready == 0 else cpu_usage_cores / ready
        pods = tuple(
            PodSample(
                name=f"pod-{i}",
                ready=i < ready,
                start_time=0.0,
                cpu_usage_cores=per_pod if i < ready else None,
                cpu_request_cores=request_cores,
            )
            for i in range(current)
        )
    return Snapshot(
        time=time,
        replicas=Replicas(current=current, ready=ready, min=min_replicas, max=max_replicas),
        signals=Signals(
            cpu_utilization=cpu_utilization,
            cpu_usage_cores=cpu_usage_cores,
            gpu_duty_cycle=gpu_duty_cycle,
            rps=rps,
            concurrency=concurrency,
            latency_ms=dict(latency_ms or {}),
            error_rate=error_rate,
            age_s=age_s,
        ),
        pods=pods,
    )


def drive(
    policy: Policy,
    snapshot_at: Callable[[float, int], Snapshot],
    *,
    start: float,
    ticks: int,
    initial: int,
    state: State | None = None,
) -> list[tuple[float, Decision]]:
    """Call ``policy`` every ``policy.period_s`` for ``ticks`` ticks, applying each decision.

    ``snapshot_at(t, current)`` builds the snapshot seen at ``t`` given the replica count
    applied; state is carried like the controller does (from ``state`` if given).
    """
    state = dict(state) if state is not None else policy.initial_state()
    current = initial
    timeline: list[tuple[float, Decision]] = []
    for i in range(ticks):
        now = start + i * policy.period_s
        decision, state = policy.decide(snapshot_at(now, current), state)
        current = decision.replicas
        timeline.append((now, decision))
    return timeline
