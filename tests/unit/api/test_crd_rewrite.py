"""The JSON-schema to structural-schema rewrite on shapes the resource model may grow into."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from servectl.api import crd


class TreeNode(pydantic.BaseModel):
    children: list[TreeNode] = []


def test_a_recursive_model_is_refused_by_name() -> None:
    # Kubernetes cannot express a schema that contains itself.
    with pytest.raises(crd.SchemaError, match="recursive model TreeNode"):
        crd.openapi_schema(TreeNode)


@pytest.mark.parametrize(
    ("node", "json_type"),
    [
        ({"const": True}, "boolean"),
        ({"enum": [1, 2]}, "integer"),
        ({"const": 1.5}, "number"),
        ({"enum": ["a", "b"]}, "string"),
    ],
)
def test_an_enum_without_a_type_gets_one(node: dict[str, Any], json_type: str) -> None:
    # Structural schemas need a type on every node; pydantic leaves it out for some literals.
    out = crd.structural(node, path="x")
    assert out["type"] == json_type
    assert out["enum"] == node.get("enum", [node.get("const")])


def test_a_free_form_map_keeps_unknown_fields_and_is_an_object() -> None:
    out = crd.structural({"additionalProperties": True}, path="x")
    assert out == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
