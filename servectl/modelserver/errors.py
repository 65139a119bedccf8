"""Errors with a canonical (gRPC) status code, as TF Serving reports them.

Every front end turns a :class:`ServingError` into its own wire form: REST picks the
HTTP status from :data:`HTTP_STATUS` (the mapping TF Serving's HTTP server uses), gRPC
aborts the RPC with the status code of the same name. Replies that carry a status
(``GetModelStatus``) hold the code's number, :func:`code_number`.
"""

from __future__ import annotations

# Canonical code names by number (absl, gRPC and ``tensorflow.error.Code`` agree).
CANONICAL_CODES: tuple[str, ...] = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

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


def code_number(name: str) -> int:
    """A canonical code's number (``NOT_FOUND`` -> 5); ValueError for an unknown name."""
    return CANONICAL_CODES.index(name)


def code_name(number: object) -> str:
    """A canonical code's name from its number; ``UNKNOWN`` for anything else.

    ``OK`` (0) is not an error code, so it is ``UNKNOWN`` here too: a load error
    reported as OK is still an error.
    """
    if isinstance(number, int) and 0 < number < len(CANONICAL_CODES):
        return CANONICAL_CODES[number]
    return "UNKNOWN"


def invalid_argument(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingError:
    return ServingError("NOT_FOUND", message)


def failed_precondition(message: str) -> ServingError:
    return ServingError("FAILED_PRECONDITION", message)


# The largest request either front end accepts (a REST body, a gRPC message), unless
# --max_request_bytes says otherwise: TF Serving's own gRPC limit. Its server builder calls
# SetMaxMessageSize(kint32max) (tensorflow_serving/model_servers/server.cc), raising gRPC's
# 4 MiB default to INT32_MAX; its REST server sets none.
DEFAULT_MAX_REQUEST_BYTES = 2**31 - 1


def request_too_large(size: int, limit: int) -> str:
    """What a request over the limit is told (REST 413, in TF Serving's ``{"error": ...}``)."""
    return f"Request body of {size} bytes exceeds the limit of {limit} bytes (--max_request_bytes)"
