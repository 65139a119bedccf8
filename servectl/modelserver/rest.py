"""TF Serving's REST API over a :class:`~servectl.modelserver.models.ModelManager`.

Endpoints (all under ``/v1/models/{name}[/versions/{v}|/labels/{l}]``):

- ``GET``: model status; ``GET .../metadata``: signature defs;
- ``POST ...:predict`` (row ``instances`` or columnar ``inputs``),
  ``...:classify`` and ``...:regress`` (``examples`` as JSON objects).

Errors are ``{"error": "..."}`` with the HTTP status TF Serving maps the
canonical code to. JSON <-> numpy conversion lives here; the manager sees arrays.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import json
import logging
import math
import queue
import re
import select
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from servectl.modelserver.errors import ServingError, invalid_argument
from servectl.modelserver.models import ModelManager
from servectl.modelserver.monitoring import (
    CONTENT_TYPE,
    ENTRYPOINT_REST,
    ServingMetrics,
)
from servectl.modelserver.servables import (
    ModelSpec,
    Servable,
    TensorSpecInfo,
    classification_2d,
)

log = logging.getLogger(__name__)

# Largest request body accepted; larger ones get 413 before the body is read.
MAX_BODY_BYTES = 64 * 1024 * 1024

# Deepest nesting of arrays and objects a request body may have (400 beyond). A rank-R
# tensor in row format with named inputs and b64 strings is R + 3 levels deep.
MAX_JSON_DEPTH = 100

# The whole request head (request line and headers) must arrive within this many seconds
# of its first byte (or within the request timeout, if that is smaller).
HEAD_TIMEOUT_S = 10.0

# Connections served at once (one thread each); the next ones get 503 and are closed.
DEFAULT_MAX_CONNECTIONS = 256

# Listen backlog: connections the kernel queues before the server accepts them.
LISTEN_BACKLOG = 1024

_NAME = r"([^/:]+)"
_VERSION_OR_LABEL = r"(?:/versions/(\d+)|/labels/([^/:]+))?"
_PREDICT_RE = re.compile(rf"/v1/models/{_NAME}{_VERSION_OR_LABEL}:(classify|regress|predict)", re.I)
_STATUS_RE = re.compile(rf"/v1/models(?:/{_NAME})?{_VERSION_OR_LABEL}(/metadata)?", re.I)
_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)

# TensorFlow's DataTypeString names, which TF Serving uses in messages.
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "bfloat16": "bfloat16"}


def _type_name(spec: TensorSpecInfo) -> str:
    return _TF_TYPE_NAMES.get(spec.dtype_name, spec.dtype_name)


# --------------------------------------------------------------------------- JSON -> arrays


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "Null"
    if isinstance(value, str):
        return "String"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, list):
        return "Array"
    return "Object"


def _type_error(value: Any, spec: TensorSpecInfo) -> ServingError:
    shown = json.dumps(value)
    return invalid_argument(
        f"JSON Value: {shown} Type: {_json_kind(value)} is not of expected type: {_type_name(spec)}"
    )


def _decode_b64(value: Mapping[str, Any]) -> bytes:
    data = value.get("b64")
    if len(value) != 1 or not isinstance(data, str):
        raise invalid_argument(
            f'JSON Value: {json.dumps(value)} Type: Object is not of expected form: {{"b64": ...}}'
        )
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid_argument(f"Unable to base64 decode: {data[:64]!r}") from exc


def _leaf(value: Any, spec: TensorSpecInfo) -> Any:
    kind = spec.dtype_name
    if kind == "string":
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, dict):
            return _decode_b64(value)
        raise _type_error(value, spec)
    if isinstance(value, dict) and kind == "bool":
        raise _type_error(value, spec)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise _type_error(value, spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(value, spec)
    if kind.startswith(("int", "uint")) and isinstance(value, float):
        if not value.is_integer():
            raise _type_error(value, spec)
        return int(value)
    return value


def _shape_and_leaves(value: Any, spec: TensorSpecInfo, out: list[Any]) -> tuple[int, ...]:
    if not isinstance(value, list):
        out.append(_leaf(value, spec))
        return ()
    if not value:
        return (0,)
    shapes = {_shape_and_leaves(item, spec, out) for item in value}
    if len(shapes) != 1:
        raise invalid_argument(
            f"Expected all elements of a list to have the same shape (input {spec.key!r} is ragged)"
        )
    return (len(value), *shapes.pop())


def json_to_array(value: Any, spec: TensorSpecInfo) -> np.ndarray[Any, Any]:
    """A (nested) JSON value as an array of the signature input's dtype."""
    leaves: list[Any] = []
    shape = _shape_and_leaves(value, spec, leaves)
    if spec.dtype_name == "string":
        arr = np.empty(len(leaves), dtype=object)
        arr[:] = leaves
        return arr.reshape(shape)
    try:
        with np.errstate(over="raise"):
            return np.array(leaves, dtype=spec.dtype.as_numpy_dtype).reshape(shape)
    except FloatingPointError as exc:  # a finite number beyond the dtype's range
        raise invalid_argument(
            f"Input {spec.key}: cannot convert a JSON value to {_type_name(spec)} "
            "without loss of precision (out of range)"
        ) from exc
    except (OverflowError, ValueError) as exc:
        raise invalid_argument(f"Input {spec.key}: {exc}") from exc


