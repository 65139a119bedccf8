"""Loading documents into the resource model, with errors that say where and how to fix.

Every entry point takes any decoded JSON/YAML value and returns a model or raises
``SpecError``; pydantic's ValidationError never escapes. Each ``Issue`` has a ``path``
in document terms (``spec.autoscaling.signals[1].type``: camelCase names, ``[i]`` list
indexes), a ``message`` and a concrete ``fix``. ``str(SpecError)`` is one line per
issue::

    spec.autoscaling.minReplicas: minReplicas (5) is greater than maxReplicas (3) \
(fix: set minReplicas <= maxReplicas (now 5 > 3))

Besides the models' own rules, loading compiles CEL policies
(``servectl.autoscaling.cel_policy``) so a broken expression is reported at load time,
with its line and column, rather than on the first reconcile; and :func:`policy_issues`
runs a policy that compiles on a plain cycle (:func:`probe_snapshot`), so ``deploy`` and
``validate`` refuse one that would fail on every cycle.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, get_args, get_origin

import annotated_types
import pydantic
from pydantic_core import ErrorDetails

from servectl.api import models
from servectl.autoscaling import cel_policy, snapshot

Loc = tuple[str | int, ...]
_ModelT = TypeVar("_ModelT", bound=pydantic.BaseModel)

ROOT_PATH = "(document)"
KINDS = ("ModelService", "ScalingPolicy")
_CEL_FIX = (
    "fix the expression; it may read signals, replicas, time, rollout, recommended, params "
    "and state, and returns replicas or {replicas, reason} (docs/policies.md)"
)


@dataclass(frozen=True)
class Issue:
    """One problem in a document: where (``loc``/``path``), what, and how to fix it."""

    loc: Loc
    message: str
    fix: str
    line: int | None = None  # 1-based line in the source file, when loaded from one

    @property
    def path(self) -> str:
        return format_path(self.loc)

    def __str__(self) -> str:
        # One line per issue, whatever a message quotes (CEL diagnostics can span lines).
        return " ".join(f"{self.path}: {self.message} (fix: {self.fix})".splitlines())


class SpecError(ValueError):
    """A document does not describe a valid resource; ``issues`` says why, one by one."""

    def __init__(self, issues: Sequence[Issue], *, source: str | None = None) -> None:
        self.issues: tuple[Issue, ...] = tuple(issues)
        self.source = source  # the file the issues are in, set by servectl.specfile
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(self._where(issue) + str(issue) for issue in self.issues)

    def _where(self, issue: Issue) -> str:
        if self.source is None:
            return ""
        return f"{self.source}:{issue.line}: " if issue.line else f"{self.source}: "


# ----------------------------------------------------------------------------- entry points


def load_model_service(doc: object) -> models.ModelService:
    """A ModelService from a decoded document, or SpecError listing every issue."""
    policy: Loc = ("spec", "autoscaling", "policy")
    return _load(models.ModelService, doc, cel_loc=(*policy, "cel"), params_loc=(*policy, "params"))


def load_scaling_policy(doc: object) -> models.ScalingPolicy:
    """A ScalingPolicy from a decoded document, or SpecError listing every issue."""
    # Params a ScalingPolicy reads need no default here: a ModelService may supply them.
    return _load(models.ScalingPolicy, doc, cel_loc=("spec", "cel"), params_loc=None)


def load_document(doc: object) -> models.ModelService | models.ScalingPolicy:
    """Whichever resource ``doc["kind"]`` names."""
    if not isinstance(doc, Mapping):
        raise SpecError(
            [
                Issue(
                    (),
                    f"expected an object, got {_describe(doc)}",
                    "write a mapping with apiVersion, kind, metadata and spec",
                )
            ]
        )
    kind = doc.get("kind")
    if kind == "ModelService":
        return load_model_service(doc)
    if kind == "ScalingPolicy":
        return load_scaling_policy(doc)
    message = "kind is missing" if kind is None else f"unknown kind {kind!r}"
    raise SpecError([Issue(("kind",), message, f"allowed kinds: {', '.join(KINDS)}")])


def to_document(resource: pydantic.BaseModel) -> dict[str, Any]:
    """The document form of a model (camelCase, JSON types, unset optionals left out)."""
    return resource.model_dump(mode="json", by_alias=True, exclude_none=True)


def format_path(loc: Loc) -> str:
    """("spec", "signals", 1, "type") -> "spec.signals[1].type"; () -> "(document)"."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            parts.append(f".{part}" if parts else part)
        else:
            # Map keys such as label names: app.kubernetes.io/name
            parts.append(f"[{part!r}]")
    return "".join(parts) or ROOT_PATH


