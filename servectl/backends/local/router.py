"""HAProxy as the local runtime's router: stable front ports per service, exact weighted
splits between revisions, least-outstanding-requests within one, changed at runtime.

The controller calls :meth:`Router.apply` every tick with the full desired routing
(level-triggered); the router reads what HAProxy runs now through its runtime API and sends
only the commands that differ, none when nothing changed. The routing design (slots, the
counter + map split, the A/B match map) is in the pure core, which plans the routes
(:mod:`~servectl.backends.local.router_model`), renders the config and maps
(:mod:`~servectl.backends.local.haproxy_config`) and computes the commands
(:mod:`~servectl.backends.local.haproxy_state`) without a process; this module runs the
process and talks to it. docs/local-runtime.md, "The router (HAProxy)", has the
design, the HAProxy 2.6 facts it rests on and measured figures.

Runtime API versus reload. Weights (``prepare/add/commit map``, atomic), A/B values, servers
(``add server`` + ``enable health`` + ``set server state ready``; ``state drain``;
``state maint`` then ``del server`` once idle) are all changed through the stats socket;
the process is reloaded only when the *structure* changes: a service added or removed, its
ports, a larger slot pool, a match header or cookie name, timeouts, the stats port. A
reload (master-worker mode, ``reload`` on the master CLI, listeners handed over with
``expose-fd listeners``) starts a new worker from the files, so every apply also writes the
config and maps describing the whole desired state, servers and drain state included
(a draining server is written with ``weight 0``).

Process lifecycle. :meth:`Router.start` runs ``haproxy -W -S <master socket> -f <config>``
in the foreground as a child in its own session: it survives the controller's death, and a
new :class:`Router` over the same directory adopts it (the pid file names the master, whose
``/proc/<pid>/cmdline`` must hold our config path) without a restart, so traffic flows on
through a controller restart. When the master dies (a worker dying takes the master with
it), :meth:`Router.ensure_running` starts a new one from the files (same ports, servers
and weights) and returns True so that the caller re-applies.

Layout of ``directory``::

    haproxy.cfg      the generated config (HAProxy's own errors name its lines)
    maps/            <ns>.<svc>.weights.map, .slots.map, .match.map
    routes.json      the last applied routes and their slots: start() renders from it
    haproxy.pid      the master's pid
    admin.sock       the runtime API (stats socket, level admin)
    master.sock      the master CLI (reload, show proc)
    haproxy.log      the process's stdout and stderr (appended across restarts)
    .check/          a candidate config and maps while ``haproxy -c`` checks them

The two sockets move to ``$TMPDIR/servectl-haproxy-<hash of directory>/`` when
``directory`` is too long a path for them (HAProxy takes 97 bytes).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from servectl import processes
from servectl.backends.local import haproxy_config, haproxy_state, router_model
from servectl.backends.local.router_model import (
    Endpoint,
    Match,
    RevisionRoute,
    RouteError,
    RouterError,
    ServiceRoute,
    Timeouts,
)

__all__ = [
    "DEFAULT_BINARY",
    "INSTALL_HINT",
    "Endpoint",
    "Match",
    "RevisionRoute",
    "RouteError",
    "Router",
    "RouterError",
    "RouterNotFound",
    "RouterNotRunning",
    "RouterStartError",
    "RuntimeAPI",
    "RuntimeCommandError",
    "ServiceRoute",
    "Timeouts",
    "doctor",
    "find_haproxy",
    "haproxy_version",
]

DEFAULT_BINARY = "haproxy"
INSTALL_HINT = "install it with the Debian package: apt-get install haproxy"
_POLL_S = 0.02
_SOCKET_TIMEOUT_S = 5.0
# HAProxy 2.6 refuses a socket path over 97 bytes ("too long (max 97)"): sun_path is 108
# bytes, and it binds "<path>.<pid>.tmp" first, then renames it into place.
_MAX_UNIX_PATH = 97
_UNSAFE_PATH = re.compile(r"[\s;#'\"\\]")
# Answers of commands that worked; anything else is HAProxy saying why not.
_OK_ANSWERS = (
    "New server registered.",
    "Server deleted.",
    "New version created:",
    "no need to change the addr",
    "IP changed from",
)


class RouterNotFound(RouterError):
    """The ``haproxy`` binary is not installed (or not where ``binary`` says)."""


class RouterStartError(RouterError):
    """HAProxy exited or did not answer in time while starting or reloading; the message
    ends with its log."""


class RouterNotRunning(RouterError):
    """An operation that needs the process found none: call ``ensure_running()`` first."""


class RuntimeCommandError(RouterError):
    """HAProxy refused runtime API commands; the message lists each with HAProxy's answer."""


