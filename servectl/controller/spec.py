"""What the loop needs of a ModelService, and the autoscaling policy it names.

:func:`service_spec` and :func:`policy_for` are the one place where a ``ModelService``
becomes what :func:`servectl.controller.decide.decide` runs on: the CLI, the simulator and
every backend call them, so a spec means the same thing everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from servectl.api import models, names
from servectl.autoscaling import cel_policy, config, engine, registry
from servectl.autoscaling import policy as policy_mod

DEFAULT_SURGE = 0.25
"""Surge budget without ``surgeBudget``: this share of the demand (Deployment maxSurge)."""


@dataclass(frozen=True)
class ServiceSpec:
    """What the loop needs of a ModelService."""

    name: str
    rollout: models.RolloutSpec = field(default_factory=models.RolloutSpec)
    min_replicas: int = 1
    max_replicas: int = 100
    gpus_per_replica: int = 0
    mode: config.Mode = config.Mode.ACTIVE
    # Warm standby replicas per revision that takes traffic (docs/standby.md):
    # spec.autoscaling.standby.replicas, the one source of the planner's pools and the
    # engine's knowledge of them (AutoscalingSpec.to_config); the simulator sets it too.
    standby: int = 0

    def revision_name(self, version: int) -> str:
        return names.revision_name(self.name, version)

    def surge_replicas(self, demand: int) -> int | None:
        """The surge budget in replicas (the tighter of its replicas and gpus bounds).

        Omitted: a quarter of the current demand (at least one replica), like a
        Deployment's default maxSurge of 25 %, so a rollout never doubles the fleet.
        Blue/green holds a full second fleet by design and has no budget.
        """
        budget = self.rollout.surge_budget
        if self.rollout.strategy is models.RolloutStrategy.BLUE_GREEN:
            return None
        if budget is None:
            return max(1, math.ceil(demand * DEFAULT_SURGE))
        bounds = []
        if budget.replicas is not None:
            bounds.append(budget.replicas)
        if budget.gpus is not None and self.gpus_per_replica > 0:
            bounds.append(budget.gpus // self.gpus_per_replica)
        return min(bounds) if bounds else None


def service_spec(service: models.ModelService) -> ServiceSpec:
    """The loop's view of ``service``: name, rollout, replica bounds, GPUs, mode."""
    spec = service.spec
    return ServiceSpec(
        name=service.metadata.name,
        rollout=spec.rollout if spec.rollout is not None else models.RolloutSpec(),
        min_replicas=spec.autoscaling.min_replicas,
        max_replicas=spec.autoscaling.max_replicas,
        gpus_per_replica=spec.runtime.resources.gpu,
        mode=spec.autoscaling.mode,
        standby=spec.autoscaling.standby_replicas,
    )


class PolicySpecError(ValueError):
    """The spec's policy cannot be built; ``field`` names where, the message says the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def custom_policy(
    service: models.ModelService, library: Mapping[str, models.ScalingPolicy]
) -> engine.CustomPolicy | None:
    """The spec's CEL policy (inline, or ``ref`` looked up in ``library``), compiled."""
    autoscaling = service.spec.autoscaling
    try:
        resolved = autoscaling.resolve_policy(library)
    except models.UnknownPolicyError as exc:
        raise PolicySpecError("spec.autoscaling.policy.ref", str(exc)) from exc
    if resolved is None:
        return None
    where = "spec.autoscaling.policy." + ("ref" if resolved.ref is not None else "cel")
    try:
        program = cel_policy.compile_expression(resolved.cel)
    except cel_policy.PolicyCompileError as exc:
        raise PolicySpecError(where, f"CEL policy {resolved.name}: {exc}") from exc
    return engine.CustomPolicy(resolved.name, program, dict(resolved.params))


def policy_for(
    service: models.ModelService,
    library: Mapping[str, models.ScalingPolicy] | None = None,
    *,
    name: str = "servectl",
    routing: config.Routing = config.Routing.ROUND_ROBIN,
) -> policy_mod.Policy:
    """The autoscaling policy ``service`` asks for: servectl's engine with the spec's
    signals, behavior and custom CEL policy, or (``name``) a baseline on the same targets.
    ``routing`` is how the backend's router spreads a revision's requests (the engine
    sizes a backlog's drain by it).

    Raises :class:`PolicySpecError` naming the field when the policy cannot be built.
    """
    cfg = dataclasses.replace(service.spec.autoscaling.to_config(), routing=routing)
    custom = custom_policy(service, library or {})
    if custom is not None and name != "servectl":
        raise PolicySpecError(
            "spec.autoscaling.policy",
            f"a custom CEL policy wraps servectl's engine, not the {name} baseline",
        )
    try:
        return registry.build(name, cfg, custom)
    except registry.UnknownPolicyError as exc:
        raise PolicySpecError("policy", str(exc)) from exc


@dataclass(frozen=True)
class RouteMatch:
    """The A/B test's match (or blue/green's preview header) every router applies: a
    header, or a cookie."""

    kind: str  # "header" | "cookie"
    name: str
    value: str


def route_match(spec: models.ModelServiceSpec) -> RouteMatch | None:
    """Which requests the header revision gets, or None when the spec routes none."""
    rollout = spec.rollout
    if rollout is None:
        return None
    header: models.HeaderMatch | None = None
    cookie: models.CookieMatch | None = None
    if rollout.ab_test is not None:
        header, cookie = rollout.ab_test.match.header, rollout.ab_test.match.cookie
    elif rollout.blue_green is not None:
        header = rollout.blue_green.preview_header
    if header is not None:
        return RouteMatch("header", header.name, header.value)
    if cookie is not None:
        return RouteMatch("cookie", cookie.name, cookie.value)
    return None


def analysis_checks(rollout: models.RolloutSpec) -> list[models.AnalysisCheck]:
    """Every analysis check of the rollout: the defaults' and each analysis step's."""
    checks = list(rollout.analysis.checks) if rollout.analysis is not None else []
    for step in rollout.steps:
        if step.analysis is not None and step.analysis.checks:
            checks.extend(step.analysis.checks)
    return checks
