"""metadata: the subset of Kubernetes ObjectMeta servectl reads."""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, Field

from servectl.api.models.common import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    MODEL_SERVICE_NAME_MAX,
    Int,
    SpecModel,
)


class ObjectMeta(SpecModel):
    """The subset of Kubernetes ObjectMeta servectl reads; server-set fields round-trip."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN,
        description="Object name, unique in its namespace.",
        examples=["resnet"],
    )
    namespace: str = Field(default="default", min_length=1, max_length=63, pattern=DNS1123_LABEL)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # Set by the API server. Declared so objects read back from a cluster validate,
    # while a misspelled field a user writes is still rejected.
    uid: str | None = None
    resource_version: str | None = None
    generation: Int | None = None
    creation_timestamp: AwareDatetime | None = None
    deletion_timestamp: AwareDatetime | None = None
    generate_name: str | None = None
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)
    managed_fields: list[dict[str, Any]] = Field(default_factory=list)


class ModelServiceMeta(ObjectMeta):
    """ObjectMeta whose name can also name the per-revision Services and Deployments."""

    name: str = Field(
        min_length=1,
        max_length=MODEL_SERVICE_NAME_MAX,
        pattern=DNS1035_LABEL,
        description="Object name; prefixes each revision's Deployment and Service.",
        examples=["resnet"],
    )
