"""Run a real Prometheus as a child process, for the integration tests and the local runtime.

`PrometheusServer` writes a ``prometheus.yml`` into its data directory, starts the
``prometheus`` binary on a loopback port and talks to its HTTP API. Targets come from
file-based service discovery (one ``targets/<job>.json`` per job), so `set_targets` changes
what is scraped without a restart: Prometheus watches those files and re-reads them when
they change. Only a job that is new to the config needs a config reload
(``/-/reload``, enabled by ``--web.enable-lifecycle``), which `set_targets` does itself.

Timing (Prometheus 2.42): ready in ~0.1 s, but discovered targets reach the scrape manager
on a fixed 5 s tick, so a new or changed target is first scraped ~5 s (at worst ~10 s)
after `start` or `set_targets`. A target whose server stops is down at its next scrape.

Layout of ``data_dir``::

    prometheus.yml      generated config
    targets/<job>.json  file_sd target groups, rewritten atomically by set_targets
    tsdb/               the TSDB (survives stop/restart)
    prometheus.log      the process's stdout and stderr (appended across restarts)

Example::

    with PrometheusServer(tmp, targets=[ScrapeTarget("app", "127.0.0.1:9100")]) as prom:
        prom.wait_for_targets(1, timeout_s=10)
        samples = prom.wait_for_series('up{job="app"} == 1', timeout_s=10)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from servectl import processes

DEFAULT_BINARY = "prometheus"
INSTALL_HINT = "install it with the Debian package: apt-get install prometheus"
_POLL_S = 0.05
_HTTP_TIMEOUT_S = 5.0
_JOB_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")


class PrometheusError(RuntimeError):
    """Base of every error this module raises."""


class PrometheusNotFound(PrometheusError):
    """The ``prometheus`` binary is not installed (or not where ``binary`` says)."""


class PrometheusStartError(PrometheusError):
    """The process exited or did not become ready in time; the message ends with its log."""


class PrometheusPortInUse(PrometheusStartError):
    """Another process took the listen port (picked free, then taken before Prometheus bound
    it: a race with whatever else starts on the machine); :meth:`PrometheusServer.move_to`
    another port and start again."""


class PrometheusTimeout(PrometheusError):
    """A ``wait_for_*`` condition did not hold before its timeout."""


class PrometheusQueryError(PrometheusError):
    """The HTTP API answered with ``status: error`` (bad PromQL, execution error)."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint to scrape. ``labels`` become target labels on every scraped series."""

    job: str
    address: str
    """``host:port``, e.g. ``127.0.0.1:9100``."""
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector (or a scalar, with empty labels)."""

    labels: Mapping[str, str]
    value: float
    timestamp: float
    """Unix seconds of the evaluation time."""


@dataclass(frozen=True)
class Series:
    """One series of a range query: ``points`` are ``(unix seconds, value)``."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class TargetHealth:
    """One active target as ``/api/v1/targets`` reports it."""

    job: str
    scrape_url: str
    labels: Mapping[str, str]
    health: str
    """``up``, ``down`` or ``unknown`` (not scraped yet)."""
    last_error: str


def find_prometheus(binary: str = DEFAULT_BINARY) -> str | None:
    """The path of the Prometheus binary (a name looked up on PATH, or a path), or None."""
    return shutil.which(binary)


def _now() -> float:
    # Deadlines for waiting on a child process: this module is an I/O edge, not a policy.
    return time.monotonic()


def _duration(seconds: float) -> str:
    """A Prometheus duration (whole milliseconds; Prometheus rejects ``1.5s``)."""
    millis = round(seconds * 1000)
    if millis <= 0:
        raise ValueError(f"duration must be at least 1 ms, got {seconds!r} s")
    return f"{millis}ms" if millis % 1000 else f"{millis // 1000}s"


def _check_job_name(job: str) -> None:
    if not job or not set(job) <= _JOB_NAME_CHARS:
        raise ValueError(f"job name {job!r}: use letters, digits and _ - . : only")


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


