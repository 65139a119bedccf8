"""CustomResourceDefinitions for ModelService and ScalingPolicy, derived from the models.

The OpenAPI schema in each CRD is computed from the pydantic JSON schema, never written
by hand, so the cluster and ``servectl`` accept the same documents. Kubernetes only
accepts *structural* schemas
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema),
so the JSON schema is rewritten:

- ``$ref`` to ``$defs`` are inlined (sibling keywords such as a field's description win);
- ``anyOf [X, null]`` (an optional field) becomes X with ``nullable: true``;
- ``const`` becomes a one-value ``enum``; JSON Schema's numeric ``exclusiveMinimum: 0``
  becomes OpenAPI 3.0's ``minimum: 0, exclusiveMinimum: true``;
- free-form maps (``dict[str, Any]``) become ``x-kubernetes-preserve-unknown-fields``;
  maps with a key pattern keep only their value schema (key patterns are not
  expressible);
- ``additionalProperties: false`` is dropped (the API server prunes unknown fields and
  ``kubectl`` rejects them with strict field validation); only scalar defaults are kept;
  titles and examples are dropped.

Anything the rewrite cannot express (a union of two object types, say) raises
``SchemaError`` naming the path, so a model change that would produce a non-structural
CRD fails the tests rather than the ``kubectl apply``.

The cross-field rules of the models are repeated as ``x-kubernetes-validations`` (CEL)
on the nodes they constrain; tests evaluate them against the same cases as the models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from servectl.api import models

Schema = dict[str, Any]

# Output order of schema keywords, so generated files diff cleanly.
_KEYWORD_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "items",
    "additionalProperties",
    "properties",
    "required",
    "x-kubernetes-validations",
)
_SCALARS = (str, int, float, bool)


class SchemaError(ValueError):
    """The JSON schema has a construct a structural CRD schema cannot express."""


@dataclass(frozen=True)
class FieldRow:
    """One row of the field reference (docs/resource-model.md)."""

    path: str
    type: str
    default: str
    meaning: str


# ----------------------------------------------------------------------------- CRDs


def generate_crds() -> list[dict[str, Any]]:
    """The apiextensions.k8s.io/v1 CRDs, ModelService first."""
    return [
        _crd(
            kind="ModelService",
            plural="modelservices",
            short_names=["ms"],
            schema=openapi_schema(models.ModelService),
            status=True,
            columns=[
                _column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
                _column("Desired", "integer", ".status.autoscaling.desiredReplicas"),
                _column("Traffic", "string", ".status.traffic"),
                _column("Strategy", "string", ".spec.rollout.strategy"),
                _column("Phase", "string", ".status.rollout.phase"),
                _column("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
        _crd(
            kind="ScalingPolicy",
            plural="scalingpolicies",
            short_names=["scalingpol"],
            schema=openapi_schema(models.ScalingPolicy),
            status=False,
            columns=[
                _column("Description", "string", ".spec.description"),
                _column("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
    ]


def _column(name: str, kind: str, json_path: str) -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": json_path}


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    schema: Schema,
    status: bool,
    columns: list[dict[str, str]],
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": models.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{models.GROUP}"},
        "spec": {
            "group": models.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["servectl"],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def openapi_schema(model: type[pydantic.BaseModel]) -> Schema:
    """The structural openAPIV3Schema of a top-level resource model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    schema = structural(_inline(raw, definitions, ()), path=model.__name__)
    properties = dict(schema["properties"])
    # Kubernetes owns these: apiVersion/kind are checked by the API machinery, and a
    # CRD may not constrain metadata beyond name/generateName.
    properties["apiVersion"] = {"description": "servectl.io/v1alpha1", "type": "string"}
    properties["kind"] = {"description": schema["properties"]["kind"]["enum"][0], "type": "string"}
    properties["metadata"] = {"type": "object"}
    schema["properties"] = properties
    schema["required"] = [
        name
        for name in schema.get("required", [])
        if name not in ("apiVersion", "kind", "metadata")
    ]
    return _ordered(schema)


