"""``servectl up``, ``down``, ``status``, ``doctor``: the local runtime on this machine.

``up`` starts the controller as a background process (``servectl controller``), which
brings up (or adopts) HAProxy, Prometheus and the replicas, and ticks every second;
``down`` stops it and everything it runs. Everything lives under one state directory
(``--state-dir``, ``$SERVECTL_STATE_DIR``, default ``~/.servectl``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servectl import processes
from servectl.cli import console
from servectl.cli.console import Output, err, fail, out

if TYPE_CHECKING:
    from servectl.backends.local.client import LocalClient

STATE_DIR_HELP = (
    "The local runtime's directory (store, replicas, HAProxy, Prometheus, logs). "
    "Default: $SERVECTL_STATE_DIR, else ~/.servectl."
)
StateDirOption = Annotated[
    Path | None, typer.Option("--state-dir", help=STATE_DIR_HELP, file_okay=False)
]
UP_TIMEOUT_S = 90.0


def state_dir(value: Path | None) -> Path:
    from servectl.backends.local.paths import default_state_dir

    return (value or default_state_dir()).expanduser().resolve()


def _client(directory: Path) -> LocalClient:
    from servectl.backends.local.client import LocalClient
    from servectl.backends.local.store import StoreError

    try:
        return LocalClient(directory)
    except StoreError as exc:
        raise fail(str(exc), 1) from None


def up(
    state: StateDirOption = None,
    foreground: Annotated[
        bool,
        typer.Option(
            "--foreground", help="Run the controller in this terminal (Ctrl-C stops all)."
        ),
    ] = False,
    rest_port: Annotated[
        int | None,
        typer.Option(
            "--rest-port",
            metavar="N",
            help="Where services' ports start: the first service gets REST port N and gRPC "
            "port N-1, the next N+2 and N+1, and so on (the first free pair); each keeps "
            "its pair for life. Kept in the state directory; applies to services given "
            "ports after it. Default: 8501 (gRPC 8500), TF Serving's defaults.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start the local runtime: the controller, HAProxy, Prometheus (idempotent).

    Then deploy a model with `servectl deploy`, see it with `servectl get`, and stop
    everything with `servectl down`. Example:

    \b
      servectl up
      servectl model export-demo ~/models
      servectl deploy cost --model-path ~/models/cost_model --max 4
      curl -d '{"instances": [[1,2,3,4,5,6,7,8]]}' \\
          localhost:8501/v1/models/cost_model:predict

    8501 is the first service's REST port when it is free (else the next free pair, or
    where --rest-port says): deploy prints the ports the service got.
    """
    from servectl.backends.local import front_ports

    directory = state_dir(state)
    problems = _missing_binaries()
    if problems:
        raise fail("; ".join(problems), 1)
    if rest_port is not None:
        try:
            front_ports.check_first_rest(rest_port)
        except ValueError as exc:
            raise fail(str(exc)) from None
        client = _client(directory)
        try:
            front_ports.set_first_rest(client.store, rest_port)
        finally:
            client.close()
    if foreground:
        controller(state=directory)
        return
    client = _client(directory)
    try:
        info = client.controller()
        first = front_ports.first_rest(client.store)
        if info.alive:
            out.print(f"already up: controller pid {info.pid} ({directory})", highlight=False)
            out.print(_ports_line(first), highlight=False)
            return
        started = time.time()
        log_path = directory / "controller.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "servectl", "controller", "--state-dir", str(directory)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        err.print(
            f"starting the controller (pid {process.pid}, log {log_path}) ...", highlight=False
        )
        deadline = time.monotonic() + UP_TIMEOUT_S
        while True:
            beat = client.store.get_setting("heartbeat") or {}
            if float(beat.get("time", 0)) >= started and beat.get("pid") == process.pid:
                break
            if process.poll() is not None:
                raise fail(
                    f"the controller exited with code {process.returncode}; last lines of "
                    f"{log_path}:\n{processes.log_tail(log_path, 15).rstrip()}",
                    1,
                )
            if time.monotonic() > deadline:
                raise fail(
                    f"the controller did not tick within {UP_TIMEOUT_S:g} s; see {log_path}", 1
                )
            time.sleep(0.2)
        ports = client.store.get_setting("ports") or {}
        out.print(f"up: controller pid {process.pid}, state in {directory}", highlight=False)
        out.print(
            f"  prometheus http://127.0.0.1:{ports.get('prometheus')}   "
            f"haproxy stats http://127.0.0.1:{ports.get('haproxy_stats')}/stats",
            highlight=False,
        )
        out.print(_ports_line(first), highlight=False)
    finally:
        client.close()


