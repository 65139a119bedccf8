"""status: what the controller observed and decided, written once per reconcile.

Status models ignore unknown fields (``StatusModel``) so an older CLI can read the
status a newer controller wrote.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import AwareDatetime, Field

from servectl.api.models.common import Int, StatusModel


class ModelState(enum.StrEnum):
    """TF Serving's ModelVersionStatus.State."""

    UNKNOWN = "UNKNOWN"
    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"


class RevisionStatus(StatusModel):
    """One revision (model version) being served."""

    name: str = Field(description="Revision name, <service>-v<version>.")
    version: Int = Field(description="Model version it serves.")
    weight: Int = Field(default=0, ge=0, le=100, description="Percent of traffic it receives.")
    desired_replicas: Int = Field(default=0, ge=0, description="Replicas the planner asks for.")
    ready_replicas: Int = Field(default=0, ge=0, description="Replicas serving now.")
    standby_replicas: Int | None = Field(
        default=None,
        ge=0,
        description="Warm standby replicas kept beside it (loaded, not routed); omitted: none.",
    )
    model_state: ModelState = Field(
        default=ModelState.UNKNOWN, description="TF Serving's state of the version."
    )


class Verdict(enum.StrEnum):
    """An analysis verdict (Argo Rollouts' AnalysisPhase names)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class AnalysisVerdict(StatusModel):
    """The outcome of one analysis step."""

    step: Int = Field(ge=0, description="Index of the analysis step.")
    verdict: Verdict = Field(description="Pending, Running, Successful, Failed, ...")
    message: str = Field(default="", description="Which check decided, with values.")
    samples: Int | None = Field(default=None, ge=0, description="Requests judged.")
    time: AwareDatetime | None = Field(default=None, description="When it was reached.")


class RolloutPhase(enum.StrEnum):
    """Where a rollout stands (``status.rollout.phase``).

    - ``Idle``: no rollout: one revision serves everything.
    - ``Progressing``: the steps are running (capacity, weights, analysis).
    - ``Paused``: waiting for a person (a ``pause`` step without seconds, a blueGreen
      preview without autoPromote, or an analysis that ran out of extensions);
      a person's resume or promote continues.
    - ``Completed``: the new revision serves everything; the old one is being removed.
    - ``Aborted``: a check failed or a person aborted; traffic is back on the stable
      revision. Changing the version starts a new rollout.
    - ``Degraded``: the rollout cannot progress (the new revision's capacity did not
      become ready within progressDeadlineSeconds); stable keeps its traffic.
    """

    IDLE = "Idle"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    COMPLETED = "Completed"
    ABORTED = "Aborted"
    DEGRADED = "Degraded"


class RolloutStatus(StatusModel):
    """Where the rollout stands; enough to resume after a restart."""

    phase: RolloutPhase = Field(
        default=RolloutPhase.IDLE,
        description="Idle, Progressing, Paused, Completed, Aborted or Degraded.",
    )
    step: Int = Field(default=0, ge=0, description="Index of the current step.")
    stable_version: Int | None = Field(
        default=None, ge=0, description="Model version of the stable revision."
    )
    canary_version: Int | None = Field(
        default=None,
        ge=0,
        description="Model version being rolled out (canary, preview or B); absent when Idle.",
    )
    message: str = Field(default="", description="What the rollout is doing or waiting for.")
    winner: Literal["A", "B"] | None = Field(
        default=None, description="abTest: the winning variant, A (stable) or B (new)."
    )
    verdicts: list[AnalysisVerdict] = Field(default_factory=list, description="Per step.")
    state: dict[str, Any] = Field(
        default_factory=dict,
        description="The rollout state machine's persisted state (free-form).",
    )


class AutoscalingStatus(StatusModel):
    """The last autoscaling decision and the policy's state."""

    desired_replicas: Int | None = Field(default=None, ge=0, description="Total replicas wanted.")
    decided_by: str | None = Field(default=None, description="Winning signal, or the policy.")
    reason: str | None = Field(default=None, description="Reason code of the last decision.")
    message: str | None = Field(default=None, description="The decision in words.")
    last_scale_time: AwareDatetime | None = Field(
        default=None, description="When the replica count last changed."
    )
    policy_state: dict[str, Any] = Field(
        default_factory=dict, description="The policy's persisted state (free-form)."
    )


class ConditionType(enum.StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    METRICS_AVAILABLE = "MetricsAvailable"
    SCALING_LIMITED = "ScalingLimited"
    ROUTES_ACCEPTED = "RoutesAccepted"  # Kubernetes with a Gateway: the routes' status


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StatusModel):
    """A Kubernetes-style condition."""

    type: ConditionType = Field(description="Ready, Progressing, Degraded, MetricsAvailable, ...")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason code.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: AwareDatetime | None = Field(
        default=None, description="When status last changed."
    )
    observed_generation: Int | None = Field(
        default=None, description="metadata.generation the condition was computed for."
    )


class ModelServiceStatus(StatusModel):
    """Observed state, written by the controller once per reconcile."""

    observed_generation: Int | None = Field(
        default=None, description="metadata.generation this status reflects."
    )
    revisions: list[RevisionStatus] = Field(default_factory=list, description="Stable first.")
    traffic: str | None = Field(
        default=None,
        description="The traffic split in one line, `<revision>:<percent>` for each revision, "
        "stable first (kubectl's Traffic column: a column shows one value, not a list).",
    )
    rollout: RolloutStatus | None = Field(default=None, description="Rollout progress.")
    autoscaling: AutoscalingStatus | None = Field(default=None, description="Last decision.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, MetricsAvailable, ScalingLimited, "
        "RoutesAccepted (with a Gateway).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    loop: dict[str, Any] = Field(
        default_factory=dict,
        description="The Kubernetes controller's saved loop state (free-form): the rollout "
        "step, the planner's drain clocks and the policy's history a restarted controller "
        "resumes from, and the last rollout command it carried out.",
    )

    def condition(self, condition_type: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type is condition_type), None)