# ----------------------------------------------------------------------------- policy probe

PROBE_TIME = 1_736_164_800.0
"""The probe's clock: Monday 2025-01-06 12:00 UTC (a weekday, within office hours)."""
PROBE_PARAM = 1.0
"""A ScalingPolicy's ``params.<name>`` that only a ModelService may set, while probing."""
_PROBE_FIX = (
    "make it work there (state is empty on the first call); try it with "
    "`servectl policy eval docs/examples/snapshot.json --cel ...` (docs/policies.md)"
)


def probe_snapshot(min_replicas: int = 1, max_replicas: int = 10) -> snapshot.Snapshot:
    """A plain cycle of a running service: two ready replicas, every signal measured, no
    rollout. What a policy that works at all must evaluate on."""
    current = max(min_replicas, min(2, max_replicas))
    pods = tuple(
        snapshot.PodSample(name=f"probe-{i}", cpu_usage_cores=0.5, cpu_request_cores=1.0)
        for i in range(current)
    )
    return snapshot.Snapshot(
        time=PROBE_TIME,
        replicas=snapshot.Replicas(
            current=current, ready=current, min=min_replicas, max=max_replicas
        ),
        signals=snapshot.Signals(
            cpu_utilization=50.0,
            cpu_usage_cores=0.5 * current,
            gpu_duty_cycle=50.0,
            rps=20.0,
            concurrency=2.0,
            latency_ms={"p50": 40.0, "p90": 70.0, "p95": 80.0, "p99": 100.0},
            error_rate=0.0,
        ),
        pods=pods,
    )


def probe_policy(
    program: cel_policy.CompiledPolicy,
    params: Mapping[str, float],
    *,
    min_replicas: int = 1,
    max_replicas: int = 10,
) -> str | None:
    """Why a compiled policy fails on :func:`probe_snapshot` (run twice, the second time
    with the state the first returned, as the loop would), or None when it works.

    A policy that compiles can still fail on every cycle (``recommended * 1.5``: CEL does
    not mix int and double); the loop would then fall back to servectl's recommendation
    forever. ``deploy`` and ``validate`` refuse it instead."""
    snap = probe_snapshot(min_replicas, max_replicas)
    state: Mapping[str, Any] | None = None
    for _ in range(2):
        try:
            result = program.evaluate(snap, snap.replicas.current, params=params, state=state)
        except cel_policy.PolicyRuntimeError as error:
            return str(error)
        state = result.state
    return None


def probe_issue(
    loc: Loc,
    name: str,
    program: cel_policy.CompiledPolicy,
    params: Mapping[str, float],
    *,
    min_replicas: int = 1,
    max_replicas: int = 10,
) -> Issue | None:
    """:func:`probe_policy` as an :class:`Issue` at ``loc`` naming policy ``name``."""
    problem = probe_policy(program, params, min_replicas=min_replicas, max_replicas=max_replicas)
    if problem is None:
        return None
    what = "the policy" if name == "inline" else f"ScalingPolicy {name}"
    return Issue(
        loc, f"{what} fails on a plain cycle (every signal measured): {problem}", _PROBE_FIX
    )


