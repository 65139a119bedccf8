"""Slowloris against the REST server: does a normal client keep its latency?

    taskset -c 1 python tests/bench/slowloris.py [--slow 200] [--hold 30] [--trickle 3]

Loopback only (127.0.0.1), bounded in connections (--slow at most 2000) and time (--hold at
most 300 s); it stops by itself. It exports the demo half_plus_two to a temporary
directory, serves it with ``servectl-model-server`` pinned to CPU 0 with one TensorFlow
thread, and measures one keep-alive client sending predict requests back to back:

1. idle: the client alone for --hold seconds;
2. attack: the same client while --slow connections each send a request head one byte
   every --trickle seconds (a slowloris). A slow connection the server cuts (408 at the
   head deadline, 503 over the connection cap, or a plain close) is counted and opened
   again after --trickle seconds, so the pressure stays on for the whole --hold.

Prints the client's p50 / p99 in both phases and their ratio, the server's thread count
(``Threads:`` in /proc/PID/status, highest seen), and what happened to the slow
connections. Extra arguments after ``--`` go to the server (e.g.
``-- --rest_api_max_connections=64``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads (the export)

from servectl.modelserver.demo import HALF_PLUS_TWO, export_demo

SLOW_HEAD = b"POST /v1/models/half_plus_two:predict HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000


def _status(pid: int) -> tuple[int, int]:
    """The server's thread count and resident memory (MiB), from /proc/PID/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) // 1024


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the server has used, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client(
    conn: http.client.HTTPConnection, seconds: float, pid: int
) -> tuple[list[float], tuple[int, int, float]]:
    """Back-to-back predicts on a keep-alive connection: latencies (ms), the most server
    threads and resident MiB seen (sampled every 0.5 s), and the server's CPU share."""
    body = json.dumps({"instances": [1.0, 2.0, 5.0]})
    latencies: list[float] = []
    most = (0, 0)
    cpu_before, started = _cpu_s(pid), time.monotonic()
    end = started + seconds
    next_sample = 0.0
    while (now := time.monotonic()) < end:
        if now >= next_sample:
            threads, rss = _status(pid)
            most = (max(most[0], threads), max(most[1], rss))
            next_sample = now + 0.5
        t0 = time.perf_counter()
        conn.request("POST", f"/v1/models/{HALF_PLUS_TWO}:predict", body)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise SystemExit(f"the normal client got {resp.status}: {data!r}")
        latencies.append((time.perf_counter() - t0) * 1000)
    cpu_share = (_cpu_s(pid) - cpu_before) / (time.monotonic() - started)
    return latencies, (*most, cpu_share)


class Slowloris:
    """``n`` slow connections driven by one thread with a selector."""

    def __init__(self, port: int, n: int, trickle_s: float) -> None:
        self.port, self.n, self.trickle_s = port, n, trickle_s
        self.outcomes: Counter[str] = Counter()
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _open(self, sel: selectors.BaseSelector, state: dict[socket.socket, list[float]]) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            self.outcomes["connect failed"] += 1
            return
        sock.setblocking(False)
        self.opened += 1
        sel.register(sock, selectors.EVENT_READ)
        state[sock] = [0.0, 0.0]  # [bytes sent, next send time]

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        state: dict[socket.socket, list[float]] = {}
        reopen_at: list[float] = []
        for i in range(self.n):  # spread the first bytes over one trickle period
            self._open(sel, state)
            if i % 50 == 49:
                time.sleep(0.01)
        for k, sock in enumerate(state):
            state[sock][1] = time.monotonic() + self.trickle_s * k / max(self.n, 1)
        while not self._stop.is_set():
            now = time.monotonic()
            for sock, (sent, due) in list(state.items()):
                if due <= now:
                    try:
                        sock.send(
                            SLOW_HEAD[int(sent) % len(SLOW_HEAD) : int(sent) % len(SLOW_HEAD) + 1]
                        )
                        state[sock] = [sent + 1, now + self.trickle_s]
                    except OSError:
                        self._close(sel, state, sock, "closed (send failed)", reopen_at)
            for key, _ in sel.select(0.05):
                sock = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 503"):
                    outcome = "503 (over the cap)"
                elif data.startswith(b"HTTP/1.1 408"):
                    outcome = "408 (head deadline)"
                elif data:
                    outcome = f"other answer {data[:12]!r}"
                else:
                    outcome = "closed without answer"
                self._close(sel, state, sock, outcome, reopen_at)
            now = time.monotonic()
            due_now = [t for t in reopen_at if t <= now]
            reopen_at[:] = [t for t in reopen_at if t > now]
            for _ in due_now:
                self._open(sel, state)
        for sock in list(state):
            self.outcomes["still open at the end"] += 1
            sel.unregister(sock)
            sock.close()
        sel.close()

    def _close(
        self,
        sel: selectors.BaseSelector,
        state: dict[socket.socket, list[float]],
        sock: socket.socket,
        outcome: str,
        reopen_at: list[float],
    ) -> None:
        self.outcomes[outcome] += 1
        sel.unregister(sock)
        del state[sock]
        sock.close()
        reopen_at.append(time.monotonic() + self.trickle_s)


