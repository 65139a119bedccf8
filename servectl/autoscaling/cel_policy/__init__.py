"""Custom CEL policies: compile an expression once, evaluate it on each snapshot.

A custom policy runs after servectl's engine has combined its signals into
``recommended`` and before the shared safety rails (stabilization, rate limits,
min/max), so a five-line policy is still safe. It sees the documented snapshot
(docs/snapshot.md) as CEL variables and returns replicas, or
``{"replicas": n, "reason": "CODE", "state": {...}}``. docs/policies.md is the
user-facing guide; this package is the reference for its rules.

Compile errors carry a line and column (shown at validation time). Every runtime
failure, including a wrong return type, is a :class:`PolicyRuntimeError` whose
message names the problem and the fix; the engine then falls back to
``recommended`` with reason ``POLICY_ERROR``.

Speed: programs are compiled once and cached by source text. Each evaluation hands
CEL only the variables, and the fields of them, that the expression names (found by
a static scan of the source), because converting Python values into CEL values
dominates the cost (about 2 µs per map entry), not the evaluation itself.

Use the names from here (``cel_policy.compile_expression``); the modules behind them
are private, in the order a policy meets them:

    errors       PolicyCompileError, PolicyResultTypeError, PolicyRuntimeError
    helpers      the functions a policy may call (math.*, max, min, orDefault), with usage
    activation   the snapshot as CEL variables (snapshot_activation, VARIABLES)
    analysis     the static scan: variables, fields and helpers used; what is refused
    compiler     compile_expression: limits, compile, static checks, result type; cached
    results      the returned value checked and turned into a PolicyResult
    compiled     CompiledPolicy: evaluate, and explain runtime failures to the author

Compile diagnostics (the library's errors as messages with a line and column), the
literal blanker and positions live in ``servectl.autoscaling.cel_diagnostics``, shared
with analysis-check conditions (``servectl.api.conditions``).
"""

from __future__ import annotations

from servectl.autoscaling.cel_policy.activation import VARIABLES, snapshot_activation
from servectl.autoscaling.cel_policy.compiled import CompiledPolicy
from servectl.autoscaling.cel_policy.compiler import MAX_EXPRESSION_CHARS, compile_expression
from servectl.autoscaling.cel_policy.errors import (
    PolicyCompileError,
    PolicyResultTypeError,
    PolicyRuntimeError,
)
from servectl.autoscaling.cel_policy.helpers import HELPERS
from servectl.autoscaling.cel_policy.results import (
    MAX_REASON_CHARS,
    MAX_STATE_BYTES,
    RESULT_KEYS,
    PolicyResult,
)

__all__ = [
    "HELPERS",
    "MAX_EXPRESSION_CHARS",
    "MAX_REASON_CHARS",
    "MAX_STATE_BYTES",
    "RESULT_KEYS",
    "VARIABLES",
    "CompiledPolicy",
    "PolicyCompileError",
    "PolicyResult",
    "PolicyResultTypeError",
    "PolicyRuntimeError",
    "compile_expression",
    "snapshot_activation",
]