def _instances_to_arrays(
    instances: Any, inputs: Mapping[str, TensorSpecInfo]
) -> dict[str, np.ndarray[Any, Any]]:
    if not isinstance(instances, list):
        raise invalid_argument("Expected 'instances' key to be an array")
    if not instances:
        raise invalid_argument("Expected 'instances' array to have at least one element")
    names = list(inputs)
    named = all(isinstance(i, dict) and "b64" not in i for i in instances)
    if len(names) == 1 and not named:
        return {names[0]: json_to_array(instances, inputs[names[0]])}
    if not named:
        raise invalid_argument(
            "Expected every element of 'instances' to be a JSON object naming the "
            f"signature's inputs {sorted(names)}"
        )
    columns: dict[str, list[Any]] = {n: [] for n in names}
    for idx, inst in enumerate(instances):
        if set(inst) != set(names):
            raise invalid_argument(
                f"Failed to process element: {idx} of 'instances' list. JSON object "
                f"keys {sorted(inst)} do not match the signature's inputs {sorted(names)}"
            )
        for n in names:
            columns[n].append(inst[n])
    return {n: json_to_array(columns[n], inputs[n]) for n in names}


def _inputs_to_arrays(
    value: Any, inputs: Mapping[str, TensorSpecInfo]
) -> dict[str, np.ndarray[Any, Any]]:
    names = list(inputs)
    if isinstance(value, dict) and "b64" not in value:
        unknown = sorted(set(value) - set(inputs))
        if unknown:
            raise invalid_argument(
                f"Input {unknown[0]!r} is not an input of the signature; "
                f"its inputs are {sorted(names)}"
            )
        return {k: json_to_array(v, inputs[k]) for k, v in value.items()}
    if len(names) != 1:
        raise invalid_argument(
            f"Expected 'inputs' to be a JSON object naming the signature's inputs {sorted(names)}"
        )
    return {names[0]: json_to_array(value, inputs[names[0]])}


# --------------------------------------------------------------------------- arrays -> JSON


def _scalar_to_json(value: Any, key: str) -> Any:
    if isinstance(value, bytes):
        if not key.endswith("_bytes"):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.floating):
        f = float(value)
        if math.isfinite(f) and value.dtype != np.float64:
            return float(str(value))  # shortest repr of the float32 value, as TF Serving prints
        return f
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def array_to_json(arr: Any, key: str) -> Any:
    if not isinstance(arr, np.ndarray):  # an element of an object (string) array
        return _scalar_to_json(arr, key)
    if arr.ndim == 0:
        return _scalar_to_json(arr[()], key)
    return [array_to_json(arr[i], key) for i in range(arr.shape[0])]


