"""How long the CLI's everyday reads take a user: ``servectl get`` and ``servectl describe
NAME`` against a running local runtime, each a new process, beside ``servectl --help``
(the floor: Python, typer and rich, no command run).

``servectl bench --cli`` runs it: a local runtime in a temporary state directory
(``servectl up --state-dir DIR``, ports picked free), the demo model deployed and ready,
then the three commands in turn, ``runs`` times each (interleaved, so a busy moment of
the machine falls on all three), and ``servectl down`` on the way out, failure or not.
Figures and the command are in docs/benchmarks.md ("CLI latency").

``python -m servectl.backends.local.cli_bench --baseline DIR`` also times the three
commands of another checkout (``DIR`` on ``PYTHONPATH``, e.g. a ``git worktree`` of an
earlier commit) in the same runs, against the same runtime: a before/after on one
machine at one time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from servectl.backends.local.client import LocalClient

SERVICE = "cost"
READY_TIMEOUT_S = 180.0
COMMAND_TIMEOUT_S = 120.0


class CliBenchError(Exception):
    """The runtime or a command failed; the message says which and where the log is."""


@dataclass(frozen=True)
class Timing:
    """One command's wall times, in seconds, as a user's shell sees them."""

    command: str
    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p90_s(self) -> float:
        if len(self.seconds) < 2:
            return self.seconds[0]
        return statistics.quantiles(self.seconds, n=10, method="inclusive")[-1]


@dataclass(frozen=True)
class CliBench:
    """``--help``'s timing (the floor) and each read's; with a baseline, its own."""

    floor: Timing
    reads: tuple[Timing, ...]
    baseline: tuple[Timing, ...] = ()  # the baseline's --help, get, describe

    def ratio(self, timing: Timing) -> float:
        """A command's median over ``--help``'s (of the same code)."""
        floor = self.baseline[0] if timing in self.baseline[1:] else self.floor
        return timing.median_s / floor.median_s


def servectl(*args: str | Path) -> list[str]:
    """A ``servectl`` command line run by this Python (``python -m servectl``)."""
    return [sys.executable, "-m", "servectl", *(str(a) for a in args)]


def _run(
    args: Sequence[str],
    what: str,
    timeout_s: float = COMMAND_TIMEOUT_S,
    code: Path | None = None,
) -> float:
    """Run ``args`` (output discarded; ``code``: the checkout whose servectl runs); its
    wall time, or CliBenchError naming ``what``."""
    began = time.perf_counter()
    done = subprocess.run(
        args,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=_environment(code),
        check=False,
    )
    took = time.perf_counter() - began
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise CliBenchError(f"{what}: exit {done.returncode}: {' / '.join(last)}")
    return took


def _environment(code: Path | None = None) -> dict[str, str]:
    """The caller's environment, less what would send the commands to a cluster (with
    ``code`` first on the import path)."""
    env = dict(os.environ)
    env.pop("SERVECTL_CONTEXT", None)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH")) if p)
    return env


@contextlib.contextmanager
def local_runtime(
    root: Path, progress: Callable[[str], None]
) -> Iterator[tuple[Path, LocalClient]]:
    """``servectl up --state-dir root/state``, then ``down`` on the way out (always)."""
    state = root / "state"
    client: LocalClient | None = None
    try:
        progress(f"servectl up --state-dir {state}")
        _run(servectl("up", "--state-dir", state), "servectl up", timeout_s=READY_TIMEOUT_S)
        client = LocalClient(state)
        yield state, client
    finally:
        if client is not None:
            client.close()
        progress(f"servectl down --state-dir {state}")
        with contextlib.suppress(CliBenchError, subprocess.TimeoutExpired):
            _run(servectl("down", "--state-dir", state), "servectl down")


def _wait_ready(client: LocalClient, timeout_s: float) -> None:
    """Until the controller reports a ready replica of the service and a last cycle."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.status("default", SERVICE) or {}
        ready = sum(int(r.get("readyReplicas", 0)) for r in status.get("revisions", []))
        if ready >= 1 and client.last_cycle("default", SERVICE) is not None:
            return
        time.sleep(0.5)
    raise CliBenchError(f"{SERVICE} not ready within {timeout_s:g} s")


def run(
    runs: int,
    *,
    progress: Callable[[str], None] = lambda line: None,
    keep: Path | None = None,
    baseline: Path | None = None,
) -> CliBench:
    """Time ``--help``, ``get`` and ``describe cost``, ``runs`` times each, against a
    fresh local runtime serving the demo cost_model (``keep``: the directory to use and
    leave behind; default a temporary one, removed; ``baseline``: a checkout whose three
    commands are timed too, in the same runs)."""
    root = keep or Path(tempfile.mkdtemp(prefix="servectl-cli-bench-"))
    try:
        models = root / "models"
        progress(f"servectl model export-demo {models} --models cost_model")
        _run(
            servectl("model", "export-demo", models, "--models", "cost_model", "--force"),
            "servectl model export-demo",
            timeout_s=READY_TIMEOUT_S,
        )
        with local_runtime(root, progress) as (state, client):
            deploy = servectl(
                "deploy", SERVICE, "--model-path", models / "cost_model", "--version", "1"
            )
            progress(" ".join(deploy[2:]) + " --state-dir ...")
            _run([*deploy, "--state-dir", str(state)], "servectl deploy")
            _wait_ready(client, READY_TIMEOUT_S)
            three = {
                "servectl --help": servectl("--help"),
                "servectl get": servectl("get", "--state-dir", state),
                f"servectl describe {SERVICE}": servectl("describe", SERVICE, "--state-dir", state),
            }
            codes: list[Path | None] = [None] if baseline is None else [None, baseline]
            commands = {
                (name + ("" if code is None else " (baseline)"), code): args
                for code in codes
                for name, args in three.items()
            }
            for (name, code), args in commands.items():  # warm the page cache once
                _run(args, name, code=code)
            progress(f"timing {', '.join(n for n, _ in commands)}: {runs} runs each, interleaved")
            times: dict[str, list[float]] = {name: [] for name, _ in commands}
            for _ in range(runs):
                for (name, code), args in commands.items():
                    times[name].append(_run(args, name, code=code))
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    timings = [Timing(name, tuple(seconds)) for name, seconds in times.items()]
    return CliBench(floor=timings[0], reads=tuple(timings[1:3]), baseline=tuple(timings[3:]))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m servectl.backends.local.cli_bench [--runs N] [--baseline DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="runs per command (default 15)")
    parser.add_argument("--baseline", type=Path, help="a checkout timed beside this one")
    options = parser.parse_args(argv)
    began = time.monotonic()
    result = run(
        options.runs,
        progress=lambda line: print(f"[{time.monotonic() - began:4.0f} s] {line}", file=sys.stderr),
        baseline=options.baseline,
    )
    print(f"{'command':<40} {'median s':>9} {'p90 s':>7} {'x --help':>9}")
    for timing in (result.floor, *result.reads, *result.baseline):
        print(
            f"{timing.command:<40} {timing.median_s:>9.3f} {timing.p90_s:>7.3f} "
            f"{result.ratio(timing):>9.2f}"
        )


if __name__ == "__main__":
    main()
