"""The ModelService document: spec (model, runtime, autoscaling, rollout, routing) and
status.

``Resource`` is either top-level kind, as a file may hold both.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from servectl.api.models.autoscaling import AutoscalingSpec
from servectl.api.models.common import SpecModel, cel_rules, spec_error
from servectl.api.models.meta import ModelServiceMeta
from servectl.api.models.rollout import RolloutSpec
from servectl.api.models.routing import RoutingSpec
from servectl.api.models.runtime import ModelRef, RuntimeSpec
from servectl.api.models.scalingpolicy import ScalingPolicy
from servectl.api.models.status import ModelServiceStatus
from servectl.autoscaling import config


class ModelServiceSpec(SpecModel):
    """What to serve, how to scale it, and how to roll out new versions."""

    model_config = cel_rules(
        (
            "!has(self.autoscaling) || !has(self.autoscaling.signals)"
            " || !self.autoscaling.signals.exists(s, s.type == 'gpu')"
            " || (has(self.runtime) && has(self.runtime.resources)"
            " && has(self.runtime.resources.gpu) && self.runtime.resources.gpu > 0)",
            "a gpu signal needs runtime.resources.gpu >= 1",
        ),
        (
            "!has(self.rollout) || !has(self.rollout.surgeBudget)"
            " || !has(self.rollout.surgeBudget.gpus) || !has(self.runtime)"
            " || !has(self.runtime.resources) || !has(self.runtime.resources.gpu)"
            " || self.rollout.surgeBudget.gpus >= self.runtime.resources.gpu",
            "surgeBudget.gpus must fit at least one replica's GPUs",
        ),
    )

    model: ModelRef = Field(description="The model to serve.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="How replicas run.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        description=(
            f"Omitted: {config.AutoscalingConfig.min_replicas}-"
            f"{config.AutoscalingConfig.max_replicas} replicas on the default signals."
        ),
    )
    rollout: RolloutSpec | None = Field(
        default=None, description="How new versions roll out: strategy, steps, analysis."
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="Kubernetes, through a Gateway: the hostnames of the service's routes.",
    )

    @model_validator(mode="after")
    def _gpu_signal_needs_gpu(self) -> Self:
        for index, signal in enumerate(self.autoscaling.signals):
            if signal.type is config.SignalType.GPU and self.runtime.resources.gpu == 0:
                raise spec_error(
                    "a gpu signal needs replicas with a GPU",
                    field=("autoscaling", "signals", index, "type"),
                    fix="set runtime.resources.gpu >= 1, or use another signal type",
                )
        return self

    @model_validator(mode="after")
    def _surge_fits_a_replica(self) -> Self:
        budget = None if self.rollout is None else self.rollout.surge_budget
        per_replica = self.runtime.resources.gpu
        if budget is not None and budget.gpus is not None and budget.gpus < per_replica:
            raise spec_error(
                f"surgeBudget.gpus ({budget.gpus}) cannot fit one new replica, which needs "
                f"{per_replica} GPU(s)",
                field=("rollout", "surgeBudget", "gpus"),
                fix=f"set gpus >= {per_replica} (runtime.resources.gpu), or leave gpus out "
                "to limit the surge by replicas only",
            )
        return self


class ModelService(SpecModel):
    """A TensorFlow model served, autoscaled and rolled out by servectl."""

    api_version: Literal["servectl.io/v1alpha1"] = "servectl.io/v1alpha1"
    kind: Literal["ModelService"] = "ModelService"
    metadata: ModelServiceMeta
    spec: ModelServiceSpec
    status: ModelServiceStatus | None = None


Resource = ModelService | ScalingPolicy