def _rows(outputs: Mapping[str, np.ndarray[Any, Any]]) -> list[Any]:
    if len(outputs) == 1:
        ((key, arr),) = outputs.items()
        if arr.ndim == 0:
            raise invalid_argument(f"Output {key} is a scalar; row format needs a batch dimension")
        return [array_to_json(arr[i], key) for i in range(arr.shape[0])]
    sizes = {k: (a.shape[0] if a.ndim else None) for k, a in outputs.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise invalid_argument(
            f"Tensors in 'outputs' do not share a batch size {sizes}; "
            "use the columnar 'inputs' format"
        )
    n = next(iter(sizes.values()))
    assert n is not None
    return [{k: array_to_json(a[i], k) for k, a in outputs.items()} for i in range(n)]


# --------------------------------------------------------------------------- tf.Example


def _feature(value: Any, key: str) -> Any:
    import tensorflow as tf

    items = value if isinstance(value, list) else [value]
    if not items:
        return tf.train.Feature(float_list=tf.train.FloatList(value=[]))
    if all(isinstance(v, (str, dict)) for v in items):
        raw = [v.encode("utf-8") if isinstance(v, str) else _decode_b64(v) for v in items]
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=raw))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        if any(not -(2**63) <= v <= _INT64_MAX for v in items):
            raise invalid_argument(
                f"Feature: {key} has an integer element outside int64. Only int64 is supported."
            )
        return tf.train.Feature(int64_list=tf.train.Int64List(value=items))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        floats = []
        for v in items:
            # TF Serving refuses what float32 cannot hold (NaN and Infinity pass).
            if (isinstance(v, int) or math.isfinite(v)) and abs(v) > _FLOAT32_MAX:
                raise invalid_argument(
                    f"Cannot convert JSON value: {v} to float without loss of precision."
                )
            floats.append(float(v))
        return tf.train.Feature(float_list=tf.train.FloatList(value=floats))
    raise invalid_argument(
        f"Feature {key!r}: expected a number, string, {{'b64': ...}} or a list of one kind"
    )


def _examples(body: Mapping[str, Any]) -> list[bytes]:
    import tensorflow as tf

    examples = body.get("examples")
    if not isinstance(examples, list):
        raise invalid_argument("Expected 'examples' key to be an array")
    context = body.get("context", {})
    if not isinstance(context, dict):
        raise invalid_argument("Expected 'context' key to be a JSON object")
    serialized = []
    for idx, ex in enumerate(examples):
        if not isinstance(ex, dict):
            raise invalid_argument(f"Expected element {idx} of 'examples' to be a JSON object")
        clash = sorted(set(ex) & set(context))
        if clash:
            raise invalid_argument(f"Feature {clash[0]!r} appears in both 'context' and 'examples'")
        features = {k: _feature(v, k) for k, v in {**context, **ex}.items()}
        example = tf.train.Example(features=tf.train.Features(feature=features))
        serialized.append(example.SerializeToString())
    return serialized


# --------------------------------------------------------------------------- handlers


def _signature_name(body: Mapping[str, Any]) -> str:
    name = body.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid_argument("'signature_name' key must be a string value.")
    return name


_TOO_DEEP = (
    f"JSON Parse error: The document nests arrays and objects more than {MAX_JSON_DEPTH} "
    "levels deep"
)


def _json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (list, dict)):
                stack.append((child, depth + 1))
    return False


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    """Whether a string (or key) in ``value`` is not valid Unicode (no recursion)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False


def _parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; every way it can be wrong is a 400.

    Like TF Serving (rapidjson with ``kParseNanAndInfFlag``), ``NaN``, ``Infinity`` and
    ``-Infinity`` are accepted as numbers. Nesting deeper than ``MAX_JSON_DEPTH`` is
    refused here, so nothing downstream (conversion, error messages) recurses deeply.
    """
    if not raw.strip():
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        body = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise invalid_argument(f"JSON Parse error: Invalid encoding in string. {exc}") from exc
    except json.JSONDecodeError as exc:
        raise invalid_argument(f"JSON Parse error: {exc.msg} at offset: {exc.pos}") from exc
    except RecursionError as exc:  # far deeper than MAX_JSON_DEPTH
        raise invalid_argument(_TOO_DEEP) from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise invalid_argument(f"JSON Parse error: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid_argument("JSON Value: the request body is not a JSON object")
    # A lone surrogate can only come from a \uD800-\uDFFF escape; rapidjson refuses it.
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(body):
        raise invalid_argument("JSON Parse error: The surrogate pair in string is invalid.")
    # Only a body with that many brackets can be that deep: most skip the walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _json_depth_exceeds(
        body, MAX_JSON_DEPTH
    ):
        raise invalid_argument(_TOO_DEEP)
    return body


