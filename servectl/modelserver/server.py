"""``servectl-model-server``: TF Serving's flags and start-up, serving REST with TensorFlow.

Run it like ``tensorflow_model_server``::

    servectl-model-server --rest_api_port=8501 --model_name=half_plus_two \\
        --model_base_path=/models/half_plus_two

Flags use TF Serving's names; docs/modelserver.md lists each one and what it does here.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from servectl.modelserver.errors import DEFAULT_MAX_REQUEST_BYTES, ServingError

# The REST module imports no TensorFlow at import time; its limits are the flags' defaults.
from servectl.modelserver.rest import DEFAULT_MAX_CONNECTIONS

if TYPE_CHECKING:
    from servectl.modelserver.batching import Batcher

log = logging.getLogger("servectl.modelserver")

# Seconds RPCs in flight get to finish on SIGTERM before gRPC cancels them.
GRPC_GRACE_S = 30.0

_USAGE = """\
servectl-model-server --model_base_path=PATH [--model_name=NAME] [FLAGS]
       servectl-model-server --model_config_file=FILE [FLAGS]"""

_EPILOG = """\
examples:
  # One model, its latest version; gRPC on 8500 (all addresses), REST on 8501:
  servectl-model-server --rest_api_port=8501 \\
      --model_name=half_plus_two --model_base_path=/models/half_plus_two

  # Several models, versions and labels from a ModelServerConfig, on loopback only:
  servectl-model-server --model_config_file=/models/models.config \\
      --grpc_bind_address=127.0.0.1 --rest_api_bind_address=127.0.0.1 --rest_api_port=8501

