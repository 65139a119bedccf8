"""Spec files: multi-document YAML and JSON, errors with file and line, YAML output."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servectl import specfile
from servectl.api import crd, models, validation

MINIMAL = """\
apiVersion: servectl.io/v1alpha1
kind: ModelService
metadata:
  name: {name}
spec:
  model: {{name: m, basePath: /models/m}}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_multi_document_yaml_skips_empty_documents(tmp_path: Path) -> None:
    text = "---\n" + MINIMAL.format(name="a") + "---\n---\n" + MINIMAL.format(name="b") + "---\n"
    docs = specfile.read_documents(write(tmp_path, "two.yaml", text))
    assert [doc["metadata"]["name"] for doc in docs] == ["a", "b"]


def test_json_object_and_list(tmp_path: Path) -> None:
    doc = yaml.safe_load(MINIMAL.format(name="a"))
    one = write(tmp_path, "one.json", json.dumps(doc))
    many = write(tmp_path, "many.json", json.dumps([doc, doc]))
    assert specfile.read_documents(one) == [doc]
    assert len(specfile.load_file(many)) == 2


def test_kubectl_list_is_unpacked(tmp_path: Path) -> None:
    items = [yaml.safe_load(MINIMAL.format(name=n)) for n in ("a", "b")]
    path = write(
        tmp_path, "list.yaml", yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    )
    assert [r.metadata.name for r in specfile.load_file(path)] == ["a", "b"]


def test_timestamps_stay_strings(tmp_path: Path) -> None:
    text = MINIMAL.format(name="a").replace(
        "  name: a\n", "  name: a\n  labels: {since: 2025-01-31}\n"
    )
    (service,) = specfile.load_file(write(tmp_path, "ts.yaml", text))
    assert service.metadata.labels == {"since": "2025-01-31"}


def test_load_file_dispatches_on_kind() -> None:
    path = Path(__file__).resolve().parents[3] / "deploy/examples/business-hours-ref.yaml"
    policy, service = specfile.load_file(path)
    assert isinstance(policy, models.ScalingPolicy)
    assert isinstance(service, models.ModelService)
    resolved = service.spec.autoscaling.resolve_policy({policy.metadata.name: policy})
    assert resolved is not None and resolved.params == {"floor": 6.0}


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "kind: ModelService\nspec: {model: [\n")
    with pytest.raises(specfile.SpecFileError, match=r"bad\.yaml:3:1: invalid YAML"):
        specfile.read_documents(path)


def test_json_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.json", '{\n  "kind": "ModelService",\n}\n')
    with pytest.raises(specfile.SpecFileError, match=r"bad\.json:3:1: invalid JSON"):
        specfile.read_documents(path)


def test_non_mapping_document_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "scalar.yaml", MINIMAL.format(name="a") + "---\n- just\n- a list\n")
    with pytest.raises(specfile.SpecFileError, match=r"scalar\.yaml:8: expected a mapping"):
        specfile.read_documents(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(specfile.SpecFileError, match=r"nope\.yaml: cannot read"):
        specfile.read_documents(tmp_path / "nope.yaml")


def test_spec_errors_carry_file_and_line(tmp_path: Path) -> None:
    text = (
        MINIMAL.format(name="a")
        + "---\n"
        + MINIMAL.format(name="b")
        + "  autoscaling:\n"
        + "    signals:\n"
        + "      - {type: cpu, targetUtilization: 70}\n"
        + "      - {type: memory}\n"
    )
    path = write(tmp_path, "svc.yaml", text)
    with pytest.raises(validation.SpecError) as caught:
        specfile.load_file(path)
    assert str(caught.value) == (
        f"{path}:17: spec.autoscaling.signals[1].type: unknown value 'memory' "
        "(fix: allowed: cpu, gpu, latency, rps, concurrency)"
    )


def test_unknown_kind_in_file(tmp_path: Path) -> None:
    path = write(tmp_path, "dep.yaml", "apiVersion: apps/v1\nkind: Deployment\n")
    with pytest.raises(validation.SpecError) as caught:
        specfile.load_file(path)
    assert str(caught.value) == (
        f"{path}:2: kind: unknown kind 'Deployment' "
        "(fix: allowed kinds: ModelService, ScalingPolicy)"
    )


# ----------------------------------------------------------------------------- writing


class Color(enum.StrEnum):
    RED = "red"


def test_dump_yaml_keeps_key_order_and_round_trips() -> None:
    docs: list[dict[str, Any]] = [
        {"z": 1, "a": {"y": [1, "two"], "b": Color.RED}},
        {"cel": "a\n  && b\n"},
    ]
    text = specfile.dump_yaml(docs)
    assert text.index("z:") < text.index("a:")
    assert "b: red" in text
    assert "cel: |" in text  # multi-line CEL stays readable
    assert list(yaml.safe_load_all(text)) == [
        {"z": 1, "a": {"y": [1, "two"], "b": "red"}},
        {"cel": "a\n  && b\n"},
    ]


def test_dump_yaml_is_deterministic() -> None:
    assert specfile.dump_yaml(crd.generate_crds()) == specfile.dump_yaml(crd.generate_crds())


def test_write_crds(tmp_path: Path) -> None:
    written = specfile.write_crds(tmp_path / "crds")
    assert [p.name for p in written] == [
        "modelservices.servectl.io.yaml",
        "scalingpolicies.servectl.io.yaml",
    ]
    for path, definition in zip(written, crd.generate_crds(), strict=True):
        text = path.read_text(encoding="utf-8")
        assert text.startswith(specfile.CRD_HEADER)
        assert yaml.safe_load(text) == definition
