"""Shared helpers for the resource-model tests: the example documents, and edits of them."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from servectl.api import crd

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "deploy" / "examples"
CRDS = REPO / "deploy" / "crds"
DELETE = object()  # edit value: remove the key

Edit = Callable[..., dict[str, Any]]


def example(name: str) -> dict[str, Any]:
    """The first document of deploy/examples/<name>."""
    with open(EXAMPLES / name, encoding="utf-8") as handle:
        first: dict[str, Any] = next(doc for doc in yaml.safe_load_all(handle) if doc)
    return first


def edited(doc: dict[str, Any], changes: dict[str, object]) -> dict[str, Any]:
    """A deep copy of ``doc`` with each "a.b[1].c" path set to a value (or DELETE)."""
    out = copy.deepcopy(doc)
    for path, value in changes.items():
        parts: list[str | int] = [
            int(index) if index else name
            for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path)
        ]
        parent: Any = out
        for part in parts[:-1]:
            parent = parent[part]
        if value is DELETE:
            del parent[parts[-1]]
        else:
            parent[parts[-1]] = value
    return out


# ----------------------------------------------------------------------------- CRD rules

GENERATED = crd.generate_crds()
BY_KIND = {c["spec"]["names"]["kind"]: c for c in GENERATED}


def schema_of(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of the generated CRD for ``kind``."""
    return BY_KIND[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def _is_sorted(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


# Functions of the Kubernetes CEL libraries the rules use that the cel package lacks
# (https://kubernetes.io/docs/reference/using-api/cel/#kubernetes-list-library).
KUBERNETES_FUNCTIONS = {"isSorted": _is_sorted}


def rule_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Evaluate every x-kubernetes-validations rule on the nodes present in ``value``."""
    cel = pytest.importorskip("cel")

    def holds(rule: str) -> bool:
        context = cel.Context(variables={"self": value}, functions=KUBERNETES_FUNCTIONS)
        return bool(cel.evaluate(rule, context))

    failures = [
        f"{path or '(root)'}: {rule['message']}"
        for rule in schema.get("x-kubernetes-validations", ())
        if isinstance(value, dict) and not holds(rule["rule"])
    ]
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                failures += rule_failures(child, value[name], f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            failures += rule_failures(schema["items"], item, f"{path}[{index}]")
    return failures