def find_haproxy(binary: str = DEFAULT_BINARY) -> str | None:
    """The path of the HAProxy binary (a name looked up on PATH, or a path), or None."""
    return shutil.which(binary)


def haproxy_version(binary: str = DEFAULT_BINARY) -> str | None:
    """The version ``haproxy -v`` reports (``2.6.12-1+deb12u4``), or None if it cannot run."""
    path = find_haproxy(binary)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"version\s+(\S+)", done.stdout)
    return found.group(1) if found else None


def doctor(binary: str = DEFAULT_BINARY) -> str:
    """One line for ``servectl doctor``: HAProxy's version and path, or how to install it."""
    path = find_haproxy(binary)
    if path is None:
        return f"HAProxy not found ({binary!r}); {INSTALL_HINT}"
    version = haproxy_version(path)
    if version is None:
        return f"HAProxy at {path} does not run (`{path} -v` failed)"
    return f"HAProxy {version} ({path})"


def _now() -> float:
    # Deadlines for waiting on a child process: this module is an I/O edge, not a policy.
    return time.monotonic()


def _write_if_changed(path: Path, text: str) -> bool:
    """Write atomically (a restart never reads half a file); False when already so."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    processes.write_atomic(path, text)
    return True


def _haproxy_messages(output: str) -> str:
    """HAProxy's alerts and warnings, without its NOTICE banner lines."""
    lines = [line for line in output.splitlines() if line.strip() and "[NOTICE]" not in line]
    return "\n".join(lines) or output.strip()


