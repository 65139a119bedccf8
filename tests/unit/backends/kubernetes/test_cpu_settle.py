"""When a pod's CPU starts to count as load on Kubernetes: once its rate window holds
nothing from before it was ready (a model's load burns CPU no request asked for)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from servectl.api import models
from servectl.backends.kubernetes import objects as obj
from servectl.backends.kubernetes.backend import CPU_SETTLE_S, cpu_settle_s
from servectl.backends.kubernetes.fleet import KubeFleet
from servectl.controller.driver import Listed
from servectl.metrics.config import MetricsConfig


def test_a_pod_counts_once_its_rate_window_is_past_its_readiness() -> None:
    assert cpu_settle_s(MetricsConfig()) == 70.0  # the default 1 m window + 10 s
    assert cpu_settle_s(MetricsConfig(rateWindow="2m")) == 130.0
    # A short window: the floor still holds (TF Serving's first requests are slow).
    assert cpu_settle_s(MetricsConfig(rateWindow="5s")) == CPU_SETTLE_S
    assert cpu_settle_s(None) == CPU_SETTLE_S  # no Prometheus: no CPU to count anyway


def _fleet(source: Any) -> KubeFleet:
    return KubeFleet(
        None,  # type: ignore[arg-type]  # open() sends nothing
        {},
        options=obj.Options(),
        source=source,
        wall_clock=lambda: 0.0,
        checkpoint_s=60.0,
    )


def test_the_fleet_gives_each_service_the_settle_time_of_its_metrics_window() -> None:
    service = models.ModelService.model_validate(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ModelService",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"model": {"name": "m", "basePath": "pvc://models/m", "version": 1}},
        }
    )
    listed = Listed("ns", "m", 1, service)
    for source, settle in (
        (SimpleNamespace(config=MetricsConfig(rateWindow="90s")), 100.0),
        (None, CPU_SETTLE_S),
    ):
        fleet = _fleet(source)
        fleet._docs[listed.key] = (None, {"metadata": {}, "status": {}})  # type: ignore[assignment]
        assert fleet.open(listed).cpu_settle_s == settle