A port of 0 turns that API off. Flags take TF Serving's names (--flag=value or --flag value);
docs/modelserver.md says what each does here.
"""

PORT_FLAGS = ("port", "rest_api_port")
# Flags that make no sense negative (0 keeps its documented meaning).
NON_NEGATIVE_FLAGS = (
    "rest_api_timeout_in_ms",
    "model_config_file_poll_wait_seconds",
    "tensorflow_intra_op_parallelism",
    "tensorflow_inter_op_parallelism",
    "file_system_poll_wait_seconds",
)


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


@dataclass(frozen=True)
class Flags:
    port: int
    grpc_bind_address: str
    rest_api_port: int
    rest_api_bind_address: str
    rest_api_timeout_in_ms: int
    rest_api_max_connections: int
    max_request_bytes: int
    model_name: str
    model_base_path: str
    model_config_file: str
    model_config_file_poll_wait_seconds: int
    tensorflow_intra_op_parallelism: int
    tensorflow_inter_op_parallelism: int
    file_system_poll_wait_seconds: int
    enable_batching: bool
    batching_parameters_file: str
    monitoring_config_file: str
    enable_model_warmup: bool


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every flag's default in its help; the epilog's examples kept as written (unwrapped)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is argparse.SUPPRESS or action.option_strings == ["-h", "--help"]:
            return text
        shown = "none" if action.default in ("", None) else "%(default)s"
        return f"{text} (default: {shown})"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="servectl-model-server",
        usage=_USAGE,
        description="A TF-Serving-compatible model server (gRPC and REST APIs) running "
        "SavedModels.",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
        exit_on_error=False,
    )
    add = p.add_argument
    add("--port", type=int, default=8500, help="gRPC port; 0 serves no gRPC")
    add(
        "--grpc_bind_address",
        default="0.0.0.0",
        help="address the gRPC server binds (servectl extension; TF Serving binds 0.0.0.0)",
    )
    add("--rest_api_port", type=int, default=0, help="REST port; 0 serves no REST")
    add(
        "--rest_api_bind_address",
        default="0.0.0.0",
        help="address the REST server binds (servectl extension; TF Serving binds 0.0.0.0)",
    )
    add(
        "--rest_api_timeout_in_ms",
        type=int,
        default=30000,
        help="REST: the longest a connection may stay idle, wait on one read or write, or "
        "take to send a request body; the request head must come within min(10 s, this); "
        "0: no timeouts but the 10 s head deadline",
    )
    add(
        "--rest_api_max_connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="REST connections served at once (a thread each); more are answered 503 "
        "(servectl extension)",
    )
    add(
        "--max_request_bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="largest request accepted: a REST body over it is answered 413 before it is "
        "read, a gRPC message over it fails RESOURCE_EXHAUSTED (servectl extension; the "
        "default is TF Serving's gRPC limit, INT32_MAX)",
    )
    add("--model_name", default="default", help="name of the model (with --model_base_path)")
    add("--model_base_path", default="", help="directory holding numbered version dirs")
    add("--model_config_file", default="", help="text-proto ModelServerConfig")
    add(
        "--model_config_file_poll_wait_seconds",
        type=int,
        default=0,
        help="seconds between reads of --model_config_file (label moves, new models); 0: never",
    )
    add("--tensorflow_intra_op_parallelism", type=int, default=0, help="0: TensorFlow picks")
    add("--tensorflow_inter_op_parallelism", type=int, default=0, help="0: TensorFlow picks")
    add(
        "--file_system_poll_wait_seconds",
        type=int,
        default=1,
        help="seconds between looks for new versions; 0: no polling after start-up",
    )
    add(
        "--enable_batching",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help="merge concurrent requests into one model call (docs/batching.md)",
    )
    add(
        "--batching_parameters_file",
        default="",
        help="text-proto BatchingParameters (max_batch_size, batch_timeout_micros, ...)",
    )
    add(
        "--enable_model_warmup",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="replay assets.extra/tf_serving_warmup_requests when a version loads",
    )
    add("--monitoring_config_file", default="", help="text-proto MonitoringConfig (Prometheus)")
    return p


class FlagError(Exception):
    pass


class StartupError(Exception):
    """The server cannot start (a port taken, an address not here): one line for the log."""


def parse_flags(argv: Sequence[str]) -> Flags:
    """Parse TF Serving style flags; a bad or unknown one raises :class:`FlagError` naming it."""
    parser = _parser()
    try:
        known, unknown = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as exc:  # e.g. --port=abc
        raise FlagError(str(exc)) from exc
    if unknown:
        raise FlagError(f"unknown argument: {unknown[0]}")
    if not known.model_base_path and not known.model_config_file:
        raise FlagError("one of --model_base_path or --model_config_file is required")
    if known.model_base_path and known.model_config_file:
        raise FlagError("give --model_base_path or --model_config_file, not both")
    if known.batching_parameters_file and not known.enable_batching:
        raise FlagError("You supplied --batching_parameters_file without --enable_batching")
    for name in PORT_FLAGS:
        value = getattr(known, name)
        if not 0 <= value <= 65535:
            raise FlagError(f"--{name}={value}: a port is 0 (off) or 1..65535")
    if known.port and known.port == known.rest_api_port:
        raise FlagError(
            f"--port={known.port} and --rest_api_port={known.rest_api_port}: gRPC and REST "
            "need different ports"
        )
    for name in NON_NEGATIVE_FLAGS:
        value = getattr(known, name)
        if value < 0:
            raise FlagError(f"--{name}={value}: must be 0 or more")
    if not 1 <= known.max_request_bytes <= DEFAULT_MAX_REQUEST_BYTES:
        raise FlagError(
            f"--max_request_bytes={known.max_request_bytes}: must be 1 to "
            f"{DEFAULT_MAX_REQUEST_BYTES} (gRPC's largest message)"
        )
    if known.rest_api_max_connections < 1:
        raise FlagError(
            f"--rest_api_max_connections={known.rest_api_max_connections}: must be 1 or more"
        )
    return Flags(**vars(known))


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound for listening right now, or None if it can.

    Binds a probe socket the way the servers bind (SO_REUSEADDR, which skips TIME_WAIT
    leftovers, and never SO_REUSEPORT, which would let two servers share the port), then
    closes it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as the servers bind it
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"address {host} cannot be resolved ({exc.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use (another model server?). "
                    "Pick a free port or stop the other process."
                )
            if exc.errno == errno.EACCES:
                return f"no permission to bind port {port} on {host} (ports below 1024 need root)"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"{host} is not an address of this machine"
            return f"cannot bind {host}:{port}: {exc.strerror or exc}"
    return None


def check_ports(flags: Flags) -> None:
    """Refuse to start on a port or address that cannot be bound, before any model loads.

    Raises :class:`StartupError` with one line naming the flag and the port.
    """
    for port_flag, host_flag in (
        ("port", "grpc_bind_address"),
        ("rest_api_port", "rest_api_bind_address"),
    ):
        port, host = getattr(flags, port_flag), getattr(flags, host_flag)
        if port > 0:
            problem = bind_problem(host, port)
            if problem is not None:
                raise StartupError(f"--{port_flag}={port} (--{host_flag}={host}): {problem}")


def _apply_threading(flags: Flags) -> None:
    from servectl.modelserver import tf_startup

    tf = tf_startup.import_tensorflow()  # the first import: its start-up noise held back

    try:
        if flags.tensorflow_intra_op_parallelism > 0:
            tf.config.threading.set_intra_op_parallelism_threads(
                flags.tensorflow_intra_op_parallelism
            )
        if flags.tensorflow_inter_op_parallelism > 0:
            tf.config.threading.set_inter_op_parallelism_threads(
                flags.tensorflow_inter_op_parallelism
            )
    except RuntimeError as exc:  # TensorFlow already initialised (in-process use)
        log.warning("Could not apply TensorFlow thread pool sizes: %s", exc)


def _batcher(flags: Flags) -> Batcher | None:
    """The request batcher for ``--enable_batching`` (None without it)."""
    from servectl.modelserver.batching import (
        Batcher,
        default_batching_parameters,
        parse_batching_parameters_file,
    )

    if not flags.enable_batching:
        return None
    if flags.batching_parameters_file:
        params = parse_batching_parameters_file(flags.batching_parameters_file)
    else:
        params = default_batching_parameters()
    log.info("Batching enabled: %s", params)
    return Batcher(params)


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s.%(msecs)03d: %(levelname).1s %(name)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
    )


def run(flags: Flags, stop: threading.Event) -> int:
    """Load models, serve until ``stop`` is set, then drain in-flight requests."""
    from servectl.modelserver.config import ModelConfig, parse_model_config_text
    from servectl.modelserver.grpc_api import serve_grpc
    from servectl.modelserver.models import ModelManager
    from servectl.modelserver.monitoring import metrics_for_flags
    from servectl.modelserver.poller import start_config_poller, start_poller
    from servectl.modelserver.rest import serve_rest

    check_ports(flags)  # before anything slow: a taken port fails in a second, not after loads
    _apply_threading(flags)
    config_text = ""
    if flags.model_config_file:
        with open(flags.model_config_file) as f:
            config_text = f.read()
        configs = parse_model_config_text(
            config_text, origin=f"base_path in --model_config_file={flags.model_config_file}"
        )
    else:
        configs = [ModelConfig(flags.model_name, flags.model_base_path, origin="--model_base_path")]
    batcher = _batcher(flags)
    manager = ModelManager(warmup=flags.enable_model_warmup, batcher=batcher)
    metrics, metrics_path = metrics_for_flags(flags.monitoring_config_file)
    manager.load(configs)
    pollers = [
        start_poller(manager, flags.file_system_poll_wait_seconds),
        start_config_poller(
            manager,
            flags.model_config_file,
            config_text,
            flags.model_config_file_poll_wait_seconds,
        ),
    ]
    grpc_server = None
    if flags.port > 0:
        try:
            grpc_server = serve_grpc(
                manager,
                flags.grpc_bind_address,
                flags.port,
                metrics=metrics,
                max_request_bytes=flags.max_request_bytes,
            )
        except OSError as exc:  # taken since check_ports (a race), or another bind failure
            raise _bind_failure("port", flags.port, "grpc_bind_address", flags, exc) from exc
        log.info(
            "Running gRPC ModelServer at %s ...",
            _host_port(flags.grpc_bind_address, grpc_server.port),
        )
    else:
        log.warning("--port=0: gRPC API is not served")
    server = None
    if flags.rest_api_port > 0:
        timeout = flags.rest_api_timeout_in_ms / 1000 if flags.rest_api_timeout_in_ms > 0 else None
        try:
            server = serve_rest(
                manager,
                flags.rest_api_bind_address,
                flags.rest_api_port,
                request_timeout_s=timeout,
                max_connections=flags.rest_api_max_connections,
                max_body_bytes=flags.max_request_bytes,
                metrics=metrics,
                metrics_path=metrics_path,
            )
        except BaseException as exc:
            if grpc_server is not None:
                grpc_server.stop(None).wait()
            if isinstance(exc, OSError):
                raise _bind_failure(
                    "rest_api_port", flags.rest_api_port, "rest_api_bind_address", flags, exc
                ) from exc
            raise
        log.info("Exporting HTTP/REST API at:localhost:%d ...", server.port)
    else:
        log.warning("--rest_api_port=0: REST API is not served")
    stop.wait()
    log.info("Shutting down: finishing requests in flight")
    for poller in pollers:
        if poller is not None:
            poller.stop()
    grpc_stopped = grpc_server.stop(GRPC_GRACE_S) if grpc_server is not None else None
    if server is not None:
        server.stop()
    if grpc_stopped is not None:
        grpc_stopped.wait()
    if batcher is not None:
        batcher.stop()
        log.info("Batching: %s", batcher.stats())
    log.info("Server stopped")
    return 0


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_failure(
    port_flag: str, port: int, host_flag: str, flags: Flags, exc: OSError
) -> StartupError:
    """The one-line error for a server that failed to bind after check_ports passed."""
    host = getattr(flags, host_flag)
    problem = bind_problem(host, port) or f"cannot listen on {_host_port(host, port)}: {exc}"
    return StartupError(f"--{port_flag}={port} (--{host_flag}={host}): {problem}")


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help", "--helpfull") for a in args):
        _parser().print_help()
        return 0
    try:
        flags = parse_flags(args)
    except FlagError as exc:
        print(f"{exc}\nusage: {_USAGE}", file=sys.stderr)
        return 2
    _configure_logging()
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("Received signal %d", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return run(flags, stop)
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    except ServingError as exc:
        log.error("%s", exc.message)
        return 1
    except OSError as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
