"""spec.rollout and status.rollout: every rule accepts what it should and teaches the fix.

Each rejected case names the issue's path, text its message must contain, text its fix
must contain, and how the CRD refuses the same document: "cel" (an
x-kubernetes-validations rule), "schema" (the OpenAPI schema) or None (servectl only).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from servectl import specfile
from servectl.api import conditions, models, validation
from tests.unit.api.helpers import DELETE, edited, example, rule_failures, schema_of

# ----------------------------------------------------------------------------- documents


def canary(**rollout: Any) -> dict[str, Any]:
    """The resnet example (GPU replicas) with spec.rollout fields replaced."""
    doc = example("resnet-canary.yaml")
    return edited(doc, {f"spec.rollout.{name}": value for name, value in rollout.items()})


def blue_green(**rollout: Any) -> dict[str, Any]:
    return edited(example("bluegreen.yaml"), {f"spec.rollout.{k}": v for k, v in rollout.items()})


def ab_test(**ab: Any) -> dict[str, Any]:
    return edited(example("abtest.yaml"), {f"spec.rollout.abTest.{k}": v for k, v in ab.items()})


def with_check(check: dict[str, Any]) -> dict[str, Any]:
    """The resnet example whose first shared analysis check is ``check``."""
    return edited(example("resnet-canary.yaml"), {"spec.rollout.analysis.checks[0]": check})


QUERY = 'sum(rate(fraud_flagged_total{revision="{{revision}}"}[5m]))'
CONDITION = "value < 0.01 || value < stable * 1.2"

# ----------------------------------------------------------------------------- accepted

ACCEPTED: dict[str, dict[str, Any]] = {
    "every built-in metric": canary(
        analysis={
            "checks": [
                {"metric": "errorRate", "max": 0.01},
                {"metric": "successRate", "min": 0.99},
                {"metric": "requestRate", "min": 1},
                {"metric": "latencyP99", "maxRatioToStable": 1.2},
                {"metric": "latencyP5", "max": 10},
                {"metric": "latencyP05", "max": 10},
                {"metric": "modelAvailable", "min": 1},
            ]
        }
    ),
    "custom query with a condition only": with_check(
        {"metric": "flaggedShare", "query": QUERY, "condition": CONDITION}
    ),
    "built-in metric with a condition only": with_check(
        {"metric": "errorRate", "condition": "value <= 0.02"}
    ),
    "query overriding a built-in name": with_check(
        {"metric": "errorRate", "query": QUERY, "max": 0.01}
    ),
    "query with every placeholder": with_check(
        {
            "metric": "x",
            "query": 'x{namespace="{{namespace}}",service="{{service}}",rev="{{revision}}"}',
            "max": 1,
        }
    ),
    "min equal to max": with_check({"metric": "modelAvailable", "min": 1, "max": 1}),
    "maxExtensions 0": canary(**{"analysis.maxExtensions": 0}),
    "equal weights in a row": canary(
        steps=[{"setWeight": 10}, {"pause": {"seconds": 5}}, {"setWeight": 10}, {"setWeight": 100}]
    ),
    "canary scale independent of weights": canary(
        steps=[
            {"setCanaryScale": {"weight": 50}},
            {"setWeight": 10},
            {"setCanaryScale": {"weight": 5}},
            {"setCanaryScale": {"matchTrafficWeight": True}},
            {"setWeight": 20},
        ]
    ),
    "blueGreen without a blueGreen block": blue_green(blueGreen=DELETE),
    "blueGreen without steps": blue_green(steps=DELETE),
    "abTest on successRate, higher is better": ab_test(
        winnerMetric="successRate", higherIsBetter=True
    ),
    "abTest on requestRate, either direction": ab_test(
        winnerMetric="requestRate", higherIsBetter=True
    ),
    "abTest with empty steps": edited(example("abtest.yaml"), {"spec.rollout.steps": []}),
    "surge budget of replicas only": canary(surgeBudget={"replicas": 1}),
    "surge budget of GPUs only, enough for a replica": canary(surgeBudget={"gpus": 1}),
    "zero GPUs on CPU replicas with replica room": edited(
        example("canary-analysis.yaml"), {"spec.rollout.surgeBudget": {"gpus": 0, "replicas": 2}}
    ),
    "hard failure at 100 % errors": canary(hardFailureErrorRate=1),
    "progress deadline of 1 s": canary(progressDeadlineSeconds=1),
}


@pytest.mark.parametrize("doc", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted(doc: dict[str, Any]) -> None:
    validation.load_model_service(doc)
    assert rule_failures(schema_of("ModelService"), doc) == []


# ----------------------------------------------------------------------------- rejected

BUILTINS = "errorRate, successRate, requestRate, latencyP<N> (latencyP50, latencyP99, ...), "
BUILTINS += "modelAvailable"
CHECK = "spec.rollout.analysis.checks[0]"

# (id, document, issue path, text in the message, text in the fix, how the CRD refuses it)
REJECTED: list[tuple[str, dict[str, Any], str, str, str, str | None]] = [
    # --- analysis checks
    (
        "unknown metric without query",
        with_check({"metric": "p99Latency", "max": 100}),
        f"{CHECK}.metric",
        f"unknown metric 'p99Latency'; built-in metrics: {BUILTINS}",
        "add query: '<PromQL>' to define a custom metric",
        "cel",
    ),
    (
        "latencyP0 is no percentile",
        with_check({"metric": "latencyP0", "max": 100}),
        f"{CHECK}.metric",
        "unknown metric 'latencyP0'",
        "add query: '<PromQL>'",
        "cel",
    ),
    (
        "fractional percentile name",
        with_check({"metric": "latencyP99.9", "max": 100}),
        f"{CHECK}.metric",
        "is not a valid identifier",
        "use letters, digits and '_'",
        "schema",
    ),
    (
        "check without bound or condition",
        with_check({"metric": "errorRate"}),
        f"{CHECK}.max",
        "check on errorRate has no bound",
        "add max, min, maxRatioToStable, minRatioToStable or condition",
        "cel",
    ),
    (
        "condition syntax error",
        with_check({"metric": "errorRate", "condition": "value < 0.01 &&\n  value <"}),
        f"{CHECK}.condition",
        "condition does not compile at 2:10: syntax error",
        "write a CEL expression over value and stable",
        None,
    ),
    (
        "condition reads an unknown name",
        with_check({"metric": "errorRate", "condition": "value < 0.01 || val < 1.0"}),
        f"{CHECK}.condition",
        "at 1:17: unknown name 'val'; a condition reads value and stable",
        "e.g. value < 0.01 || value < stable * 1.2",
        None,
    ),
    (
        "condition mixes int and double",
        with_check({"metric": "errorRate", "condition": "value * 2 < stable"}),
        f"{CHECK}.condition",
        "type error: Unsupported operation: double * int",
        "e.g. value < 0.01",
        None,
    ),
    (
        "condition returns a number",
        with_check({"metric": "errorRate", "condition": "value * 2.0"}),
        f"{CHECK}.condition",
        "the condition returns a double (2.0), not a bool",
        "true when the check passes",
        None,
    ),
    (
        "empty condition",
        with_check({"metric": "errorRate", "condition": ""}),
        f"{CHECK}.condition",
        "must not be empty",
        "write a non-empty value",
        "schema",
    ),
    (
        "query placeholder misspelled",
        with_check({"metric": "x", "query": 'x{rev="{{revison}}"}', "max": 1}),
        f"{CHECK}.query",
        "unknown placeholder {{revison}} in query",
        "did you mean {{revision}}? placeholders: {{revision}}, {{service}}, {{namespace}}",
        "cel",  # by the rule that the query selects {{revision}}
    ),
    (
        "query placeholder with spaces",
        with_check({"metric": "x", "query": 'x{rev="{{ revision }}"}', "max": 1}),
        f"{CHECK}.query",
        "unknown placeholder {{ revision }} in query",
        "did you mean {{revision}}?",
        "cel",
    ),
    (
        "query that selects no revision",
        with_check({"metric": "x", "query": 'x{service="{{service}}"}', "max": 1}),
        f"{CHECK}.query",
        "the query does not select a revision",
        'filter by {{revision}}, e.g. sum(rate(my_failures_total{revision="{{revision}}"}',
        "cel",
    ),
    (
        "min above max",
        with_check({"metric": "errorRate", "min": 0.5, "max": 0.1}),
        f"{CHECK}.min",
        "min (0.5) is above max (0.1): no value passes",
        "set min <= max",
        "cel",
    ),
    (
        "minRatioToStable above maxRatioToStable",
        with_check({"metric": "latencyP99", "minRatioToStable": 2, "maxRatioToStable": 1.5}),
        f"{CHECK}.minRatioToStable",
        "minRatioToStable (2) is above maxRatioToStable (1.5)",
        "set minRatioToStable <= maxRatioToStable",
        "cel",
    ),
    (
        "negative maxExtensions",
        canary(**{"analysis.maxExtensions": -1}),
        "spec.rollout.analysis.maxExtensions",
        "must be >= 0, got -1",
        "use a value >= 0",
        "schema",
    ),
    (
        "bad check inside a step",
        canary(**{"steps[1]": {"analysis": {"checks": [{"metric": "cpu", "max": 1}]}}}),
        "spec.rollout.steps[1].analysis.checks[0].metric",
        "unknown metric 'cpu'",
        "add query: '<PromQL>' to define a custom metric",
        "cel",
    ),
    # --- canary
    (
        "canary weight going down",
        canary(steps=[{"setWeight": 10}, {"setWeight": 50}, {"pause": {}}, {"setWeight": 20}]),
        "spec.rollout.steps[3].setWeight",
        "setWeight 20 after 50 (steps[1]): canary weights only go up",
        "to send traffic back, abort",
        "cel",
    ),
    (
        "weight above 100",
        canary(**{"steps[0].setWeight": 150}),
        "spec.rollout.steps[0].setWeight",
        "must be 0-100, got 150",
        "use a value from 0 to 100",
        "schema",
    ),
    (
        "negative weight",
        canary(**{"steps[0].setWeight": -1}),
        "spec.rollout.steps[0].setWeight",
        "must be 0-100, got -1",
        "use a value from 0 to 100",
        "schema",
    ),
    # --- blueGreen
    (
        "blueGreen setWeight step",
        blue_green(steps=[{"analysis": {}}, {"setWeight": 50}]),
        "spec.rollout.steps[1].setWeight",
        "setWeight does not apply to blueGreen: its steps run against the preview",
        "keep only pause and analysis steps",
        "cel",
    ),
    (
        "blueGreen setCanaryScale step",
        blue_green(steps=[{"setCanaryScale": {"replicas": 2}}]),
        "spec.rollout.steps[0].setCanaryScale",
        "setCanaryScale does not apply to blueGreen",
        "use strategy: canary to shift traffic step by step",
        "cel",
    ),
    (
        "blueGreen with surgeBudget",
        blue_green(surgeBudget={"replicas": 2}),
        "spec.rollout.surgeBudget",
        "blueGreen needs a full second fleet; use canary with surgeBudget",
        "remove surgeBudget",
        "cel",
    ),
    (
        "blueGreen block on a canary",
        canary(blueGreen={"autoPromote": False}),
        "spec.rollout.blueGreen",
        "blueGreen settings apply to strategy blueGreen, not canary",
        "set strategy: blueGreen, or remove blueGreen",
        "cel",
    ),
    (
        "blueGreen block with strategy omitted",
        edited(canary(blueGreen={}), {"spec.rollout.strategy": DELETE}),
        "spec.rollout.blueGreen",
        "not canary",
        "set strategy: blueGreen",
        "cel",
    ),
    (
        "negative scaleDownDelaySeconds",
        blue_green(**{"blueGreen.scaleDownDelaySeconds": -5}),
        "spec.rollout.blueGreen.scaleDownDelaySeconds",
        "must be >= 0, got -5",
        "use a value >= 0",
        "schema",
    ),
    (
        "bad preview header name",
        blue_green(**{"blueGreen.previewHeader": {"name": "x preview", "value": "1"}}),
        "spec.rollout.blueGreen.previewHeader.name",
        "is not a valid header name",
        "use an HTTP header name",
        "schema",
    ),
    # --- abTest
    (
        "abTest with steps",
        edited(example("abtest.yaml"), {"spec.rollout.steps": [{"pause": {}}]}),
        "spec.rollout.steps",
        "an abTest runs for abTest.durationSeconds; remove steps",
        "set abTest.durationSeconds",
        "cel",
    ),
    (
        "abTest block on a canary",
        canary(abTest={"match": {"header": {"name": "x-v", "value": "b"}}}),
        "spec.rollout.abTest",
        "abTest settings apply to strategy abTest, not canary",
        "set strategy: abTest, or remove abTest",
        "cel",
    ),
    (
        "abTest block on a blueGreen",
        blue_green(abTest={"match": {"header": {"name": "x-v", "value": "b"}}}),
        "spec.rollout.abTest",
        "not blueGreen",
        "remove abTest",
        "cel",
    ),
    (
        "unknown winnerMetric",
        ab_test(winnerMetric="conversion"),
        "spec.rollout.abTest.winnerMetric",
        f"unknown winnerMetric 'conversion'; built-in metrics: {BUILTINS}",
        "pick the winner on a built-in metric",
        "cel",
    ),
    (
        "higher errorRate wins",
        ab_test(winnerMetric="errorRate", higherIsBetter=True),
        "spec.rollout.abTest.higherIsBetter",
        "higherIsBetter: true would pick the variant with the higher errorRate",
        "remove higherIsBetter",
        "cel",
    ),
    (
        "higher latency wins (winnerMetric defaulted)",
        edited(ab_test(higherIsBetter=True), {"spec.rollout.abTest.winnerMetric": DELETE}),
        "spec.rollout.abTest.higherIsBetter",
        "the higher errorRate",
        "errorRate is better lower",
        "cel",
    ),
    (
        "lower successRate wins",
        ab_test(winnerMetric="successRate"),
        "spec.rollout.abTest.higherIsBetter",
        "successRate is better higher, but higherIsBetter is false",
        "set higherIsBetter: true",
        "cel",
    ),
    (
        "zero durationSeconds",
        ab_test(durationSeconds=0),
        "spec.rollout.abTest.durationSeconds",
        "must be >= 1, got 0",
        "use a value >= 1",
        "schema",
    ),
    (
        "promoteWinner as a string",
        ab_test(promoteWinner="yes"),
        "spec.rollout.abTest.promoteWinner",
        "expected true or false",
        "write true or false",
        "schema",
    ),
    # --- surge budget
    (
        "surge budget of zero replicas",
        canary(surgeBudget={"replicas": 0}),
        "spec.rollout.surgeBudget.replicas",
        "a surge budget of 0 leaves no room to start the new revision before moving traffic",
        "surgeBudget: {replicas: 2}",
        "cel",
    ),
    (
        "surge budget of zero GPUs",
        canary(surgeBudget={"gpus": 0}),
        "spec.rollout.surgeBudget.gpus",
        "a surge budget of 0",
        "or remove surgeBudget",
        "cel",
    ),
    (
        "empty surge budget",
        canary(surgeBudget={}),
        "spec.rollout.surgeBudget",
        "a surge budget of 0",
        "allow at least one extra replica",
        "cel",
    ),
    (
        "surge GPUs below one replica's",
        edited(canary(surgeBudget={"gpus": 1, "replicas": 2}), {"spec.runtime.resources.gpu": 2}),
        "spec.rollout.surgeBudget.gpus",
        "surgeBudget.gpus (1) cannot fit one new replica, which needs 2 GPU(s)",
        "set gpus >= 2",
        "cel",
    ),
    (
        "zero surge GPUs beside replica room on GPU replicas",
        canary(surgeBudget={"gpus": 0, "replicas": 2}),
        "spec.rollout.surgeBudget.gpus",
        "cannot fit one new replica",
        "leave gpus out",
        "cel",
    ),
    # --- scalar bounds
    (
        "zero progress deadline",
        canary(progressDeadlineSeconds=0),
        "spec.rollout.progressDeadlineSeconds",
        "must be >= 1, got 0",
        "use a value >= 1",
        "schema",
    ),
    (
        "zero hard failure error rate",
        canary(hardFailureErrorRate=0),
        "spec.rollout.hardFailureErrorRate",
        "must be > 0, got 0",
        "use a value > 0",
        "schema",
    ),
    (
        "hard failure error rate above 1",
        canary(hardFailureErrorRate=1.5),
        "spec.rollout.hardFailureErrorRate",
        "must be <= 1, got 1.5",
        "use a value <= 1",
        "schema",
    ),
]


def _issues(doc: dict[str, Any]) -> dict[str, validation.Issue]:
    with pytest.raises(validation.SpecError) as caught:
        validation.load_model_service(doc)
    return {issue.path: issue for issue in caught.value.issues}


@pytest.mark.parametrize(
    ("doc", "path", "message", "fix"),
    [case[1:5] for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_rejected_with_path_and_fix(doc: dict[str, Any], path: str, message: str, fix: str) -> None:
    issues = _issues(doc)
    assert path in issues, f"expected an issue at {path}, got {list(issues)}"
    assert message in issues[path].message
    assert fix in issues[path].fix


MIRRORED = [case for case in REJECTED if case[5] is not None]


@pytest.mark.parametrize(
    ("doc", "how"), [(case[1], case[5]) for case in MIRRORED], ids=[case[0] for case in MIRRORED]
)
def test_the_crd_refuses_it_too(doc: dict[str, Any], how: str) -> None:
    schema = schema_of("ModelService")
    if how == "cel":
        assert rule_failures(schema, doc) != []
    else:
        jsonschema = pytest.importorskip("jsonschema")
        assert not jsonschema.Draft4Validator(schema).is_valid(doc)


def test_unmirrored_rules_pass_the_crd_rules() -> None:
    # Compiling a condition is servectl's job alone: the CRD's CEL rules let it through
    # (the API server would store it; servectl validate and the controller refuse it).
    unmirrored = [case for case in REJECTED if case[5] is None]
    assert unmirrored
    for case in unmirrored:
        assert rule_failures(schema_of("ModelService"), case[1]) == [], case[0]


# CEL's matches() must draw the same line between built-in and custom metrics as Python.
METRIC_NAMES = [
    *models.BUILTIN_ANALYSIS_METRICS,
    *(f"latencyP{n}" for n in range(0, 101)),
    *(f"latencyP0{n}" for n in range(0, 10)),
    "latencyP00",
    "latencyP999",
    "latencyp99",
    "LatencyP99",
    "errorrate",
    "p99",
    "latency",
]


@pytest.mark.parametrize("metric", METRIC_NAMES)
def test_builtin_metric_rule_agrees_with_is_builtin_metric(metric: str) -> None:
    if not re.fullmatch(models.CEL_IDENTIFIER, metric):
        return  # the pattern refuses it first ("latencyP<N>")
    doc = with_check({"metric": metric, "max": 1})
    crd_accepts = rule_failures(schema_of("ModelService"), doc) == []
    assert crd_accepts == models.is_builtin_metric(metric)
    try:
        validation.load_model_service(doc)
        servectl_accepts = True
    except validation.SpecError:
        servectl_accepts = False
    assert servectl_accepts == models.is_builtin_metric(metric)


# ----------------------------------------------------------------------------- defaults


def test_explicit_nulls_are_omitted_fields() -> None:
    doc = with_check({"metric": "errorRate", "max": 1, "query": None, "condition": None})
    service = validation.load_model_service(doc)
    assert service.spec.rollout is not None and service.spec.rollout.analysis is not None
    check = service.spec.rollout.analysis.checks[0]
    assert (check.query, check.condition) == (None, None)


def test_rollout_defaults() -> None:
    rollout = models.RolloutSpec()
    assert rollout.strategy is models.RolloutStrategy.CANARY
    assert rollout.progress_deadline_seconds == 600
    assert rollout.hard_failure_error_rate == 0.5
    assert rollout.blue_green is None and rollout.ab_test is None
    assert models.AnalysisSpec().max_extensions is None
    green = models.BlueGreenSpec()
    assert (green.auto_promote, green.scale_down_delay_seconds, green.preview_header) == (
        True,
        30,
        None,
    )


def test_ab_test_defaults() -> None:
    service = validation.load_model_service(
        edited(
            example("abtest.yaml"),
            {
                "spec.rollout.abTest": {"match": {"cookie": {"name": "variant", "value": "b"}}},
            },
        )
    )
    assert service.spec.rollout is not None
    ab = service.spec.rollout.ab_test
    assert ab is not None
    assert (ab.duration_seconds, ab.winner_metric, ab.higher_is_better, ab.promote_winner) == (
        600,
        "errorRate",
        False,
        True,
    )


def test_examples_load_with_their_rollout_fields() -> None:
    fraud = validation.load_model_service(example("canary-analysis.yaml")).spec.rollout
    assert fraud is not None and fraud.analysis is not None
    assert fraud.analysis.max_extensions == 6
    custom = fraud.analysis.checks[2]
    assert custom.query is not None and "{{revision}}" in custom.query
    assert custom.condition is not None
    assert conditions.evaluate_condition(custom.condition, 0.03, 0.028)
    assert not conditions.evaluate_condition(custom.condition, 0.05, 0.028)
    embedder = validation.load_model_service(example("bluegreen.yaml")).spec.rollout
    assert embedder is not None and embedder.blue_green is not None
    assert embedder.blue_green.auto_promote is False
    assert embedder.blue_green.preview_header == models.HeaderMatch(name="x-preview", value="true")
    ranker = validation.load_model_service(example("abtest.yaml")).spec.rollout
    assert ranker is not None and ranker.ab_test is not None
    assert (ranker.ab_test.duration_seconds, ranker.ab_test.winner_metric) == (1800, "latencyP99")
    assert ranker.steps == []


def test_document_round_trip_keeps_the_new_fields() -> None:
    for name in ("canary-analysis.yaml", "bluegreen.yaml", "abtest.yaml"):
        service = validation.load_model_service(example(name))
        again = validation.load_model_service(validation.to_document(service))
        assert again == service


def test_validate_message_for_a_weight_of_150(tmp_path: Path) -> None:
    source = (Path(__file__).parents[3] / "deploy/examples/resnet-canary.yaml").read_text()
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.endswith("Weight: 10"))
    broken = tmp_path / "w.yaml"
    broken.write_text(source.replace("setWeight: 10\n", "setWeight: 150\n"))
    with pytest.raises(validation.SpecError) as caught:
        specfile.load_file(broken)
    assert str(caught.value) == (
        f"{broken}:{line}: spec.rollout.steps[0].setWeight: must be 0-100, got 150 "
        "(fix: use a value from 0 to 100)"
    )


# ----------------------------------------------------------------------------- status


def test_rollout_status_fields() -> None:
    status = models.ModelServiceStatus.model_validate(
        {
            "rollout": {
                "phase": "Paused",
                "step": 3,
                "stableVersion": 3,
                "canaryVersion": 4,
                "message": "waiting for load: 40 of 500 requests",
                "winner": "B",
                "state": {"extensions": 2, "since": 1700000000.5, "nested": {"a": [1, "x"]}},
                "somethingNewer": True,  # written by a newer controller: ignored
            }
        }
    )
    rollout = status.rollout
    assert rollout is not None
    assert rollout.phase is models.RolloutPhase.PAUSED
    assert (rollout.stable_version, rollout.canary_version, rollout.winner) == (3, 4, "B")
    assert rollout.state["nested"] == {"a": [1, "x"]}
    assert models.RolloutStatus().phase is models.RolloutPhase.IDLE
    assert models.RolloutStatus().state == {} and models.RolloutStatus().message == ""


def test_rollout_phases() -> None:
    assert [phase.value for phase in models.RolloutPhase] == [
        "Idle",
        "Progressing",
        "Paused",
        "Completed",
        "Aborted",
        "Degraded",
    ]
    doc = models.RolloutPhase.__doc__ or ""
    for phase in models.RolloutPhase:
        assert f"``{phase.value}``" in doc  # each phase is described


@pytest.mark.parametrize("bad", [{"phase": "Running"}, {"winner": "C"}, {"stableVersion": -1}])
def test_rollout_status_refuses_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        models.RolloutStatus.model_validate(bad)


def test_rollout_state_is_free_form_in_the_crd() -> None:
    rollout = schema_of("ModelService")["properties"]["status"]["properties"]["rollout"]
    assert rollout["properties"]["state"]["x-kubernetes-preserve-unknown-fields"] is True
    assert rollout["properties"]["phase"]["enum"] == [p.value for p in models.RolloutPhase]


# ----------------------------------------------------------------------------- conditions


def test_compile_condition() -> None:
    compiled = conditions.compile_condition(CONDITION)
    assert compiled.text == CONDITION and compiled.reads_stable
    assert not conditions.compile_condition("value < 0.01").reads_stable
    assert conditions.compile_condition(CONDITION) is compiled  # cached by text
    assert conditions.compile_condition("type(value) == double")


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("value <", 1, 8, "syntax error: the expression ends too early"),
        ("value < 0.01 ||\n   value <", 2, 11, "ends too early"),
        ("value < 0.01 )", 1, 14, "syntax error: unexpected ')'"),
        ("valu < 0.01", 1, 1, "unknown name 'valu'"),
        ("value < 0.01\n  || stabel > 1.0", 2, 6, "unknown name 'stabel'"),
        ("math.abs(value) < 1.0", 1, 1, "unknown name 'math'"),
        ("[value].all(v, v < 1.0)", 1, 9, "all() is not available in a condition"),
        ("value * 2 > 1.0", None, None, "type error: Unsupported operation: double * int"),
        ("value", None, None, "returns a double (1.0), not a bool"),
        ("'ok'", None, None, "returns a string ('ok'), not a bool"),
        ("null", None, None, "returns null, not a bool"),
        ("[value]", None, None, "returns a list"),
        ("size(value) > 1", None, None, "size() got an argument of a type it does not take"),
        ("Check{v: value}", None, None, "builds a message type"),
        ("isGood(value)", None, None, "unknown function 'isGood'"),
        ("  // nothing\n", None, None, "empty condition"),
        ("value < 1.0 || " * 100 + "true", None, None, "keep it under 1024"),
    ],
)
def test_compile_errors_say_where_and_what(
    text: str, line: int | None, column: int | None, message: str
) -> None:
    with pytest.raises(conditions.ConditionCompileError) as caught:
        conditions.compile_condition(text)
    error = caught.value
    assert (error.line, error.column) == (line, column)
    assert message in error.message
    if line is not None:
        assert str(error).startswith(f"line {line}, column {column}: ")
    else:
        assert str(error) == error.message


def test_compile_error_str_with_line_only() -> None:
    assert str(conditions.ConditionCompileError("bad", 3)) == "line 3: bad"


def test_compile_refuses_a_non_string() -> None:
    with pytest.raises(conditions.ConditionCompileError, match="as a string, got int"):
        conditions.compile_condition(3)  # type: ignore[arg-type]


def test_evaluate_true_and_false() -> None:
    assert conditions.evaluate_condition("value < 0.01", 0.001) is True
    assert conditions.evaluate_condition("value < 0.01", 0.5) is False
    assert conditions.evaluate_condition("value < 1", 0) is True  # an int value is a double
    assert conditions.evaluate_condition("value / 2.0 < 1.0", 1) is True


def test_evaluate_with_and_without_stable() -> None:
    compiled = conditions.compile_condition(CONDITION)
    assert conditions.evaluate_condition(compiled, 0.02, 0.02) is True  # within 1.2 x stable
    assert conditions.evaluate_condition(compiled, 0.05, 0.02) is False
    # Without stable, `||` still decides when the side without it is true ...
    assert conditions.evaluate_condition(compiled, 0.001, None) is True
    # ... and otherwise the check cannot be judged: Inconclusive.
    with pytest.raises(conditions.StableUnavailableError, match="is Inconclusive"):
        conditions.evaluate_condition(compiled, 0.05, None)
    with pytest.raises(conditions.StableUnavailableError):
        conditions.evaluate_condition(compiled, 0.05, math.nan)  # NaN: no stable data
    # A condition that never reads stable ignores it.
    assert conditions.evaluate_condition("value > 0.5", 1.0, None) is True


def test_evaluate_refuses_a_non_bool_result() -> None:
    # Returns a bool on the sample value 1.0, so it compiles; at 3.0 it returns a double.
    compiled = conditions.compile_condition("value > 2.0 ? value : true")
    assert conditions.evaluate_condition(compiled, 1.0) is True
    with pytest.raises(
        conditions.ConditionEvalError, match=r"returns a double \(3.0\), not a bool"
    ):
        conditions.evaluate_condition(compiled, 3.0)


def test_evaluate_reports_runtime_errors() -> None:
    compiled = conditions.compile_condition("1 / int(value) > 0")
    with pytest.raises(conditions.ConditionEvalError, match="division by zero"):
        conditions.evaluate_condition(compiled, 0.5)
    with pytest.raises(conditions.ConditionEvalError, match="value is NaN"):
        conditions.evaluate_condition("value < 1.0", math.nan)
    with pytest.raises(conditions.ConditionCompileError):
        conditions.evaluate_condition("value <", 1.0)


@pytest.mark.parametrize(("value", "stable"), [(True, None), ("0.1", None), (0.1, "x")])
def test_evaluate_refuses_non_numbers(value: Any, stable: Any) -> None:
    with pytest.raises(TypeError, match="must be a number"):
        conditions.evaluate_condition("value < stable", value, stable)


def test_errors_are_value_errors() -> None:
    assert issubclass(conditions.StableUnavailableError, conditions.ConditionEvalError)
    assert issubclass(conditions.ConditionEvalError, conditions.ConditionError)
    assert issubclass(conditions.ConditionCompileError, conditions.ConditionError)
    assert issubclass(conditions.ConditionError, ValueError)


# ----------------------------------------------------------------------------- queries


def test_render_query() -> None:
    query = 'sum(rate(x{namespace="{{namespace}}",revision="{{revision}}"}[1m])) # {{service}}'
    assert conditions.placeholders(query) == ["namespace", "revision", "service"]
    rendered = conditions.render_query(
        query, {"revision": "fraud-v8", "service": "fraud", "namespace": "ml"}
    )
    assert rendered == 'sum(rate(x{namespace="ml",revision="fraud-v8"}[1m])) # fraud'
    with pytest.raises(ValueError, match=r"placeholder \{\{service\}\} has no value"):
        conditions.render_query(query, {"revision": "fraud-v8", "namespace": "ml"})


def test_value_dependent_failures_compile_and_fail_when_they_happen() -> None:
    # On the sample value 1.0 these fail, but not on every value: they compile.
    divide = conditions.compile_condition("1 / int(value - 1.0) > 0")
    assert conditions.evaluate_condition(divide, 2.0) is True
    lookup = conditions.compile_condition("{'2': true}[string(int(value))]")
    assert conditions.evaluate_condition(lookup, 2.0) is True
    with pytest.raises(conditions.ConditionEvalError, match="no key '3' in the map"):
        conditions.evaluate_condition(lookup, 3.0)
    index = conditions.compile_condition("[true][int(value)]")
    with pytest.raises(conditions.ConditionEvalError, match="index out of bounds: 3"):
        conditions.evaluate_condition(index, 3.0)


class PanicException(BaseException):
    """Stands in for pyo3's PanicException (a Rust panic in the CEL library)."""


