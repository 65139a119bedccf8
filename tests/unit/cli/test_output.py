"""Output that survives a pipe (issue 11): ``-o table|wide|json|yaml`` on every table,
whole rows when stdout is not a terminal, text printed as text (never as rich markup),
and the checks that must be able to fail: empty spec files, an unreachable load-test
target, a URL that is not Prometheus.

No console width is patched here: CliRunner's stdout is not a terminal, exactly like
``servectl ... | cat``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from servectl.cli import console
from servectl.cli import main as cli_main
from tests.unit.cli.helpers import runner, servectl

REPO = Path(__file__).resolve().parents[3]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


SIMULATE = ("simulate", "--trace", "step", "--minutes", "2", "--compare", "oracle")
ROLLOUT = (
    "rollout",
    "simulate",
    "--trace",
    "step",
    "--minutes",
    "6",
    "--at",
    "60",
    "--compare",
    "",
)


# ----------------------------------------------------------------------------- pipes


def test_a_piped_table_keeps_every_row_whole() -> None:
    result = servectl(*SIMULATE)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "…" not in result.stdout
    # The title is one line, not folded at 80 columns, and the table is past 80 wide.
    assert lines[0].startswith("step: share of requests") and lines[0].endswith("reversals")
    row = next(line for line in lines if "servectl" in line and "%" in line)
    assert "100.000%" in row and "1.00×" in row
    assert max(len(line) for line in lines) > 80


def test_wide_adds_columns() -> None:
    narrow = servectl(*SIMULATE)
    wide = servectl(*SIMULATE, "-o", "wide")
    assert wide.exit_code == 0, wide.output
    narrow_header = next(line for line in narrow.stdout.splitlines() if "policy" in line)
    assert "requests" not in narrow_header
    header = next(line for line in wide.stdout.splitlines() if "policy" in line)
    assert "requests" in header and "within SLO" in header and "failed" in header
    row = next(line for line in wide.stdout.splitlines() if "servectl" in line and "%" in line)
    assert "24,307" in row  # the step trace's first two minutes, seed 0


@pytest.mark.parametrize("flag", [("-o", "json"), ("--output", "JSON"), ("--json",)])
def test_json_is_one_record_a_line_and_nothing_else(flag: tuple[str, ...]) -> None:
    result = servectl(*SIMULATE, *flag)
    assert result.exit_code == 0, result.output
    records = json_lines(result.stdout)
    assert [r["policy"] for r in records] == ["servectl", "oracle"]
    assert records[0]["requests"] == 24_307 and records[0]["slo_attainment"] == 1.0
    assert result.stderr == ""  # no progress chatter with a machine format


def test_yaml_is_one_document_a_record() -> None:
    result = servectl(*SIMULATE, "-o", "yaml")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["policy"] for d in docs] == ["servectl", "oracle"]
    assert docs[1]["service"]["slo_ms"] == 150.0


def test_json_alias_and_another_format_disagree() -> None:
    result = servectl(*SIMULATE, "--json", "-o", "yaml")
    assert result.exit_code == 2
    assert "--json and -o yaml disagree" in result.stderr


def test_unknown_format_is_refused_naming_the_choices() -> None:
    result = servectl(*SIMULATE, "-o", "csv")
    assert result.exit_code == 2
    assert "csv" in result.output and "table" in result.output and "yaml" in result.output


def test_rollout_simulate_formats_and_timeline_on_stdout() -> None:
    table = servectl(*ROLLOUT)
    assert table.exit_code == 0, table.output
    timeline = [line for line in table.stdout.splitlines() if line.startswith("servectl's rollout")]
    assert len(timeline) == 1 and "Progressing at 60 s" in timeline[0]
    (record,) = json_lines(servectl(*ROLLOUT, "-o", "json").stdout)
    assert record["controller"] == "servectl" and "lost_unready" in record
    wide = servectl(*ROLLOUT, "-o", "wide")
    assert "errors" in next(line for line in wide.stdout.splitlines() if "controller" in line)
    (doc,) = yaml.safe_load_all(servectl(*ROLLOUT, "-o", "yaml").stdout)
    assert doc["controller"] == "servectl"


def test_bench_rollouts_and_bench_take_o(monkeypatch: pytest.MonkeyPatch) -> None:
    result = servectl(
        "bench", "--traces", "step", "--policies", "servectl,oracle", "-o", "yaml", "--seed", "1"
    )
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert {d["policy"] for d in docs} == {"servectl", "oracle"}
    assert all(d["trace"] == "step" for d in docs)


def test_policy_list_is_a_table_with_formats() -> None:
    table = servectl("policy", "list")
    assert table.exit_code == 0, table.output
    assert "latency-slo" in table.stdout and "hpa" in table.stdout
    records = json_lines(servectl("policy", "list", "-o", "json").stdout)
    kinds = {r["name"]: r["kind"] for r in records}
    assert kinds["hpa"] == "built-in" and kinds["latency-slo"] == "CEL"
    assert {"name", "kind", "file"} <= set(records[0])


# ----------------------------------------------------------------------------- text is text


def test_fail_prints_brackets_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    exit_ = console.fail("spec.steps[analysis]: bad [/x] at [::1]:8500")
    assert exit_.exit_code == 2
    assert "spec.steps[analysis]: bad [/x] at [::1]:8500" in capsys.readouterr().err


def test_table_cells_are_text_not_markup(capsys: pytest.CaptureFixture[str]) -> None:
    console.print_table("t [bold]x[/]", ["name", "v"], [["decide_us[hpa]", "[/oops]"]])
    printed = capsys.readouterr().out
    assert "decide_us[hpa]" in printed and "[/oops]" in printed and "t [bold]x[/]" in printed


# ----------------------------------------------------------------------------- checks that fail


@pytest.mark.parametrize("text", ["", "\n\n", "---\n---\n", "# only a comment\n", "[]"])
def test_validate_fails_on_a_file_with_no_resource(tmp_path: Path, text: str) -> None:
    path = tmp_path / ("empty.json" if text == "[]" else "empty.yaml")
    path.write_text(text)
    result = servectl("validate", path)
    assert result.exit_code == 1, result.output
    assert "no resources" in result.stderr and "ModelService" in result.stderr
    assert ": ok" not in result.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_loadtest_says_unreachable_before_starting_locust(tmp_path: Path, protocol: str) -> None:
    port = free_port()
    where = (
        ("--target", f"http://127.0.0.1:{port}")
        if protocol == "rest"
        else ("--grpc", f"127.0.0.1:{port}", "--protocol", "grpc")
    )
    # Ten minutes of load would be the old behaviour: run it all, then say unreachable.
    result = servectl("loadtest", *where, "--duration", "10m", "--out", tmp_path)
    assert result.exit_code == 1, result.output
    assert "target unreachable" in result.stderr and f"127.0.0.1:{port}" in result.stderr
    assert where[0] in result.stderr and "Connection refused" in result.stderr
    assert not list(tmp_path.iterdir())  # Locust never ran: no log, no CSV


class _NotPrometheus(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = b"<html><body>a web page</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def web_page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotPrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_metrics_show_says_the_url_is_not_prometheus(web_page: str) -> None:
    result = servectl("metrics", "show", "-p", web_page)
    assert result.exit_code == 1, result.output
    assert f"{web_page} is not a Prometheus API" in result.stderr
    assert "NotPrometheus" in result.stderr
    assert "queries" not in result.stderr and "config" not in result.stderr
    as_json = servectl("metrics", "show", "-p", web_page, "-o", "json")
    (doc,) = json_lines(as_json.stdout)
    assert {p["reason"] for p in doc["problems"]} == {"NotPrometheus"}


# ----------------------------------------------------------------------------- help


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):  # a group
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _all_commands() -> list[tuple[tuple[str, ...], Any]]:
    import typer.main

    return list(_commands(typer.main.get_command(cli_main.app)))


def test_every_command_is_covered() -> None:
    names = {" ".join(path) for path, _ in _all_commands()}
    assert {"simulate", "bench", "validate", "loadtest", "policy eval", "rollout simulate"} <= names


@pytest.mark.parametrize(
    "path", [path for path, _ in _all_commands() if path != ("model-server",)], ids=" ".join
)
def test_help_examples_do_not_wrap_mid_command(path: tuple[str, ...]) -> None:
    """Every example line of a command's docstring shows whole at 80 columns, and a
    long example is continued with a backslash, never folded by the help formatter."""
    command = dict(_all_commands())[path]
    result = runner.invoke(cli_main.app, [*path, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    shown = [line.strip() for line in result.stdout.splitlines()]
    examples = [
        line.strip()
        for line in (command.help or "").splitlines()
        if line.strip().startswith(("servectl ", "--", "nvidia-smi ")) and line.startswith("  ")
    ]
    for example in examples:
        assert example in shown, f"{' '.join(path)} --help folds {example!r}"
        assert len(example) <= 76, f"{example!r}: continue it with a backslash"
