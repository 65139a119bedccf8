"""Run Locust headless in a subprocess and read its CSV reports back into a summary.

Locust monkey-patches the process it runs in with gevent (sockets, threads, time), so it
never runs inside the CLI's process: ``run`` starts ``python -m locust --headless -f
<servectl/loadtest/locustfile.py> ...``, relays its progress lines, and parses
``PREFIX_stats.csv`` and ``PREFIX_failures.csv`` when it exits.
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servectl.loadtest import payload, shapes

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
PROGRESS_PREFIX = "SERVECTL_PROGRESS "  # locustfile.PROGRESS_PREFIX (not imported: gevent)
ERROR_PREFIX = "SERVECTL_ERROR "
PROTOCOLS = ("rest", "grpc", "both")
AGGREGATED = "Aggregated"

# Failure texts that mean nothing answered: Locust counts them as failed requests.
_UNREACHABLE = re.compile(
    r"^connection:|ConnectionRefused|Connection refused|ConnectTimeout|Max retries exceeded"
    r"|Name or service not known|failed to connect|UNAVAILABLE|DEADLINE_EXCEEDED: .*connect"
    r"|Temporary failure in name resolution|No route to host",
    re.IGNORECASE,
)


class LoadTestError(RuntimeError):
    """Locust could not run (missing, bad options, crashed); the message says what to do."""


class UnreachableError(LoadTestError):
    """Nothing listens at --target or --grpc: found before Locust starts, in seconds."""


# Seconds a pre-flight connection may take before the target counts as unreachable.
PREFLIGHT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class LoadTestConfig:
    """What to load and how; ``build_command`` turns it into Locust's command line.

    ``users`` set means closed loop (``users`` users back to back for ``duration_s``),
    ignoring ``shape``; otherwise ``shape`` (``shapes.SHAPES``) with ``rps``/``peak_rps``.
    ``duration_s`` ``None`` is for ``shape="trace"`` only: the whole trace.
    """

    model: str = "cost_model"
    target: str | None = "http://127.0.0.1:8501"
    grpc: str | None = None
    protocol: str = "rest"
    version: int | None = None
    label: str | None = None
    signature: str = "serving_default"
    payload: str | None = None
    shape: str = "constant"
    rps: float = 10.0
    peak_rps: float | None = None
    duration_s: float | None = 30.0
    users: int | None = None
    rps_per_user: float = shapes.DEFAULT_RPS_PER_USER
    trace: Path | None = None
    speedup: float = 1.0
    ab_header: str | None = None
    ab_share: float = 0.0
    out_dir: Path = Path("out/loadtest")
    name: str = "loadtest"
    extra_args: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise a ValueError naming the option for bad settings, before Locust starts.

        ``shapes.ShapeError`` (shape, rates, protocol, header), ``payload.PayloadError``
        (model, version, payload) or ``traces.TraceError`` (the trace CSV).
        """
        target = payload.Target(self.model, self.version, self.label, self.signature)
        payload.load_payload(self.payload, target.model)
        if self.protocol not in PROTOCOLS:
            raise shapes.ShapeError(
                f"--protocol {self.protocol!r}: choose one of {', '.join(PROTOCOLS)}"
            )
        rest = self.protocol in ("rest", "both")
        if rest and (not self.target or not re.match(r"^https?://[^/\s]+", self.target)):
            raise shapes.ShapeError(
                f"--target {self.target!r}: give the REST base URL, e.g. http://127.0.0.1:8501"
            )
        grpc = self.protocol in ("grpc", "both")
        if grpc and (
            not self.grpc or not re.fullmatch(r"[^\s/:]+:\d+|\[[0-9a-fA-F:]+\]:\d+", self.grpc)
        ):
            raise shapes.ShapeError(
                f"--grpc {self.grpc!r}: --protocol {self.protocol} needs the gRPC "
                "HOST:PORT, e.g. --grpc 127.0.0.1:8500"
            )
        if self.users is not None:
            if self.duration_s is None:
                raise shapes.ShapeError("--users (closed loop) needs --duration, e.g. 20s")
            shapes.ClosedLoop(self.users, self.duration_s)
        else:
            self.load_shape()
        if self.ab_header is not None:
            shapes.parse_header(self.ab_header)
        shapes.check_share(self.ab_share)
        if self.ab_share > 0 and self.ab_header is None:
            raise shapes.ShapeError("--ab-share needs --ab-header NAME=VALUE")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise shapes.ShapeError(f"report name {self.name!r}: letters, digits, '-', '_'")

    def load_shape(self) -> shapes.LoadShape:
        """The open-loop shape (reads ``trace``); raises ``shapes.ShapeError``."""
        trace = None if self.trace is None else payload.read_trace(self.trace, "--trace")
        return shapes.build(
            self.shape,
            rps=self.rps,
            peak_rps=self.peak_rps,
            duration_s=self.duration_s,
            trace=trace,
            speedup=self.speedup,
        )

    @property
    def csv_prefix(self) -> Path:
        return self.out_dir / self.name

    @property
    def html_report(self) -> Path:
        return self.out_dir / f"{self.name}.html"

    @property
    def log_file(self) -> Path:
        return self.out_dir / f"{self.name}.log"


