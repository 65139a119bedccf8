"""Bad input never prints a Python traceback (issue 11): each case runs the real
``servectl`` in a subprocess, as a user would, and checks the exit status, that stderr
names the option, file or field, and that no traceback or "internal error" escaped.

Cases that need TensorFlow or a model server live with the model server's tests; the
policy/snapshot cases are in tests/unit/cli/test_policy_bad_input.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "notyaml.yaml").write_text("x")
    (d / "badspec.yaml").write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata: {name: x}\nspec: [1]\n"
    )
    (d / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    (d / "broken.yaml").write_text("a: [")
    (d / "empty.yaml").write_text("")
    (d / "dashes.yaml").write_text("---\n---\n")
    (d / "trace.csv").write_text("t,rps\n0,abc\n")
    (d / "empty.csv").write_text("")
    (d / "adir").mkdir()
    (d / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000)
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "self.yaml").write_text("a: &x [*x]\n")
    (d / "control.yaml").write_text("kind: \x1f\n")
    # "Billion laughs": six lines that expand to a million values.
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcde", "bcdef", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    (d / "laughs.yaml").write_text("\n".join(lines) + "\n")
    return d


UNUSED = free_port()

# (arguments with {bad} for the folder of bad files, exit status, text stderr must hold)
CASES: list[tuple[str, int, str]] = [
    ("validate {bad}/notyaml.yaml", 1, "notyaml.yaml"),
    ("validate {bad}/badspec.yaml", 1, "spec"),
    ("validate {bad}/binary.yaml", 1, "binary.yaml: cannot read"),
    ("validate {bad}/broken.yaml", 1, "invalid YAML"),
    ("validate {bad}/adir", 1, "adir: cannot read"),
    ("validate {bad}/empty.yaml", 1, "no resources"),
    ("validate {bad}/dashes.yaml", 1, "no resources"),
    ("validate {bad}/missing.yaml", 1, "missing.yaml: cannot read"),
    ("validate {bad}/deep.yaml", 1, "nested deeper than 64 levels"),
    ("validate {bad}/deep.json", 1, "nested deeper than 64 levels"),
    ("validate {bad}/self.yaml", 1, "an alias refers to the node that holds it"),
    ("validate {bad}/control.yaml", 1, "unacceptable character #x001f"),
    ("validate {bad}/laughs.yaml", 1, "expands to more than 100,000 values"),
    ("simulate --csv {bad}/trace.csv", 2, "trace.csv"),
    ("simulate --csv {bad}/empty.csv", 2, "empty.csv"),
    ("simulate --csv {bad}/adir", 2, "adir"),
    ("simulate --trace nope", 2, "nope"),
    ("simulate --minutes -1", 2, "--minutes"),
    ("simulate --policy nope", 2, "--policy"),
    ("simulate -o csv", 2, "-o"),
    ("simulate --json -o yaml", 2, "--json and -o yaml"),
    ("simulate --plot {bad}/adir --minutes 1", 2, "--plot"),
    ("simulate --plot /proc/nope/x.png --minutes 1", 2, "--plot"),
    ("bench --traces nope", 2, "--traces"),
    ("bench --policies nope", 2, "--policies"),
    ("bench --local --parts nope", 2, "--parts: unknown nope"),
    ("bench --local --parts ,", 2, "--parts: empty"),
    ("bench --local --ticks 1", 2, "--ticks"),
    ("rollout simulate {bad}/badspec.yaml", 2, "badspec.yaml"),
    ("rollout simulate {bad}/empty.yaml", 2, "no resources"),
    ("rollout simulate --trace nope", 2, "nope"),
    ("rollout simulate --minutes 1 --at 1000", 2, "--at"),
    ("rollout simulate --plot /proc/nope/x.png --minutes 2", 2, "--plot"),
    ("metrics show --config {bad}/broken.yaml", 2, "--config"),
    ("metrics show --config {bad}/adir", 2, "--config"),
    ("metrics show -p notaurl", 2, "--prometheus"),
    ("metrics show -p http://[::1", 2, "--prometheus"),
    ("metrics show -p http://host:99999", 2, "--prometheus"),
    (f"metrics show -p http://127.0.0.1:{UNUSED}", 1, "unreachable"),
    ("metrics queries --config {bad}/notyaml.yaml", 2, "--config"),
    ("loadtest --target notaurl --duration 1s", 2, "--target"),
    ("loadtest --target http://127.0.0.1:99999 --duration 1s", 2, "--target"),
    ("loadtest --grpc 127.0.0.1:99999 --protocol grpc --duration 1s", 2, "--grpc"),
    (f"loadtest --target http://127.0.0.1:{UNUSED} --duration 5m", 1, "target unreachable"),
    ("loadtest --trace {bad}/trace.csv", 2, "--trace"),
    ("loadtest --duration -5s", 2, "--duration"),
    ("model export-demo {bad}/notyaml.yaml", 2, "notyaml.yaml"),
    ("model export-demo {bad} --models resnet", 2, "--models"),
    ("exporter cpu --replicas {bad}/adir --once", 2, "adir"),
    ("exporter cpu --replicas {bad}/broken.yaml --once", 2, "broken.yaml"),
    ("exporter cpu --port 99999", 2, "--port"),
    ("crds generate --out /proc/nope", 1, "--out"),
    ("policy test {bad}/broken.yaml", 1, "broken.yaml"),
    ("policy test {bad}/adir", 1, "adir"),
]


# The free port is not in the ids: pytest-xdist's workers must collect the same names.
@pytest.mark.parametrize(
    ("args", "status", "says"), CASES, ids=[c[0].replace(str(UNUSED), "{unused}") for c in CASES]
)
def test_bad_input_gets_a_message_not_a_traceback(
    bad: Path, tmp_path: Path, args: str, status: int, says: str
) -> None:
    argv = [a.replace("{bad}", str(bad)) for a in args.split()]
    # This checkout's servectl, whatever an editable install points at.
    env = {**os.environ, "SERVECTL_DEBUG": "", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "servectl", *argv],
        cwd=tmp_path,  # no ./policies here: nothing is read by accident
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    stderr = done.stderr
    assert "Traceback" not in stderr + done.stdout, stderr
    assert "internal error" not in stderr, stderr
    assert done.returncode == status, f"rc {done.returncode}\n{stderr}"
    assert says in stderr, stderr


def test_an_unexpected_error_is_one_line_with_a_way_to_the_traceback(tmp_path: Path) -> None:
    """What still escapes a command (a bug) gets one line, exit 70, and SERVECTL_DEBUG=1
    brings the traceback back."""
    script = (
        "import sys; from servectl.cli import main as m\n"
        "@m.app.command('boom')\n"
        "def boom() -> None:\n"
        "    raise RuntimeError('kaput')\n"
        "sys.argv = ['servectl', 'boom']\n"
        "m.main()\n"
    )
    quiet = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "SERVECTL_DEBUG": "", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert quiet.returncode == 70
    assert "internal error (a bug in servectl): RuntimeError: kaput" in quiet.stderr
    assert "Traceback" not in quiet.stderr and "SERVECTL_DEBUG=1" in quiet.stderr
    loud = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "SERVECTL_DEBUG": "1", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert loud.returncode != 0 and "Traceback" in loud.stderr and "kaput" in loud.stderr
