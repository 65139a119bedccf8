"""What every document shares: API group, strict scalars, patterns, quantities, bases.

Quantities and durations are parsed here (``parse_quantity``, ``parse_duration``);
``cel_rules`` and ``spec_error`` are how every model states a cross-field rule twice,
as a CRD ``x-kubernetes-validations`` entry and as a validation error with a fix.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "servectl.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# ----------------------------------------------------------------------------- scalars

# Strict numbers: the API server types these fields as integer/number, so the string
# "3" or the boolean true must fail here too, or a deploy would accept a file
# that `kubectl apply` rejects.
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]  # strict float still takes integers
Bool = Annotated[bool, Strict()]

# Kubernetes names. A ModelService name must be a DNS-1035 label because it names the
# per-revision Services; the shorter limit leaves room for the "-v<version>" suffix of
# each revision (a 10-digit timestamp version included) within the 63-character limit.
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MODEL_SERVICE_NAME_MAX = 50
TF_MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NO_WHITESPACE = r"^\S+$"
# Go-style durations as Argo and Kubernetes write them: "30s", "5m", "1h30m", "250ms".
DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
HTTP_HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
CEL_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A non-negative Kubernetes resource quantity ("2", "500m", "4Gi", "1.5", "1e3").
QUANTITY = (
    r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

_QUANTITY_RE = re.compile(QUANTITY)
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_SUFFIX_FACTORS: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_quantity(quantity: int | str) -> Decimal:
    """The value of a Kubernetes quantity: "500m" -> 0.5, "4Gi" -> 4294967296."""
    if isinstance(quantity, int):
        return Decimal(quantity)
    match = _QUANTITY_RE.match(quantity)
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    number, suffix = match.group(1), match.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number + suffix)
    return Decimal(number) * _SUFFIX_FACTORS[suffix]


def parse_duration(duration: str) -> float:
    """Seconds in a Go-style duration: "30s" -> 30.0, "1h30m" -> 5400.0."""
    if re.fullmatch(DURATION, duration) is None:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(
        float(amount) * _DURATION_FACTORS[unit]
        for amount, unit in _DURATION_PART_RE.findall(duration)
    )


def _check_quantity(value: object) -> object:
    # Runs before the int | str union so every bad quantity gets one clear error
    # instead of one per union member.
    example = 'e.g. "2", "500m" or "4Gi"'
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PydanticCustomError(
            "quantity",
            "expected a resource quantity, got {got}",
            {"got": repr(value), "fix": f"write a quantity, {example}"},
        )
    if isinstance(value, float):
        if value.is_integer() and value >= 0:
            return int(value)
        # The CRD types quantities as int-or-string (as Kubernetes does), so a bare
        # 0.5 would be refused by the API server; refuse it here as well.
        raise PydanticCustomError(
            "quantity",
            "a fractional quantity must be a string, got {got}",
            {"got": repr(value), "fix": f'quote it ("{value:g}") or use millicores, {example}'},
        )
    if isinstance(value, int):
        if value < 0:
            raise PydanticCustomError(
                "quantity",
                "a quantity cannot be negative, got {got}",
                {"got": str(value), "fix": f"use a positive quantity, {example}"},
            )
        return value
    if _QUANTITY_RE.match(value) is None:
        raise PydanticCustomError(
            "quantity",
            "not a Kubernetes quantity: {got}",
            {"got": repr(value), "fix": f"use a number with an optional suffix, {example}"},
        )
    return value


Quantity = Annotated[
    int | str,
    BeforeValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


def cel_rules(*rules: tuple[str, str]) -> ConfigDict:
    """Repeat a model's cross-field rules as CRD ``x-kubernetes-validations``.

    Each rule is (CEL expression over ``self``, message). The API server then refuses
    what ``servectl.api.validation`` refuses, for ``kubectl apply`` users too;
    tests/unit/api/test_crds.py checks the two agree.
    """
    return ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": rule, "message": message} for rule, message in rules
            ]
        }
    )


def spec_error(message: str, *, field: tuple[str | int, ...] = (), fix: str) -> PydanticCustomError:
    """A cross-field error that ``validation`` renders at ``<model's path>.<field>``."""
    return PydanticCustomError(
        "spec", "{message}", {"message": message, "field": field, "fix": fix}
    )


def to_snake(camel: str) -> str:
    """targetMs -> target_ms (the inverse of the alias generator for our names)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


# ----------------------------------------------------------------------------- bases


class SpecModel(BaseModel):
    """Base of everything a user writes: camelCase, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )


class StatusModel(BaseModel):
    """Base of status: written by the controller, read by the CLI.

    Unknown fields are ignored, not rejected, so an older CLI can still read the status
    a newer controller wrote.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        allow_inf_nan=False,
    )