def _inline(node: Any, definitions: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        if name in seen:
            raise SchemaError(f"recursive model {name} cannot be a structural schema")
        target = _inline(definitions[name], definitions, (*seen, name))
        siblings = {k: _inline(v, definitions, seen) for k, v in node.items() if k != "$ref"}
        return {**target, **siblings}
    return {key: _inline(value, definitions, seen) for key, value in node.items()}


def structural(node: Mapping[str, Any], path: str = "") -> Schema:
    """Rewrite one (inlined) JSON-schema node into a structural OpenAPI v3 node."""
    node = dict(node)
    if node.get("additionalProperties") is True:
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = node.pop("anyOf")
        concrete = [b for b in branches if b.get("type") != "null"]
        if len(concrete) != 1:
            raise SchemaError(f"{path}: a union of {len(concrete)} types is not structural")
        if len(concrete) < len(branches):
            node["nullable"] = True
        # The field's own keywords (description, default) win over the branch's.
        node = {**concrete[0], **node}
        return structural(node, path)
    out: Schema = {}
    for key, value in node.items():
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "default":
            if isinstance(value, _SCALARS):
                out["default"] = value
        elif key == "properties":
            out["properties"] = {
                name: structural(child, f"{path}.{name}") for name, child in value.items()
            }
        elif key == "items":
            out["items"] = structural(value, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = structural(value, f"{path}{{}}")
        elif key == "patternProperties":
            (value_schema,) = value.values()
            out["additionalProperties"] = structural(value_schema, f"{path}{{}}")
        elif key in _KEYWORD_ORDER:
            out[key] = value
        # everything else (title, examples, propertyNames, ...) is documentation noise
        # or not expressible in a CRD.
    if "enum" in out and "type" not in out:
        out["type"] = _json_type(out["enum"][0])
    if out.get("x-kubernetes-preserve-unknown-fields") and "type" not in out:
        out["type"] = "object"
    return _ordered(out)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _ordered(node: Schema) -> Schema:
    rank = {key: index for index, key in enumerate(_KEYWORD_ORDER)}
    return dict(sorted(node.items(), key=lambda item: rank.get(item[0], len(rank))))


# ----------------------------------------------------------------------------- reference


def field_reference(model: type[pydantic.BaseModel], root: str = "spec") -> list[FieldRow]:
    """Every field under ``root`` of a resource's CRD schema, depth first."""
    schema = openapi_schema(model)["properties"][root]
    rows: list[FieldRow] = []
    _walk(schema, root, rows)
    return rows


def _walk(node: Schema, path: str, rows: list[FieldRow]) -> None:
    required = set(node.get("required", ()))
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}"
        rows.append(
            FieldRow(
                path=child_path,
                type=_type_label(child),
                default="required" if name in required else _default_label(child),
                meaning=_meaning(child),
            )
        )
        target = child.get("items", child)
        suffix = "[]" if "items" in child else ""
        if "properties" in target:
            _walk(target, child_path + suffix, rows)


def _type_label(node: Schema) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "quantity"
    if "enum" in node:
        return " \\| ".join(str(value) for value in node["enum"])
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"list of {_type_label(node['items'])}"
    if kind == "object" and "additionalProperties" in node:
        return f"map of {_type_label(node['additionalProperties'])}"
    if node.get("format") == "date-time":
        return "timestamp"
    return kind


def _default_label(node: Schema) -> str:
    if "default" in node:
        default = node["default"]
        if isinstance(default, bool):
            return f"`{str(default).lower()}`"
        return f"`{default}`" if default != "" else '`""`'
    return ""


def _meaning(node: Schema) -> str:
    text = str(node.get("description", ""))
    bounds = []
    for key, symbol in (("minimum", ">"), ("maximum", "<")):
        if key in node:
            exclusive = node.get("exclusiveMinimum" if key == "minimum" else "exclusiveMaximum")
            bounds.append(f"{symbol}{'' if exclusive else '='} {node[key]}")
    if "minItems" in node:
        bounds.append(f"at least {node['minItems']} item(s)")
    if "maxItems" in node:
        bounds.append(f"at most {node['maxItems']} item(s)")
    if bounds:
        text = f"{text} ({', '.join(bounds)})" if text else ", ".join(bounds)
    return text.replace("|", "\\|")


def reference_markdown(rows: Sequence[FieldRow]) -> str:
    """The rows as a Markdown table."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r.path}` | {r.type} | {r.default} | {r.meaning} |" for r in rows]
    return "\n".join(lines) + "\n"
