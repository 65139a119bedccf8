"""Fuzz the REST API: ``RestApi.handle`` with hostile bodies and paths, and the HTTP server
with hostile bytes on a socket.

Contract checked for every input (docs/modelserver.md, "Errors" and "NaN and Infinity"):

- ``handle`` never raises, and answers 200 or a 4xx, never 500;
- an error is ``{"error": "<text>"}``;
- the body is strict JSON (``allow_nan=False``), except that a 200 may carry non-finite
  float tensor values under ``predictions`` / ``outputs`` / ``results``, written as
  ``NaN`` / ``Infinity`` / ``-Infinity`` as TF Serving writes them;
- over a socket, the server answers with complete JSON responses or closes, within a
  deadline, and logs no traceback.

The model (the demo ``half_plus_two``, versions 1 and 2 with labels) loads once per module.
Examples per run come from the hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servectl.modelserver.demo import HALF_PLUS_TWO, export_demo, model_config_text
from servectl.modelserver.models import ModelManager, parse_model_config_text
from servectl.modelserver.monitoring import ServingMetrics
from servectl.modelserver.rest import RestServer
from servectl.modelserver.rest_api import RestApi
from servectl.modelserver.rest_codec import MAX_JSON_DEPTH

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
TENSOR_KEYS = ("predictions", "outputs", "results")
SOCKET_DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> ModelManager:
    directory: Path = tmp_path_factory.mktemp("fuzz-models")
    export_demo(directory, [HALF_PLUS_TWO])
    mgr = ModelManager(warmup=False)
    mgr.load(parse_model_config_text(model_config_text(directory, [HALF_PLUS_TWO])))
    return mgr


@pytest.fixture(scope="module")
def api(manager: ModelManager) -> RestApi:
    return RestApi(manager, ServingMetrics())


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server(manager: ModelManager) -> Iterator[tuple[RestServer, _Records]]:
    records = _Records()
    logger = logging.getLogger("servectl.modelserver")
    logger.addHandler(records)
    srv = RestServer(
        manager,
        "127.0.0.1",
        0,
        request_timeout_s=5.0,
        head_timeout_s=2.0,
        metrics=ServingMetrics(),
        metrics_path="/monitoring/prometheus/metrics",
    )
    srv.start()
    try:
        yield srv, records
    finally:
        srv.stop()
        logger.removeHandler(records)


# --------------------------------------------------------------------------- the contract


def _tensor_nans_removed(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None (they are allowed there)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_tensor_nans_removed(v) for v in value]
    if isinstance(value, dict):
        return {k: _tensor_nans_removed(v) for k, v in value.items()}
    return value


def assert_contract(status: int, payload: Any) -> None:
    assert isinstance(status, int)
    assert status == 200 or 400 <= status < 500, (status, payload)
    assert isinstance(payload, dict)
    if status != 200:
        assert set(payload) == {"error"} and isinstance(payload["error"], str), payload
        json.dumps(payload, allow_nan=False)
        return
    checked = {k: (_tensor_nans_removed(v) if k in TENSOR_KEYS else v) for k, v in payload.items()}
    json.dumps(checked, allow_nan=False)


# --------------------------------------------------------------------------- strategies

MODEL_NAMES = st.sampled_from([HALF_PLUS_TWO, "nope", "", "half_plus_two ", "HALF_PLUS_TWO"])
SIGNATURES = st.sampled_from(
    ["", "serving_default", "classify_x_to_y", "regress_x_to_y", "nope"]
) | st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2))
NUMBERS = st.one_of(
    st.floats(),  # NaN and +-Infinity included
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers().map(lambda i: i * 10**300),  # far outside every dtype
    st.booleans(),
)
SCALARS = st.one_of(
    NUMBERS,
    st.none(),
    st.text(max_size=8),
    st.fixed_dictionaries({"b64": st.one_of(st.text(max_size=8), st.integers())}),
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["instances", "inputs", "x", "b64", "examples", "context"])
            | st.text(max_size=6),
            children,
            max_size=4,
        )
    ),
    max_leaves=25,
)


@st.composite
def tensors(draw: st.DrawFn) -> Any:
    """Nested lists of one shape (mostly), with odd leaves now and then."""
    shape = draw(st.lists(st.integers(0, 3), max_size=4))
    leaf = draw(st.sampled_from([NUMBERS, SCALARS]))

    def build(dims: list[int]) -> Any:
        if not dims:
            return draw(leaf)
        return [build(dims[1:]) for _ in range(dims[0])]

    value = build(shape)
    if draw(st.booleans()) and isinstance(value, list) and value:
        value[-1] = draw(JSON)  # ragged or mistyped
    return value


def _deep(depth: int) -> Any:
    value: Any = 1.0
    for _ in range(depth):
        value = [value]
    return value


PREDICT_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "signature_name": SIGNATURES,
        "instances": st.one_of(
            tensors(),
            st.lists(st.dictionaries(st.sampled_from(["x", "y", "b64"]), tensors()), max_size=3),
            st.integers(MAX_JSON_DEPTH - 5, MAX_JSON_DEPTH + 5).map(_deep),
            JSON,
        ),
        "inputs": st.one_of(
            tensors(), st.dictionaries(st.sampled_from(["x", "inputs", "z"]), tensors()), JSON
        ),
    },
)
FEATURES = st.dictionaries(
    st.sampled_from(["x", "y"]) | st.text(max_size=4),
    st.one_of(SCALARS, st.lists(SCALARS, max_size=3), JSON),
    max_size=3,
)
EXAMPLE_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "signature_name": SIGNATURES,
        "examples": st.one_of(st.lists(FEATURES, max_size=3), JSON),
        "context": st.one_of(FEATURES, JSON),
    },
)
VERSION_PARTS = st.one_of(
    st.just(""),
    st.sampled_from(["/versions/1", "/versions/2", "/versions/9", "/labels/stable"]),
    st.sampled_from(["/labels/canary", "/labels/nope", "/versions/", "/versions/-1"]),
    st.integers(0, 2**80).map(lambda v: f"/versions/{v}"),
    st.just("/versions/" + "9" * 5000),
    st.text(max_size=6).map(lambda t: f"/labels/{t}"),
)
VERBS = st.sampled_from([":predict", ":classify", ":regress", ":PREDICT", "", "/metadata", ":x"])


@st.composite
def paths(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=30))
    query = draw(st.sampled_from(["", "?a=b", "?"]))
    return (
        f"/v1/models/{draw(MODEL_NAMES)}{draw(VERSION_PARTS)}{draw(VERBS)}{query}"
        if draw(st.integers(0, 5))
        else f"/v1/models{draw(VERSION_PARTS)}"
    )


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity as the literals TF Serving reads


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return _encode(draw(JSON))
    raw = _encode(draw(PREDICT_BODIES if kind < 4 else EXAMPLE_BODIES))
    if draw(st.integers(0, 4)) == 0 and raw:  # damage it: truncate or splice bytes in
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=4)) + raw[cut + draw(st.integers(0, 3)) :]
    return raw


# --------------------------------------------------------------------------- RestApi.handle


@FUZZ
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]) | st.text(max_size=5),
    path=paths(),
    body=bodies(),
)
def test_handle_never_fails(api: RestApi, method: str, path: str, body: bytes) -> None:
    status, payload = api.handle(method, path, body)
    assert_contract(status, payload)


@FUZZ
@given(body=PREDICT_BODIES.map(_encode), label=VERSION_PARTS)
def test_predict_bodies(api: RestApi, body: bytes, label: str) -> None:
    status, payload = api.handle("POST", f"/v1/models/{HALF_PLUS_TWO}{label}:predict", body)
    assert_contract(status, payload)


@FUZZ
@given(body=EXAMPLE_BODIES.map(_encode), verb=st.sampled_from(["classify", "regress"]))
def test_classify_and_regress_bodies(api: RestApi, body: bytes, verb: str) -> None:
    status, payload = api.handle("POST", f"/v1/models/{HALF_PLUS_TWO}:{verb}", body)
    assert_contract(status, payload)


# --------------------------------------------------------------------------- raw HTTP

HEADER_VALUES = st.sampled_from(
    ["0", "5", "-1", "abc", "99999999999999999999999", "1e3", " 7 ", "\u00b2", "", "10, 10"]
)


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=200))
    method = draw(st.sampled_from(["GET", "POST", "HEAD", "PUT", "OPTIONS", "G\x00T", ""]))
    path = draw(st.one_of(paths(), st.just("/monitoring/prometheus/metrics")))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "", "HTTP/x"]))
    body = draw(bodies())
    headers = [f"Host: {draw(st.sampled_from(['x', '', 'a' * 300]))}"]
    length = draw(st.one_of(st.just(str(len(body))), HEADER_VALUES))
    headers.append(f"Content-Length: {length}")
    if draw(st.booleans()):
        headers.append(draw(st.sampled_from(["Transfer-Encoding: chunked", "Connection: close"])))
    if draw(st.integers(0, 5)) == 0:
        headers += [f"X-{i}: y" for i in range(draw(st.integers(90, 110)))]
    head = f"{method} {path} {version}".rstrip() + "\r\n" + "\r\n".join(headers) + "\r\n\r\n"
    raw = head.encode("utf-8", "surrogatepass") + body
    if draw(st.booleans()):
        raw += raw  # a second (pipelined) request
    if draw(st.integers(0, 4)) == 0:
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=6)) + raw[cut:]
    return raw


def parse_responses(data: bytes) -> list[int]:
    """Status codes of the complete HTTP responses in ``data`` (asserts they are well formed)."""
    statuses = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data[:300]
        lines = head.split(b"\r\n")
        match = re.fullmatch(rb"HTTP/1\.1 (\d{3}) [^\r\n]*", lines[0])
        assert match, lines[0]
        fields = dict(line.split(b": ", 1) for line in lines[1:])
        length = int(fields[b"Content-Length"])
        body, data = rest[:length], rest[length:]
        if len(body) < length:  # the answer to HEAD: headers only, then the close
            assert body == b"" and data == b"", rest[:300]
        else:
            if fields[b"Content-Type"] == b"application/json":
                json.loads(body)
            else:  # the Prometheus page
                assert fields[b"Content-Type"].startswith(b"text/plain; version=0.0.4")
        statuses.append(int(match.group(1)))
    return statuses


def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw``, half-close, and read until the server closes (within the deadline)."""
    deadline = time.monotonic() + SOCKET_DEADLINE_S
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_DEADLINE_S) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed before reading it all
            pass
        reply = b""
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                pytest.fail(f"no answer and no close within {SOCKET_DEADLINE_S} s for {raw!r}")
            if not chunk:
                break
            reply += chunk
    return reply


@FUZZ
@given(raw=raw_requests())
def test_raw_http_answers_or_closes(server: tuple[RestServer, _Records], raw: bytes) -> None:
    srv, records = server
    records.records.clear()
    statuses = parse_responses(exchange(srv.port, raw))
    # 501 answers an unknown method (HEAD too), 505 an HTTP version other than 1.x;
    # no input is an internal error.
    assert all(s < 500 or s in (501, 505) for s in statuses), statuses
    # The handler thread may log just after the close: give it a moment to finish.
    deadline = time.monotonic() + 2
    while srv.active_connections and time.monotonic() < deadline:
        time.sleep(0.005)
    bad = [r for r in records.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]
