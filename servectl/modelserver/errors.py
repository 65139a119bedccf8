"""Errors with a canonical (gRPC) status code, as TF Serving reports them.

Every front end (REST now, gRPC next) turns a :class:`ServingError` into its own
wire form: REST picks the HTTP status from :data:`HTTP_STATUS` (the mapping TF
Serving's HTTP server uses), gRPC will use ``code`` directly.
"""

from __future__ import annotations

# Canonical code name -> HTTP status, as TF Serving's REST server maps them.
HTTP_STATUS: dict[str, int] = {
    "OK": 200,
    "CANCELLED": 503,
    "ABORTED": 503,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
    "INVALID_ARGUMENT": 400,
    "OUT_OF_RANGE": 400,
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "UNIMPLEMENTED": 501,
    "UNKNOWN": 500,
    "INTERNAL": 500,
    "DATA_LOSS": 500,
}


class ServingError(Exception):
    """A request or load failure carrying a canonical status code name."""

    def __init__(self, code: str, message: str) -> None:
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]


def invalid_argument(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingError:
    return ServingError("NOT_FOUND", message)


def failed_precondition(message: str) -> ServingError:
    return ServingError("FAILED_PRECONDITION", message)
