"""Validation edge cases: each odd input still gets an issue with its path and a fix."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from servectl.api import models, validation
from servectl.autoscaling import cel_policy, config
from tests.unit.api.helpers import Edit


def issues_of(doc: object) -> dict[str, validation.Issue]:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    return {issue.path: issue for issue in caught.value.issues}


# (case id, edits to the resnet example, issue path, text in the message, text in the fix)
CASES: list[tuple[str, dict[str, object], str, str, str]] = [
    (
        "boolean written as a word",
        {"spec.rollout.steps[0]": {"setCanaryScale": {"matchTrafficWeight": "yes"}}},
        "spec.rollout.steps[0].setCanaryScale.matchTrafficWeight",
        "expected true or false, got string 'yes'",
        "write true or false",
    ),
    (
        "canary scale with two sizes",
        {"spec.rollout.steps[0]": {"setCanaryScale": {"replicas": 2, "weight": 20}}},
        "spec.rollout.steps[0].setCanaryScale",
        "exactly one of replicas, weight, matchTrafficWeight",
        "e.g. {setCanaryScale: {replicas: 2}}",
    ),
    (
        "negative cpu request",
        {"spec.runtime.resources.cpu": -1},
        "spec.runtime.resources.cpu",
        "cannot be negative, got -1",
        "use a positive quantity",
    ),
    (
        "more signals than signal types",
        {"spec.autoscaling.signals": [{"type": "cpu", "targetUtilization": 70}] * 6},
        "spec.autoscaling.signals",
        "too many items",
        "keep at most 5 item(s)",
    ),
    (
        "empty rate policy list",
        {"spec.autoscaling.behavior.scaleUp.policies": []},
        "spec.autoscaling.behavior.scaleUp.policies",
        "needs at least 1 item(s)",
        "add an item or leave the field out",
    ),
    (
        "empty inline expression",
        {"spec.autoscaling.policy": {"cel": ""}},
        "spec.autoscaling.policy.cel",
        "must not be empty",
        "write a non-empty value",
    ),
    (
        "forecast periods that share no bucket",
        {"spec.autoscaling.forecast": {"periodsSeconds": [86400, 86401]}},
        "spec.autoscaling.forecast.periodsSeconds",
        "is not a whole number of 300 s buckets",
        "[86400, 604800]",
    ),
    (
        "forecast slack of half a day",
        {"spec.autoscaling.forecast": {"timingSlackBuckets": 144}},
        "spec.autoscaling.forecast.timingSlackBuckets",
        "timingSlackBuckets (144) must be under half the shortest period (288 buckets)",
        "e.g. 6",
    ),
    (
        "timestamp that is not one",
        {"metadata.creationTimestamp": "yesterday"},
        "metadata.creationTimestamp",
        "expected an RFC 3339 timestamp, got string 'yesterday'",
        "with a timezone",
    ),
    (
        "timestamp without a zone",
        {"metadata.creationTimestamp": "2025-01-31T12:00:00"},
        "metadata.creationTimestamp",
        "expected an RFC 3339 timestamp",
        "write e.g. 2025-01-31T12:00:00Z",
    ),
]


@pytest.mark.parametrize(
    ("changes", "path", "message", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_issue_names_path_message_and_fix(
    edit: Edit, changes: dict[str, object], path: str, message: str, fix: str
) -> None:
    issues = issues_of(edit(changes))
    assert path in issues, f"expected an issue at {path}, got {list(issues)}"
    assert message in issues[path].message
    assert fix in issues[path].fix


def test_a_server_set_timestamp_with_a_zone_is_accepted(edit: Edit) -> None:
    service = validation.load_model_service(
        edit({"metadata.creationTimestamp": "2025-01-31T12:00:00Z"})
    )
    assert service.metadata.creation_timestamp is not None
    assert service.metadata.creation_timestamp.year == 2025


def test_an_unquoted_whole_cpu_count_and_a_canary_scale_load(edit: Edit) -> None:
    service = validation.load_model_service(
        edit(
            {
                "spec.runtime.resources.cpu": 4,
                "spec.rollout.steps[0]": {"setCanaryScale": {"replicas": 2}},
            }
        )
    )
    assert service.spec.runtime.resources.cpu_cores() == 4.0
    assert service.spec.rollout is not None
    canary_scale = service.spec.rollout.steps[0].set_canary_scale
    assert canary_scale is not None and canary_scale.replicas == 2


def test_an_unquoted_yaml_date_is_reported_as_a_date() -> None:
    # YAML reads `name: 2024-01-01` as a date, not a string: say so, and say to quote it.
    doc = yaml.safe_load(
        "metadata: {name: resnet, labels: {release: 2024-01-01}}\n"
        "spec: {model: {name: resnet, basePath: /models/resnet}}\n"
    )
    issue = issues_of(doc)["metadata.labels.release"]
    assert issue.message == "expected a string, got date"
    assert issue.fix == "quote the value"


def test_an_unexpected_input_kind_still_names_the_field() -> None:
    # `!!binary` gives bytes; undecodable ones fail in a way the table has no entry for.
    doc = yaml.safe_load(
        "metadata: {name: !!binary /w==}\nspec: {model: {name: resnet, basePath: /m}}\n"
    )
    issue = issues_of(doc)["metadata.name"]
    assert "string" in issue.message
    assert issue.fix == "see docs/resource-model.md for this field"


@pytest.mark.parametrize(
    ("doc", "described"),
    [
        (None, "null"),
        ([{"kind": "ModelService"}], "a list"),
        (3.5, "number 3.5"),
        ("x", "string 'x'"),
    ],
)
def test_load_document_refuses_a_non_object(doc: object, described: str) -> None:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_document(doc)
    (issue,) = caught.value.issues
    assert issue.path == "(document)"
    assert issue.message == f"expected an object, got {described}"
    assert issue.fix == "write a mapping with apiVersion, kind, metadata and spec"


def test_load_document_says_when_kind_is_missing() -> None:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_document({"metadata": {"name": "x"}})
    (issue,) = caught.value.issues
    assert (issue.path, issue.message) == ("kind", "kind is missing")


def test_load_document_reads_a_scaling_policy() -> None:
    policy = validation.load_document(
        {
            "apiVersion": "servectl.io/v1alpha1",
            "kind": "ScalingPolicy",
            "metadata": {"name": "floor"},
            "spec": {"description": "a floor", "cel": "max(recommended, 2)"},
        }
    )
    assert isinstance(policy, models.ScalingPolicy)
    assert policy.spec.cel == "max(recommended, 2)"


# ----------------------------------------------------------------------------- CEL


@pytest.mark.parametrize(
    ("cel", "message"),
    [
        ("// only a comment", "CEL does not compile: empty expression"),
        ("1 + " * 3000 + "1", "CEL does not compile: the expression is 12001 characters"),
    ],
    ids=["only a comment", "too long"],
)
def test_cel_errors_without_a_position_have_no_position(edit: Edit, cel: str, message: str) -> None:
    issue = issues_of(edit({"spec.autoscaling.policy": {"cel": cel}}))[
        "spec.autoscaling.policy.cel"
    ]
    assert issue.message.startswith(message)  # "compile: ...", not "compile at ...: ..."


@pytest.mark.parametrize(
    ("line", "column", "prefix"),
    [(2, 7, "CEL does not compile at 2:7: "), (2, None, "CEL does not compile at line 2: ")],
)
def test_cel_error_position_is_as_precise_as_the_compiler_was(
    edit: Edit,
    monkeypatch: pytest.MonkeyPatch,
    line: int,
    column: int | None,
    prefix: str,
) -> None:
    # The compiler may know a line but not a column; the issue must not invent one.
    def compile_failing(expression: str) -> Any:
        raise cel_policy.PolicyCompileError("bad token", line, column)

    monkeypatch.setattr(cel_policy, "compile_expression", compile_failing)
    issue = issues_of(edit({"spec.autoscaling.policy": {"cel": "recommended"}}))[
        "spec.autoscaling.policy.cel"
    ]
    assert issue.message == prefix + "bad token"


def test_compile_error_text_with_a_line_only() -> None:
    assert str(cel_policy.PolicyCompileError("bad", line=3)) == "line 3: bad"
    assert str(cel_policy.PolicyCompileError("bad")) == "bad"


# ----------------------------------------------------------------------------- models


def test_parse_quantity_rejects_what_is_not_a_quantity() -> None:
    with pytest.raises(ValueError, match="not a quantity: '4GB'"):
        models.parse_quantity("4GB")


def test_describe_rules_says_when_a_direction_is_disabled() -> None:
    rules = config.ScalingRules(
        stabilization_s=0.0,
        policies=(config.RatePolicy(config.RateType.PODS, 1, 60.0),),
        select=config.SelectPolicy.DISABLED,
    )
    assert models.describe_rules(rules) == "no window, disabled"
    windowed = config.ScalingRules(
        stabilization_s=300.0,
        policies=(config.RatePolicy(config.RateType.PERCENT, 50, 30.0),),
        select=config.SelectPolicy.MIN,
    )
    assert models.describe_rules(windowed) == "300 s window, min(50 % / 30 s)"


def test_forecast_knobs_reach_the_engine(edit: Edit) -> None:
    def forecast_of(changes: dict[str, object]) -> object:
        service = validation.load_model_service(edit(changes))
        return service.spec.autoscaling.to_config().forecast

    default = forecast_of({})
    assert default is not None and default.timing_slack_buckets == 6
    told = forecast_of({"spec.autoscaling.forecast": {"timingSlackBuckets": 0}})
    assert told is not None and told.timing_slack_buckets == 0
    assert told.periods_s == (86400.0, 604800.0)
    assert forecast_of({"spec.autoscaling.forecast": {"enabled": False}}) is None
