"""``controller.observe``: the cycle's Observed from a metrics snapshot and the backend's
revisions."""

from __future__ import annotations

import pytest

from servectl.autoscaling.snapshot import PodSample, Signals
from servectl.controller.observe import ready_cpu


def test_cpu_counts_only_the_ready_replicas_when_the_backend_names_them() -> None:
    """A replica loading its model burns CPU nobody asked for: counted, it would read as
    load and order more replicas, which load and burn more (the HPA ignores unready pods'
    CPU for the same reason)."""
    pods = (
        PodSample("a", cpu_usage_cores=0.2, cpu_request_cores=0.5),
        PodSample("b", cpu_usage_cores=0.5, cpu_request_cores=0.5),  # loading TensorFlow
    )
    signals = Signals(cpu_usage_cores=0.7, cpu_utilization=70.0, rps=10.0)
    counted, marked = ready_cpu(signals, pods, frozenset({"a"}))
    assert counted.cpu_usage_cores == pytest.approx(0.2)
    assert counted.cpu_utilization == pytest.approx(40.0)
    assert counted.rps == 10.0
    assert [p.ready for p in marked] == [True, False]
    # No ready pod with a sample yet: CPU is unknown, not the loading replicas' burn.
    unknown, _ = ready_cpu(signals, pods, frozenset())
    assert unknown.cpu_usage_cores is None and unknown.cpu_utilization is None
    assert unknown.rps == 10.0
