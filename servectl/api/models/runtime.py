"""spec.model and spec.runtime: which TensorFlow model to serve, and how each replica runs."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from servectl.api.models.common import (
    NO_WHITESPACE,
    TF_MODEL_NAME,
    Int,
    Quantity,
    SpecModel,
    parse_quantity,
    spec_error,
)
from servectl.api.models.pod import PodOptions


class ModelRef(SpecModel):
    """Which exported TensorFlow model to serve (TF Serving layout)."""

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=TF_MODEL_NAME,
        description="Model name as TF Serving exposes it (/v1/models/<name>).",
        examples=["resnet"],
    )
    base_path: str = Field(
        min_length=1,
        pattern=NO_WHITESPACE,
        description="Directory holding one numbered subdirectory per version "
        "(<basePath>/<version>/saved_model.pb); s3://, gs://, or a local path.",
        examples=["s3://models/resnet"],
    )
    version: Int | None = Field(
        default=None,
        ge=0,
        description="Version to serve; omitted means the latest version under basePath.",
        examples=[3],
    )


# ----------------------------------------------------------------------------- spec.runtime


class Resources(SpecModel):
    """Per-replica resource requests (the denominators of utilization signals)."""

    cpu: Quantity = Field(
        default="1", description='CPU request per replica, e.g. "2" or "500m".', examples=["2"]
    )
    memory: Quantity = Field(
        default="2Gi", description="Memory request per replica, e.g. 4Gi.", examples=["4Gi"]
    )
    gpu: Int = Field(default=0, ge=0, description="Whole GPUs per replica.")

    @model_validator(mode="after")
    def _positive_requests(self) -> Self:
        # CPU utilization is usage over request: a zero request makes it undefined.
        for name in ("cpu", "memory"):
            if parse_quantity(getattr(self, name)) <= 0:
                raise spec_error(
                    f"{name} request must be greater than zero",
                    field=(name,),
                    fix='set a positive quantity, e.g. cpu: "1", memory: 2Gi',
                )
        return self

    def cpu_cores(self) -> float:
        """The CPU request in cores ("500m" -> 0.5)."""
        return float(parse_quantity(self.cpu))

    def memory_bytes(self) -> int:
        """The memory request in bytes ("4Gi" -> 4294967296)."""
        return int(parse_quantity(self.memory))


class Batching(SpecModel):
    """TF Serving server-side batching (--enable_batching)."""

    max_batch_size: Int = Field(ge=1, description="Largest batch TF Serving forms.", examples=[32])
    batch_timeout_micros: Int = Field(
        ge=0, description="How long a batch waits to fill, in microseconds.", examples=[2000]
    )


class RuntimeSpec(SpecModel):
    """How each replica runs."""

    image: str = Field(
        default="tensorflow/serving:2.19.0",
        min_length=1,
        pattern=NO_WHITESPACE,
        description="Model server image (in the cluster).",
    )
    resources: Resources = Field(default_factory=Resources, description="Requests per replica.")
    batching: Batching | None = Field(default=None, description="Omitted: batching off.")
    load_timeout_seconds: Int = Field(
        default=600,
        ge=10,
        le=3600,
        description="The longest a replica may take to load its model and open its ports "
        "(TF Serving opens them only after loading) before it is restarted: on Kubernetes, "
        "the startup probe's budget; liveness checks begin after it passes.",
    )
    pod: PodOptions | None = Field(
        default=None,
        description="Kubernetes: the model pods' service account, env, volumes, scheduling "
        "and labels (spec.runtime.pod); the local runtime has no pods and ignores it.",
    )
