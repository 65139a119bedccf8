"""Fuzz target: spec files (``servectl validate``'s reader, ``specfile.load_file``).

Whatever the text of the file, loading it returns resources or raises ``SpecFileError``
naming the file, or ``SpecError`` naming the file and the fields: never another
exception. The texts are arbitrary, truncated examples, deep nesting and YAML aliases
that refer to themselves; documents are fuzzed in test_fuzz_documents.py.

CI runs this under the "ci" profile (fixed seed, 100 examples a test); for a long run:
``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/fuzz`` (docs/fuzzing.md).
"""

from __future__ import annotations

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
