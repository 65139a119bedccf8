"""The generated CRDs: committed files are fresh, schemas are structural, rules agree."""

from __future__ import annotations

from typing import Any

import pytest

from servectl import specfile
from servectl.api import crd, models, validation
from tests.unit.api.helpers import (
    BY_KIND,
    CRDS,
    EXAMPLES,
    GENERATED,
    edited,
    example,
    rule_failures,
    schema_of,
)


def test_committed_crds_are_fresh() -> None:
    committed = sorted(path.name for path in CRDS.glob("*.yaml"))
    expected = sorted(f"{c['metadata']['name']}.yaml" for c in GENERATED)
    assert committed == expected, "run `servectl crds generate` to refresh"
    for definition in GENERATED:
        path = CRDS / f"{definition['metadata']['name']}.yaml"
        assert path.read_text(encoding="utf-8") == specfile.crd_file_text(definition), (
            f"{path.name} is stale: run `servectl crds generate` to refresh"
        )


def test_crd_metadata() -> None:
    ms = BY_KIND["ModelService"]
    assert ms["metadata"]["name"] == "modelservices.servectl.io"
    assert ms["spec"]["names"]["shortNames"] == ["ms"]
    assert ms["spec"]["scope"] == "Namespaced"
    (version,) = ms["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}  # and no scale subresource
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Desired"] == ".status.autoscaling.desiredReplicas"
    assert {"Strategy", "Phase", "Age"} <= set(columns)
    sp = BY_KIND["ScalingPolicy"]
    assert sp["metadata"]["name"] == "scalingpolicies.servectl.io"
    assert "subresources" not in sp["spec"]["versions"][0]


# ----------------------------------------------------------------------------- structural

# Keywords a structural schema node may carry (OpenAPI v3.0 subset Kubernetes accepts).
ALLOWED = {
    "description", "type", "format", "enum", "default", "nullable", "minimum",
    "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "items", "properties", "required", "additionalProperties", "anyOf",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-validations",
}  # fmt: skip
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(node: dict[str, Any], path: str) -> list[str]:
    problems = [f"{path}: keyword {key}" for key in node if key not in ALLOWED]
    if node.get("x-kubernetes-int-or-string"):
        if "type" in node or node.get("anyOf") != INT_OR_STRING:
            problems.append(f"{path}: int-or-string must be exactly anyOf integer/string")
    elif "anyOf" in node:
        problems.append(f"{path}: anyOf outside int-or-string")
    elif "type" not in node:
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties")
    if isinstance(node.get("additionalProperties"), bool):
        problems.append(f"{path}: boolean additionalProperties")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{path}: {key} must be a boolean in OpenAPI v3.0")
    if "default" in node and not isinstance(node["default"], str | int | float | bool):
        problems.append(f"{path}: non-scalar default")
    if node.get("x-kubernetes-list-type") == "map":
        item_required = set(node["items"].get("required", ()))
        missing = set(node["x-kubernetes-list-map-keys"]) - item_required
        problems += [f"{path}: list-map key {key} not required" for key in sorted(missing)]
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{path}{{}}")
    return problems


@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_schema_is_structural(kind: str) -> None:
    schema = schema_of(kind)
    assert structural_problems(schema, kind) == []
    # Kubernetes allows no constraint on metadata beyond its type.
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert "$ref" not in repr(schema) and "$defs" not in repr(schema)


def test_free_form_status_state_preserves_fields() -> None:
    state = schema_of("ModelService")["properties"]["status"]["properties"]["autoscaling"]
    assert state["properties"]["policyState"]["x-kubernetes-preserve-unknown-fields"] is True


def test_a_union_of_objects_is_refused() -> None:
    with pytest.raises(crd.SchemaError, match="a union of 2 types"):
        crd.structural({"anyOf": [{"type": "object"}, {"type": "string"}]}, path="x")


def test_kubernetes_validate_accepts_the_crds() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for definition in GENERATED:
        kubernetes_validate.validate(definition, kubernetes_validate.latest_version(), strict=True)


# ----------------------------------------------------------------------------- examples


ALL_EXAMPLES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_examples_validate(name: str) -> None:
    resources = specfile.load_file(EXAMPLES / name)
    assert resources


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_examples_name_their_version_as_a_cluster_requires(name: str) -> None:
    # `kubectl apply -f deploy/examples/...` is for a cluster, where the controller cannot
    # list a model path's versions: a ModelService without one is refused there.
    for doc in specfile.read_documents(EXAMPLES / name):
        if doc["kind"] == "ModelService":
            assert isinstance(doc["spec"]["model"].get("version"), int), (name, doc["spec"])


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_examples_match_the_crd_schema(name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for doc in specfile.read_documents(EXAMPLES / name):
        # OpenAPI v3.0 is JSON Schema draft 4 for the keywords used (boolean exclusiveMinimum).
        jsonschema.Draft4Validator(schema_of(doc["kind"])).validate(doc)


def test_crd_schema_rejects_what_the_models_reject() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft4Validator(schema_of("ModelService"))
    bad = edited(example("resnet-canary.yaml"), {"spec.rollout.steps[0].setWeight": 150})
    assert not validator.is_valid(bad)


# ----------------------------------------------------------------------------- CEL rules


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_cel_rules_accept_the_examples(name: str) -> None:
    for doc in specfile.read_documents(EXAMPLES / name):
        assert rule_failures(schema_of(doc["kind"]), doc) == []


# Cross-field rules the models enforce in Python and the CRD enforces in CEL.
CROSS_FIELD = {
    "min above max": {"spec.autoscaling.minReplicas": 5, "spec.autoscaling.maxReplicas": 3},
    "missing target": {"spec.autoscaling.signals[0]": {"type": "cpu"}},
    "foreign target": {"spec.autoscaling.signals[2].targetPerReplica": 3},
    "foreign percentile": {"spec.autoscaling.signals[3].percentile": 99},
    "gpu signal, no gpu": {"spec.runtime.resources.gpu": 0},
    "cel and ref": {"spec.autoscaling.policy": {"cel": "recommended", "ref": "x"}},
    "no policy source": {"spec.autoscaling.policy": {}},
    "two step actions": {"spec.rollout.steps[1]": {"setWeight": 20, "pause": {}}},
    "empty step": {"spec.rollout.steps[1]": {}},
    "abTest without match": {"spec.rollout.strategy": "abTest"},
    "check without bound": {"spec.rollout.analysis.checks[0]": {"metric": "errorRate"}},
    "two canary scales": {
        "spec.rollout.steps[1]": {"setCanaryScale": {"replicas": 1, "weight": 5}}
    },
}


@pytest.mark.parametrize("changes", CROSS_FIELD.values(), ids=CROSS_FIELD.keys())
def test_cel_rules_reject_what_the_models_reject(changes: dict[str, object]) -> None:
    doc = edited(example("resnet-canary.yaml"), changes)
    with pytest.raises(validation.SpecError):
        validation.load_model_service(doc)
    assert rule_failures(schema_of("ModelService"), doc) != []


def test_reference_rows_cover_every_spec_field() -> None:
    paths = [row.path for row in crd.field_reference(models.ModelService)]
    assert len(paths) == len(set(paths))
    assert "spec.autoscaling.signals[].targetDutyCycle" in paths
    assert "spec.rollout.abTest.match.header.name" in paths
