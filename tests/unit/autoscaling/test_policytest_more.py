"""The policy test runner on malformed documents and traces: every problem is reported
where it is (document, test file or step) with the field it concerns, and the run goes on."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from servectl.autoscaling import policytest

POLICY: dict[str, Any] = {
    "apiVersion": "servectl.io/v1alpha1",
    "kind": "ScalingPolicy",
    "metadata": {"name": "floor"},
    "spec": {
        "description": "never below params.floor replicas",
        "params": {"floor": 3},
        "cel": (
            'recommended < int(params.floor) ? {"replicas": int(params.floor), "reason": "FLOOR"}'
            " : recommended"
        ),
    },
}
OK_STEP: dict[str, Any] = {"recommended": 5, "expect": {"replicas": 5}}


def policy_with(**changes: Any) -> dict[str, Any]:
    """POLICY with top-level keys or ``spec__<key>`` replaced."""
    doc = copy.deepcopy(POLICY)
    for key, value in changes.items():
        if key.startswith("spec__"):
            doc["spec"][key.removeprefix("spec__")] = value
        else:
            doc[key] = value
    return doc


# ----------------------------------------------------------------------------- the document


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        (["not", "a", "map"], "expected a ScalingPolicy document (a map)"),
        (policy_with(kind="ModelService"), "kind: expected ScalingPolicy, got 'ModelService'"),
        (policy_with(metadata={}), "metadata.name: required"),
        (policy_with(metadata="floor"), "metadata.name: required"),
        (policy_with(spec="recommended"), "spec: required, with cel"),
        (policy_with(spec__cel=3), "spec.cel: required, the policy's CEL expression as a string"),
        (policy_with(spec__params=[3]), "spec.params: expected a map of names to numbers"),
        (policy_with(spec__params={"floor": "3"}), "spec.params.floor: expected a finite number"),
        (policy_with(spec__params={"floor": True}), "spec.params.floor: expected a finite number"),
        (
            policy_with(spec__params={"floor": float("inf")}),
            "spec.params.floor: expected a finite number",
        ),
    ],
    ids=[
        "not a map",
        "wrong kind",
        "no name",
        "metadata not a map",
        "spec not a map",
        "cel not a string",
        "params not a map",
        "param as a string",
        "param as a boolean",
        "infinite param",
    ],
)
def test_a_malformed_policy_document_names_the_field(doc: Any, error: str) -> None:
    with pytest.raises(policytest.PolicyDocumentError, match="^" + re.escape(error)):
        policytest.read_policy_document(doc)
    report = policytest.run_policy_tests(doc, {"steps": [OK_STEP]})
    assert not report.passed and not report.steps
    assert report.errors[0].startswith(error)
    assert report.summary == f"error: {report.errors[0]}"


def test_a_report_names_the_policy_even_when_its_document_is_malformed() -> None:
    report = policytest.run_policy_tests(policy_with(kind="Deployment"), {"steps": [OK_STEP]})
    assert report.policy == "floor"
    assert policytest.run_policy_tests(["x"], {"steps": [OK_STEP]}).policy == "?"  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the test file


def test_a_bare_list_of_steps_is_a_test_document() -> None:
    report = policytest.run_policy_tests(
        POLICY, [OK_STEP, {"recommended": 1, "expect": {"replicas": 3}}]
    )  # type: ignore[arg-type]
    assert report.passed
    assert report.summary == "2 steps: 2 passed, 0 failed"


def test_a_test_document_that_is_not_a_map_is_an_error() -> None:
    report = policytest.run_policy_tests(POLICY, "steps: []")  # type: ignore[arg-type]
    assert report.errors == ("test document: expected a map with steps",)


def test_every_whole_run_problem_is_reported_and_counted() -> None:
    report = policytest.run_policy_tests(
        POLICY,
        {"stepz": [OK_STEP], "policy": "other", "snapshot": [1], "params": {"floor": "high"}},
    )
    assert not report.passed and not report.steps
    assert report.errors == (
        "test document: unknown key(s) stepz; allowed: params, policy, snapshot, steps",
        "policy: the test is for 'other', the policy is 'floor'",
        "steps: required, a non-empty list",
        "snapshot: expected a map (merged onto the default for every step)",
        "params.floor: expected a finite number, got 'high'",
    )
    assert report.summary == (
        "error: test document: unknown key(s) stepz; allowed: params, policy, snapshot, "
        "steps (+4 more)"
    )
    assert report.lines() == [f"error: {error}" for error in report.errors]


def test_the_test_document_snapshot_and_params_apply_to_every_step() -> None:
    doc = policy_with(
        spec__cel='{"replicas": replicas.ready + int(params.floor), "reason": rollout.phase}'
    )
    trace = {
        "snapshot": {"replicas": {"ready": 2}, "rollout": {"phase": "Progressing"}},
        "params": {"floor": 10},
        "steps": [
            {"recommended": 1, "expect": {"replicas": 12, "reason": "Progressing"}},
            # A step's own snapshot and params win over the document's.
            {
                "recommended": 1,
                "snapshot": {"replicas": {"ready": 3}},
                "params": {"floor": 1},
                "expect": {"replicas": 4},
            },
        ],
    }
    report = policytest.run_policy_tests(doc, trace)
    assert report.passed, report.lines()


# ----------------------------------------------------------------------------- steps


STEP_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("snapshot not a map", {**OK_STEP, "snapshot": [1]}, "snapshot: expected a map"),
    ("expect missing", {"recommended": 5}, "expect: required, a map with replicas"),
    (
        "expect with a typo",
        {"recommended": 5, "expect": {"replicas": 5, "reasons": "X"}},
        "expect: unknown key(s) reasons; allowed: error, reason, replicas, state",
    ),
    (
        "expected error with a result too",
        {"recommended": 5, "expect": {"error": "division", "replicas": 5}},
        "expect.error: a substring of the expected error, and nothing else",
    ),
    (
        "expected error not a string",
        {"recommended": 5, "expect": {"error": 404}},
        "expect.error: a substring of the expected error",
    ),
    (
        "reason not a string",
        {"recommended": 5, "expect": {"replicas": 5, "reason": 7}},
        "expect.reason: a substring of the expected reason, or null for none",
    ),
    (
        "expected state not a map",
        {"recommended": 5, "expect": {"replicas": 5, "state": [1]}},
        "expect.state: a map",
    ),
    (
        "step params not numbers",
        {**OK_STEP, "params": {"floor": "3"}},
        "params.floor: expected a finite number, got '3'",
    ),
    ("step params not a map", {**OK_STEP, "params": 3}, "params: expected a map"),
    ("step state not a map", {**OK_STEP, "state": "empty"}, "state: expected a map"),
    ("negative recommendation", {**OK_STEP, "recommended": -1}, "recommended: required integer"),
]


@pytest.mark.parametrize(
    ("step", "problem"), [c[1:] for c in STEP_CASES], ids=[c[0] for c in STEP_CASES]
)
def test_a_malformed_step_fails_alone_with_its_problem(step: dict[str, Any], problem: str) -> None:
    report = policytest.run_policy_tests(POLICY, {"steps": [step, OK_STEP]})
    bad, good = report.steps
    assert not bad.passed and bad.actual is None
    (message,) = bad.problems
    assert message.startswith(f"malformed step: {problem}")
    assert good.passed
    assert report.summary == "2 steps: 1 passed, 1 failed"
    assert report.lines()[0] == "FAIL steps[0] step 0"
    assert report.lines()[1] == f"     {message}"


def test_a_reason_expected_to_be_absent_is_checked() -> None:
    report = policytest.run_policy_tests(
        POLICY,
        {
            "steps": [
                {"recommended": 1, "expect": {"replicas": 3, "reason": None}},
                {"recommended": 5, "expect": {"replicas": 5, "reason": None}},
            ]
        },
    )
    first, second = report.steps
    assert first.problems == ("reason: expected none, got 'FLOOR'",)
    assert second.passed


def test_an_expected_error_that_does_not_happen_fails() -> None:
    report = policytest.run_policy_tests(
        POLICY, {"steps": [{"recommended": 5, "expect": {"error": "division by zero"}}]}
    )
    (step,) = report.steps
    assert not step.passed
    assert step.problems == ("error: expected one containing 'division by zero', got a result",)
    assert step.actual == {"replicas": 5, "reason": None, "state": {}}