class PrometheusServer:
    """A Prometheus child process with a generated config and file-based targets."""

    def __init__(
        self,
        data_dir: Path,
        *,
        targets: Iterable[ScrapeTarget] | None = None,
        scrape_interval_s: float = 1.0,
        port: int = 0,
        binary: str = DEFAULT_BINARY,
        rule_files: Sequence[Path] = (),
        extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
        retention: str = "1d",
        start_timeout_s: float = 30.0,
        detach: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        """``port=0`` picks a free loopback port at the first `start` and keeps it after.

        ``extra_scrape_configs`` are appended verbatim to ``scrape_configs`` (for jobs that
        need their own relabelling); ``rule_files`` are loaded with the config and
        evaluated every ``scrape_interval_s``.

        ``detach=True`` (the local runtime): Prometheus runs in its own session, so it
        outlives this process (a controller killed with ``kill -9`` and started again
        finds it with :meth:`adopt`), and its pid is written to ``prometheus.pid``.
        """
        self.data_dir = Path(data_dir).resolve()
        self.scrape_interval_s = scrape_interval_s
        self.binary = binary
        self.rule_files = tuple(Path(p).resolve() for p in rule_files)
        self.extra_scrape_configs = tuple(dict(c) for c in extra_scrape_configs)
        self.retention = retention
        self.start_timeout_s = start_timeout_s
        self._port = port
        self.host = host
        """The address it listens on (loopback unless pods must reach it)."""
        self._jobs: set[str] = set()
        self._targets: tuple[ScrapeTarget, ...] = ()
        self.detach = detach
        self._process: subprocess.Popen[bytes] | None = None
        self._adopted_pid: int | None = None
        _duration(scrape_interval_s)  # fail early on a bad interval
        self._targets_dir.mkdir(parents=True, exist_ok=True)
        self.set_targets(targets or ())

    # --- paths and addresses

    @property
    def config_path(self) -> Path:
        return self.data_dir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "prometheus.log"

    @property
    def tsdb_path(self) -> Path:
        return self.data_dir / "tsdb"

    @property
    def _targets_dir(self) -> Path:
        return self.data_dir / "targets"

    def _job_file(self, job: str) -> Path:
        return self._targets_dir / f"{job}.json"

    @property
    def port(self) -> int:
        """The listen port; 0 until the first `start` when constructed with ``port=0``."""
        return self._port

    @property
    def url(self) -> str:
        if self._port == 0:
            raise PrometheusError("not started yet: the port is picked by start()")
        return f"http://{self.host}:{self._port}"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "prometheus.pid"

    @property
    def pid(self) -> int | None:
        if self._process is not None:
            return self._process.pid
        return self._adopted_pid

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._adopted_pid is not None and processes.alive(self._adopted_pid)

    def move_to(self, port: int) -> None:
        """Listen on ``port`` from the next :meth:`start` (not while running)."""
        if self.running:
            raise PrometheusError(f"running at {self.url}: stop it before moving it")
        self._port = port

    def adopt(self) -> bool:
        """Take over a Prometheus a previous process started here with ``detach=True``
        and left running: True when its pid (``prometheus.pid``) is alive and it serves
        this data directory's TSDB on its recorded port."""
        if self.running:
            return True
        recorded = processes.read_pidfile(self.pid_path)
        if recorded is None or len(recorded) != 2:
            return False
        pid, port = recorded
        if not processes.alive(pid):
            return False
        saved = self._port
        self._port = port
        try:
            ours = self._serves_our_tsdb()
        except (OSError, ValueError, PrometheusError):
            ours = False
        if not ours:
            self._port = saved
            return False
        self._adopted_pid = pid
        return True

    @property
    def targets_configured(self) -> tuple[ScrapeTarget, ...]:
        """The targets last given to `set_targets`."""
        return self._targets

    # --- config

    def _config(self) -> dict[str, Any]:
        interval = _duration(self.scrape_interval_s)
        scrape_configs: list[dict[str, Any]] = [
            {
                "job_name": job,
                "file_sd_configs": [
                    {"files": [str(self._job_file(job))], "refresh_interval": interval}
                ],
            }
            for job in sorted(self._jobs)
        ]
        scrape_configs.extend(dict(c) for c in self.extra_scrape_configs)
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": scrape_configs,
        }
        if self.rule_files:
            config["rule_files"] = [str(p) for p in self.rule_files]
        return config

    def _write_config(self) -> None:
        processes.write_atomic(self.config_path, yaml.safe_dump(self._config(), sort_keys=False))

    def set_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Replace every target. Takes effect at Prometheus's next file_sd read (~instant).

        A job that disappears keeps an empty target file, so only new jobs cost a reload.
        """
        targets = tuple(targets)
        by_job: dict[str, list[ScrapeTarget]] = {}
        for target in targets:
            _check_job_name(target.job)
            by_job.setdefault(target.job, []).append(target)
        new_jobs = set(by_job) - self._jobs
        self._jobs |= new_jobs
        for job in sorted(self._jobs):
            groups = [
                {
                    "targets": [t.address],
                    "labels": {**t.labels, "__metrics_path__": t.metrics_path},
                }
                for t in by_job.get(job, [])
            ]
            # Prometheus watches file_sd files with inotify: a rename is one event with the
            # whole content, where an in-place write could be read half-written.
            processes.write_atomic(self._job_file(job), json.dumps(groups, indent=1))
        self._targets = targets
        if new_jobs or not self.config_path.exists():
            self._write_config()
            if self.running:
                self.reload()

    def reload(self) -> None:
        """Rewrite the config and make Prometheus re-read it and the rule files."""
        self._write_config()
        self._request("POST", "/-/reload")

    # --- process

    def start(self) -> None:
        """Start Prometheus and wait until ``/-/ready`` answers 200."""
        if self.running:
            raise PrometheusError(f"already running at {self.url}")
        binary = find_prometheus(self.binary)
        if binary is None:
            raise PrometheusNotFound(f"Prometheus binary {self.binary!r} not found; {INSTALL_HINT}")
        if self._port == 0:
            self._port = processes.free_port(self.host)
        self._write_config()
        self.tsdb_path.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.tsdb_path}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address={self.host}:{self._port}",
            "--web.enable-lifecycle",
        ]
        self._process, _ = processes.start_logged(
            command,
            self.log_path,
            header=f"--- servectl: {' '.join(command)}\n",
            cwd=self.data_dir,
            new_session=self.detach,
        )
        if self.detach:
            processes.write_atomic(self.pid_path, f"{self._process.pid} {self._port}\n")
        try:
            self._wait_ready(self.start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = _now() + timeout_s
        while True:
            process = self._process
            assert process is not None
            if process.poll() is not None:
                tail = self.log_tail()
                kind = (
                    PrometheusPortInUse
                    if "address already in use" in tail.rsplit("--- servectl:", 1)[-1]
                    else PrometheusStartError
                )
                raise kind(
                    f"Prometheus exited with code {process.returncode} while starting on "
                    f"port {self._port}; last lines of {self.log_path}:\n{tail}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1.0) as response:
                    ready = response.status == 200
                # Whoever answers must be this process, not another one on the port.
                if ready and self._serves_our_tsdb():
                    return
            except (OSError, ValueError, PrometheusError):
                pass  # not listening yet, or 503 while the TSDB opens
            if _now() > deadline:
                raise PrometheusStartError(
                    f"Prometheus on port {self._port} not ready after {timeout_s:g} s; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _serves_our_tsdb(self) -> bool:
        flags = self._api_data("/api/v1/status/flags")
        return isinstance(flags, dict) and flags.get("storage.tsdb.path") == str(self.tsdb_path)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (Prometheus flushes and closes the TSDB), then SIGKILL after timeout_s."""
        process, self._process = self._process, None
        adopted, self._adopted_pid = self._adopted_pid, None
        if adopted is not None and processes.alive(adopted):
            os.kill(adopted, signal.SIGTERM)
            deadline = _now() + timeout_s
            while processes.alive(adopted) and _now() < deadline:
                time.sleep(_POLL_S)
            if processes.alive(adopted):
                os.kill(adopted, signal.SIGKILL)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self) -> None:
        """Stop and start again on the same port and data directory (the data survives)."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 20) -> str:
        return processes.log_tail(self.log_path, lines)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.url}" if self.running else "stopped"
        return f"PrometheusServer({str(self.data_dir)!r}, {state})"

    # --- HTTP API

    def _request(
        self, method: str, path: str, params: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        url = f"{self.url}{path}"
        data: bytes | None = None
        if params and method == "GET":
            url = f"{url}?{urllib.parse.urlencode(params)}"
        elif params:
            data = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as error:
            # The API puts the reason (e.g. a PromQL parse error) in the JSON body of a 4xx.
            body = error.read()
            try:
                payload = json.loads(body)
            except ValueError:
                raise PrometheusError(
                    f"{method} {path}: HTTP {error.code}: {body[:500]!r}"
                ) from error
            if isinstance(payload, dict) and payload.get("status") == "error":
                raise PrometheusQueryError(
                    f"{payload.get('errorType')}: {payload.get('error')}"
                ) from error
            raise PrometheusError(f"{method} {path}: HTTP {error.code}") from error
        if not path.startswith("/api/"):
            return {}
        payload = json.loads(body)
        if not isinstance(payload, dict):
            raise PrometheusError(f"{method} {path}: unexpected answer {body[:200]!r}")
        return payload

    def _api_data(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        payload = self._request("GET", path, params)
        if payload.get("status") != "success":
            raise PrometheusQueryError(f"{payload.get('errorType')}: {payload.get('error')}")
        return payload.get("data")

    def query(self, promql: str, *, at: float | None = None) -> list[Sample]:
        """An instant query (at ``at`` unix seconds, default now): vector or scalar result."""
        params = {"query": promql}
        if at is not None:
            params["time"] = repr(at)
        data = self._api_data("/api/v1/query", params)
        result_type = data.get("resultType")
        result = data.get("result")
        if result_type == "scalar":
            return [Sample({}, float(result[1]), float(result[0]))]
        if result_type != "vector":
            raise PrometheusQueryError(
                f"query() expects an instant vector or scalar, got {result_type}: {promql}"
            )
        return [
            Sample(_str_map(item.get("metric")), float(item["value"][1]), float(item["value"][0]))
            for item in result
        ]

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[Series]:
        """A range query between unix seconds ``start`` and ``end``."""
        params = {"query": promql, "start": repr(start), "end": repr(end), "step": repr(step_s)}
        data = self._api_data("/api/v1/query_range", params)
        return [
            Series(
                _str_map(item.get("metric")),
                tuple((float(t), float(v)) for t, v in item.get("values", [])),
            )
            for item in data.get("result", [])
        ]

    def targets(self) -> list[TargetHealth]:
        """The active targets and their health."""
        data = self._api_data("/api/v1/targets", {"state": "active"})
        return [
            TargetHealth(
                job=str(item.get("scrapePool", "")),
                scrape_url=str(item.get("scrapeUrl", "")),
                labels=_str_map(item.get("labels")),
                health=str(item.get("health", "")),
                last_error=str(item.get("lastError", "")),
            )
            for item in data.get("activeTargets", [])
        ]

    def _wait(self, what: str, timeout_s: float, check: Callable[[], tuple[bool, str]]) -> None:
        deadline = _now() + timeout_s
        while True:
            done, state = check()
            if done:
                return
            if _now() > deadline:
                raise PrometheusTimeout(
                    f"timed out after {timeout_s:g} s waiting for {what}; {state}"
                )
            time.sleep(_POLL_S)

    def wait_for_targets(
        self, n: int, timeout_s: float = 10.0, *, job: str | None = None
    ) -> list[TargetHealth]:
        """Wait until exactly ``n`` active targets (of ``job``, if given) exist and are up.

        Exactly, so that it also waits for removed targets to go away.
        """
        found: list[TargetHealth] = []

        def check() -> tuple[bool, str]:
            nonlocal found
            found = [t for t in self.targets() if job is None or t.job == job]
            up = [t for t in found if t.health == "up"]
            state = ", ".join(
                f"{t.job} {t.scrape_url} {t.health}"
                + (f" ({t.last_error})" if t.last_error else "")
                for t in found
            )
            return len(up) == n == len(found), f"active targets: [{state}]"

        self._wait(f"{n} active targets up" + (f" in job {job}" if job else ""), timeout_s, check)
        return found

    def wait_for_series(self, promql: str, timeout_s: float = 10.0) -> list[Sample]:
        """Wait until an instant query returns at least one sample; return them."""
        samples: list[Sample] = []

        def check() -> tuple[bool, str]:
            nonlocal samples
            samples = self.query(promql)
            return bool(samples), "the query still returns nothing"

        self._wait(f"samples of {promql}", timeout_s, check)
        return samples