class _Program:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def execute(self, variables: Any) -> Any:
        raise self.error


def test_a_panic_in_the_library_is_a_condition_error(monkeypatch: pytest.MonkeyPatch) -> None:
    panicking = conditions.CompiledCondition("value < 1.0", False, _Program(PanicException("boom")))
    with pytest.raises(conditions.ConditionEvalError, match="CEL failed: boom"):
        conditions.evaluate_condition(panicking, 0.5)
    # A panic in the trial run leaves the judgement to evaluation.
    conditions._trial(panicking)

    def compile_panics(text: str) -> Any:
        raise PanicException("parser")

    monkeypatch.setattr(conditions.cel, "compile", compile_panics)
    with pytest.raises(conditions.ConditionCompileError, match="does not compile: parser"):
        conditions.compile_condition("value < 0.125 && value > 0.0625")


def test_other_base_exceptions_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    interrupted = conditions.CompiledCondition("value < 1.0", False, _Program(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        conditions.evaluate_condition(interrupted, 0.5)
    with pytest.raises(KeyboardInterrupt):
        conditions._trial(interrupted)

    def compile_interrupted(text: str) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(conditions.cel, "compile", compile_interrupted)
    with pytest.raises(KeyboardInterrupt):
        conditions.compile_condition("value < 0.375")
