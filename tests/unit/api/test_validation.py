"""Validation: every bad document names the exact path and a concrete fix."""

from __future__ import annotations

from typing import Any

import pytest

from servectl.api import models, validation
from tests.unit.api.helpers import DELETE, Edit, example

# (case id, edits to the resnet example, expected issue path, text the fix must contain)
CASES: list[tuple[str, dict[str, object], str, str]] = [
    (
        "min above max",
        {"spec.autoscaling.minReplicas": 5, "spec.autoscaling.maxReplicas": 3},
        "spec.autoscaling.minReplicas",
        "set minReplicas <= maxReplicas (now 5 > 3)",
    ),
    (
        "unknown signal type",
        {"spec.autoscaling.signals[1].type": "memory"},
        "spec.autoscaling.signals[1].type",
        "allowed: cpu, gpu, latency, rps, concurrency",
    ),
    (
        "signal without its target",
        {"spec.autoscaling.signals[0]": {"type": "cpu"}},
        "spec.autoscaling.signals[0].targetUtilization",
        "add targetUtilization, e.g. {type: cpu, targetUtilization: 70}",
    ),
    (
        "signal with another type's target",
        {"spec.autoscaling.signals[2].targetPerReplica": 3},
        "spec.autoscaling.signals[2].targetPerReplica",
        "remove targetPerReplica; a latency signal is {type: latency",
    ),
    (
        "percentile on a non-latency signal",
        {"spec.autoscaling.signals[3].percentile": 99},
        "spec.autoscaling.signals[3].percentile",
        "remove percentile",
    ),
    (
        "duplicate signal type",
        {"spec.autoscaling.signals[3]": {"type": "cpu", "targetUtilization": 50}},
        "spec.autoscaling.signals[3].type",
        "keep one cpu signal",
    ),
    (
        "percentile of 100",
        {"spec.autoscaling.signals[2].percentile": 100},
        "spec.autoscaling.signals[2].percentile",
        "use a value < 100",
    ),
    (
        "percentile of 0",
        {"spec.autoscaling.signals[2].percentile": 0},
        "spec.autoscaling.signals[2].percentile",
        "use a value > 0",
    ),
    (
        "nan target",
        {"spec.autoscaling.signals[2].targetMs": float("nan")},
        "spec.autoscaling.signals[2].targetMs",
        "finite number",
    ),
    (
        "weight above 100",
        {"spec.rollout.steps[0].setWeight": 150},
        "spec.rollout.steps[0].setWeight",
        "use a value from 0 to 100",
    ),
    (
        "negative weight",
        {"spec.rollout.steps[0].setWeight": -5},
        "spec.rollout.steps[0].setWeight",
        "use a value from 0 to 100",
    ),
    (
        "misspelled field",
        {"spec.autoscaling.signals[0]": {"type": "cpu", "targetUtilisation": 70}},
        "spec.autoscaling.signals[0].targetUtilisation",
        "did you mean targetUtilization?",
    ),
    (
        "snake_case field",
        {"spec.autoscaling.min_replicas": 2},
        "spec.autoscaling.min_replicas",
        "write it in camelCase: minReplicas",
    ),
    (
        "fractional cpu as a number",
        {"spec.runtime.resources.cpu": 0.5},
        "spec.runtime.resources.cpu",
        'quote it ("0.5")',
    ),
    (
        "memory in GB",
        {"spec.runtime.resources.memory": "4GB"},
        "spec.runtime.resources.memory",
        '"4Gi"',
    ),
    (
        "zero cpu request",
        {"spec.runtime.resources.cpu": "0"},
        "spec.runtime.resources.cpu",
        "set a positive quantity",
    ),
    (
        "uppercase name",
        {"metadata.name": "ResNet"},
        "metadata.name",
        "use lowercase letters, digits and '-'",
    ),
    (
        "name too long",
        {"metadata.name": "r" * 51},
        "metadata.name",
        "shorten it to at most 50",
    ),
    (
        "missing basePath",
        {"spec.model.basePath": DELETE},
        "spec.model.basePath",
        "add basePath, e.g. basePath: s3://models/resnet",
    ),
    (
        "missing spec",
        {"spec": DELETE},
        "spec",
        "add spec with model",
    ),
    (
        "gpu signal without a gpu",
        {"spec.runtime.resources.gpu": 0},
        "spec.autoscaling.signals[1].type",
        "set runtime.resources.gpu >= 1",
    ),
    (
        "policy with cel and ref",
        {"spec.autoscaling.policy": {"cel": "recommended", "ref": "business-hours"}},
        "spec.autoscaling.policy.ref",
        "either {cel:",
    ),
    (
        "empty policy",
        {"spec.autoscaling.policy": {}},
        "spec.autoscaling.policy",
        "either {cel:",
    ),
    (
        "bad param name",
        {"spec.autoscaling.policy": {"ref": "x", "params": {"slo-ms": 1}}},
        "spec.autoscaling.policy.params.slo-ms",
        "not starting with a digit",
    ),
    (
        "step with two actions",
        {"spec.rollout.steps[1]": {"setWeight": 20, "pause": {}}},
        "spec.rollout.steps[1]",
        "one step per action",
    ),
    (
        "abTest without match",
        {"spec.rollout.strategy": "abTest"},
        "spec.rollout.abTest",
        "add abTest: {match: {header:",
    ),
    (
        "match with header and cookie",
        {
            "spec.rollout.abTest": {
                "match": {
                    "header": {"name": "x", "value": "b"},
                    "cookie": {"name": "c", "value": "b"},
                }
            }
        },
        "spec.rollout.abTest.match",
        "e.g. {header: {name: x-model-variant",
    ),
    (
        "analysis step without checks",
        {"spec.rollout.analysis": DELETE},
        "spec.rollout.steps[1].analysis",
        "add rollout.analysis.checks",
    ),
    (
        "check without bound",
        {"spec.rollout.analysis.checks[0]": {"metric": "errorRate"}},
        "spec.rollout.analysis.checks[0].max",
        "add max, min, maxRatioToStable, minRatioToStable or condition",
    ),
    (
        "bad duration",
        {"spec.rollout.analysis.interval": "30 sec"},
        "spec.rollout.analysis.interval",
        'write a duration such as "30s"',
    ),
    (
        "unknown strategy",
        {"spec.rollout.strategy": "linear"},
        "spec.rollout.strategy",
        "allowed: canary, abTest, blueGreen",
    ),
    (
        "no signals",
        {"spec.autoscaling.signals": []},
        "spec.autoscaling.signals",
        "add a signal, e.g. {type: cpu, targetUtilization: 70}",
    ),
    (
        "signals not a list",
        {"spec.autoscaling.signals": "cpu"},
        "spec.autoscaling.signals",
        "write a list",
    ),
    (
        "autoscaling not an object",
        {"spec.autoscaling": [1, 2]},
        "spec.autoscaling",
        "write a mapping",
    ),
    (
        "select policy in lower case",
        {"spec.autoscaling.behavior.scaleDown.selectPolicy": "max"},
        "spec.autoscaling.behavior.scaleDown.selectPolicy",
        "allowed: Max, Min, Disabled",
    ),
    (
        "window over an hour",
        {"spec.autoscaling.behavior.scaleDown.stabilizationSeconds": 4000},
        "spec.autoscaling.behavior.scaleDown.stabilizationSeconds",
        "use a value from 0 to 3600",
    ),
    (
        "replicas as a string",
        {"spec.autoscaling.maxReplicas": "20"},
        "spec.autoscaling.maxReplicas",
        "write a whole number, unquoted",
    ),
    (
        "replicas as a boolean",
        {"spec.autoscaling.maxReplicas": True},
        "spec.autoscaling.maxReplicas",
        "write a whole number, unquoted",
    ),
    (
        "zero min replicas",
        {"spec.autoscaling.minReplicas": 0},
        "spec.autoscaling.minReplicas",
        "use a value >= 1",
    ),
    (
        "label value not a string",
        {"metadata.labels.team": 7},
        "metadata.labels.team",
        "quote the value",
    ),
    (
        "hostname with an underscore",
        {"spec.routing": {"hostnames": ["cost_v1.example.com"]}},
        "spec.routing.hostnames[0]",
        "e.g. cost.ml.models.example.com",
    ),
    (
        "gRPC and REST sharing a hostname",
        {"spec.routing": {"hostnames": ["cost.example.com"], "grpcHostnames": ["*.example.com"]}},
        "spec.routing.grpcHostnames",
        "give gRPC its own name",
    ),
    (
        "wrong kind",
        {"kind": "Modelservice"},
        "kind",
        "allowed: ModelService",
    ),
    (
        "wrong apiVersion",
        {"apiVersion": "servectl.io/v1"},
        "apiVersion",
        "allowed: servectl.io/v1alpha1",
    ),
]


