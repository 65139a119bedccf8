"""The errors a CEL policy raises: compile errors (with a position) and runtime errors."""

from __future__ import annotations

from typing import Final

from servectl.autoscaling import cel_diagnostics


class PolicyCompileError(ValueError):
    """The expression does not compile, or names something that does not exist.

    ``str()`` is ``"line L, column C: <message>"`` (1-based) when the position is known.
    ``detail`` keeps the library's full diagnostic for debugging.
    """

    def __init__(
        self, message: str, line: int | None = None, column: int | None = None, detail: str = ""
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.detail = detail or message
        super().__init__(str(self))

    def __str__(self) -> str:
        return cel_diagnostics.located(self.message, self.line, self.column)


class PolicyResultTypeError(PolicyCompileError):
    """The expression compiles but can never return replicas (``"hello"``,
    ``{"replicas": "three"}``): found statically by :mod:`cel_types`, conservatively.

    ``problem`` says what it returns; ``fix`` how to return replicas instead.
    """

    FIX: Final = 'return an int (the replica count) or {"replicas": n, "reason": "CODE"}'

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.fix = self.FIX
        super().__init__(f"{problem}, never a replica count; {self.FIX}")


class PolicyRuntimeError(RuntimeError):
    """Evaluation failed or returned something that is not a replica count."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)
