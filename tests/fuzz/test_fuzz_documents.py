"""Fuzz target: resource documents. Any JSON-like input gives a model or a SpecError
(each issue with a path, a message and a fix): never a crash, never a raw pydantic error.

The hypothesis profile decides how long it runs (docs/fuzzing.md); file-level input
(bytes, YAML syntax, aliases, nesting) is fuzzed in test_fuzz_specs.py."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.api import models, validation
from tests.unit.api.helpers import example

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([1e308, -0.0, 5e-324, 2**63, -(2**63) - 1])
    | st.text(max_size=12)
    | st.sampled_from(["", "0", "-1", "NaN", "${x}", "x" * 5000, "\x00", "[/x]"])
    # Values that mean something in the model, so mutations reach deep validators.
    | st.sampled_from(["cpu", "latency", "abTest", "500m", "4Gi", "30s", "recommended", "Max"])
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=10) | st.integers(0, 3), children, max_size=4)
    ),
    max_leaves=12,
)
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASES = [
    example("resnet-canary.yaml"),
    example("latency-slo-policy.yaml"),
    example("abtest.yaml"),
    example("half-plus-two-minimal.yaml"),
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            out += _paths(child, (*prefix, index))
    return out


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    """A valid example with a few subtrees replaced, removed or added."""
    doc: Any = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            return draw(JSON)
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.text(max_size=10))] = draw(JSON)
    return doc


def _check(doc: Any) -> None:
    for load in (validation.load_model_service, validation.load_scaling_policy):
        try:
            resource = load(doc)
        except validation.SpecError as error:
            assert error.issues
            # One line per issue, each with a path, a message and a fix.
            assert len(str(error).splitlines()) == len(error.issues)
            for issue in error.issues:
                assert issue.path and issue.message and issue.fix
        else:
            # What loads, dumps to a document that loads to the same thing.
            assert load(validation.to_document(resource)) == resource
            if isinstance(resource, models.ModelService):
                resource.spec.autoscaling.to_config()


@FUZZ
@given(JSON)
def test_random_json_never_crashes(doc: Any) -> None:
    _check(doc)


@FUZZ
@given(mutated_documents())
def test_mutated_examples_never_crash(doc: Any) -> None:
    _check(doc)