def policy_issues(
    resource: models.ModelService | models.ScalingPolicy,
    library: Mapping[str, models.ScalingPolicy] | None = None,
) -> list[Issue]:
    """The probe (:func:`probe_policy`) of the policy a loaded resource holds: an inline
    policy with its params, a ScalingPolicy with its defaults (``PROBE_PARAM`` for a
    param only a ModelService sets); with ``library`` (``deploy``), a ``ref`` too, with
    the params the service gives it. A ``ref`` missing from ``library`` is not probed:
    resolving the policy reports it."""
    loc: Loc
    if isinstance(resource, models.ScalingPolicy):
        expression, loc = resource.spec.cel, ("spec", "cel")
        given: Mapping[str, float] = resource.spec.params
        name, low, high = resource.metadata.name, 1, 10
    else:
        autoscaling = resource.spec.autoscaling
        policy = autoscaling.policy
        if policy is None or (policy.cel is None and library is None):
            return []
        try:
            resolved = autoscaling.resolve_policy(library or {})
        except models.UnknownPolicyError:
            return []
        if resolved is None:
            return []
        field = "cel" if resolved.ref is None else "ref"
        expression, loc = resolved.cel, ("spec", "autoscaling", "policy", field)
        given, name = resolved.params, resolved.name
        low, high = autoscaling.min_replicas, autoscaling.max_replicas
    try:
        program = cel_policy.compile_expression(expression)
    except cel_policy.PolicyCompileError:
        return []  # loading reported it
    params = {key: PROBE_PARAM for key in program.params_read} | dict(given)
    issue = probe_issue(loc, name, program, params, min_replicas=low, max_replicas=high)
    return [] if issue is None else [issue]


# ----------------------------------------------------------------------------- internals


def _load(model: type[_ModelT], doc: object, *, cel_loc: Loc, params_loc: Loc | None) -> _ModelT:
    issues: list[Issue] = []
    result: _ModelT | None = None
    try:
        # by_name=False: documents must use the camelCase names the CRD declares. A
        # snake_case key accepted here would be pruned by the API server, so the same
        # file would mean different things to servectl and to kubectl.
        result = model.model_validate(doc, by_alias=True, by_name=False)
    except pydantic.ValidationError as error:
        issues.extend(_issue(model, detail) for detail in error.errors(include_url=False))
    # Compile the expression even when other fields are wrong, so one run reports all.
    issues.extend(_cel_issues(doc, cel_loc, params_loc))
    if issues:
        raise SpecError(issues)
    assert result is not None
    return result


def _dig(doc: object, loc: Loc) -> object:
    for part in loc:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(part)
    return doc


def _cel_issues(doc: object, cel_loc: Loc, params_loc: Loc | None) -> list[Issue]:
    """Compile the policy at ``cel_loc``; with ``params_loc``, every ``params.<name>``
    the expression reads must be set there (an inline policy has no other source)."""
    expression = _dig(doc, cel_loc)
    if not isinstance(expression, str) or not expression.strip():
        return []  # the model reports a missing or mistyped expression
    try:
        compiled = cel_policy.compile_expression(expression)
    except cel_policy.PolicyResultTypeError as error:
        return [Issue(cel_loc, error.problem, error.fix)]
    except cel_policy.PolicyCompileError as error:
        if error.line is not None and error.column is not None:
            where = f" at {error.line}:{error.column}"
        elif error.line is not None:
            where = f" at line {error.line}"
        else:
            where = ""
        return [Issue(cel_loc, f"CEL does not compile{where}: {error.message}", _CEL_FIX)]
    if params_loc is None:
        return []
    given = _dig(doc, params_loc)
    missing = sorted(compiled.params_read - set(given if isinstance(given, Mapping) else ()))
    if not missing:
        return []
    names = ", ".join(f"params.{name}" for name in missing)
    example = ", ".join(f"{name}: <number>" for name in missing)
    return [
        Issue(params_loc, f"the expression reads {names}, which is not set", f"add {{{example}}}")
    ]


def _clean_loc(loc: tuple[int | str, ...]) -> Loc:
    # pydantic adds markers that are not document paths: "[key]" for a bad map key and
    # validator tags such as "function-after[...]".
    return tuple(
        part for part in loc if not (isinstance(part, str) and re.fullmatch(r"[a-z-]*\[.*\]", part))
    )


