"""Spec files: reading YAML/JSON documents into resources, and writing the CRD files.

The I/O edge of ``servectl.api`` (which may not touch files): decoding, file and line
numbers in errors, and YAML output. Validation itself is ``servectl.api.validation``.

YAML is read the way Kubernetes reads it for these resources: timestamps stay strings
(PyYAML would turn ``2025-01-31`` into a date), and a ``kind: List`` is unpacked into its
items, so the output of ``kubectl get -o yaml`` loads too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from servectl.api import crd, models, validation

CRD_HEADER = "# Generated from servectl/api/models.py by `servectl crds generate`. Do not edit.\n"


class SpecFileError(ValueError):
    """A file cannot be read or decoded; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class _Document:
    content: Any  # a Mapping once _read has checked it
    node: yaml.Node | None  # for line numbers; None when unknown
    loc: validation.Loc = ()  # where the resource sits in the node (inside a List)


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as the Kubernetes API does."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Dumper(yaml.SafeDumper):
    """Block-style YAML; multi-line strings (CEL policies) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    # str(value) so StrEnum members are written as their plain value.
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=style)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_multi_representer(str, _represent_str)  # StrEnum and other str subclasses


# ----------------------------------------------------------------------------- reading


def read_documents(path: str | Path) -> list[dict[str, Any]]:
    """Every non-empty document in a YAML (multi-document) or JSON file, as dicts.

    A ``kind: List`` document contributes its items. Raises SpecFileError naming the
    file and line for unreadable files, syntax errors and non-mapping documents.
    """
    return [dict(document.content) for document in _read(Path(path))]


def load_file(
    path: str | Path, *, probe_policies: bool = False
) -> list[models.ModelService | models.ScalingPolicy]:
    """Every resource in a file, dispatched on ``kind``.

    Raises SpecError with ``source`` set to the file and each issue's line, covering
    all documents in the file at once, and SpecFileError for a file with no resource.
    ``probe_policies`` (``deploy``, ``validate``): a CEL policy that compiles must also
    work on a plain cycle (:func:`servectl.api.validation.policy_issues`).
    """
    file = Path(path)
    resources: list[models.ModelService | models.ScalingPolicy] = []
    issues: list[validation.Issue] = []
    for document in _read(file):
        try:
            resource = validation.load_document(document.content)
            found = validation.policy_issues(resource) if probe_policies else []
        except validation.SpecError as error:
            found = list(error.issues)
        else:
            resources.append(resource)
        issues.extend(
            validation.Issue(
                issue.loc, issue.message, issue.fix, _line(document.node, document.loc + issue.loc)
            )
            for issue in found
        )
    if issues:
        raise validation.SpecError(issues, source=str(file))
    if not resources:
        raise SpecFileError(
            f"{file}: no resources: the file is empty or holds only empty documents; "
            "expected a ModelService or ScalingPolicy (see deploy/examples/)"
        )
    return resources


def error_text(path: str | Path, error: Exception) -> str:
    """What :func:`load_file` raised, as the one text to print: the file named once (a
    SpecError and a SpecFileError name it already, with the line)."""
    if isinstance(error, validation.SpecError) and error.source is not None:
        return str(error)
    if isinstance(error, SpecFileError):
        return str(error)
    if isinstance(error, OSError):
        return f"{path}: cannot read: {error.strerror or error}"
    return f"{path}: {error}"


def _read(file: Path) -> list[_Document]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecFileError(f"{file}: cannot read: {error}") from None
    documents = _decode_json(file, text) if file.suffix == ".json" else _decode_yaml(file, text)
    out: list[_Document] = []
    for document in documents:
        content = document.content
        if content is None:
            continue  # an empty document, e.g. after a trailing "---"
        if isinstance(content, Mapping) and content.get("kind") == "List":
            items = content.get("items")
            if not isinstance(items, list):
                raise SpecFileError(f"{_where(file, document)}: a List needs items: [...]")
            parts = [_Document(item, document.node, ("items", i)) for i, item in enumerate(items)]
        else:
            parts = [document]
        for part in parts:
            if not isinstance(part.content, Mapping):
                got = type(part.content).__name__
                raise SpecFileError(
                    f"{_where(file, part)}: expected a mapping (a resource), got {got}"
                )
            out.append(part)
    return out


def _where(file: Path, document: _Document) -> str:
    line = _line(document.node, document.loc)
    return f"{file}:{line}" if line else str(file)


# A resource is a few levels deep; these bound what a hostile file can make the parser and
# the validator walk (deep nesting, aliases that refer to themselves or fan out).
MAX_DEPTH = 64
MAX_NODES = 100_000


def _check_graph(file: Path, node: yaml.Node) -> None:
    """Refuse a composed document that is too deep, refers to itself through an alias,
    or expands (aliases counted each time they are used) past MAX_NODES nodes."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def where(at: yaml.Node) -> str:
        return f"{file}:{at.start_mark.line + 1}:{at.start_mark.column + 1}"

    def size(at: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise SpecFileError(f"{where(at)}: nested deeper than {MAX_DEPTH} levels")
        key = id(at)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise SpecFileError(f"{where(at)}: an alias refers to the node that holds it")
        on_path.add(key)
        total = 1
        if isinstance(at, yaml.SequenceNode):
            children: list[yaml.Node] = list(at.value)
        elif isinstance(at, yaml.MappingNode):
            children = [part for pair in at.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_NODES:
                raise SpecFileError(
                    f"{where(at)}: expands to more than {MAX_NODES:,} values "
                    "(aliases counted each time they are used)"
                )
        on_path.discard(key)
        sizes[key] = total
        return total

    size(node, 0)


def _decode_yaml(file: Path, text: str) -> list[_Document]:
    documents: list[_Document] = []
    try:
        loader = _Loader(text)  # its reader already refuses control characters
    except yaml.YAMLError as error:
        raise SpecFileError(f"{file}: invalid YAML: {error}") from None
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # check_node() said there is one
                break
            _check_graph(file, node)
            documents.append(_Document(loader.construct_document(node), node))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(file)
        problem = getattr(error, "problem", None) or str(error)
        raise SpecFileError(f"{where}: invalid YAML: {problem}") from None
    except RecursionError:  # the parser itself recurses once per level
        raise SpecFileError(f"{file}: nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
    return documents


def _decode_json(file: Path, text: str) -> list[_Document]:
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecFileError(
            f"{file}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
        ) from None
    except RecursionError:
        raise SpecFileError(f"{file}: nested deeper than {MAX_DEPTH} levels") from None
    # JSON is YAML as far as structure goes: reuse the YAML node tree for line numbers.
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        node = None
    if node is not None:
        _check_graph(file, node)
    if isinstance(content, list):  # several resources in one JSON file
        return [_Document(item, _child(node, index)) for index, item in enumerate(content)]
    return [_Document(content, node)]


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                return value  # type: ignore[no-any-return]
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]  # type: ignore[no-any-return]
    return None


def _line(node: yaml.Node | None, loc: validation.Loc) -> int | None:
    """The 1-based line of the deepest node along ``loc`` that exists in the file."""
    if node is None:
        return None
    line: int = node.start_mark.line + 1
    for part in loc:
        found = _child(node, part)
        if found is None:
            break
        node, line = found, found.start_mark.line + 1
    return line


# ----------------------------------------------------------------------------- writing


def dump_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """Documents as YAML, keys in the order given (stable for generated files)."""
    return yaml.dump_all(
        [_plain(doc) for doc in docs],
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=len(docs) > 1,
        allow_unicode=True,
        width=4096,  # no line folding: generated files diff line by line
    )


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def crd_file_text(definition: Mapping[str, Any]) -> str:
    """The committed form of one CRD (header comment + YAML)."""
    return CRD_HEADER + dump_yaml([definition])


def write_crds(directory: str | Path) -> list[Path]:
    """Write one ``<plural>.<group>.yaml`` per CRD into ``directory``; returns the paths."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for definition in crd.generate_crds():
        path = target / f"{definition['metadata']['name']}.yaml"
        path.write_text(crd_file_text(definition), encoding="utf-8")
        written.append(path)
    return written