class RuntimeAPI:
    """One HAProxy CLI socket (the stats socket or the master CLI): a command per connection.

    ``on_command`` sees every command before it is sent (tests count them; reads start
    with ``show`` or ``get``).
    """

    def __init__(
        self,
        path: Path,
        *,
        timeout_s: float = _SOCKET_TIMEOUT_S,
        on_command: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.on_command = on_command

    def send(self, command: str, payload: str | None = None) -> str:
        """Send one command (and a multi-line payload, ``<<`` syntax); return the answer.

        Raises :class:`RouterError` when the socket does not answer.
        """
        if "\n" in command or ";" in command:
            raise RouterError(f"one command at a time, without newlines or ';': {command!r}")
        if self.on_command is not None:
            self.on_command(command)
        data = f"{command}\n"
        if payload is not None:
            data = f"{command} <<\n{payload.rstrip(chr(10))}\n\n"
        chunks: list[bytes] = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(str(self.path))
                sock.sendall(data.encode())
                # The master CLI answers once the command is complete, i.e. at end of input.
                sock.shutdown(socket.SHUT_WR)
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
        except OSError as error:
            raise RouterError(
                f"HAProxy's runtime API at {self.path} did not answer {command.split()[0]!r}: "
                f"{error}"
            ) from error
        return b"".join(chunks).decode(errors="replace")


def socket_dir_for(directory: Path) -> Path | None:
    """None when HAProxy's sockets fit in ``directory`` (and in its ``.check/``, where a
    candidate config is checked); else a short directory of their own under the temporary
    directory, named after a hash of ``directory`` so that a later controller finds the
    same sockets (adoption)."""
    if len(str(directory / ".check" / "master.sock").encode()) <= _MAX_UNIX_PATH:
        return None
    digest = hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"servectl-haproxy-{digest}"


class Router:
    """HAProxy in front of the local runtime's replicas (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        stats_port: int,
        binary: str = DEFAULT_BINARY,
        timeouts: Timeouts | None = None,
        start_timeout_s: float = 10.0,
        on_command: Callable[[str], None] | None = None,
    ) -> None:
        """``stats_port`` serves ``/metrics`` (Prometheus) and ``/stats``; ``on_command``
        sees every runtime API command (reads included) before it is sent."""
        directory = Path(directory).resolve()
        self.settings = haproxy_config.Settings(
            directory=directory,
            stats_port=stats_port,
            timeouts=timeouts or Timeouts(),
            socket_dir=socket_dir_for(directory),
        )
        self.binary = binary
        self.start_timeout_s = start_timeout_s
        if _UNSAFE_PATH.search(str(self.settings.directory)):
            raise RouterError(
                f"router directory {str(self.settings.directory)!r}: HAProxy's config and "
                "runtime API cannot take spaces, quotes, '#', ';' or '\\' in paths; use "
                "another directory"
            )
        for sock in (self.settings.admin_socket, self.settings.master_socket):
            if len(str(sock).encode()) > _MAX_UNIX_PATH:
                raise RouterError(
                    f"{sock} is longer than HAProxy takes for a unix socket ({_MAX_UNIX_PATH} "
                    "bytes), and so is the temporary directory's fallback: use a shorter "
                    "state directory (--state-dir) or TMPDIR"
                )
        timeouts_ = self.settings.timeouts
        for seconds in (timeouts_.connect_s, timeouts_.client_s, timeouts_.server_s):
            haproxy_config.ms(seconds)  # fail early on a bad timeout
        haproxy_config.ms(timeouts_.check_interval_s)
        self._admin = RuntimeAPI(self.settings.admin_socket, on_command=on_command)
        self._master = RuntimeAPI(self.settings.master_socket, on_command=on_command)
        self._process: subprocess.Popen[bytes] | None = None
        self.reloads = 0
        """Reloads this object has done (structure changes)."""
        self.last_changes: tuple[str, ...] = ()
        """The change commands the last apply sent (empty when HAProxy already agreed)."""
        self.deferred: tuple[str, ...] = ()
        """Commands the last apply could not do yet (``del server`` of a busy server)."""

    # --- paths and addresses

    @property
    def directory(self) -> Path:
        return self.settings.directory

    @property
    def config_path(self) -> Path:
        return self.settings.config_path

    @property
    def log_path(self) -> Path:
        return self.settings.log_path

    @property
    def metrics_address(self) -> str:
        """``host:port`` of the Prometheus exporter (``/metrics``), for the scrape config."""
        return f"127.0.0.1:{self.settings.stats_port}"

    # --- process

    def _is_ours(self, pid: int) -> bool:
        """Whether ``pid`` is a live (not zombie) HAProxy started with our config."""
        if not processes.alive(pid):
            return False
        args = processes.command_line(pid)
        if args is None:
            return False
        config = str(self.config_path).encode()
        pairs = itertools.pairwise(args)
        return b"-c" not in args and any(a == b"-f" and b == config for a, b in pairs)

    def processes(self) -> list[int]:
        """Pids of every HAProxy process of this router: master, worker, old workers."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._is_ours(int(entry.name)):
                pids.append(int(entry.name))
        return pids

    @property
    def pid(self) -> int | None:
        """The master's pid while HAProxy runs (started or adopted), else None."""
        if self._process is not None and self._process.poll() is not None:
            self._process = None  # reaped
        recorded = processes.read_pidfile(self.settings.pid_path)
        if recorded is None:
            return None
        pid = recorded[0]
        return pid if self._is_ours(pid) else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def _binary_path(self) -> str:
        path = find_haproxy(self.binary)
        if path is None:
            raise RouterNotFound(f"HAProxy binary {self.binary!r} not found; {INSTALL_HINT}")
        return path

    def log_tail(self, lines: int = 20) -> str:
        return processes.log_tail(self.log_path, lines)

    def start(self) -> None:
        """Start HAProxy from the last applied routes (``routes.json``), or with none.

        Raises :class:`RouterNotFound`, :class:`RouterError` (HAProxy refuses the config:
        its own message) or :class:`RouterStartError` (it exited or did not answer).
        """
        if self.running:
            raise RouterError(
                f"HAProxy is already running for {self.directory} (pid {self.pid}); "
                "use it, or stop() it first"
            )
        binary = self._binary_path()
        self._kill(self.processes())  # workers of a master that was killed
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.settings.socket_dir is not None:
            try:
                self.settings.socket_dir.mkdir(mode=0o700, exist_ok=True)
            except OSError as exc:
                raise RouterError(
                    f"cannot make {self.settings.socket_dir} for HAProxy's sockets "
                    f"({self.directory} is too long a path for them): {exc.strerror or exc}"
                ) from exc
        plans = self._load_plans()
        self._verify(plans, binary)
        rendered = haproxy_config.render(plans, self.settings)
        self._write(plans, rendered)
        command = [
            binary,
            "-W",
            "-S",
            f"{self.settings.master_socket},mode,600",
            "-f",
            str(self.config_path),
            "-p",
            str(self.settings.pid_path),
        ]
        self.settings.pid_path.unlink(missing_ok=True)
        # Its own session: a signal to the controller's process group (Ctrl-C, a kill of
        # the group) does not reach it, and it outlives the controller.
        self._process, _ = processes.start_logged(
            command,
            self.log_path,
            header=f"--- servectl: {' '.join(command)}\n",
            cwd=self.directory,
        )
        try:
            self._wait_for(rendered.structure, "start", old_worker=None, failed_before=None)
        except BaseException:
            self.stop(timeout_s=1.0)
            raise

    def _worker_pid(self) -> int | None:
        try:
            found = re.search(r"^Pid:\s*(\d+)", self._admin.send("show info"), re.MULTILINE)
        except RouterError:
            return None
        return int(found.group(1)) if found else None

    def _structure(self) -> str | None:
        try:
            return haproxy_state.parse_var(self._admin.send("get var proc.servectl_structure"))
        except RouterError:
            return None

    def _failed_reloads(self) -> int | None:
        try:
            found = re.search(r"master\s+\d+\s+\[failed:\s*(\d+)\]", self._master.send("show proc"))
        except RouterError:
            return None
        return int(found.group(1)) if found else None

    def _wait_for(
        self, structure: str, what: str, *, old_worker: int | None, failed_before: int | None
    ) -> None:
        """Wait until a worker other than ``old_worker`` answers with ``structure``; fail
        when the master counts more failed reloads than ``failed_before``."""
        deadline = _now() + self.start_timeout_s
        confirmed = 0
        while True:
            if not self.running and (self._process is None or self._process.poll() is not None):
                raise RouterStartError(
                    f"HAProxy exited during {what}; last lines of {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            worker = self._worker_pid()
            if worker is not None and worker != old_worker and self._structure() == structure:
                # Twice: right after a reload the old worker may still take one connection.
                confirmed += 1
                if confirmed >= 2:
                    return
            else:
                confirmed = 0
            if failed_before is not None:
                failed = self._failed_reloads()
                if failed is not None and failed > failed_before:
                    raise RouterError(
                        f"HAProxy refused the new config on reload (the old one still "
                        f"serves); last lines of {self.log_path}:\n{self.log_tail()}"
                    )
            if _now() > deadline:
                raise RouterStartError(
                    f"HAProxy did not answer on {self.settings.admin_socket} within "
                    f"{self.start_timeout_s:g} s of {what}; last lines of {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _verify(self, plans: Sequence[router_model.ServicePlan], binary: str | None = None) -> None:
        """``haproxy -c`` on the config ``plans`` render to, written in a scratch directory
        first, so that a config HAProxy refuses never replaces the live files (a restart
        would fail on it). Raises :class:`RouterError` with HAProxy's own message."""
        scratch = self.directory / ".check"
        shutil.rmtree(scratch, ignore_errors=True)
        settings = replace(self.settings, directory=scratch)
        rendered = haproxy_config.render(plans, settings)
        settings.maps_dir.mkdir(parents=True)
        for path, entries in rendered.maps.items():
            path.write_text(haproxy_config.map_text(entries), encoding="utf-8")
        settings.config_path.write_text(rendered.config, encoding="utf-8")
        done = subprocess.run(
            [binary or self._binary_path(), "-c", "-f", str(settings.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=scratch,
        )
        shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode != 0:
            messages = _haproxy_messages(done.stdout + done.stderr).replace(
                str(settings.config_path), str(self.config_path)
            )
            raise RouterError(f"HAProxy refuses the config for {self.config_path}:\n{messages}")

    def _kill(self, pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        deadline = _now() + timeout_s
        while True:
            if self._process is not None and self._process.pid == pid:
                try:
                    self._process.wait(timeout=_POLL_S)
                    return True
                except subprocess.TimeoutExpired:
                    pass
            elif not self._is_ours(pid):
                return True
            else:
                time.sleep(_POLL_S)
            if _now() > deadline:
                return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop HAProxy: a soft stop (listeners close, in-flight requests finish) for up to
        ``timeout_s``, then SIGKILL to every process of it. Works on an adopted process."""
        pid = self.pid
        if pid is not None:
            self._kill([pid], signal.SIGUSR1)
            if not self._wait_gone(pid, timeout_s):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self._kill([pid])
                self._wait_gone(pid, 5.0)
        self._kill(self.processes())
        if self._process is not None:
            self._process.poll()
            self._process = None
        self.settings.pid_path.unlink(missing_ok=True)
        if self.settings.socket_dir is not None:  # our own directory: nothing else is there
            shutil.rmtree(self.settings.socket_dir, ignore_errors=True)

    def ensure_running(self) -> bool:
        """Start HAProxy if it is not running; True when it had to (the caller re-applies)."""
        if self.running:
            return False
        self.start()
        return True

    # --- files

    def _load_plans(self) -> list[router_model.ServicePlan]:
        try:
            text = self.settings.routes_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            return router_model.plans_from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as error:
            # Written atomically by apply, so this is a hand edit: start empty; the
            # controller's next apply brings the routes back.
            with self.log_path.open("a", encoding="utf-8") as log:
                log.write(f"--- servectl: ignored {self.settings.routes_path}: {error}\n")
            return []

    def _write(
        self, plans: Sequence[router_model.ServicePlan], rendered: haproxy_config.Rendered
    ) -> None:
        """Write routes.json, the maps and the config where they changed (atomically)."""
        maps_dir = self.settings.maps_dir
        maps_dir.mkdir(parents=True, exist_ok=True)
        routes = json.dumps(router_model.plans_to_json(plans), indent=1) + "\n"
        _write_if_changed(self.settings.routes_path, routes)
        for path, entries in rendered.maps.items():
            _write_if_changed(path, haproxy_config.map_text(entries))
        for stale in maps_dir.glob("*.map"):
            if stale not in rendered.maps:
                stale.unlink(missing_ok=True)
        # A crash between these writes is harmless: start() renders config and maps again
        # from routes.json, and a reload happens only after the config is written.
        _write_if_changed(self.config_path, rendered.config)

    # --- runtime state

    def _require_running(self) -> None:
        if not self.running:
            raise RouterNotRunning(
                f"HAProxy is not running for {self.directory}: call ensure_running() first"
            )

    def _observe(self) -> haproxy_state.RuntimeState:
        structure = self._structure()
        layout = haproxy_config.parse_layout(
            haproxy_state.parse_var(self._admin.send("get var proc.servectl_layout")) or ""
        )
        servers = haproxy_state.parse_servers(
            self._admin.send("show servers state"), self._admin.send("show stat")
        )
        maps: dict[str, haproxy_config.MapEntries] = {}
        for (namespace, service), entry in layout.items():
            names = self.settings.names(namespace, service)
            paths = [names.weights_map, names.slots_map]
            if entry.match_kind is not None:
                paths.append(names.match_map)
            for path in paths:
                answer = self._admin.send(f"show map {path}")
                if not answer.startswith("Unknown"):
                    maps[str(path)] = haproxy_state.parse_map(answer)
        return haproxy_state.RuntimeState(
            structure=structure, layout=layout, servers=servers, maps=maps
        )

    def _plan(
        self, routes: Sequence[ServiceRoute], observed: haproxy_state.RuntimeState
    ) -> list[router_model.ServicePlan]:
        plans = []
        for route in routes:
            names = self.settings.names(route.namespace, route.service)
            entry = observed.layout.get(route.key)
            count = entry.slot_count if entry is not None else 0
            plans.append(
                router_model.plan_service(
                    route,
                    previous=observed.slots_of(names) if entry is not None else {},
                    slot_count=count,
                    busy=observed.busy_slots(names, count),
                )
            )
        return plans

    def apply(
        self, routes: Sequence[ServiceRoute], *, observed: haproxy_state.RuntimeState | None = None
    ) -> None:
        """Converge HAProxy to ``routes`` (every service it should serve); idempotent.

        Writes the config and maps, reloads only for a structure change, then sends the
        runtime commands that differ. Raises :class:`RouteError` for invalid routes (nothing
        changed), :class:`RouterNotRunning`, :class:`RouterError` when HAProxy refuses the
        config, :class:`RuntimeCommandError` when it refuses commands.

        ``observed``: a reading of :meth:`observe` taken since the last apply, so that a
        controller that reads HAProxy at the start of its tick does not read it twice. Only
        apply and a restart change HAProxy's state, so the reading is still true, unless
        HAProxy restarted since (read again then); the next apply corrects a stale one.
        """
        routes = tuple(routes)
        router_model.validate(routes, stats_port=self.settings.stats_port)
        self._require_running()
        if observed is None:
            observed = self._observe()
        plans = self._plan(routes, observed)
        rendered = haproxy_config.render(plans, self.settings)
        if observed.structure != rendered.structure:
            # Before any file changes: a refused config must not be what a restart loads.
            self._check_ports_free(routes, observed)
            self._verify(plans)
        self._write(plans, rendered)
        if observed.structure != rendered.structure:
            self._reload(rendered.structure)
            observed = self._observe()
        self._send(haproxy_state.converge(rendered.runtime, observed))

    def _check_ports_free(
        self, routes: Sequence[ServiceRoute], observed: haproxy_state.RuntimeState
    ) -> None:
        """Refuse front ports that another process holds, before a reload would fail on them.

        Ports the running HAProxy binds already are skipped (it binds with SO_REUSEPORT and
        hands them to the new worker); a race with another process is still possible, and
        then the reload fails with HAProxy's message.
        """
        held = {e.rest_port for e in observed.layout.values()}
        held |= {e.grpc_port for e in observed.layout.values()}
        held.add(self.settings.stats_port)
        for route in routes:
            for port, proto in ((route.rest_port, "REST"), (route.grpc_port, "gRPC")):
                if port in held:
                    continue
                # As HAProxy binds: a port whose last connections linger in TIME_WAIT
                # (a service deleted and deployed again) is free to it.
                error = processes.bind_error(port)
                if error is not None:
                    raise RouteError(
                        f"service {route.namespace}/{route.service}: {proto} front port "
                        f"{port} is taken by another process ({error.strerror}); "
                        "free it or choose another port"
                    ) from error

    def _reload(self, structure: str) -> None:
        old_worker = self._worker_pid()
        failed_before = self._failed_reloads()
        # The master re-executes itself and may drop the connection before answering.
        with contextlib.suppress(RouterError):
            self._master.send("reload")
        self._wait_for(structure, "reload", old_worker=old_worker, failed_before=failed_before)
        self.reloads += 1

    def _send(self, changes: Sequence[haproxy_state.Change]) -> None:
        sent: list[str] = []
        deferred: list[str] = []
        refused: list[str] = []

        def run(command: str, payload: str | None = None, *, deferrable: bool = False) -> str:
            answer = self._admin.send(command, payload).strip()
            sent.append(command)
            if answer and not answer.startswith(_OK_ANSWERS):
                (deferred if deferrable else refused).append(f"{command}: {answer}")
            return answer

        for change in changes:
            if isinstance(change, haproxy_state.Command):
                run(change.line, deferrable=change.deferrable)
                continue
            answer = run(f"prepare map {change.path}")
            version = re.search(r"New version created:\s*(\d+)", answer)
            if version is None:
                continue
            at = f"@{version.group(1)} {change.path}"
            if change.entries:
                run(f"add map {at}", haproxy_config.map_text(change.entries))
            run(f"commit map {at}")
        self.last_changes = tuple(sent)
        self.deferred = tuple(deferred)
        if refused:
            raise RuntimeCommandError(
                "HAProxy refused runtime commands (the next apply retries them):\n"
                + "\n".join(refused)
            )

    def inflight(self) -> dict[tuple[str, str, str], int]:
        """Outstanding requests (in progress + queued, REST + gRPC) per
        ``(namespace, service, endpoint)``, for every server HAProxy has, draining and
        leaving ones included: stop a replica's process once its count is 0."""
        self._require_running()
        counts: dict[tuple[str, str, str], int] = {}
        servers = haproxy_state.parse_servers(
            self._admin.send("show servers state"), self._admin.send("show stat")
        )
        for backend, by_name in servers.items():
            slot = haproxy_config.parse_slot_backend(backend)
            if slot is None:
                continue
            for name, state in by_name.items():
                key = (slot.namespace, slot.service, name)
                counts[key] = counts.get(key, 0) + state.outstanding
        return counts

    def observe(self) -> haproxy_state.RuntimeState:
        """HAProxy's runtime state now (layout, servers, maps): for :meth:`actual` and
        :meth:`apply`, read once a tick."""
        self._require_running()
        return self._observe()

    def actual(
        self, observed: haproxy_state.RuntimeState | None = None
    ) -> dict[tuple[str, str], ServiceRoute]:
        """What HAProxy routes now, read back from its runtime API (or from ``observed``,
        a reading of :meth:`observe`).

        Weights are counted in the weights map, revision names come from the slots map,
        endpoints from the slot backends' servers (those in maintenance, on their way out,
        are left out), in slot order and by name.
        """
        if observed is None:
            observed = self.observe()
        return haproxy_state.actual_routes(observed, self.settings)

    def describe(self) -> str:
        """One line for ``servectl doctor`` and ``status``."""
        path = find_haproxy(self.binary)
        if path is None:
            return f"router: HAProxy not found ({self.binary!r}); {INSTALL_HINT}"
        version = haproxy_version(path) or "(version unknown)"
        pid = self.pid
        if pid is None:
            return f"router: HAProxy {version} ({path}), not running ({self.directory})"
        worker = self._worker_pid()
        return (
            f"router: HAProxy {version} ({path}), running: master pid {pid}, worker pid "
            f"{worker if worker is not None else '?'}, metrics at "
            f"http://{self.metrics_address}/metrics"
        )

    def __repr__(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        return f"Router({str(self.directory)!r}, {state})"
