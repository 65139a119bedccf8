"""Where a local service answers (issue 25, item 10): ``deploy`` prints the ports the
controller gave it, and ``servectl up --rest-port N`` chooses where they start.

No controller process: a running controller is this test process (its pid in
``controller.pid``), and a thread writes the service's record as the controller's first
tick would."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servectl.backends.local import front_ports
from servectl.backends.local.client import LocalClient
from servectl.backends.local.store import Store
from servectl.cli import local_cmd
from tests.unit.cli.helpers import servectl


@pytest.fixture
def models(tmp_path: Path) -> Path:
    base = tmp_path / "models" / "cost_model"
    (base / "1").mkdir(parents=True)
    (base / "1" / "saved_model.pb").write_bytes(b"")
    return base


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "settings" / "state.db")
    yield opened
    opened.close()


def _controller_is_this_process(state: Path) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "controller.pid").write_text(f"{os.getpid()}\n")


# ----------------------------------------------------------------------------- deploy


def test_deploy_prints_the_ports_the_controller_gave(tmp_path: Path, models: Path) -> None:
    state = tmp_path / "state"
    _controller_is_this_process(state)

    def first_tick() -> None:
        # The controller's tick after the deploy: the service is in the store.
        client = LocalClient(state)
        try:
            deadline = time.monotonic() + 30
            while client.store.get_spec("default", "cost") is None:
                assert time.monotonic() < deadline, "deploy wrote no spec"
                time.sleep(0.05)
            client.store.put_runtime("default", "cost", {"restPort": 8603, "grpcPort": 8602})
        finally:
            client.close()

    tick = threading.Thread(target=first_tick)
    tick.start()
    try:
        deployed = servectl("deploy", "cost", "--model-path", models, "--state-dir", state)
    finally:
        tick.join()
    assert deployed.exit_code == 0, deployed.output
    assert deployed.stdout.splitlines() == [
        "modelservice/cost created",
        "  REST http://127.0.0.1:8603/v1/models/cost_model   gRPC 127.0.0.1:8602",
    ]
    again = servectl("deploy", "cost", "--model-path", models, "--state-dir", state)
    assert again.stdout.splitlines()[1].startswith("  REST http://127.0.0.1:8603/")


def test_deploy_with_the_controller_down_says_when_the_ports_come(
    tmp_path: Path, models: Path
) -> None:
    started = time.monotonic()
    deployed = servectl("deploy", "cost", "--model-path", models, "--state-dir", tmp_path / "s")
    assert time.monotonic() - started < 3  # no wait for a controller that is not there
    assert deployed.exit_code == 0, deployed.output
    assert deployed.stdout.splitlines() == ["modelservice/cost created"]
    assert deployed.stderr.splitlines()[0] == (
        "  ports: the controller gives them at its next tick; `servectl get` shows them"
    )


# ----------------------------------------------------------------------------- up --rest-port


def test_up_rest_port_is_kept_for_the_next_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_cmd, "_missing_binaries", lambda: [])
    state = tmp_path / "state"
    _controller_is_this_process(state)  # already up: the setting is all `up` changes
    done = servectl("up", "--rest-port", "9101", "--state-dir", state)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"already up: controller pid {os.getpid()} ({state.resolve()})",
        "  services get REST port 9101 and gRPC 9100 (the first free pair; then +2 each); "
        "`servectl deploy` prints a service's",
    ]
    client = LocalClient(state)
    try:
        assert front_ports.first_rest(client.store) == 9101
    finally:
        client.close()


@pytest.mark.parametrize("port", ["0", "1", "65536"])
def test_up_refuses_a_rest_port_that_cannot_be_a_pair(tmp_path: Path, port: str) -> None:
    refused = servectl("up", "--rest-port", port, "--state-dir", tmp_path / "state")
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (
        f"error: --rest-port {port}: not a port for a REST/gRPC pair; give 2 to 65535 "
        "(gRPC takes the port below it)"
    )
    assert not (tmp_path / "state").exists()


def test_up_help_says_how_grpc_ports_follow() -> None:
    shown = " ".join(servectl("up", "--help").stdout.split())
    assert "--rest-port N" in shown
    assert "the first service gets REST port N and gRPC port N-1, the next N+2 and N+1" in shown


# ----------------------------------------------------------------------------- allocation


def test_the_allocator_starts_where_the_setting_says(store: Store) -> None:
    allocate = front_ports.allocator(store)
    rest, grpc = allocate(set())
    assert rest >= front_ports.FIRST_REST_PORT and grpc == rest - 1
    assert (rest - front_ports.FIRST_REST_PORT) % 2 == 0
    front_ports.set_first_rest(store, 19_201)
    rest, grpc = allocate(set())  # read at each call: a running controller follows `up`
    assert rest >= 19_201 and (rest - 19_201) % 2 == 0 and grpc == rest - 1
    taken = {rest, grpc}
    after, _ = allocate(taken)
    assert after > rest and (after - 19_201) % 2 == 0


def test_allocate_skips_a_pair_in_use_on_the_machine() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rest, grpc = front_ports.allocate(set(), first=port)
        assert rest >= port + 2 and grpc == rest - 1
        rest, grpc = front_ports.allocate(set(), first=port + 1)  # its gRPC port is busy
        assert rest >= port + 3
