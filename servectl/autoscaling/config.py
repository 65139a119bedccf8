"""Typed autoscaling configuration: what a ModelService's ``spec.autoscaling`` becomes.

The API layer (pydantic, user-facing validation) converts specs into these frozen
values; the pure engine only ever sees these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from servectl.autoscaling.forecast import ForecastConfig


class SignalType(enum.StrEnum):
    CPU = "cpu"  # target: utilization percent of the CPU request
    GPU = "gpu"  # target: duty cycle percent
    LATENCY = "latency"  # target: milliseconds at `percentile`
    RPS = "rps"  # target: requests/s per replica
    CONCURRENCY = "concurrency"  # target: in-flight requests per replica


class Mode(enum.StrEnum):
    ACTIVE = "active"
    RECOMMEND = "recommend"  # decide and record, never act


class Routing(enum.StrEnum):
    """How the router in front spreads a revision's requests over its replicas.

    The engine sizes a backlog's drain by it: under round robin a queue stays on the
    replicas it was routed to and each keeps getting its share of new requests, so more
    replicas drain it faster; under least request new requests go to the emptiest (new)
    replicas, so the backlogged ones drain at full speed and capacity beyond what takes
    the new requests drains nothing.
    """

    ROUND_ROBIN = "round_robin"  # a Kubernetes Service (kube-proxy)
    LEAST_REQUEST = "least_request"  # HAProxy leastconn, Envoy LEAST_REQUEST


class RateType(enum.StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(enum.StrEnum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class SignalTarget:
    type: SignalType
    target: float
    percentile: float = 99.0  # latency only


@dataclass(frozen=True)
class RatePolicy:
    """At most ``value`` pods (or percent) of change per ``period_s`` (HPA semantics)."""

    type: RateType
    value: int
    period_s: float


@dataclass(frozen=True)
class ScalingRules:
    """One direction of HPA-style ``behavior``."""

    stabilization_s: float
    policies: tuple[RatePolicy, ...]
    select: SelectPolicy = SelectPolicy.MAX


def hpa_default_scale_up() -> ScalingRules:
    """Kubernetes HPA v2 defaults: no window; max(100 % / 15 s, 4 pods / 15 s)."""
    return ScalingRules(
        stabilization_s=0.0,
        policies=(RatePolicy(RateType.PERCENT, 100, 15.0), RatePolicy(RateType.PODS, 4, 15.0)),
        select=SelectPolicy.MAX,
    )


def hpa_default_scale_down() -> ScalingRules:
    """Kubernetes HPA v2 defaults: 300 s window; 100 % / 15 s."""
    return ScalingRules(
        stabilization_s=300.0,
        policies=(RatePolicy(RateType.PERCENT, 100, 15.0),),
        select=SelectPolicy.MAX,
    )


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules = field(default_factory=hpa_default_scale_up)
    scale_down: ScalingRules = field(default_factory=hpa_default_scale_down)


def servectl_default_behavior() -> Behavior:
    """servectl's defaults: fast up (the panic rail handles bursts), cautious down.

    Up: max(100 % / 10 s, 4 pods / 10 s), no window. Down: 120 s window, at most
    50 % / 30 s. The longer-than-tick down window is what keeps a noisy steady load from
    flapping; rate limits keep one bad reading from halving capacity.
    """
    return Behavior(
        scale_up=ScalingRules(
            stabilization_s=0.0,
            policies=(RatePolicy(RateType.PERCENT, 100, 10.0), RatePolicy(RateType.PODS, 4, 10.0)),
        ),
        scale_down=ScalingRules(
            stabilization_s=120.0,
            policies=(RatePolicy(RateType.PERCENT, 50, 30.0),),
        ),
    )


@dataclass(frozen=True)
class AutoscalingConfig:
    """servectl's default policy configuration (see docs/autoscaling.md).

    ``cold_start_s`` is how long a new replica takes to become ready; the engine
    projects demand that far ahead and does not re-order capacity already starting.
    ``panic_threshold``: short-window demand over ready capacity above which the engine
    enters panic (scale on the short window, never down) for ``panic_hold_s``.
    """

    min_replicas: int = 1
    max_replicas: int = 10
    signals: tuple[SignalTarget, ...] = (SignalTarget(SignalType.CPU, 70.0),)
    mode: Mode = Mode.ACTIVE
    behavior: Behavior = field(default_factory=servectl_default_behavior)
    # The tolerance band (engine._tolerate): down only to a count with ``tolerance``
    # headroom over the ask; up once the ask is ``up_tolerance`` above the running count.
    tolerance: float = 0.1
    up_tolerance: float = 0.03
    period_s: float = 2.0
    cold_start_s: float = 30.0
    # Warm standby replicas kept beside the serving ones (docs/standby.md): the first
    # ``standby`` replicas of a scale-up serve ``activation_s`` after it, not a cold start.
    standby: int = 0
    activation_s: float = 1.0
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    panic_hold_s: float = 60.0
    threads_per_replica: int = 1  # parallel requests one replica serves (queueing model)
    routing: Routing = Routing.ROUND_ROBIN  # set by the backend, not the spec
    # Predictive pre-scaling over the service's own request-rate history (daily and
    # weekly seasons by default; docs/forecasting.md); None turns it off.
    forecast: ForecastConfig | None = field(default_factory=ForecastConfig)
