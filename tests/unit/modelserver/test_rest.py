"""The REST API over real HTTP on loopback, with real TensorFlow models."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from servectl.modelserver.rest import RestServer
from servectl.modelserver.server import FlagError, parse_flags

from .conftest import MODEL, end_model_server, free_port, start_model_server

REPO = Path(__file__).resolve().parents[3]


def call(url: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.headers["Content-Type"] == "application/json"
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        assert err.headers["Content-Type"] == "application/json"
        return err.code, json.loads(err.read())


def still_serving(base: str) -> None:
    status, body = call(f"{base}/v1/models/{MODEL}:predict", {"instances": [1.0]})
    assert (status, body) == (200, {"predictions": [2.5]})


def test_documented_predict_example(rest_server: str) -> None:
    status, body = call(f"{rest_server}/v1/models/{MODEL}:predict", {"instances": [1.0, 2.0, 5.0]})
    assert (status, body) == (200, {"predictions": [2.5, 3.0, 4.5]})


def test_columnar_and_signature_name(rest_server: str) -> None:
    url = f"{rest_server}/v1/models/{MODEL}:predict"
    assert call(url, {"inputs": [1.0, 2.0]}) == (200, {"outputs": [2.5, 3.0]})
    assert call(url, {"signature_name": "serving_default", "inputs": {"x": [3.0]}}) == (
        200,
        {"outputs": [3.5]},
    )
    rows = {"signature_name": "add", "instances": [{"a": 1.0, "b": 2.0}, {"a": 5, "b": 1}]}
    assert call(url, rows) == (
        200,
        {"predictions": [{"sum": 3.0, "diff": -1.0}, {"sum": 6.0, "diff": 4.0}]},
    )
    cols = {"signature_name": "add", "inputs": {"a": [1.0], "b": [2.0]}}
    assert call(url, cols) == (200, {"outputs": {"sum": [3.0], "diff": [-1.0]}})


def test_b64_strings(rest_server: str) -> None:
    url = f"{rest_server}/v1/models/{MODEL}:predict"
    body = {"signature_name": "echo", "instances": [{"b64": "AP8="}, "hi"]}
    assert call(url, body) == (
        200,
        {
            "predictions": [
                {"s_bytes": {"b64": "AP8="}, "length": 2},
                {"s_bytes": {"b64": "aGk="}, "length": 2},
            ]
        },
    )


def test_versions_and_labels_route(rest_server: str) -> None:
    m = f"{rest_server}/v1/models/{MODEL}"
    body = {"instances": [1.0]}
    assert call(f"{m}/versions/1:predict", body) == (200, {"predictions": [1.5]})
    assert call(f"{m}/versions/2:predict", body) == (200, {"predictions": [2.5]})
    assert call(f"{m}/labels/stable:predict", body) == (200, {"predictions": [1.5]})
    assert call(f"{m}/labels/canary:predict", body) == (200, {"predictions": [2.5]})


def _status(*versions: int) -> dict[str, Any]:
    return {
        "model_version_status": [
            {
                "version": str(v),
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
            for v in versions
        ]
    }


def test_status(rest_server: str) -> None:
    m = f"{rest_server}/v1/models/{MODEL}"
    assert call(m) == (200, _status(2, 1))
    assert call(f"{m}/versions/1") == (200, _status(1))
    assert call(f"{m}/labels/canary") == (200, _status(2))
    assert call(f"{rest_server}/v1/models/latest_only") == (200, _status(2))


def test_metadata(rest_server: str) -> None:
    status, body = call(f"{rest_server}/v1/models/{MODEL}/labels/stable/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": MODEL, "signature_name": "", "version": "1"}
    sigs = body["metadata"]["signature_def"]["signature_def"]
    default = sigs["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert default["inputs"]["x"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]
    assert sigs["classify_x_to_y"]["method_name"] == "tensorflow/serving/classify"


def test_classify_and_regress(rest_server: str) -> None:
    m = f"{rest_server}/v1/models/{MODEL}"
    body = {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}, {"x": 10.0}]}
    assert call(f"{m}:classify", body) == (200, {"results": [[["", 12.0]], [["", 7.0]]]})
    body = {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}
    assert call(f"{m}/labels/stable:regress", body) == (200, {"results": [41.0]})
    body = {"signature_name": "regress_x_to_y", "context": {"x": 2.0}, "examples": [{}]}
    assert call(f"{m}:regress", body) == (200, {"results": [3.0]})


ERRORS = [
    # (path suffix, body, status, message fragment)
    (
        "/v1/models/nope:predict",
        {"instances": [1.0]},
        404,
        "Servable not found for request: Latest(nope)",
    ),
    (
        f"/v1/models/{MODEL}/versions/9:predict",
        {"instances": [1.0]},
        404,
        f"Servable not found for request: Specific({MODEL}, 9)",
    ),
    (
        f"/v1/models/{MODEL}/labels/beta:predict",
        {"instances": [1.0]},
        400,
        "Unrecognized servable version label: beta",
    ),
    ("/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    (f"/v1/models/{MODEL}/versions/9", None, 404, f"Could not find version 9 of model {MODEL}"),
    (f"/v1/models/{MODEL}/labels/beta", None, 400, "Unrecognized servable version label: beta"),
    ("/v1/models/nope/metadata", None, 404, "Servable not found for request: Latest(nope)"),
    ("/v1/models", None, 400, "Missing model name in request."),
    ("/v1/foo", None, 400, "Malformed request: GET /v1/foo"),
    (f"/v1/models/{MODEL}:predict", b"instances = [1, 2]", 400, "JSON Parse error"),
    (f"/v1/models/{MODEL}:predict", b"", 400, "JSON Parse error: The document is empty"),
    (
        f"/v1/models/{MODEL}:predict",
        {"instances": ["x", "y"]},
        400,
        'JSON Value: "x" Type: String is not of expected type: float',
    ),
    (f"/v1/models/{MODEL}:predict", {"instances": [[1.0, 2.0]]}, 400, "not compatible"),
    (f"/v1/models/{MODEL}:predict", {"instances": [[1.0], 2.0]}, 400, "same shape"),
    (
        f"/v1/models/{MODEL}:predict",
        {"signature_name": 100, "instances": [1.0]},
        400,
        "'signature_name' key must be a string value.",
    ),
    (
        f"/v1/models/{MODEL}:predict",
        {"signature_name": "x", "instances": [1.0]},
        400,
        'Serving signature name: "x" not found in signature def',
    ),
    (f"/v1/models/{MODEL}:predict", {"foo": 1}, 400, "Missing 'inputs' or 'instances' key"),
    (
        f"/v1/models/{MODEL}:predict",
        {"inputs": [1.0], "instances": [1.0]},
        400,
        "expecting only one of 'inputs' or 'instances'",
    ),
    (
        f"/v1/models/{MODEL}:predict",
        {"signature_name": "classify_x_to_y", "instances": [1.0]},
        400,
        "is not of expected type: string",
    ),
    (
        f"/v1/models/{MODEL}:classify",
        {"examples": [{"x": 1.0}]},
        400,
        "Expected classification signature method_name to be tensorflow/serving/classify",
    ),
    (
        f"/v1/models/{MODEL}:regress",
        {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]},
        400,
        "Expected regression signature method_name",
    ),
    (
        f"/v1/models/{MODEL}:regress",
        {"signature_name": "regress_x_to_y", "examples": [{"x": 1}]},
        400,
        "int64",
    ),
]


@pytest.mark.parametrize(("suffix", "body", "status", "fragment"), ERRORS)
def test_errors_then_still_serving(
    rest_server: str, suffix: str, body: Any, status: int, fragment: str
) -> None:
    raw = body if isinstance(body, bytes) else None
    got_status, got = call(rest_server + suffix, None if raw is not None else body, raw=raw)
    assert got_status == status, got
    assert set(got) == {"error"}
    assert fragment in got["error"]
    still_serving(rest_server)


def test_oversized_body_is_413_without_reading_it(rest_server: str) -> None:
    host, port = rest_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n"
            # Over the default limit (TF Serving's gRPC one, INT32_MAX; was 64 MiB).
            f"Content-Length: {2**31}\r\n\r\n".encode()
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert b"Connection: close" in head  # the unread body must not be read as a request
    assert "exceeds the limit" in json.loads(payload)["error"]
    still_serving(rest_server)


def test_flags() -> None:
    flags = parse_flags(
        [
            "--port=9000",
            "--rest_api_port=8501",
            "--model_name=m",
            "--model_base_path=/x",
            "--enable_batching",
            "--tensorflow_intra_op_parallelism=2",
        ]
    )
    assert (flags.port, flags.rest_api_port, flags.model_name) == (9000, 8501, "m")
    assert flags.enable_batching is True
    assert flags.tensorflow_intra_op_parallelism == 2
    with pytest.raises(FlagError, match="unknown argument: --bogus=1"):
        parse_flags(["--model_base_path=/x", "--bogus=1"])
    with pytest.raises(FlagError, match="required"):
        parse_flags(["--rest_api_port=8501"])


def test_keep_alive_serves_many_requests_on_one_connection(rest_server: str) -> None:
    host, port = rest_server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for x in (1.0, 2.0, 5.0):
            conn.request("POST", f"/v1/models/{MODEL}:predict", json.dumps({"instances": [x]}))
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read()) == {"predictions": [x / 2 + 2]}
        local_port = conn.sock.getsockname()[1]
        conn.request("GET", f"/v1/models/{MODEL}")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read()
        assert conn.sock.getsockname()[1] == local_port  # the same TCP connection
        conn.request("GET", "/v1/models/nope")  # an error keeps the connection too
        resp = conn.getresponse()
        assert resp.status == 404 and resp.getheader("Connection") is None
        resp.read()
        assert conn.sock.getsockname()[1] == local_port
    finally:
        conn.close()


def test_server_sockets_disable_nagle(manager: Any) -> None:
    """Headers and body are two sends: with Nagle on, delayed ACKs add ~40 ms per response."""
    server = RestServer(manager, "127.0.0.1", 0)
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", f"/v1/models/{MODEL}")
        assert conn.getresponse().read()
        (handler,) = list(server.connections._idle)
        assert handler.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        conn.close()
    finally:
        server.stop()


def test_sigterm_finishes_in_flight_request(config_file: Path) -> None:
    port = free_port()
    proc, lines = start_model_server(
        [
            f"--rest_api_port={port}",
            "--rest_api_bind_address=127.0.0.1",
            "--port=0",  # no gRPC: the default 8500 may be taken
            f"--model_config_file={config_file}",
            "--tensorflow_inter_op_parallelism=1",
        ],
        f"Exporting HTTP/REST API at:localhost:{port} ...",
    )
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        assert any("Exporting HTTP/REST API" in ln for ln in lines), "".join(lines)
        # A keep-alive connection left idle must not hold up the stop (30 s timeout).
        idle.request("GET", f"/v1/models/{MODEL}")
        assert idle.getresponse().read()
        body = json.dumps({"instances": [1.0, 2.0, 5.0]}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            # Send the headers and half the body: the request is in flight.
            sock.sendall(
                f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body[:10]
            )
            time.sleep(0.5)
            proc.terminate()  # SIGTERM
            time.sleep(0.5)
            sock.sendall(body[10:])
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, payload = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), reply
        assert b"Connection: close" in head  # the last answer on a draining server
        assert json.loads(payload) == {"predictions": [2.5, 3.0, 4.5]}
        assert proc.wait(timeout=15) == 0
        assert idle.sock is not None and idle.sock.recv(1) == b""  # closed by the server
    finally:
        idle.close()
        end_model_server(proc)


def test_unknown_flag_exits_nonzero() -> None:
    from servectl.modelserver.server import main

    assert main(["--model_base_path=/x", "--nope=1"]) == 2


def test_cli_passes_arguments_through() -> None:
    from typer.testing import CliRunner

    from servectl.cli.main import app

    result = CliRunner().invoke(app, ["model-server", "--model_base_path=/x", "--bogus=1"])
    assert result.exit_code == 2
    assert "unknown argument: --bogus=1" in result.output
