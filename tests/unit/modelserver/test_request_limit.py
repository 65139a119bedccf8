"""The largest request the model server takes (issue 25, item 12): ``--max_request_bytes``,
by default TF Serving's gRPC limit (INT32_MAX), the same for a REST body (413 from the
Content-Length, before the body is read, in TF Serving's ``{"error": ...}``) and a gRPC
message (RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
grpc = pytest.importorskip("grpc")

from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

from servectl.modelserver import errors  # noqa: E402
from servectl.modelserver.grpc_api import serve_grpc  # noqa: E402
from servectl.modelserver.models import ModelManager  # noqa: E402
from servectl.modelserver.rest import RestServer  # noqa: E402
from servectl.modelserver.server import FlagError, parse_flags  # noqa: E402

from .conftest import MODEL, end_model_server, free_port, start_model_server  # noqa: E402

LIMIT = 256 * 1024


@pytest.fixture
def limited_rest(manager: ModelManager) -> Iterator[int]:
    server = RestServer(manager, "127.0.0.1", 0, max_body_bytes=LIMIT)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.port
    finally:
        server.stop()


def _exchange(port: int, head: bytes, body: bytes = b"") -> tuple[bytes, bytes]:
    """Send a request (head, then as much of the body as given); the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
            head_end = reply.find(b"\r\n\r\n")
            if head_end >= 0:
                length = int(
                    next(
                        line.split(b":", 1)[1]
                        for line in reply[:head_end].split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                )
                if len(reply) >= head_end + 4 + length:
                    break
    answer_head, _, payload = reply.partition(b"\r\n\r\n")
    return answer_head, payload


def _predict_body(values: int) -> bytes:
    return json.dumps({"instances": [1.5] * values}).encode()


def _post(length: int) -> bytes:
    return (
        f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_the_default_is_tf_servings_grpc_limit_for_both_front_ends() -> None:
    assert errors.DEFAULT_MAX_REQUEST_BYTES == 2**31 - 1  # kint32max in server.cc
    flags = parse_flags(["--model_base_path=/m"])
    assert flags.max_request_bytes == errors.DEFAULT_MAX_REQUEST_BYTES
    assert (
        parse_flags(["--model_base_path=/m", "--max_request_bytes=1000"]).max_request_bytes == 1000
    )
    for bad in ("0", "-5", str(2**31)):
        with pytest.raises(FlagError, match=f"--max_request_bytes={bad}: must be 1 to"):
            parse_flags(["--model_base_path=/m", f"--max_request_bytes={bad}"])


def test_a_body_over_the_limit_is_413_at_once_without_being_read(limited_rest: int) -> None:
    size = 10 * 1024 * 1024  # the 10 MB predict, declared; not one byte of it sent
    started = time.monotonic()
    head, payload = _exchange(limited_rest, _post(size))
    took = time.monotonic() - started
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"Connection: close" in head
    assert json.loads(payload) == {"error": errors.request_too_large(size, LIMIT)}
    assert (
        f"exceeds the limit of {LIMIT} bytes (--max_request_bytes)" in json.loads(payload)["error"]
    )
    assert took < 1.0, took


def test_a_body_under_the_limit_is_served(limited_rest: int) -> None:
    body = _predict_body(20_000)
    assert len(body) < LIMIT
    head, payload = _exchange(limited_rest, _post(len(body)), body)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(payload)["predictions"][:2] == [2.75, 2.75]
    over = _predict_body(60_000)
    assert len(over) > LIMIT
    head, _ = _exchange(limited_rest, _post(len(over)), over)
    assert head.startswith(b"HTTP/1.1 413"), head


def _grpc_predict(port: int, values: int) -> Any:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([1.5] * values, dtype=tf.float32))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return stub.Predict(request, timeout=10)


def test_grpc_takes_the_same_limit(manager: ModelManager) -> None:
    server = serve_grpc(manager, "127.0.0.1", 0, max_workers=2, max_request_bytes=LIMIT)
    try:
        reply = _grpc_predict(server.port, 1000)  # 4 kB of floats
        assert list(tf.make_ndarray(reply.outputs["y"])[:1]) == [2.75]
        with pytest.raises(grpc.RpcError) as raised:
            _grpc_predict(server.port, LIMIT // 4 + 100)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"vs. {LIMIT})" in raised.value.details()
    finally:
        server.stop(None).wait()


def test_the_flag_reaches_the_rest_server(model_base: Path) -> None:
    rest_port = free_port()
    proc, lines = start_model_server(
        [
            "--port=0",
            f"--rest_api_port={rest_port}",
            "--rest_api_bind_address=127.0.0.1",
            f"--model_name={MODEL}",
            f"--model_base_path={model_base}",
            "--max_request_bytes=1000",
        ],
        "Exporting HTTP/REST API",
    )
    try:
        assert any("Exporting HTTP/REST API" in line for line in lines), lines
        head, payload = _exchange(rest_port, _post(1001))
        assert head.startswith(b"HTTP/1.1 413"), head
        assert "limit of 1000 bytes" in json.loads(payload)["error"]
        body = _predict_body(10)
        head, _ = _exchange(rest_port, _post(len(body)), body)
        assert head.startswith(b"HTTP/1.1 200"), head
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        end_model_server(proc)
