"""The functions a policy may call (``math.*``, ``max``/``min``, ``orDefault``), with usage.

A helper given arguments it cannot take returns a marker CEL cannot convert, so the
evaluation fails with an error naming the function, which the policy then explains
with the helper's usage (``CompiledPolicy`` in ``compiled``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import cel
import cel.stdlib


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers_or_one_list(args: tuple[Any, ...]) -> bool:
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    return len(items) > 0 and all(is_number(item) for item in items)


def _one_number(args: tuple[Any, ...]) -> bool:
    return len(args) == 1 and is_number(args[0])


def _or_default(value: Any, fallback: Any) -> Any:
    return fallback if value is None else value


class _HelperMisuse:
    """Returned by a helper given arguments it cannot take.

    CEL turns any value it cannot convert into an evaluation error that names the
    function, which :func:`_explain` rewrites into the helper's usage. Raising instead
    would also work, but the library prints every exception raised inside a Python
    callback to stderr, and a pure package must not write anywhere.
    """


_MISUSE: Final = _HelperMisuse()


@dataclass(frozen=True)
class Helper:
    name: str
    usage: str
    impl: Callable[..., Any]
    accepts: Callable[[tuple[Any, ...]], bool]

    def __call__(self, *args: Any) -> Any:
        if not self.accepts(args):
            return _MISUSE
        try:
            return self.impl(*args)
        except Exception:
            return _MISUSE


def _helpers() -> dict[str, Helper]:
    std = cel.stdlib
    table = [
        ("math.greatest", "math.greatest(a, b, ...) or math.greatest([a, b, ...]): numbers",
         std.math_greatest, _numbers_or_one_list),
        ("math.least", "math.least(a, b, ...) or math.least([a, b, ...]): numbers",
         std.math_least, _numbers_or_one_list),
        ("max", "max(a, b, ...): numbers (same as math.greatest)",
         std.math_greatest, _numbers_or_one_list),
        ("min", "min(a, b, ...): numbers (same as math.least)",
         std.math_least, _numbers_or_one_list),
        ("math.ceil", "math.ceil(x): one number; returns a double",
         std.math_ceil, _one_number),
        ("math.floor", "math.floor(x): one number; returns a double",
         std.math_floor, _one_number),
        ("math.round", "math.round(x): one number; halves away from zero; returns a double",
         std.math_round, _one_number),
        ("math.trunc", "math.trunc(x): one number; returns a double",
         std.math_trunc, _one_number),
        ("math.abs", "math.abs(x): one number", std.math_abs, _one_number),
        ("math.sign", "math.sign(x): one number", std.math_sign, _one_number),
        ("math.sqrt", "math.sqrt(x): one number; returns a double", std.math_sqrt, _one_number),
        ("math.isFinite", "math.isFinite(x): one number", std.math_is_finite, _one_number),
        ("orDefault", "orDefault(value, fallback) or value.orDefault(fallback)",
         _or_default, lambda args: len(args) == 2),
    ]  # fmt: skip
    return {name: Helper(name, usage, impl, accepts) for name, usage, impl, accepts in table}


#: Functions registered for policies, by the name a policy calls them with.
HELPERS: Final[Mapping[str, Helper]] = MappingProxyType(_helpers())

# Program.functions() reports ``math.ceil(x)`` as the function ``ceil`` (and ``math``
# as a variable): map the reported name to the helpers it may mean.
HELPERS_BY_LAST_NAME: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        last: tuple(name for name in HELPERS if name.rsplit(".", 1)[-1] == last)
        for last in {name.rsplit(".", 1)[-1] for name in HELPERS}
    }
)
