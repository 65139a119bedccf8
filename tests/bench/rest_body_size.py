"""What a large REST ``:predict`` costs the model server, and what the limit saves.

    python tests/bench/rest_body_size.py [--values 1000000] [--limit 4194304]

Exports the tests' half_plus_two model to a temporary directory, serves it with
servectl's REST server in this process, and times one ``:predict`` of ``--values`` floats
with the default ``--max_request_bytes`` (TF Serving's INT32_MAX: served), then the same
request against a server limited to ``--limit`` bytes (answered 413 from the
Content-Length, its body unread). docs/modelserver.md, "Request size", quotes a run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' model, run as a file

from servectl.modelserver import errors
from servectl.modelserver.models import ModelManager, parse_model_config_text
from servectl.modelserver.rest import RestServer
from tests.unit.modelserver.conftest import MODEL, _export, config_text


def _time_predict(manager: ModelManager, limit: int, body: bytes) -> str:
    server = RestServer(manager, "127.0.0.1", 0, max_body_bytes=limit)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        started = time.perf_counter()
        # The head alone: a server that refuses from the Content-Length answers at once.
        conn.putrequest("POST", f"/v1/models/{MODEL}:predict")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if len(body) <= limit:
            conn.send(body)
        response = conn.getresponse()
        answer = response.read()
        took = time.perf_counter() - started
        conn.close()
        return (
            f"limit {limit} B: a {len(body) / 1e6:.1f} MB body -> HTTP {response.status}, "
            f"{len(answer) / 1e6:.2f} MB back in {took:.3f} s"
        )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--values", type=int, default=1_000_000, help="floats in the request")
    parser.add_argument("--limit", type=int, default=4 * 2**20, help="the lowered limit, bytes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory) / MODEL
        _export(base / "1", 1.0)
        _export(base / "2", 2.0)
        manager = ModelManager()
        manager.load(parse_model_config_text(config_text(base)))
        body = json.dumps({"instances": [1.2345678] * args.values}).encode()
        print(_time_predict(manager, errors.DEFAULT_MAX_REQUEST_BYTES, body))
        print(_time_predict(manager, args.limit, body))


if __name__ == "__main__":
    main()