def _percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=200, help="slow connections (<= 2000)")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds per phase (<= 300)")
    parser.add_argument("--trickle", type=float, default=3.0, help="seconds between bytes")
    parser.add_argument("--port", type=int, default=18521)
    args, server_args = parser.parse_known_args()
    server_args = [a for a in server_args if a != "--"]
    if not 1 <= args.slow <= 2000 or not 1 <= args.hold <= 300 or args.trickle <= 0:
        raise SystemExit("--slow must be 1..2000, --hold 1..300 s, --trickle > 0")
    with tempfile.TemporaryDirectory() as tmp:
        export_demo(Path(tmp), [HALF_PLUS_TWO])
        server = subprocess.Popen(
            ["taskset", "-c", "0", sys.executable, "-m", "servectl.modelserver.server",
             f"--rest_api_port={args.port}", "--port=0", "--rest_api_bind_address=127.0.0.1",
             f"--model_name={HALF_PLUS_TWO}", f"--model_base_path={tmp}/{HALF_PLUS_TWO}",
             "--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=1",
             *server_args],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )  # fmt: skip
        assert server.stderr is not None
        for line in server.stderr:
            if "Exporting HTTP/REST API" in line:
                break
        # Drain the server's log so it never blocks on a full pipe (a line per cut).
        threading.Thread(target=lambda: server.stderr and server.stderr.read(), daemon=True).start()
        # One connection for the whole run, opened before the attack: an established
        # keep-alive client keeps its slot when the cap fills up (a new one would get 503).
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
        try:
            _client(conn, 3.0, server.pid)  # warm up
            idle, idle_most = _client(conn, args.hold, server.pid)
            attack = Slowloris(args.port, args.slow, args.trickle)
            attack.start()
            time.sleep(min(args.trickle, 5.0))  # every slow connection has sent a byte
            loaded, loaded_most = _client(conn, args.hold, server.pid)
            attack.stop()
        finally:
            conn.close()
            server.terminate()
            server.wait(60)
    p99_idle, p99_load = _percentile(idle, 99), _percentile(loaded, 99)
    print(
        f"slow connections: {args.slow}, a byte every {args.trickle:g} s, {args.hold:g} s per phase"
    )
    print(f"server flags: {' '.join(server_args) or '(defaults)'}")
    for name, values, (threads, rss, cpu) in (
        ("idle:  ", idle, idle_most),
        ("attack:", loaded, loaded_most),
    ):
        print(
            f"{name} {len(values)} requests, p50 {_percentile(values, 50):.2f} ms, "
            f"p99 {_percentile(values, 99):.2f} ms, server threads <= {threads}, "
            f"RSS <= {rss} MiB, server CPU {cpu:.0%}"
        )
    print(f"p99 attack / idle: {p99_load / p99_idle:.2f}")
    print(f"slow connections opened: {attack.opened}")
    for outcome, count in sorted(attack.outcomes.items()):
        print(f"  {outcome}: {count}")


if __name__ == "__main__":
    main()