def _version(text: str | None) -> int | None:
    if text is None:
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > 19:  # more digits than int64 has (and int() refuses over 4300)
        raise invalid_argument(f"Failed to convert version: {text[:64]} to numeric.")
    value = int(digits)
    if value > _INT64_MAX:
        raise invalid_argument(f"Failed to convert version: {text} to numeric.")
    return value


class RestApi:
    """Request routing and JSON handling; independent of the HTTP server class."""

    def __init__(self, manager: ModelManager, metrics: ServingMetrics | None = None) -> None:
        self.manager = manager
        self.metrics = metrics

    def handle(self, method: str, path: str, raw_body: bytes) -> tuple[int, Any]:
        """One request: (HTTP status, JSON-able body). Never raises for a bad request.

        With ``metrics``, every inference request is recorded (status code name and
        latency in µs, entrypoint ``REST``), as TF Serving does: not status or metadata.
        """
        start = time.perf_counter_ns()
        path = path.split("?", 1)[0]
        code = "OK"
        try:
            result: tuple[int, Any] = (200, self._dispatch(method, path, raw_body))
        except ServingError as exc:
            code = exc.code
            result = (exc.http_status, {"error": exc.message})
        except Exception as exc:  # a bug or a TF failure: report it, keep serving
            log.exception("Internal error on %s %s", method, path)
            code = "INTERNAL"
            result = (500, {"error": f"Internal: {exc}"})
        if self.metrics is not None:
            route = _metrics_route(method, path)
            if route is not None:
                latency_us = (time.perf_counter_ns() - start) / 1000
                served = route[0] in self.manager.model_names()
                self.metrics.record(
                    route[0], route[1], ENTRYPOINT_REST, code, latency_us, served=served
                )
        return result

    def _dispatch(self, method: str, path: str, raw_body: bytes) -> Any:
        if method == "POST" and (m := _PREDICT_RE.fullmatch(path)):
            name, version, label, verb = m.groups()
            body = _parse_body(raw_body)
            spec = ModelSpec(name, _version(version), label, _signature_name(body))
            verb = verb.lower()
            if verb == "predict":
                return self.predict(spec, body)
            if verb == "classify":
                return self.classify(spec, body)
            return self.regress(spec, body)
        if method == "GET" and (m := _STATUS_RE.fullmatch(path)):
            name, version, label, metadata = m.groups()
            spec = ModelSpec(name or "", _version(version), label)
            if metadata:
                return self.metadata(spec)
            return self.status(spec)
        raise invalid_argument(f"Malformed request: {method} {path}")

    def status(self, spec: ModelSpec) -> Any:
        return {
            "model_version_status": [
                {
                    "version": str(s.version),
                    "state": s.state,
                    "status": {"error_code": s.error_code, "error_message": s.error_message},
                }
                for s in self.manager.status(spec)
            ]
        }

    def metadata(self, spec: ModelSpec) -> Any:
        from google.protobuf import json_format

        if not spec.name:
            raise invalid_argument("Missing model name in request.")
        servable = self.manager.resolve(spec)
        sig_map = json_format.MessageToDict(
            servable.signature_def_map,
            always_print_fields_with_no_presence=True,
            preserving_proto_field_name=True,
        )
        return {
            "model_spec": _model_spec_json(servable),
            "metadata": {"signature_def": sig_map},
        }

    def predict(self, spec: ModelSpec, body: Mapping[str, Any]) -> Any:
        has_instances, has_inputs = "instances" in body, "inputs" in body
        if has_instances and has_inputs:
            raise invalid_argument(
                "Not formatted correctly expecting only one of 'inputs' or 'instances' keys "
                "exclusively"
            )
        if not has_instances and not has_inputs:
            raise invalid_argument("Missing 'inputs' or 'instances' key")
        servable = self.manager.resolve(spec)
        sig = servable.signature(spec.signature_name)
        if has_instances:
            arrays = _instances_to_arrays(body["instances"], sig.inputs)
        else:
            arrays = _inputs_to_arrays(body["inputs"], sig.inputs)
        pinned = ModelSpec(spec.name, servable.version, None, spec.signature_name)
        _, outputs = self.manager.predict(pinned, arrays)
        if has_instances:
            return {"predictions": _rows(outputs)}
        if len(outputs) == 1:
            ((key, arr),) = outputs.items()
            return {"outputs": array_to_json(arr, key)}
        return {"outputs": {k: array_to_json(a, k) for k, a in outputs.items()}}

    def classify(self, spec: ModelSpec, body: Mapping[str, Any]) -> Any:
        examples = _examples(body)
        _, classes, scores = self.manager.classify(spec, examples)
        n = len(examples)
        labels = classification_2d(classes, n) if classes is not None else None
        values = classification_2d(scores, n) if scores is not None else None
        k = (labels if labels is not None else values).shape[1]  # type: ignore[union-attr]
        results = []
        for i in range(n):
            row = []
            for j in range(k):
                label = labels[i, j] if labels is not None else b""
                score = values[i, j] if values is not None else 0.0
                text = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
                row.append([text, _scalar_to_json(score, "scores")])
            results.append(row)
        return {"results": results}

    def regress(self, spec: ModelSpec, body: Mapping[str, Any]) -> Any:
        examples = _examples(body)
        _, values = self.manager.regress(spec, examples)
        return {"results": [_scalar_to_json(v, "outputs") for v in values]}