@dataclass(frozen=True)
class RequestStats:
    """One row of ``PREFIX_stats.csv``: a request name (or the aggregate) and its figures."""

    type: str
    name: str
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float

    @property
    def failure_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class FailureRow:
    """One row of ``PREFIX_failures.csv``: a failure message and how often it happened."""

    method: str
    name: str
    message: str
    occurrences: int


@dataclass(frozen=True)
class Summary:
    """Per request name and aggregated figures, and the most frequent failures."""

    rows: list[RequestStats]
    total: RequestStats
    failures: list[FailureRow] = field(default_factory=list)

    @property
    def failure_rate(self) -> float:
        return self.total.failure_rate

    @property
    def unreachable(self) -> bool:
        """Nothing answered: every request failed, all with connection errors."""
        return (
            self.total.requests > 0
            and self.total.failures == self.total.requests
            and bool(self.failures)
            and all(_UNREACHABLE.search(f.message) for f in self.failures)
        )

    def notes(self) -> list[str]:
        """Plain-language remarks: no requests, an unreachable target."""
        if self.total.requests == 0:
            return ["no requests were made: is the duration shorter than a request?"]
        if self.unreachable:
            return [
                "target unreachable: every request failed to connect "
                f"({self.failures[0].message}); check --target/--grpc and that the "
                "server is running"
            ]
        return []

    def to_record(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) | {"failure_rate": r.failure_rate} for r in self.rows],
            "total": asdict(self.total) | {"failure_rate": self.total.failure_rate},
            "failures": [asdict(f) for f in self.failures],
            "unreachable": self.unreachable,
            "notes": self.notes(),
        }


@dataclass(frozen=True)
class Progress:
    """A progress line from the running test."""

    elapsed_s: float
    users: int
    rps: float
    requests: int
    failures: int

    def line(self) -> str:
        return (
            f"{self.elapsed_s:6.1f} s  users {self.users:4d}  {self.rps:8.1f} req/s  "
            f"requests {self.requests}  failures {self.failures}"
        )


@dataclass(frozen=True)
class LoadTestResult:
    summary: Summary
    csv_prefix: Path
    html_report: Path
    log_file: Path
    command: list[str]
    wall_s: float
    forced_stop: bool = False
    """Locust did not stop within STOP_GRACE_S of the SIGINT that ``stop`` sent and was
    killed: ``summary`` is its last periodic CSV write (about a second old, or older if it
    hung), and there is no HTML report."""

    def to_record(self) -> dict[str, Any]:
        return {
            **self.summary.to_record(),
            "csv_prefix": str(self.csv_prefix),
            "html_report": str(self.html_report),
            "log_file": str(self.log_file),
            "command": self.command,
            "wall_s": round(self.wall_s, 2),
            "forced_stop": self.forced_stop,
        }


def locust_available() -> bool:
    """Whether Locust is installed for this Python (found without importing it)."""
    return importlib.util.find_spec("locust") is not None


