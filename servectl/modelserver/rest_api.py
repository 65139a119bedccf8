"""TF Serving's REST API over a :class:`~servectl.modelserver.models.ModelManager`, apart
from any HTTP server: a request (method, path, body) in, (HTTP status, JSON value) out.

Endpoints (all under ``/v1/models/{name}[/versions/{v}|/labels/{l}]``):

- ``GET``: model status; ``GET .../metadata``: signature defs;
- ``POST ...:predict`` (row ``instances`` or columnar ``inputs``),
  ``...:classify`` and ``...:regress`` (``examples`` as JSON objects).

Errors are ``{"error": "..."}`` with the HTTP status TF Serving maps the canonical code to.
JSON <-> numpy conversion is :mod:`~servectl.modelserver.rest_codec`'s; the HTTP/1.1 server
is :mod:`~servectl.modelserver.rest`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from servectl.modelserver import rest_codec
from servectl.modelserver.errors import ServingError, invalid_argument
from servectl.modelserver.models import ModelManager
from servectl.modelserver.monitoring import ENTRYPOINT_REST, ServingMetrics
from servectl.modelserver.servables import ModelSpec, Servable, classification_2d

log = logging.getLogger(__name__)

_NAME = r"([^/:]+)"
_VERSION_OR_LABEL = r"(?:/versions/(\d+)|/labels/([^/:]+))?"
_PREDICT_RE = re.compile(rf"/v1/models/{_NAME}{_VERSION_OR_LABEL}:(classify|regress|predict)", re.I)
_STATUS_RE = re.compile(rf"/v1/models(?:/{_NAME})?{_VERSION_OR_LABEL}(/metadata)?", re.I)


def _version(text: str | None) -> int | None:
    if text is None:
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > 19:  # more digits than int64 has (and int() refuses over 4300)
        raise invalid_argument(f"Failed to convert version: {text[:64]} to numeric.")
    value = int(digits)
    if value > rest_codec.INT64_MAX:
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
            body = rest_codec.parse_body(raw_body)
            spec = ModelSpec(name, _version(version), label, rest_codec.signature_name(body))
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
            arrays = rest_codec.instances_to_arrays(body["instances"], sig.inputs)
        else:
            arrays = rest_codec.inputs_to_arrays(body["inputs"], sig.inputs)
        pinned = ModelSpec(spec.name, servable.version, None, spec.signature_name)
        _, outputs = self.manager.predict(pinned, arrays)
        if has_instances:
            return {"predictions": rest_codec.rows_to_json(outputs)}
        if len(outputs) == 1:
            ((key, arr),) = outputs.items()
            return {"outputs": rest_codec.array_to_json(arr, key)}
        return {"outputs": {k: rest_codec.array_to_json(a, k) for k, a in outputs.items()}}

    def classify(self, spec: ModelSpec, body: Mapping[str, Any]) -> Any:
        examples = rest_codec.serialized_examples(body)
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
                row.append([text, rest_codec.scalar_to_json(score, "scores")])
            results.append(row)
        return {"results": results}

    def regress(self, spec: ModelSpec, body: Mapping[str, Any]) -> Any:
        examples = rest_codec.serialized_examples(body)
        _, values = self.manager.regress(spec, examples)
        return {"results": [rest_codec.scalar_to_json(v, "outputs") for v in values]}


def _metrics_route(method: str, path: str) -> tuple[str, str] | None:
    """(model name, API label) of an inference request (predict, classify, regress), else
    None. TF Serving counts and times inference only: a model status or metadata request
    (a readiness probe every few seconds) is no traffic, and would read as load."""
    if method == "POST" and (m := _PREDICT_RE.fullmatch(path)):
        return m.group(1), m.group(4).lower()
    return None


def _model_spec_json(servable: Servable) -> dict[str, str]:
    return {"name": servable.name, "signature_name": "", "version": str(servable.version)}