def _metrics_route(method: str, path: str) -> tuple[str, str] | None:
    """(model name, API label) of an inference request (predict, classify, regress), else
    None. TF Serving counts and times inference only: a model status or metadata request
    (a readiness probe every few seconds) is no traffic, and would read as load."""
    if method == "POST" and (m := _PREDICT_RE.fullmatch(path)):
        return m.group(1), m.group(4).lower()
    return None


def _model_spec_json(servable: Servable) -> dict[str, str]:
    return {"name": servable.name, "signature_name": "", "version": str(servable.version)}


# --------------------------------------------------------------------------- HTTP server


class _DeadlineExceeded(Exception):
    """A request head or body did not arrive in time (not a TimeoutError on purpose: the
    standard handler would swallow that and close without an answer; this one gets 408)."""


class _DeadlineReader(io.RawIOBase):
    """The connection's socket as a raw stream whose reads respect the handler's deadline.

    Each read waits at most the request timeout (an idle keep-alive connection is closed
    after it, as before) and never past the current deadline, so a client trickling a byte
    at a time cannot keep a request head (or body) open longer than the deadline: the
    socket timeout is per read, the deadline is for the whole head.
    """

    def __init__(self, handler: _Handler) -> None:
        super().__init__()
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        handler = self._handler
        idle_timeout = handler.server.request_timeout_s
        deadline = handler.deadline
        timeout = idle_timeout
        limited = False
        if deadline is not None:
            remaining = deadline - handler.server.clock()
            if remaining <= 0:
                raise _DeadlineExceeded(handler.deadline_message)
            if idle_timeout is None or remaining <= idle_timeout:
                timeout, limited = remaining, True
        handler.connection.settimeout(timeout)
        try:
            return int(handler.connection.recv_into(buffer))
        except TimeoutError:
            if limited:
                raise _DeadlineExceeded(handler.deadline_message) from None
            raise


