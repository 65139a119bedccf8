"""The standard benchmark setup: one service model, one set of targets, four policies.

Fairness (docs/benchmarks.md): servectl is told the service's SLO, which is what a user
states and what HPA and KPA cannot take; the baselines get the per-replica targets a user
would start from, and every policy its own documented defaults for everything else (the
frontier bench then tunes the baselines):

- servectl: the SLO alone (latency p99 <= 150 ms), its default behavior, 2 s tick;
- hpa:      CPU 70 % (Resource Utilization), Kubernetes defaults (15 s sync, 0.1
            tolerance, 300 s scale-down window, 100 %/4 pods per 15 s up);
- kpa:      target concurrency = a replica's threads at Knative's default 70 % target
            utilization, Knative defaults (60 s stable / 6 s panic windows, 200 % panic
            threshold, 1000x up / 2x down rates, 2 s tick);
- oracle:   perfect foresight of the load and the cold start (the lower bound).

Everyone runs on the same arrivals (same seed), the same cold start, min and max.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from servectl.autoscaling import config, registry
from servectl.autoscaling.policy import Policy
from servectl.sim import model, oracle, traces

MIN_REPLICAS = 1
MAX_REPLICAS = 60
CPU_TARGET = 70.0


def service() -> model.ServiceModel:
    return model.ServiceModel()


def engine_routing(routing: model.Routing) -> config.Routing:
    """What the engine is told about the simulated router: least request, or round robin
    (random routing does not steer around a backlog either)."""
    if routing is model.Routing.LEAST_REQUEST:
        return config.Routing.LEAST_REQUEST
    return config.Routing.ROUND_ROBIN


def autoscaling_config(
    svc: model.ServiceModel,
    *,
    latency: bool = True,
    cpu_target: float | None = None,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    standby: int = 0,
) -> config.AutoscalingConfig:
    """servectl's configuration: the service's SLO (p99 <= ``svc.slo_ms``) as its one
    signal, which is what a user states; ``cpu_target`` adds a CPU signal (the
    frontier's sweep of servectl). ``latency=False``: CPU alone at ``cpu_target``
    (default CPU_TARGET), the baselines' target."""
    signals: tuple[config.SignalTarget, ...] = ()
    if cpu_target is not None or not latency:
        cpu = CPU_TARGET if cpu_target is None else cpu_target
        signals += (config.SignalTarget(config.SignalType.CPU, cpu),)
    if latency:
        signals += (config.SignalTarget(config.SignalType.LATENCY, svc.slo_ms, 99.0),)
    return config.AutoscalingConfig(
        min_replicas=MIN_REPLICAS,
        max_replicas=MAX_REPLICAS,
        signals=signals,
        cold_start_s=svc.cold_start_s,
        standby=standby,
        activation_s=svc.activation_s,
        threads_per_replica=svc.threads_per_replica,
        routing=engine_routing(routing),
    )


def kpa_config(svc: model.ServiceModel) -> config.AutoscalingConfig:
    return config.AutoscalingConfig(
        min_replicas=MIN_REPLICAS,
        max_replicas=MAX_REPLICAS,
        signals=(
            config.SignalTarget(config.SignalType.CONCURRENCY, float(svc.threads_per_replica)),
        ),
    )


def with_seasons(cfg: config.AutoscalingConfig, trace: traces.Trace) -> config.AutoscalingConfig:
    """``cfg`` told the trace's own day and week, as a user would set
    ``spec.autoscaling.forecast.periodsSeconds`` for their service: only a trace whose
    days are compressed (``trace.day_s`` under a real day) changes anything, and a
    forecast that is off stays off."""
    if cfg.forecast is None or trace.day_s == 86400:
        return cfg
    seasons = (float(trace.day_s), 7.0 * trace.day_s)
    return dataclasses.replace(cfg, forecast=dataclasses.replace(cfg.forecast, periods_s=seasons))


PolicyFactory = Callable[[traces.Trace], Policy]


def policies(
    svc: model.ServiceModel,
    names: list[str] | None = None,
    *,
    routing: model.Routing = model.Routing.ROUND_ROBIN,
    standby: int = 0,
) -> dict[str, PolicyFactory]:
    """Factories for the named policies (default: all four), in a stable order; servectl
    is told ``routing`` and its ``standby`` pool (the baselines have no such notion)."""
    cfg = autoscaling_config(svc, routing=routing, standby=standby)
    cpu_only = autoscaling_config(svc, latency=False)
    factories: dict[str, PolicyFactory] = {
        "servectl": lambda trace: registry.build("servectl", with_seasons(cfg, trace)),
        "hpa": lambda _trace: registry.build("hpa", cpu_only),
        "kpa": lambda _trace: registry.build("kpa", kpa_config(svc)),
        "oracle": lambda trace: oracle.OraclePolicy(trace, svc),
    }
    if names is None:
        return factories
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(unknown)}; choose from {', '.join(factories)}")
    return {n: factories[n] for n in names}
