"""What ``servectl demo --kubernetes`` builds before a first run, said up front, and each
build run with its progress.

Every part is built from source or a package registry by one of the repository's scripts,
into ``~/.cache/servectl`` (the same caches the tests use), and only when it is missing or
its inputs changed. The estimates are the first-run times measured on the 2-core
development machine (docs/benchmarks.md); a second run finds everything and builds nothing,
except the images after a change to servectl's own files.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servectl.demo.story import DemoError

HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class Build:
    """One script that makes a part the demo needs."""

    what: str
    script: tuple[str, ...]  # scripts/<script[0]> and its arguments
    first_run_min: float  # about how long a first run takes on 2 cores
    present: Callable[[], bool]

    @property
    def command(self) -> str:
        return f"bash scripts/{' '.join(self.script)}"


def plan_lines(builds: list[Build]) -> list[str]:
    """What will be built, one line each, and the total, for the demo's first words."""
    missing = [b for b in builds if not b.present()]
    if not missing:
        return []
    lines = ["a first run builds, into ~/.cache/servectl (once; later runs reuse it):"]
    lines += [f"  - {b.what} (~{b.first_run_min:g} min): {b.command}" for b in missing]
    total = sum(b.first_run_min for b in missing)
    lines.append(f"  about {total:.0f} min on 2 cores in all, before the cluster starts")
    return lines


def run_script(
    repo: Path, build: Build, say: Callable[[str], None], log_dir: Path, timeout_s: float = 3600
) -> str:
    """Run ``build``'s script; its progress lines (those starting with the script's name)
    go to ``say``, everything to ``log_dir/<script>.log``, and a line every
    `HEARTBEAT_S` seconds while it is silent. Returns the last line it printed on stdout
    (the scripts print the directory they filled). DemoError names the log on failure."""
    name = build.script[0]
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{'-'.join(build.script)}.log"
    began = time.monotonic()
    say(f"building {build.what} ({build.command}; log {log}) ...")
    with tempfile.TemporaryFile() as stdout, log.open("a") as written:
        process = subprocess.Popen(
            ["bash", str(repo / "scripts" / name), *build.script[1:]],
            cwd=repo,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=dict(os.environ),
        )
        assert process.stderr is not None
        selector = selectors.DefaultSelector()
        selector.register(process.stderr, selectors.EVENT_READ)
        last = began
        try:
            while True:
                now = time.monotonic()
                if now - began > timeout_s:
                    process.kill()
                    raise DemoError(f"{build.command} ran over {timeout_s:.0f} s; see {log}")
                if selector.select(timeout=min(5.0, HEARTBEAT_S)):
                    line = process.stderr.readline()
                    if not line:
                        break
                    written.write(line)
                    if line.startswith(f"{name}:"):
                        say(f"  {line.rstrip()}")
                        last = time.monotonic()
                if time.monotonic() - last >= HEARTBEAT_S:
                    last = time.monotonic()
                    say(
                        f"  ... {build.what}: {last - began:.0f} s so far "
                        f"(~{build.first_run_min:g} min on a first run)"
                    )
        finally:
            selector.close()
            code = process.wait()
        stdout.seek(0)
        printed = stdout.read().decode(errors="replace").strip().splitlines()
    if code != 0:
        raise DemoError(f"{build.command} failed (exit {code}); its output is in {log}")
    say(f"built {build.what} in {time.monotonic() - began:.0f} s")
    return printed[-1] if printed else ""
