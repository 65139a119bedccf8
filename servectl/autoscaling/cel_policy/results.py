"""What a policy returned, checked and turned into a :class:`PolicyResult`."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Final

from servectl.autoscaling.cel_policy.errors import PolicyRuntimeError

#: Keys a policy's map result may carry.
RESULT_KEYS: Final = ("replicas", "reason", "state")

#: A returned ``state`` is persisted in the resource status: keep it small.
MAX_STATE_BYTES: Final = 4096
#: A reason is a short code (``COST_CAP``), shown in status, events and ``explain``.
MAX_REASON_CHARS: Final = 128

# A double within this distance of an integer counts as that integer before rounding
# up, so ``double(recommended) * 1.1`` for 10 replicas gives 11, not 12.
_ROUNDING_SLACK = 1e-9


@dataclass(frozen=True)
class PolicyResult:
    """What a policy decided: whole replicas (≥ 0), its reason code, its state to persist.

    ``state`` is the state the policy returned, or the state it was given when it
    returned none (so a policy that sets state on one branch keeps it on the others).
    """

    replicas: int
    reason: str | None = None
    state: dict[str, Any] = dataclasses.field(default_factory=dict)


CEL_TYPE_NAMES: Final = {
    "float": "double",
    "str": "string",
    "NoneType": "null",
    "None": "null",
    "dict": "map",
    "list": "list",
    "bytes": "bytes",
    "bool": "bool",
    "int": "int",
    "datetime": "timestamp",
    "timedelta": "duration",
    "OptionalValue": "optional",
}


def _cel_type(value: object) -> str:
    name = type(value).__name__
    return CEL_TYPE_NAMES.get(name, name)


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"a bool ({'true' if value else 'false'})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string {shown!r}"
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return f"a {_cel_type(value)} value"


_SHAPE_HINT = 'return an int or {"replicas": n, "reason": "CODE"}'


def _replica_count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyRuntimeError(f"{where} {_describe(value)}; {_SHAPE_HINT}")
    if isinstance(value, float):
        if math.isnan(value):
            raise PolicyRuntimeError(f"{where} NaN (0.0 / 0.0?); replicas must be a number ≥ 0")
        if math.isinf(value):
            raise PolicyRuntimeError(
                f"{where} {'-' if value < 0 else ''}infinity (a double divided by 0.0?); "
                "replicas must be finite"
            )
    if value < 0:
        raise PolicyRuntimeError(f"{where} {value:g} replicas; replicas must be ≥ 0")
    if isinstance(value, float):
        return max(0, math.ceil(value - _ROUNDING_SLACK))
    return value


def _check_state(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PolicyRuntimeError(f"state must be a map, got {_describe(value)}")

    def walk(item: object, path: str) -> None:
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise PolicyRuntimeError(f"{path}: map keys in state must be strings")
                walk(inner, f"{path}.{key}")
        elif isinstance(item, list):
            for i, inner in enumerate(item):
                walk(inner, f"{path}[{i}]")
        elif isinstance(item, float) and not math.isfinite(item):
            raise PolicyRuntimeError(f"{path}: state values must be finite numbers")
        elif item is not None and not isinstance(item, str | int | float | bool):
            raise PolicyRuntimeError(
                f"{path}: state holds JSON values only (null, bool, int, double, string, "
                f"list, map), got {_describe(item)}"
            )

    walk(value, "state")
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_STATE_BYTES:
        raise PolicyRuntimeError(
            f"state is {size} bytes as JSON; keep it under {MAX_STATE_BYTES} "
            "(it is persisted in the resource status every cycle)"
        )
    return value


def to_result(value: object, previous_state: dict[str, Any]) -> PolicyResult:
    if not isinstance(value, dict):
        return PolicyResult(_replica_count(value, "policy returned"), None, previous_state)
    unknown = sorted(str(k) for k in value if k not in RESULT_KEYS)
    if unknown:
        raise PolicyRuntimeError(
            f"policy returned a map with unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(RESULT_KEYS)}"
        )
    if "replicas" not in value:
        raise PolicyRuntimeError(f"policy returned a map without replicas; {_SHAPE_HINT}")
    replicas = _replica_count(value["replicas"], "policy returned replicas:")
    reason = value.get("reason")
    if reason is not None:
        if not isinstance(reason, str):
            raise PolicyRuntimeError(f"reason must be a string, got {_describe(reason)}")
        if len(reason) > MAX_REASON_CHARS:
            raise PolicyRuntimeError(
                f"reason is {len(reason)} characters; keep it under {MAX_REASON_CHARS} "
                "(a short code like COST_CAP)"
            )
    state = _check_state(value["state"]) if "state" in value else previous_state
    return PolicyResult(replicas, reason or None, state)
