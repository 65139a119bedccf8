"""Fuzz target: spec files and documents (``servectl validate``, ``deploy``'s parser).

Whatever the bytes or the document tree, loading either returns resources or raises
``SpecError`` / ``SpecFileError`` whose message names a field or a line: never another
exception, and never a message without a place. Near-valid documents are the examples
in deploy/examples with one value swapped for a hostile one (wrong type, huge, NaN,
negative, deep nesting, odd strings), which is where validators crash.

CI runs this under the "ci" profile (fixed seed, 100 examples a test); for a long run:
``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/fuzz`` (docs/fuzzing.md).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl import specfile
from servectl.api import validation

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "deploy" / "examples").glob("*.yaml"))
DOCUMENTS = [doc for path in EXAMPLES for doc in specfile.read_documents(path)]

HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "0", "-1", "1e9", "NaN", "100m", "2Gi", "${x}", "x" * 5000, "\x00"]),
)
TREES = st.recursive(
    HOSTILE_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=20,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += _paths(value, (*prefix, index))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _check_loads(doc: Any) -> None:
    try:
        resource = validation.load_document(doc)
    except validation.SpecError as error:
        assert error.issues, "a SpecError with no issue"
        for issue in error.issues:
            assert issue.message.strip(), issue
            assert isinstance(issue.loc, tuple)
        assert str(error).strip()
    else:
        # What loads must dump and load back to the same resource.
        again = validation.load_document(validation.to_document(resource))
        assert again == resource


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=TREES)
def test_any_document_tree_loads_or_names_a_field(tree: Any) -> None:
    _check_loads(tree)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    example=st.sampled_from(DOCUMENTS),
    data=st.data(),
    value=st.one_of(TREES, st.just({"a": [[[[[[[[[[1]]]]]]]]]]})),
)
def test_an_example_with_one_hostile_value_loads_or_names_a_field(
    example: dict[str, Any], data: st.DataObject, value: Any
) -> None:
    path = data.draw(st.sampled_from(_paths(example)))
    _check_loads(_replace(example, path, value))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(example=st.sampled_from(DOCUMENTS), data=st.data())
def test_an_example_with_a_field_removed_loads_or_names_it(
    example: dict[str, Any], data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from([p for p in _paths(example) if p]))
    doc = copy.deepcopy(example)
    node = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    _check_loads(doc)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    text=st.one_of(
        st.text(max_size=400),
        st.binary(max_size=400).map(lambda b: b.decode("latin-1")),
        st.sampled_from([yaml.safe_dump(d) for d in DOCUMENTS]).flatmap(
            lambda s: st.integers(0, len(s)).map(lambda cut: s[:cut])  # truncated files
        ),
        st.just("a: " + "[" * 5000 + "]" * 5000),  # deep nesting
        st.just("a: &x [*x]"),  # a recursive alias
        st.just("- &a [&b [*a]]\n"),
    )
)
def test_any_file_text_loads_or_names_the_file(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        resources = specfile.load_file(path)
    except specfile.SpecFileError as error:
        assert str(error).startswith(str(path)), error
    except validation.SpecError as error:
        assert error.issues and str(path) in str(error), error
    else:
        assert resources