def build_command(
    config: LoadTestConfig,
    *,
    python: str = sys.executable,
    locustfile: Path = LOCUSTFILE,
    progress_every_s: float = 0.0,
) -> list[str]:
    """``python -m locust -f LOCUSTFILE --headless ...`` for ``config`` (not checked here)."""
    cmd = [python, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary"]
    cmd += ["--exit-code-on-error", "0"]  # failures are our summary's business, not an exit
    cmd += ["--csv", str(config.csv_prefix), "--html", str(config.html_report)]
    cmd += ["--model", config.model, "--protocol", config.protocol]
    if config.target:
        cmd += ["--host", config.target]
    if config.grpc:
        cmd += ["--grpc-host", config.grpc]
    if config.version is not None:
        cmd += ["--model-version", str(config.version)]
    if config.label is not None:
        cmd += ["--model-label", config.label]
    if config.signature != "serving_default":
        cmd += ["--signature", config.signature]
    if config.payload is not None:
        cmd += ["--payload", config.payload]
    if config.duration_s is not None:
        cmd += ["--duration", f"{config.duration_s:g}s"]
    if config.users is not None:
        cmd += ["--shape", "closed", "--users", str(config.users)]
    else:
        cmd += ["--shape", config.shape, "--rps", f"{config.rps:g}"]
        cmd += ["--rps-per-user", f"{config.rps_per_user:g}"]
        if config.peak_rps is not None:
            cmd += ["--peak-rps", f"{config.peak_rps:g}"]
        if config.trace is not None:
            cmd += ["--trace-file", str(config.trace), "--speedup", f"{config.speedup:g}"]
    if config.ab_header is not None:
        cmd += ["--ab-header", config.ab_header, "--ab-share", f"{config.ab_share:g}"]
    if progress_every_s > 0:
        cmd += ["--servectl-progress", f"{progress_every_s:g}"]
    return cmd + list(config.extra_args)


def _endpoints(config: LoadTestConfig) -> list[tuple[str, str, str, int]]:
    """(option, as given, host, port) of every server the load test will call."""
    found = []
    if config.protocol in ("rest", "both") and config.target:
        parts = urlsplit(config.target)
        default = 443 if parts.scheme == "https" else 80
        try:
            port = parts.port or default
        except ValueError:  # a port out of range: check() names it first normally
            raise shapes.ShapeError(
                f"--target {config.target!r}: the port is not 0-65535"
            ) from None
        found.append(("--target", config.target, parts.hostname or "", port))
    if config.protocol in ("grpc", "both") and config.grpc:
        host, _, port_text = config.grpc.rpartition(":")
        port = int(port_text)
        if port > 65535:
            raise shapes.ShapeError(f"--grpc {config.grpc!r}: the port is not 0-65535")
        found.append(("--grpc", config.grpc, host.strip("[]"), port))
    return found


def preflight(config: LoadTestConfig, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Raise :class:`UnreachableError` when a server the test would call does not accept
    a TCP connection, so an unreachable target is said in seconds, not after --duration."""
    for option, given, host, port in _endpoints(config):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                pass
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                reason = f"no answer in {timeout_s:g} s"
            raise UnreachableError(
                f"target unreachable: {option} {given}: cannot connect to {host}:{port} "
                f"({reason}); check {option} and that the server is running "
                "(servectl model-server --rest_api_port=8501 --port=8500 ...)"
            ) from exc


def run(
    config: LoadTestConfig,
    *,
    progress: Callable[[Progress], None] | None = None,
    progress_every_s: float = 3.0,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    stop: threading.Event | None = None,
) -> LoadTestResult:
    """Run the load test; raises ValueError (bad options, see ``check``) or ``LoadTestError``.

    Locust's own output goes to ``config.log_file``; ``progress`` gets a ``Progress`` every
    ``progress_every_s`` seconds. Failed requests do not raise: read ``summary``. A target
    that takes no connection raises :class:`UnreachableError` before Locust starts.
    Setting ``stop`` ends the test early (SIGINT: Locust stops its users and writes its
    reports, which are read as usual; one that does not stop within ``STOP_GRACE_S`` is
    killed, and its last periodic CSV is the result, with ``forced_stop`` set).
    """
    config.check()
    preflight(config)
    if python == sys.executable and not locust_available():
        raise LoadTestError(
            "Locust is not installed: pip install 'servectl[serving]' (or pip install locust)"
        )
    config.out_dir.mkdir(parents=True, exist_ok=True)
    for stale in config.out_dir.glob(f"{config.name}_*.csv"):
        stale.unlink()
    cmd = build_command(config, python=python, progress_every_s=progress_every_s)
    child_env = dict(os.environ if env is None else env)
    # The locustfile imports servectl: make this servectl importable whatever the cwd.
    package_root = str(Path(__file__).resolve().parents[2])
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, child_env.get("PYTHONPATH", "")) if p
    )
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    errors: list[str] = []
    tail: list[str] = []
    with config.log_file.open("w") as log:
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=child_env,
                bufsize=1,
                preexec_fn=_default_sigint,
            )
        except OSError as exc:
            raise LoadTestError(f"cannot start Locust ({cmd[0]}): {exc}") from exc
        assert proc.stdout is not None
        killed = threading.Event()
        if stop is not None:
            threading.Thread(target=_stop_when, args=(stop, proc, killed), daemon=True).start()
        for line in proc.stdout:
            if line.startswith(PROGRESS_PREFIX):
                if progress is not None:
                    parsed = _progress(line[len(PROGRESS_PREFIX) :])
                    if parsed is not None:
                        progress(parsed)
                continue
            log.write(line)
            if line.startswith(ERROR_PREFIX):
                errors.append(line[len(ERROR_PREFIX) :].strip())
            tail = [*tail[-19:], line.rstrip()]
        code = proc.wait()
    wall = time.perf_counter() - started
    if errors:
        raise LoadTestError("; ".join(errors))
    stats = Path(f"{config.csv_prefix}_stats.csv")
    forced = killed.is_set() and stats.is_file()
    if forced:
        # Asked to stop, it hung instead: what it wrote up to then is still the test's
        # measurement (Locust rewrites the CSVs every second), and the caller is told.
        with config.log_file.open("a") as log:
            log.write(
                f"--- servectl: Locust did not stop within {STOP_GRACE_S:g} s of SIGINT and "
                "was killed; the summary is its last CSV write\n"
            )
    elif code != 0 or not stats.is_file():
        last = "\n  ".join(line for line in tail if line.strip()) or "(no output)"
        raise LoadTestError(
            f"Locust exited with status {code} (full log: {config.log_file}); last lines:\n  {last}"
        )
    summary = summarize(config.csv_prefix)
    return LoadTestResult(
        summary=summary,
        csv_prefix=config.csv_prefix,
        html_report=config.html_report,
        log_file=config.log_file,
        command=cmd,
        wall_s=wall,
        forced_stop=forced,
    )


STOP_GRACE_S = 30.0
"""How long Locust has after SIGINT to stop its users and write its reports."""


def _default_sigint() -> None:
    """In Locust's process, before it starts: SIGINT back to its default. A shell without
    job control starts `cmd &` with SIGINT ignored, and children inherit that; Locust (any
    Python) would then never see the SIGINT ``stop`` sends and be killed after the grace."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_when(stop: threading.Event, proc: subprocess.Popen[str], killed: threading.Event) -> None:
    while proc.poll() is None:
        if stop.wait(0.2):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # Locust stops its users and writes its reports
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    killed.set()
                    proc.kill()
            return


def _progress(text: str) -> Progress | None:
    try:
        data = json.loads(text)
        return Progress(
            elapsed_s=float(data.get("elapsed_s") or 0.0),
            users=int(data["users"]),
            rps=float(data["rps"]),
            requests=int(data["requests"]),
            failures=int(data["failures"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def summarize(prefix: str | Path, top_failures: int = 5) -> Summary:
    """The summary of the run whose reports are ``PREFIX_stats.csv``/``_failures.csv``."""
    rows = parse_stats_csv(Path(f"{prefix}_stats.csv"))
    failures_path = Path(f"{prefix}_failures.csv")
    failures = parse_failures_csv(failures_path) if failures_path.is_file() else []
    totals = [r for r in rows if r.name == AGGREGATED and not r.type]
    if not totals:
        raise LoadTestError(f"{prefix}_stats.csv: no Aggregated row; is it Locust's stats CSV?")
    return Summary(
        rows=[r for r in rows if r is not totals[0]],
        total=totals[0],
        failures=failures[:top_failures],
    )


def parse_stats_csv(path: Path) -> list[RequestStats]:
    """Rows of Locust's ``PREFIX_stats.csv`` (per request name, then Aggregated)."""
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            needed = {"Type", "Name", "Request Count", "Failure Count", "Requests/s", "50%"}
            missing = needed - set(reader.fieldnames or ())
            if missing:
                raise LoadTestError(
                    f"{path}: not Locust's stats CSV (missing {', '.join(sorted(missing))})"
                )
            return [
                RequestStats(
                    type=row["Type"],
                    name=row["Name"],
                    requests=int(row["Request Count"]),
                    failures=int(row["Failure Count"]),
                    rps=_number(row["Requests/s"]),
                    p50_ms=_number(row["50%"]),
                    p95_ms=_number(row.get("95%", "")),
                    p99_ms=_number(row.get("99%", "")),
                    mean_ms=_number(row.get("Average Response Time", "")),
                )
                for row in reader
            ]
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read Locust's stats ({exc.strerror})") from exc


_WRAPPED = re.compile(r"^(\w+)\((['\"])(.*)\2\)$", re.DOTALL)
_LOCUST_WRAPPERS = {"CatchResponseError", "GrpcFailure"}


def parse_failures_csv(path: Path) -> list[FailureRow]:
    """Rows of Locust's ``PREFIX_failures.csv``, most frequent first.

    Locust stores ``repr(exception)``; the wrappers our users raise
    (``CatchResponseError('HTTP 400: ...')``, ``GrpcFailure('...')``) are unwrapped to
    their message.
    """
    try:
        with path.open(newline="") as handle:
            rows = [
                FailureRow(
                    method=row["Method"],
                    name=row["Name"],
                    message=_unwrap(row["Error"]),
                    occurrences=int(row["Occurrences"]),
                )
                for row in csv.DictReader(handle)
            ]
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read Locust's failures ({exc.strerror})") from exc
    except (KeyError, ValueError) as exc:
        raise LoadTestError(f"{path}: not Locust's failures CSV ({exc})") from exc
    return sorted(rows, key=lambda f: -f.occurrences)


def _unwrap(error: str) -> str:
    match = _WRAPPED.match(error.strip())
    if match and match.group(1) in _LOCUST_WRAPPERS:
        try:
            return str(ast.literal_eval(match.group(2) + match.group(3) + match.group(2)))
        except (ValueError, SyntaxError):
            return match.group(3)
    return error


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:  # Locust writes N/A when there were no requests
        return math.nan
    return value


def failure_rate_exceeded(summary: Summary, max_rate: float | None) -> bool:
    """Whether the run failed more than ``max_rate`` (a share, 0-1) of its requests."""
    return max_rate is not None and summary.failure_rate > max_rate


def format_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Header and rows for a table: per request name, then the total."""
    header = ["request", "via", "reqs", "fails", "fail %", "req/s", "p50", "p95", "p99 ms"]

    def ms(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.0f}"

    def row(r: RequestStats, label: str, via: str) -> list[str]:
        return [
            label,
            via,
            str(r.requests),
            str(r.failures),
            f"{100 * r.failure_rate:.1f}",
            f"{r.rps:.1f}",
            ms(r.p50_ms),
            ms(r.p95_ms),
            ms(r.p99_ms),
        ]

    body = [row(r, r.name, "rest" if r.type == "POST" else r.type) for r in summary.rows]
    body.append(row(summary.total, "total", ""))
    return header, body


__all__: Sequence[str] = (
    "FailureRow",
    "LoadTestConfig",
    "LoadTestError",
    "LoadTestResult",
    "Progress",
    "RequestStats",
    "Summary",
    "UnreachableError",
    "build_command",
    "failure_rate_exceeded",
    "format_rows",
    "locust_available",
    "parse_failures_csv",
    "parse_stats_csv",
    "preflight",
    "run",
    "summarize",
)
