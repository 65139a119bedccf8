"""The ScalingPolicy document: a reusable CEL policy, referenced from ModelServices by name."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from servectl.api.models.common import CEL_IDENTIFIER, Number, SpecModel
from servectl.api.models.meta import ObjectMeta


class ScalingPolicySpec(SpecModel):
    """A reusable CEL policy, referenced from ModelServices by name."""

    description: str = Field(min_length=1, description="What the policy does, in one line.")
    cel: str = Field(
        min_length=1, description="CEL expression returning replicas or {replicas, reason}."
    )
    params: dict[Annotated[str, Field(pattern=CEL_IDENTIFIER)], Number] = Field(
        default_factory=dict, description="Default values for params.* in the expression."
    )


class ScalingPolicy(SpecModel):
    """A named custom scaling policy."""

    api_version: Literal["servectl.io/v1alpha1"] = "servectl.io/v1alpha1"
    kind: Literal["ScalingPolicy"] = "ScalingPolicy"
    metadata: ObjectMeta
    spec: ScalingPolicySpec