def _ports_line(first_rest: int) -> str:
    return (
        f"  services get REST port {first_rest} and gRPC {first_rest - 1} (the first free "
        "pair; then +2 each); `servectl deploy` prints a service's"
    )


def _missing_binaries() -> list[str]:
    missing = []
    if shutil.which("haproxy") is None:
        missing.append("haproxy not found: apt-get install haproxy")
    if shutil.which("prometheus") is None:
        missing.append("prometheus not found: apt-get install prometheus")
    return missing


_K8S = "Kubernetes (--kubernetes)"


def controller(
    state: StateDirOption = None,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            help="Run the in-cluster controller: watch ModelServices in a cluster (in a pod, "
            "or from --kubeconfig) instead of the local runtime.",
            rich_help_panel=_K8S,
        ),
    ] = False,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            help="Kubeconfig file (default: in-cluster, else $KUBECONFIG).", rich_help_panel=_K8S
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option(help="Kubeconfig context.", rich_help_panel=_K8S)
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Watch only this namespace (repeatable; default: every namespace).",
            rich_help_panel=_K8S,
        ),
    ] = None,
    prometheus_url: Annotated[
        str | None,
        typer.Option(
            help="Prometheus that scrapes TF Serving, cAdvisor and kube-state-metrics "
            "(without it every service holds: metrics missing).",
            rich_help_panel=_K8S,
        ),
    ] = None,
    traffic: Annotated[
        str,
        typer.Option(
            help="gateway: HTTPRoute/GRPCRoute weights (Gateway API); service: one "
            "Service over every revision, split by replica ratio.",
            rich_help_panel=_K8S,
        ),
    ] = "gateway",
    gateway: Annotated[
        str | None,
        typer.Option(
            help="The Gateway routes attach to, NAME or NAMESPACE/NAME (required with "
            "--traffic gateway).",
            rich_help_panel=_K8S,
        ),
    ] = None,
    http_listener: Annotated[
        str | None,
        typer.Option(
            help="The Gateway listener (sectionName) REST routes attach to (default: every "
            "listener that takes them).",
            rich_help_panel=_K8S,
        ),
    ] = None,
    grpc_listener: Annotated[
        str | None,
        typer.Option(
            help="The Gateway listener gRPC routes attach to: one of its own lets gRPC "
            "through without hostnames.",
            rich_help_panel=_K8S,
        ),
    ] = None,
    hostnames: Annotated[
        str | None,
        typer.Option(
            help="REST hostname of services without spec.routing.hostnames, a pattern "
            "such as '{name}.{namespace}.models.example.com'.",
            rich_help_panel=_K8S,
        ),
    ] = None,
    grpc_hostnames: Annotated[
        str | None,
        typer.Option(
            help="gRPC hostname of services without spec.routing.grpcHostnames, e.g. "
            "'{name}-grpc.{namespace}.models.example.com'.",
            rich_help_panel=_K8S,
        ),
    ] = None,
    leader_elect: Annotated[
        bool, typer.Option(help="Only the Lease holder acts.", rich_help_panel=_K8S)
    ] = True,
    lease_name: Annotated[
        str, typer.Option(help="The Lease's name.", rich_help_panel=_K8S)
    ] = "servectl-controller",
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            help="The Lease's namespace (default: $POD_NAMESPACE, else default).",
            rich_help_panel=_K8S,
        ),
    ] = None,
    probe_port: Annotated[
        int, typer.Option(help="Serves /healthz and /readyz.", rich_help_panel=_K8S)
    ] = 8081,
    metrics_port: Annotated[
        int, typer.Option(help="Serves /metrics.", rich_help_panel=_K8S)
    ] = 8080,
    period: Annotated[
        float, typer.Option(help="Seconds between reconcile cycles.", rich_help_panel=_K8S)
    ] = 5.0,
    rate_window: Annotated[
        str,
        typer.Option(
            help="PromQL range of the controller's rate() queries, at least 4 of your "
            "Prometheus' scrape intervals (30s with 5 s scrapes: faster, noisier).",
            rich_help_panel=_K8S,
        ),
    ] = "1m",
) -> None:
    """Run a controller in the foreground: the local runtime's (what `servectl up` starts),
    or with --kubernetes the in-cluster one."""
    if kubernetes:
        from servectl.cli.kube_cmd import run_controller

        run_controller(
            kubeconfig=kubeconfig,
            context=context,
            namespaces=list(namespace or []),
            prometheus_url=prometheus_url,
            rate_window=rate_window,
            traffic=traffic,
            gateway=gateway,
            http_listener=http_listener,
            grpc_listener=grpc_listener,
            hostnames=hostnames,
            grpc_hostnames=grpc_hostnames,
            leader_elect=leader_elect,
            lease_name=lease_name,
            lease_namespace=lease_namespace,
            probe_port=probe_port,
            metrics_port=metrics_port,
            period=period,
        )
        return
    import logging

    from servectl.backends.local.runtime import Runtime, install_signal_handlers
    from servectl.backends.local.store import StoreError

    directory = state_dir(state)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        runtime = Runtime(directory)
    except StoreError as exc:
        raise fail(str(exc), 1) from None
    runtime.paths.pid.write_text(f"{os.getpid()}\n")
    install_signal_handlers(runtime)
    try:
        runtime.start()
        logging.getLogger("servectl.runtime").info("controller up in %s", directory)
        runtime.run()
    finally:
        logging.getLogger("servectl.runtime").info("stopping replicas, HAProxy, Prometheus")
        runtime.shutdown()
        runtime.close()
        with contextlib.suppress(OSError):
            runtime.paths.pid.unlink()


