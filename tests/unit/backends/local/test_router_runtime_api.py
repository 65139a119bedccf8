"""The router's command channel (servectl.backends.local.router.RuntimeAPI) against a fake
unix socket: the framing HAProxy 2.6 needs, found by experiment (docs/local-runtime.md)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servectl.backends.local.router import RouterError, RuntimeAPI


@pytest.fixture
def fake_cli(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A unix socket that records what each connection sent (up to EOF) and answers."""
    path = tmp_path / "admin.sock"
    received: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(4096):  # the client must shut down its write side
                    data += chunk
                received.append(data)
                conn.sendall(b"New version created: 7\n\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, received
    server.close()


def test_one_command_per_connection_ended_by_eof(fake_cli: tuple[Path, list[bytes]]) -> None:
    path, received = fake_cli
    seen: list[str] = []
    api = RuntimeAPI(path, on_command=seen.append)
    assert api.send("prepare map /m.map") == "New version created: 7\n\n"
    assert received == [b"prepare map /m.map\n"]
    assert seen == ["prepare map /m.map"]


def test_a_payload_ends_with_exactly_one_empty_line(fake_cli: tuple[Path, list[bytes]]) -> None:
    path, received = fake_cli
    RuntimeAPI(path).send("add map @7 /m.map", "0 1\n1 0\n")
    # One more empty line would be a second, empty command: "Unknown command".
    assert received == [b"add map @7 /m.map <<\n0 1\n1 0\n\n"]


def test_two_commands_in_one_are_refused(tmp_path: Path) -> None:
    api = RuntimeAPI(tmp_path / "none.sock")
    with pytest.raises(RouterError, match="one command at a time"):
        api.send("show info; show stat")


def test_a_socket_that_does_not_answer_is_a_router_error(tmp_path: Path) -> None:
    with pytest.raises(RouterError, match="did not answer 'show'"):
        RuntimeAPI(tmp_path / "none.sock").send("show info")
