"""Start-up: flag checks, busy ports refused before any model loads, the gRPC bind
address, and ``--help``."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

from servectl.modelserver.grpc_api import GrpcServer  # noqa: E402
from servectl.modelserver.models import ModelManager  # noqa: E402
from servectl.modelserver.server import (  # noqa: E402
    FlagError,
    StartupError,
    _parser,
    main,
    parse_flags,
    run,
)

from .conftest import MODEL, end_model_server, free_port, start_model_server  # noqa: E402

MISSING = "/nonexistent/servectl-test-models"  # loading it would fail: ports come first


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--port", "70000"),
        ("--port", "65536"),
        ("--port", "-1"),
        ("--rest_api_port", "70000"),
        ("--rest_api_port", "-8501"),
        ("--rest_api_timeout_in_ms", "-1"),
        ("--file_system_poll_wait_seconds", "-5"),
        ("--model_config_file_poll_wait_seconds", "-1"),
        ("--tensorflow_intra_op_parallelism", "-2"),
        ("--tensorflow_inter_op_parallelism", "-2"),
        ("--rest_api_max_connections", "0"),
    ],
)
def test_out_of_range_flags_are_refused_naming_the_flag(flag: str, value: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_flags([f"{flag}={value}", "--model_base_path=/x"])
    assert str(info.value).startswith(f"{flag}={value}: ")


def test_port_bounds_and_bad_numbers() -> None:
    flags = parse_flags(["--port=65535", "--rest_api_port=0", "--model_base_path=/x"])
    assert (flags.port, flags.rest_api_port) == (65535, 0)
    with pytest.raises(FlagError, match="--port"):
        parse_flags(["--port=abc", "--model_base_path=/x"])
    with pytest.raises(FlagError, match="need different ports"):
        parse_flags(["--port=9000", "--rest_api_port=9000", "--model_base_path=/x"])


@pytest.fixture
def grpc_neighbour() -> Iterator[int]:
    """A plain grpc server (grpc's default SO_REUSEPORT) on a loopback port."""
    other = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = other.add_insecure_port("127.0.0.1:0")
    other.start()
    try:
        yield port
    finally:
        other.stop(None).wait()


def test_grpc_port_served_by_another_server_is_refused_before_loading(
    grpc_neighbour: int,
) -> None:
    flags = parse_flags(
        [
            f"--port={grpc_neighbour}",
            "--grpc_bind_address=127.0.0.1",
            f"--model_base_path={MISSING}",
        ]
    )
    with pytest.raises(StartupError) as info:
        run(flags, threading.Event())
    assert str(info.value) == (
        f"--port={grpc_neighbour} (--grpc_bind_address=127.0.0.1): port {grpc_neighbour} on "
        "127.0.0.1 is already in use (another model server?). Pick a free port or stop the "
        "other process."
    )


def test_grpc_server_does_not_share_a_port(grpc_neighbour: int, manager: ModelManager) -> None:
    """Even past the early check (a race), the bind itself refuses a shared port."""
    with pytest.raises(OSError, match=f"127.0.0.1:{grpc_neighbour}"):
        GrpcServer(manager, "127.0.0.1", grpc_neighbour)


def test_rest_port_in_use_is_refused_before_loading() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        flags = parse_flags(
            [
                "--port=0",
                f"--rest_api_port={port}",
                "--rest_api_bind_address=127.0.0.1",
                f"--model_base_path={MISSING}",
            ]
        )
        with pytest.raises(StartupError) as info:
            run(flags, threading.Event())
    assert str(info.value).startswith(
        f"--rest_api_port={port} (--rest_api_bind_address=127.0.0.1): port {port} on "
        "127.0.0.1 is already in use"
    )


def test_busy_port_exits_1_with_one_line(grpc_neighbour: int) -> None:
    proc, lines = start_model_server(
        [
            f"--port={grpc_neighbour}",
            "--grpc_bind_address=127.0.0.1",
            f"--model_base_path={MISSING}",
        ],
        "never printed: read to the end",
    )
    try:
        assert proc.wait(timeout=60) == 1
    finally:
        end_model_server(proc)
    errors = [ln for ln in lines if f"--port={grpc_neighbour}" in ln]
    assert len(errors) == 1, "".join(lines)
    assert "is already in use (another model server?)" in errors[0]
    assert not any("Traceback" in ln for ln in lines), "".join(lines)


def test_grpc_bind_address_is_used_and_logged(model_base: Path) -> None:
    port = free_port()
    proc, lines = start_model_server(
        [
            f"--port={port}",
            "--grpc_bind_address=127.0.0.1",
            f"--model_name={MODEL}",
            f"--model_base_path={model_base}",
        ],
        "Running gRPC ModelServer at",
    )
    try:
        assert any(f"Running gRPC ModelServer at 127.0.0.1:{port} ..." in ln for ln in lines), (
            "".join(lines)
        )
        with socket.socket() as probe:  # the port is taken on 127.0.0.1 ...
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                probe.bind(("127.0.0.1", port))
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        end_model_server(proc)


def test_help_shows_every_default_both_usages_and_an_unwrapped_example(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal must not break the example
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    usage = out.split("\n\n", 1)[0]
    assert "--model_base_path=PATH" in usage and "--model_config_file=FILE" in usage
    options = out.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    blocks = {b.split()[0]: " ".join(b.split()) for b in re.split(r"\n(?=  -)", options)}
    flags = [a.option_strings[0] for a in _parser()._actions if a.dest != "help"]
    assert set(blocks) == {"-h,", *flags}
    for flag in flags:
        assert re.search(r"\(default: [^ ()]+\)$", blocks[flag]), blocks[flag]
    lines = out.splitlines()
    assert "  servectl-model-server --rest_api_port=8501 \\" in lines
    assert "      --model_name=half_plus_two --model_base_path=/models/half_plus_two" in lines