def down(state: StateDirOption = None) -> None:
    """Stop the controller and everything it runs (replicas drain, then stop)."""
    directory = state_dir(state)
    if not (directory / "state.db").exists():
        out.print(f"nothing to stop in {directory}", highlight=False)
        return
    client = _client(directory)
    try:
        if client.stop_controller():
            out.print("down: controller, replicas, HAProxy and Prometheus stopped", highlight=False)
            return
    finally:
        client.close()
    # No controller: whatever a killed one left running is adopted, then stopped.
    from servectl.backends.local.runtime import Runtime

    runtime = Runtime(directory)
    try:
        left = len(runtime.supervisor.replicas())
        runtime.prometheus.adopt()
        runtime.shutdown()
    finally:
        runtime.close()
    out.print(f"down: no controller was running; stopped {left} leftover replicas", highlight=False)


def status(
    state: StateDirOption = None,
    output: console.OutputOption = Output.TABLE,
) -> None:
    """Is the local runtime up: controller, router, Prometheus, services and replicas.

    Exits 0 while the controller runs and ticks; 1 when it is stopped (after `servectl
    down`, a crash, or never started) or no longer ticks, and says so: what the store
    holds is then only what it last saw."""
    from servectl.backends.local.client import HEARTBEAT_STALE_S

    directory = state_dir(state)
    client = _client(directory)
    try:
        info = client.controller()
        ports = client.store.get_setting("ports") or {}
        services = client.services()
        replicas = client.replicas()
        from servectl.backends.local import cgroups

        limits = cgroups.detect().describe()
    finally:
        client.close()
    age = time.time() - info.last_tick if info.last_tick else None
    ticking = info.alive and age is not None and age <= HEARTBEAT_STALE_S
    word = "running" if ticking else "not ticking" if info.alive else "stopped"
    record = {
        "stateDir": str(directory),
        "state": word,
        "controller": {
            "running": info.alive,
            "pid": info.pid,
            "lastTickSecondsAgo": round(age, 1) if age is not None else None,
            "tickSeconds": info.tick_seconds,
            "errors": dict(info.errors),
        },
        # Addresses only while the controller keeps them: after `down` nothing answers.
        "prometheus": (
            f"http://127.0.0.1:{ports['prometheus']}" if ticking and "prometheus" in ports else None
        ),
        "haproxyStats": (
            f"http://127.0.0.1:{ports['haproxy_stats']}/stats"
            if ticking and "haproxy_stats" in ports
            else None
        ),
        "limits": limits,
        "services": len(services),
        "replicas": len(replicas),
    }
    if output.machine:
        console.print_records([record], output)
        if not ticking:
            raise typer.Exit(1)
        return
    if ticking:
        out.print(f"controller: running (pid {info.pid})", highlight=False)
        out.print(
            f"  last tick {age:.1f} s ago, took {info.tick_seconds or 0:.3f} s", highlight=False
        )
    elif info.alive:
        last = f"{age:.0f} s ago" if age is not None else "never"
        out.print(f"controller: NOT TICKING (pid {info.pid}; last tick {last})", highlight=False)
    else:
        last = f"; its last tick was {age:.0f} s ago" if age is not None else ""
        out.print(f"stopped: the controller is not running{last}", highlight=False)
    for key, message in info.errors.items():
        out.print(f"  error in {key}: {message}", highlight=False, markup=False)
    if ticking:
        out.print(f"prometheus: {record['prometheus']}", highlight=False)
        out.print(f"haproxy:    {record['haproxyStats']}", highlight=False)
    out.print(f"limits:     {limits}", highlight=False, markup=False)
    if ticking:
        out.print(f"services:   {len(services)}, replicas: {len(replicas)}", highlight=False)
    else:
        left = f"{len(replicas)} left running (`servectl down` stops them)" if replicas else "0"
        out.print(
            f"services:   {len(services)} (`servectl get` shows them as last seen), "
            f"replicas: {left}",
            highlight=False,
        )
    out.print(f"state:      {directory}", highlight=False)
    if not ticking:
        out.print(
            "start it with: servectl up"
            if not info.alive
            else f"see {directory / 'controller.log'}; `servectl down` then `servectl up`",
            highlight=False,
        )
        raise typer.Exit(1)