def _raw_response(status: int, message: str) -> bytes:
    """A complete ``Connection: close`` JSON error response, for a connection being cut."""
    body = json.dumps({"error": message}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _peer(client_address: Any) -> str:
    if isinstance(client_address, tuple) and len(client_address) >= 2:
        return f"{client_address[0]}:{client_address[1]}"
    return str(client_address)


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, as TF Serving's REST server (and load generators) use it.

    Every response carries Content-Length. A response that leaves the request body unread
    (411, 413, a bad Content-Length) closes the connection, so the next request on it
    cannot be read from the middle of a body.

    Deadlines: between requests a connection may stay idle for the request timeout; once
    the first byte of a request arrives, the whole head must arrive within the head
    timeout, and then the body within the body timeout. A request that misses its
    deadline is answered 408 and the connection is closed.
    """

    server: RestServer
    protocol_version = "HTTP/1.1"
    server_version = "servectl-model-server"
    deadline: float | None = None  # server.clock() time by which the current read must end
    deadline_message = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)
        # Headers and body go out in two writes; with Nagle on, a keep-alive client's
        # delayed ACK would hold the body back ~40 ms per response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile.close()  # the buffered socket file from StreamRequestHandler
        self._reader = io.BufferedReader(_DeadlineReader(self))
        self.rfile = self._reader
        self.server.connections.opened(self)

    def finish(self) -> None:
        self.server.connections.closed(self)
        super().finish()

    def handle_one_request(self) -> None:
        self.server.connections.idle(self)  # waiting for the next request line
        self._set_deadline(None, "")
        try:
            # Wait (up to the request timeout) for the first byte of the next request.
            if not self._reader.peek(1):
                self.close_connection = True  # the client closed, or a drain shut reads
                return
            self.server.connections.busy(self)  # a request has begun: a drain lets it finish
            timeout = self.server.head_timeout_s
            self._set_deadline(timeout, f"Request head not received within {timeout:g} s")
            super().handle_one_request()
        except TimeoutError as exc:  # idle for the request timeout: close quietly
            self.log_error("Closing idle connection: %r", exc)
            self.close_connection = True
        except _DeadlineExceeded as exc:
            self.log_error("%s", exc)
            self.close_connection = True
            self.connection.settimeout(1.0)  # do not wait on a client that does not read
            with contextlib.suppress(OSError):
                self.connection.sendall(_raw_response(408, str(exc)))
        finally:
            self._set_deadline(None, "")

    def _set_deadline(self, seconds: float | None, message: str) -> None:
        self.deadline = None if seconds is None else self.server.clock() + seconds
        self.deadline_message = message
        # Writes use the socket timeout too: give them the full request timeout back.
        self.connection.settimeout(self.server.request_timeout_s)

    def parse_request(self) -> bool:
        self.server.connections.busy(self)
        if not super().parse_request():
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(400, "HTTP/0.9 requests are not supported")
            return False
        timeout = self.server.body_timeout_s
        self._set_deadline(timeout, f"Request body not received within {timeout:g} s")
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's protocol errors (400, 414, 431, 501...) as JSON."""
        self.log_error("code %d, message %s", code, message)
        if self.request_version == "HTTP/0.9":  # answer with a status line and headers
            self.request_version = "HTTP/1.0"
        self._send(code, {"error": message or HTTPStatus(code).phrase}, close=True)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _read_body(self) -> bytes | None:
        """The request body, or None after answering an error (and closing)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._send(
                411,
                {"error": "Chunked request bodies are not supported; send Content-Length"},
                close=True,
            )
            return None
        text = self.headers.get("Content-Length", "0").strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 20:
            self._send(400, {"error": "Invalid Content-Length header"}, close=True)
            return None
        length = int(text)
        if length > self.server.max_body_bytes:
            self._send(
                413,
                {
                    "error": f"Request body of {length} bytes exceeds the limit of "
                    f"{self.server.max_body_bytes} bytes"
                },
                close=True,
            )
            return None
        body = self.rfile.read(length) if length > 0 else b""
        self._set_deadline(None, "")
        if len(body) < length:  # the client closed in the middle of the body
            self.close_connection = True
            return None
        return body

    def _serve(self, method: str) -> None:
        body = self._read_body()
        if body is None:
            return
        if method != "POST":
            body = b""  # as before: only POST bodies are read as requests
        path = self.path
        metrics_path = self.server.metrics_path
        if metrics_path is not None and path.split("?", 1)[0] == metrics_path:
            self._send_metrics(method)
            return
        if not re.match(r"(?i)/v1/", path):
            self._send(404, {"error": f"Not found: {method} {path}"})
            return
        status, payload = self.server.api.handle(method, path, body)
        self._send(status, payload)

    def _send_metrics(self, method: str) -> None:
        if method != "GET" or self.server.api.metrics is None:
            self._send(405, {"error": f"Method not allowed: {method} {self.path}"})
            return
        data = self.server.api.metrics.exposition().encode("utf-8")
        self.send_response(200, HTTPStatus.OK.phrase)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self._end_headers(close=False)
        self.wfile.write(data)

    def _send(self, status: int, payload: Any, *, close: bool = False) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._end_headers(close=close)
        if self.command != "HEAD":  # the answer to HEAD (501) has no body
            self.wfile.write(data)

    def _end_headers(self, *, close: bool) -> None:
        if close or self.server.connections.draining:  # the last response on this connection
            self.send_header("Connection", "close")  # also sets self.close_connection
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)


class _Connections:
    """Open keep-alive connections, idle or busy, so a stop can close the idle ones.

    A connection is busy from the first byte of a request to its answer. On :meth:`drain`,
    idle connections (waiting for a next request, nothing received) are shut for reading,
    which ends their handler threads; busy ones finish their request and answer it with
    ``Connection: close``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Any, bool] = {}  # handler -> idle?
        self.draining = False

    def opened(self, handler: Any) -> None:
        with self._lock:
            self._idle[handler] = True

    def closed(self, handler: Any) -> None:
        with self._lock:
            self._idle.pop(handler, None)

    def idle(self, handler: Any) -> None:
        with self._lock:
            if handler in self._idle:
                self._idle[handler] = True
            if self.draining:
                handler.close_connection = True
                _shut_reads(handler.connection)

    def busy(self, handler: Any) -> None:
        with self._lock:
            if handler in self._idle:
                self._idle[handler] = False

    def drain(self) -> None:
        with self._lock:
            self.draining = True
            for handler, idle in self._idle.items():
                # A request that has arrived but is not parsed yet is served (its
                # handler shuts reads itself after answering, in idle()).
                if idle and not _has_input(handler.connection):
                    _shut_reads(handler.connection)