@pytest.mark.parametrize(
    ("changes", "path", "fix"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_invalid_document_names_path_and_fix(
    edit: Edit, changes: dict[str, object], path: str, fix: str
) -> None:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(edit(changes))
    issues = {issue.path: issue for issue in caught.value.issues}
    assert path in issues, f"expected an issue at {path}, got {list(issues)}"
    assert fix in issues[path].fix
    assert issues[path].message


def test_error_renders_one_line_per_issue(edit: Edit) -> None:
    doc = edit(
        {
            "spec.autoscaling.signals[1].type": "memory",
            "spec.rollout.steps[0].setWeight": 150,
        }
    )
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    assert str(caught.value).splitlines() == [
        "spec.autoscaling.signals[1].type: unknown value 'memory' "
        "(fix: allowed: cpu, gpu, latency, rps, concurrency)",
        "spec.rollout.steps[0].setWeight: must be 0-100, got 150 (fix: use a value from 0 to 100)",
    ]


def test_all_issues_reported_at_once(edit: Edit) -> None:
    doc = edit(
        {
            "metadata.name": "Bad_Name",
            "spec.model.basePath": DELETE,
            "spec.autoscaling.policy": {"cel": "recommended +* 2"},
        }
    )
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    assert [issue.path for issue in caught.value.issues] == [
        "metadata.name",
        "spec.model.basePath",
        "spec.autoscaling.policy.cel",
    ]


@pytest.mark.parametrize("doc", [None, [], "ModelService", 3, [{"kind": "ModelService"}]])
def test_non_object_document(doc: object) -> None:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    (issue,) = caught.value.issues
    assert issue.path == "(document)"
    assert "write a mapping with metadata, spec" in issue.fix


def test_load_document_dispatches_on_kind() -> None:
    assert isinstance(validation.load_document(example("abtest.yaml")), models.ModelService)
    with pytest.raises(validation.SpecError) as caught:
        validation.load_document({"kind": "Deployment"})
    (issue,) = caught.value.issues
    assert (issue.path, issue.fix) == ("kind", "allowed kinds: ModelService, ScalingPolicy")


def test_documents_must_use_camel_case_even_though_python_may_not() -> None:
    # Python callers construct by field name ...
    spec = models.AutoscalingSpec(min_replicas=2, max_replicas=4)
    assert spec.min_replicas == 2
    # ... documents may not: the API server would prune a snake_case key.
    with pytest.raises(validation.SpecError):
        validation.load_model_service(
            {"metadata": {"name": "a"}, "spec": {"model": {"name": "a", "base_path": "/m"}}}
        )


def test_path_formatting() -> None:
    assert validation.format_path(("spec", "signals", 1, "type")) == "spec.signals[1].type"
    assert validation.format_path(("metadata", "labels", "app.kubernetes.io/name")) == (
        "metadata.labels['app.kubernetes.io/name']"
    )
    assert validation.format_path(()) == "(document)"


# ----------------------------------------------------------------------------- CEL


def test_cel_syntax_error_has_line_and_column(edit: Edit) -> None:
    doc = edit({"spec.autoscaling.policy": {"cel": "max(recommended,\n  replicas.ready +)"}})
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    (issue,) = caught.value.issues
    assert issue.path == "spec.autoscaling.policy.cel"
    assert issue.message.startswith("CEL does not compile at 2:")
    assert "returns replicas or {replicas, reason}" in issue.fix


def test_cel_unknown_variable(edit: Edit) -> None:
    doc = edit({"spec.autoscaling.policy": {"cel": "replica.current + 1"}})
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    (issue,) = caught.value.issues
    assert issue.path == "spec.autoscaling.policy.cel"
    assert "replica" in issue.message


def test_inline_cel_must_set_the_params_it_reads(edit: Edit) -> None:
    doc = edit({"spec.autoscaling.policy": {"cel": "recommended + int(params.extra)"}})
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    (issue,) = caught.value.issues
    assert issue.path == "spec.autoscaling.policy.params"
    assert issue.fix == "add {extra: <number>}"
    ok = edit(
        {
            "spec.autoscaling.policy": {
                "cel": "recommended + int(params.extra)",
                "params": {"extra": 1},
            }
        }
    )
    assert validation.load_model_service(ok).spec.autoscaling.inline_cel is not None


def test_scaling_policy_cel_error_path() -> None:
    doc: dict[str, Any] = {
        "apiVersion": "servectl.io/v1alpha1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "broken"},
        "spec": {"description": "x", "cel": "recommended +"},
    }
    with pytest.raises(validation.SpecError) as caught:
        validation.load_scaling_policy(doc)
    (issue,) = caught.value.issues
    assert issue.path == "spec.cel"
    assert issue.message.startswith("CEL does not compile at 1:")


def test_scaling_policy_needs_description() -> None:
    doc = {"metadata": {"name": "p"}, "spec": {"cel": "recommended"}}
    with pytest.raises(validation.SpecError) as caught:
        validation.load_scaling_policy(doc)
    assert [issue.path for issue in caught.value.issues] == ["spec.description"]


def test_scaling_policy_may_leave_params_to_the_model_service() -> None:
    doc = {
        "metadata": {"name": "p"},
        "spec": {"description": "floor", "cel": "max(recommended, int(params.floor))"},
    }
    assert validation.load_scaling_policy(doc).spec.params == {}