def _issue(root: type[pydantic.BaseModel], detail: ErrorDetails) -> Issue:
    loc = _clean_loc(detail["loc"])
    kind = detail["type"]
    ctx: Mapping[str, Any] = detail.get("ctx") or {}
    given = detail.get("input")

    if kind == "spec":  # models.spec_error: a cross-field rule
        return Issue(loc + tuple(ctx.get("field", ())), str(ctx["message"]), str(ctx["fix"]))
    if kind == "quantity":
        return Issue(loc, detail["msg"], str(ctx["fix"]))
    if kind == "missing":
        return Issue(loc, "required field is missing", _missing_fix(root, loc))
    if kind == "extra_forbidden":
        return Issue(loc, "unknown field", _unknown_field_fix(root, loc))
    if kind == "invalid_key":
        return Issue(loc, f"keys must be strings, got {_describe(given)}", "quote the key")
    if kind in ("enum", "literal_error"):
        allowed = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return Issue(loc, f"unknown value {given!r}", f"allowed: {', '.join(allowed)}")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        fields = _fields_at(root, loc, required=True)
        fix = f"write a mapping with {', '.join(fields)}" if fields else "write a mapping"
        return Issue(loc, f"expected an object, got {_describe(given)}", fix)
    if kind in ("list_type", "tuple_type"):
        return Issue(
            loc, f"expected a list, got {_describe(given)}", "write a list: one '- item' per line"
        )
    if kind == "string_type":
        return Issue(loc, f"expected a string, got {_describe(given)}", "quote the value")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return Issue(
            loc, f"expected an integer, got {_describe(given)}", "write a whole number, unquoted"
        )
    if kind in ("float_type", "float_parsing"):
        return Issue(loc, f"expected a number, got {_describe(given)}", "write a number, unquoted")
    if kind == "bool_type":
        return Issue(loc, f"expected true or false, got {_describe(given)}", "write true or false")
    if kind == "finite_number":
        return Issue(loc, "must be a finite number", "replace inf/nan with a finite number")
    if kind in _BOUNDS:
        closed = _closed_range(root, loc)
        if closed is not None:  # both ends inclusive: "must be 0-100"
            low, high = closed
            return Issue(
                loc, f"must be {low}-{high}, got {given!r}", f"use a value from {low} to {high}"
            )
        symbol, key = _BOUNDS[kind]
        limit = _plain(ctx.get(key))
        return Issue(
            loc, f"must be {symbol} {limit}, got {given!r}", f"use a value {symbol} {limit}"
        )
    if kind == "too_short":
        least = ctx.get("min_length")
        return Issue(loc, f"needs at least {least} item(s)", _too_short_fix(loc))
    if kind == "too_long":
        return Issue(loc, "too many items", f"keep at most {ctx.get('max_length')} item(s)")
    if kind == "string_too_short":
        return Issue(loc, "must not be empty", "write a non-empty value")
    if kind == "string_too_long":
        limit = ctx.get("max_length")
        return Issue(loc, f"longer than {limit} characters", f"shorten it to at most {limit}")
    if kind == "string_pattern_mismatch":
        noun, hint = _PATTERNS.get(str(ctx.get("pattern")), ("value", "see docs/resource-model.md"))
        return Issue(loc, f"{given!r} is not a valid {noun}", hint)
    if kind.startswith(("datetime", "timezone")):
        return Issue(
            loc,
            f"expected an RFC 3339 timestamp, got {_describe(given)}",
            "write e.g. 2025-01-31T12:00:00Z (with a timezone)",
        )
    return Issue(loc, detail["msg"], "see docs/resource-model.md for this field")


_BOUNDS: Mapping[str, tuple[str, str]] = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}

_NAME_HINT = "lowercase letters, digits and '-', starting and ending with a letter or digit"
_PATTERNS: Mapping[str, tuple[str, str]] = {
    models.DNS1035_LABEL: (
        "name",
        "use lowercase letters, digits and '-', starting with a letter and ending with a "
        "letter or digit (e.g. resnet-50)",
    ),
    models.DNS1123_LABEL: ("name", f"use {_NAME_HINT}"),
    models.DNS1123_SUBDOMAIN: ("name", f"use {_NAME_HINT}; '.' may separate parts"),
    models.TF_MODEL_NAME: ("model name", "use letters, digits, '_', '.' and '-'"),
    models.NO_WHITESPACE: ("value", "remove the whitespace"),
    models.DURATION: ("duration", 'write a duration such as "30s", "5m" or "1h30m"'),
    models.HTTP_HEADER_NAME: ("header name", "use an HTTP header name such as x-model-variant"),
    models.HOSTNAME: (
        "hostname",
        f"use a DNS name ({_NAME_HINT} per part, '.' between parts, no IP), optionally "
        "starting with '*.', e.g. cost.ml.models.example.com",
    ),
    models.CEL_IDENTIFIER: (
        "identifier",
        "use letters, digits and '_', not starting with a digit (e.g. peak_replicas)",
    ),
}


