"""A Locust that ignores the SIGINT ``stop`` sends is killed after the grace period, and
what it last wrote is still the test's result (``forced_stop``), not an error."""

from __future__ import annotations

import signal
import socket
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servectl.loadtest import runner

STATS = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,"
    "Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,"
    "50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%\n"
    ",Aggregated,1234,5,32,40.5,20.1,300.2,28,30.5,0.1,32,40,50,60,90,120,200,250,290,300,300\n"
)


@pytest.fixture
def listening() -> Iterator[str]:
    """A target preflight can connect to (nothing is ever sent to it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def _fake_locust(tmp_path: Path, *, ignore_sigint: bool, report: bool = True) -> str:
    """A stand-in for ``python -m locust``: writes its stats CSV like Locust's periodic
    writer, then waits (ignoring SIGINT, like the hung Locust, or not)."""
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import signal, sys, time
            args = sys.argv[1:]
            prefix = args[args.index("--csv") + 1]
            if {report}:
                open(prefix + "_stats.csv", "w").write({STATS!r})
            if {ignore_sigint}:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            print("users spawned", flush=True)
            try:
                time.sleep(60)
            except KeyboardInterrupt:
                sys.exit(0)
            """
        )
    )
    script.chmod(0o755)
    return str(script)


def _config(target: str, tmp_path: Path) -> runner.LoadTestConfig:
    return runner.LoadTestConfig(
        model="cost_model",
        target=target,
        shape="constant",
        rps=5,
        duration_s=60,
        out_dir=tmp_path / "out",
        name="hung",
    )


def test_a_locust_that_ignores_sigint_is_killed_and_its_last_report_kept(
    listening: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "STOP_GRACE_S", 0.5)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    config = _config(listening, tmp_path)
    result = runner.run(config, stop=stop, python=_fake_locust(tmp_path, ignore_sigint=True))
    assert result.forced_stop
    assert result.summary.total.requests == 1234
    assert result.summary.total.failures == 5
    assert result.to_record()["forced_stop"] is True
    assert "was killed; the summary is its last CSV write" in config.log_file.read_text()


def test_a_locust_that_stops_on_sigint_is_no_forced_stop(
    listening: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "STOP_GRACE_S", 5.0)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    result = runner.run(
        _config(listening, tmp_path), stop=stop, python=_fake_locust(tmp_path, ignore_sigint=False)
    )
    assert not result.forced_stop
    assert result.summary.total.requests == 1234


def test_a_killed_locust_with_no_report_is_still_an_error(
    listening: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "STOP_GRACE_S", 0.5)
    script = _fake_locust(tmp_path, ignore_sigint=True, report=False)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(runner.LoadTestError, match="Locust exited with status -9"):
        runner.run(_config(listening, tmp_path), stop=stop, python=script)


def test_locust_gets_the_sigint_even_when_servectl_was_started_ignoring_it(
    listening: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `servectl loadtest ... &` from a script: the shell starts it with SIGINT ignored,
    # and a child inherits that. Locust must still stop gracefully when told to.
    monkeypatch.setattr(runner, "STOP_GRACE_S", 5.0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        result = runner.run(
            _config(listening, tmp_path),
            stop=stop,
            python=_fake_locust(tmp_path, ignore_sigint=False),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not result.forced_stop  # stopped on the SIGINT, not killed after the grace
    assert result.summary.total.requests == 1234