def doctor(state: StateDirOption = None) -> None:
    """Check this machine for the local runtime: binaries, cgroups, ports, memory."""
    checks: list[tuple[str, str, str]] = []  # (ok|warn|fail, what, detail)

    def binary(name: str, hint: str) -> None:
        path = shutil.which(name)
        if path is None:
            checks.append(("fail", name, f"not on PATH: {hint}"))
            return
        try:
            version = subprocess.run(
                [path, "-v" if name == "haproxy" else "--version"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            first = (version.stdout or version.stderr).splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            first = "version unknown"
        checks.append(("ok", name, f"{path}: {first}"))

    binary("haproxy", "apt-get install haproxy")
    binary("prometheus", "apt-get install prometheus")
    tfs = shutil.which("tensorflow_model_server")
    if tfs is not None:
        checks.append(("ok", "model server", f"tensorflow_model_server at {tfs}"))
    else:
        import importlib.util

        if importlib.util.find_spec("tensorflow") is not None:
            checks.append(("ok", "model server", "servectl model-server (TensorFlow installed)"))
        else:
            checks.append(
                (
                    "fail",
                    "model server",
                    "no tensorflow_model_server and no TensorFlow: pip install 'servectl[serving]'",
                )
            )
    from servectl.backends.local import cgroups

    setup = cgroups.detect()
    level = "ok" if setup.limits_cpu and setup.limits_memory else "warn"
    checks.append((level, "limits", setup.describe()))
    directory = state_dir(state)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError:
        writable = False
    checks.append(
        (
            "ok" if writable else "fail",
            "state dir",
            f"{directory}" + ("" if writable else " is not writable"),
        )
    )
    cores = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as meminfo:
            avail_kb = next(
                int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable")
            )
        gib = avail_kb / 2**20
        mem = f"{gib:.1f} GiB available, room for about {int(gib / 0.7)} replicas of ~0.7 GiB"
    except (OSError, StopIteration, ValueError):
        mem = "memory unknown"
    checks.append(("ok", "machine", f"{cores} cores, {mem}"))
    marks = {"ok": "[green]ok[/]  ", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
    from rich.markup import escape

    for level, what, detail in checks:
        out.print(f"{marks[level]} {what:<13} {escape(detail)}", highlight=False)
    if any(level == "fail" for level, _, _ in checks):
        raise typer.Exit(1)