def _closed_range(root: type[pydantic.BaseModel], loc: Loc) -> tuple[object, object] | None:
    """(low, high) when the field at ``loc`` takes low <= value <= high, else None."""
    parent = _annotation_at(root, loc[:-1])
    info = (
        _field(parent, loc[-1])
        if isinstance(parent, type) and issubclass(parent, pydantic.BaseModel)
        else None
    )
    metadata = [] if info is None else info.metadata
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    return None if low is None or high is None else (_plain(low), _plain(high))


def _plain(number: object) -> object:
    """A bound as a person writes it: 0.0 -> 0, 0.5 -> 0.5."""
    return int(number) if isinstance(number, float) and number.is_integer() else number


def _too_short_fix(loc: Loc) -> str:
    if loc and loc[-1] == "signals":
        return "add a signal, e.g. {type: cpu, targetUtilization: 70}"
    return "add an item or leave the field out"


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


# ----------------------------------------------------------------------------- schema walking


def _strip(annotation: object) -> object:
    """Unwrap Annotated[...] and `X | None` down to the type that validates the value."""
    while True:
        origin = get_origin(annotation)
        if origin is typing.Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _field(model: type[pydantic.BaseModel], alias: str | int) -> pydantic.fields.FieldInfo | None:
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias:
            return info
    return None


def _annotation_at(root: type[pydantic.BaseModel], loc: Loc) -> object:
    """The (unwrapped) type that validates the value at ``loc``, or None if unknown."""
    current: object = root
    for part in loc:
        current = _strip(current)
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
            info = _field(current, part)
            if info is None:
                return None
            current = info.annotation
        elif origin in (list, tuple) and isinstance(part, int):
            current = get_args(current)[0]
        elif origin is dict:
            current = get_args(current)[1]
        else:
            return None
    return _strip(current)


def _fields_at(root: type[pydantic.BaseModel], loc: Loc, *, required: bool = False) -> list[str]:
    """Field names of the model at ``loc``; with ``required``, only those without defaults
    (all of them when none is required)."""
    model = _annotation_at(root, loc)
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        return []
    fields = list(model.model_fields.items())
    if required and any(info.is_required() for _, info in fields):
        fields = [(name, info) for name, info in fields if info.is_required()]
    return [info.alias or name for name, info in fields]


def _missing_fix(root: type[pydantic.BaseModel], loc: Loc) -> str:
    if not loc:
        return "add the field"
    name = loc[-1]
    parent = _annotation_at(root, loc[:-1])
    info = (
        _field(parent, name)
        if isinstance(parent, type) and issubclass(parent, pydantic.BaseModel)
        else None
    )
    if info is not None and info.examples:
        return f"add {name}, e.g. {name}: {info.examples[0]}"
    if info is not None:
        fields = _fields_at(root, loc, required=True)
        if fields:
            return f"add {name} with {', '.join(fields)}"
    return f"add {name}"


def _unknown_field_fix(root: type[pydantic.BaseModel], loc: Loc) -> str:
    name = loc[-1] if loc else ""
    allowed = _fields_at(root, loc[:-1])
    if not allowed:
        return "remove it"
    known = f"allowed here: {', '.join(allowed)}"
    if isinstance(name, str):
        camel = pydantic.alias_generators.to_camel(name)
        if camel != name and camel in allowed:
            return f"write it in camelCase: {camel}"
        close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
        if close:
            return f"did you mean {close[0]}? {known}"
    return f"remove it; {known}"