def _has_input(sock: socket.socket) -> bool:
    """Whether bytes (or the peer's close) wait to be read on ``sock``, without blocking."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
    except (OSError, ValueError):  # closed meanwhile
        return False
    return bool(poller.poll(0))


def _shut_reads(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer
        sock.shutdown(socket.SHUT_RD)


class _Rejecter:
    """Answers connections over the cap with 503 on one thread, not a thread each.

    The 503 is sent (it fits the socket buffer, so the send never blocks) and the write
    side shut at once; the socket is then kept for up to ``LINGER_S``, reading and
    dropping what the client sends, until the client closes. Closing at once with the
    client's request unread would send a reset, which can destroy the 503 before the
    client reads it.
    """

    LINGER_S = 2.0
    MAX_LINGERING = 1024  # beyond this, close at once

    def __init__(self, message: str, clock: Callable[[], float]) -> None:
        self.response = _raw_response(503, message)
        self._clock = clock
        self.rejected = 0
        self._queue: queue.SimpleQueue[socket.socket] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rest-reject", daemon=True)
        self._thread.start()

    def reject(self, sock: socket.socket) -> None:
        """Send the 503 and hand the socket to the lingering thread (never blocks)."""
        self.rejected += 1
        try:
            sock.setblocking(False)
            sock.send(self.response)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        self._queue.put(sock)
        with contextlib.suppress(OSError):  # the wake-up pipe is full: it is awake anyway
            self._wake_w.send(b"x")

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5)
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        lingering: dict[socket.socket, float] = {}
        while not self._closed:
            now = self._clock()
            for sock, until in list(lingering.items()):
                if until <= now:
                    del lingering[sock]
                    sel.unregister(sock)
                    sock.close()
            timeout = min(lingering.values(), default=now + 3600) - now
            for key, _ in sel.select(max(timeout, 0.0)):
                sock = key.fileobj  # type: ignore[assignment]
                if sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:  # the client closed (or reset): done
                    del lingering[sock]
                    sel.unregister(sock)
                    sock.close()
            while True:
                try:
                    sock = self._queue.get_nowait()
                except queue.Empty:
                    break
                if len(lingering) >= self.MAX_LINGERING:
                    sock.close()
                    continue
                lingering[sock] = self._clock() + self.LINGER_S
                sel.register(sock, selectors.EVENT_READ)
        for sock in lingering:
            sock.close()
        sel.close()


class RestServer(ThreadingHTTPServer):
    """A thread per connection, up to ``max_connections``; :meth:`stop` waits for in-flight
    requests.

    Connections over the cap are answered ``503`` with ``Connection: close`` from one
    shared thread. ``head_timeout_s`` bounds the time from a request's first byte to the
    end of its headers (default: ``HEAD_TIMEOUT_S``, or ``request_timeout_s`` if smaller);
    ``body_timeout_s`` bounds reading the body (default: ``request_timeout_s``).
    """

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        manager: ModelManager,
        host: str = "0.0.0.0",
        port: int = 8501,
        *,
        request_timeout_s: float | None = 30.0,
        head_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_body_bytes: int = MAX_BODY_BYTES,
        metrics: ServingMetrics | None = None,
        metrics_path: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``metrics`` records every request; ``metrics_path`` (with ``metrics``) serves
        the Prometheus page at that path, as TF Serving's ``prometheus_config`` does.
        ``clock`` (monotonic seconds) times the head and body deadlines."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.api = RestApi(manager, metrics)
        self.metrics_path = metrics_path if metrics is not None else None
        self.request_timeout_s = request_timeout_s
        if head_timeout_s is None:
            head_timeout_s = min(HEAD_TIMEOUT_S, request_timeout_s or HEAD_TIMEOUT_S)
        self.head_timeout_s = head_timeout_s
        self.body_timeout_s = body_timeout_s if body_timeout_s is not None else request_timeout_s
        self.max_connections = max_connections
        self.max_body_bytes = max_body_bytes
        self.connections = _Connections()
        self.clock = clock
        self._active = 0
        self._active_lock = threading.Lock()
        self._rejecter = _Rejecter(
            f"The server is serving its maximum of {max_connections} connections; try again later",
            clock,
        )
        super().__init__((host, port), _Handler)  # on a failed bind, calls server_close

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def active_connections(self) -> int:
        """Connections with a handler thread (at most ``max_connections``)."""
        return self._active

    @property
    def rejected_connections(self) -> int:
        """Connections answered 503 because the cap was reached."""
        return self._rejecter.rejected

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            full = self._active >= self.max_connections
            if not full:
                self._active += 1
        if full:
            log.debug("Connection from %s over the cap: 503", _peer(client_address))
            self._rejecter.reject(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._active_lock:
            self._active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that resets or goes away is one log line; anything else is a bug."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.info("REST connection from %s ended: %r", _peer(client_address), exc)
            return
        log.error("Error on the REST connection from %s", _peer(client_address), exc_info=True)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="rest-api", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop accepting, close idle keep-alive connections, finish requests in flight."""
        self.shutdown()
        self.connections.drain()
        self.server_close()

    def server_close(self) -> None:
        super().server_close()
        self._rejecter.close()


def serve_rest(manager: ModelManager, host: str, port: int, **kwargs: Any) -> RestServer:
    """Bind and start a REST server in a background thread."""
    server = RestServer(manager, host, port, **kwargs)
    server.start()
    return server


__all__: Sequence[str] = [
    "DEFAULT_MAX_CONNECTIONS",
    "HEAD_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "RestApi",
    "RestServer",
    "serve_rest",
]
