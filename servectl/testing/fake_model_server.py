"""A fake TF-Serving-compatible model server (run as a script): the supervisor's tests and
``servectl bench --local``'s controller figures use it where TensorFlow would only add noise.

It takes the flags the supervisor passes, reads the one model of ``--model_config_file``
and behaves as ``<base_path>/fake.json`` says (re-read on every status request, so a test
can change it while the server runs):

- ``ready_after_s`` (0): the version is ``LOADING`` until then, then ``AVAILABLE``;
- ``available`` (true): false answers every status request 503 (a replica that stopped
  serving);
- ``hang`` (false): true makes status requests take 5 s (a hung replica);
- ``status_delay_s`` (0): status requests take this long (a replica busy at its CPU quota);
- ``exit_after_s`` / ``exit_code`` (none / 1): exit on its own after that long, logging
  ``told to crash`` first;
- ``ignore_sigterm`` (false): SIGTERM is ignored (only SIGKILL stops it).

Like servectl's server it exits 1 with TF Serving's ``No versions of servable ...`` line
when the version directory is missing, and with ``... is already in use ...`` when a port
is taken. It also writes its argv to ``<base_path>/argv.<pid>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp}.000: I fake] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in (
        "port",
        "rest_api_port",
        "model_config_file",
        "monitoring_config_file",
        "file_system_poll_wait_seconds",
        "rest_api_bind_address",
        "grpc_bind_address",
        "tensorflow_intra_op_parallelism",
        "tensorflow_inter_op_parallelism",
        "batching_parameters_file",
    ):
        parser.add_argument(f"--{flag}")
    parser.add_argument("--enable_batching", action="store_true")
    flags = parser.parse_args()
    config = Path(flags.model_config_file).read_text()
    name = re.search(r'name: "([^"]*)"', config).group(1)  # type: ignore[union-attr]
    base = Path(re.search(r'base_path: "([^"]*)"', config).group(1))  # type: ignore[union-attr]
    version = int(re.search(r"versions: (\d+)", config).group(1))  # type: ignore[union-attr]
    (base / f"argv.{os.getpid()}.json").write_text(json.dumps(sys.argv))

    def behaviour() -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads((base / "fake.json").read_text())
        except FileNotFoundError:
            return {}
        return loaded

    start = time.monotonic()
    first = behaviour()
    if not (base / str(version)).is_dir():
        log(
            f"No versions of servable {name} found under base path {base}. Did you forget "
            "to name your leaf directory as a number (eg. '/1/')?"
        )
        return 1
    host = flags.rest_api_bind_address or "0.0.0.0"
    grpc = socket.socket()
    try:
        grpc.bind((host, int(flags.port)))
        grpc.listen()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                now = behaviour()
                if self.path == "/monitoring/prometheus/metrics":
                    self._send(200, b":tensorflow:serving:request_count 0\n", "text/plain")
                    return
                if self.path != f"/v1/models/{name}/versions/{version}":
                    self._json(404, {"error": f"Could not find any versions of model {name}"})
                    return
                if now.get("hang"):
                    time.sleep(5)
                time.sleep(float(now.get("status_delay_s", 0)))
                if not now.get("available", True):
                    self._json(503, {"error": "told to be unavailable"})
                    return
                loading = time.monotonic() - start < float(now.get("ready_after_s", 0))
                state = "LOADING" if loading else "AVAILABLE"
                status = {"error_code": "OK", "error_message": ""}
                entry = {"version": str(version), "state": state, "status": status}
                self._json(200, {"model_version_status": [entry]})

            def _json(self, code: int, body: dict[str, Any]) -> None:
                self._send(code, json.dumps(body).encode(), "application/json")

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer((host, int(flags.rest_api_port)), Handler)
    except OSError as exc:
        log(
            f"--rest_api_port={flags.rest_api_port}: port on {host} is already in use "
            f"(another model server?): {exc}"
        )
        return 1
    server.daemon_threads = True
    log(f"Exporting HTTP/REST API at:localhost:{flags.rest_api_port} ...")

    def on_term(signum: int, frame: object) -> None:
        log(f"Received signal {signum}")
        threading.Thread(target=server.shutdown).start()

    if first.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, on_term)
    if first.get("exit_after_s") is not None:

        def crash() -> None:
            time.sleep(float(first["exit_after_s"]))
            log("told to crash")
            os._exit(int(first.get("exit_code", 1)))

        threading.Thread(target=crash, daemon=True).start()
    server.serve_forever(poll_interval=0.05)
    log("Server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
