"""The ``servectl`` command line, run in-process: exit codes, JSON shapes, files written,
and error messages that name the bad option, file, line or field."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from servectl import __version__
from tests.unit.cli.helpers import flat, servectl

REPO = Path(__file__).resolve().parents[3]
SNAPSHOT = "docs/examples/snapshot.json"
POLICY_FILES = sorted((REPO / "policies").glob("*.yaml"))
EXAMPLES = sorted((REPO / "deploy" / "examples").glob("*.yaml"))
TRACES = ("steady_noisy", "step", "spike", "ramp", "diurnal", "bursty")
PRODUCTION_TRACES = ("flash_crowd", "heavy_tailed", "slow_ramp", "business_day")
FORECAST_TRACES = ("week_business", "week_compressed")


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def snapshot_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REPO / SNAPSHOT).read_text())
    return doc


# ----------------------------------------------------------------------------- help


def test_app_help_lists_the_commands() -> None:
    result = servectl("--help")
    assert result.exit_code == 0
    for command in ("simulate", "bench", "validate", "policy", "crds", "--version"):
        assert command in result.stdout


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        (
            ["simulate"],
            ["--trace", "--csv", "--policy", "--compare", "--plot", "--minutes", "flash_crowd"],
        ),
        (["bench"], ["--traces", "--policies", "--seed", "--json", "--micro"]),
        (["policy"], ["eval", "test", "list"]),
        (
            ["policy", "eval"],
            ["--policy", "--spec", "--cel", "--policy-file", "--param", "--state", "--show-state"],
        ),
        (["policy", "test"], ["policies/tests/NAME.yaml", "Exits 1"]),
        (["policy", "list"], ["built-in"]),
        (["validate"], ["ModelService", "ScalingPolicy"]),
        (["crds"], ["generate"]),
        (["crds", "generate"], ["--out"]),
    ],
    ids=lambda value: " ".join(value) if isinstance(value[0], str) else None,
)
def test_command_help_mentions_its_options(command: list[str], mentions: list[str]) -> None:
    result = servectl(*command, "--help")
    assert result.exit_code == 0
    for text in mentions:
        assert text in flat(result.stdout), f"{' '.join(command)} --help lacks {text}"


def test_version() -> None:
    result = servectl("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"servectl {__version__}"


# ----------------------------------------------------------------------------- simulate


def test_simulate_json_prints_one_record_per_policy() -> None:
    result = servectl(
        "simulate", "--trace", "step", "--minutes", "3", "--compare", "oracle", "--json"
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no progress lines to get in the way of a JSON reader
    records = json_lines(result.stdout)
    assert [r["policy"] for r in records] == ["servectl", "oracle"]
    for record in records:
        assert {
            "trace", "policy", "seed", "duration_s", "requests", "met_slo", "failed",
            "slo_attainment", "replica_seconds", "scale_actions", "recovery", "service",
        } <= set(record)  # fmt: skip
        assert record["trace"] == "step"
        assert record["duration_s"] == 180
        assert record["slo_attainment"] == pytest.approx(record["met_slo"] / record["requests"])
        assert record["replica_seconds"] > 0
    # Every policy sees the same arrivals.
    assert records[0]["requests"] == records[1]["requests"] > 0


def test_simulate_standby_runs_servectl_with_a_pool_beside_and_counts_it_in_the_cost() -> None:
    # step's rise (x4) is at 20 min: 22 minutes hold it.
    args = ("simulate", "--trace", "step", "--minutes", "22", "--compare", "oracle")
    result = servectl(*args, "--standby", "8", "--json")
    assert result.exit_code == 0, result.output
    records = {r["policy"]: r for r in json_lines(result.stdout)}
    assert list(records) == ["servectl", "oracle", "servectl standby=8"]
    plain, pooled = records["servectl"], records["servectl standby=8"]
    assert plain["standby_seconds"] == 0
    assert plain["cost_replica_seconds"] == plain["replica_seconds"]
    assert pooled["standby_seconds"] == 8 * 22 * 60
    assert pooled["cost_replica_seconds"] > pooled["replica_seconds"]
    assert pooled["met_slo"] > plain["met_slo"]
    table = servectl(*args, "--standby", "8", "-o", "wide")
    assert table.exit_code == 0, table.output
    assert "servectl standby=8" in table.stdout and "standby·s" in table.stdout


def test_simulate_unknown_trace_lists_the_valid_ones() -> None:
    result = servectl("simulate", "--trace", "nope")
    assert result.exit_code == 2
    message = flat(result.stderr)
    assert "--trace 'nope': unknown" in message
    for name in TRACES + PRODUCTION_TRACES + FORECAST_TRACES:
        assert name in message
    assert "--csv FILE" in message


@pytest.mark.parametrize("name", ["flash_crowd", "business_day", "week_compressed"])
def test_simulate_selects_the_newer_suites_traces_by_name(name: str) -> None:
    result = servectl(
        "simulate", "--trace", name, "--minutes", "1", "--policy", "oracle", "--compare", "",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = json_lines(result.stdout)
    assert [(r["trace"], r["policy"], r["duration_s"]) for r in records] == [(name, "oracle", 60)]


def test_simulate_unknown_policy_lists_the_valid_ones() -> None:
    result = servectl("simulate", "--trace", "step", "--minutes", "1", "--compare", "hap")
    assert result.exit_code == 2
    assert "unknown policy hap; choose from servectl, hpa, kpa, oracle" in flat(result.stderr)


def test_simulate_replays_a_csv_trace(tmp_path: Path) -> None:
    csv = tmp_path / "launch.csv"
    csv.write_text("t,rps\n# a launch: 100 rps, then 300\n0,100\n60,300\n300,300\n")
    result = servectl("simulate", "--csv", csv, "--minutes", "2", "--compare", "kpa", "--json")
    assert result.exit_code == 0, result.output
    records = json_lines(result.stdout)
    assert [(r["trace"], r["policy"]) for r in records] == [
        ("launch", "servectl"),
        ("launch", "kpa"),
    ]
    assert all(r["duration_s"] == 120 for r in records)
    # Interpolated t,rps: 100 -> 300 over the first minute, then 300: about 28,000 requests.
    assert records[0]["requests"] == pytest.approx(100 * 60 + 200 * 30 + 300 * 60, rel=0.05)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("t,rps\n0,10\n60,abc\n", "bad.csv:3: t and rps must be numbers"),
        ("time,rate\n0,10\n", "bad.csv:1: expected the header 't,rps'"),
        ("t,rps\n0,10\n60,20,30\n", "bad.csv:3: expected 2 columns (t,rps), got 3"),
        ("t,rps\n", "no data rows after the header"),
    ],
    ids=["not a number", "wrong header", "three columns", "no rows"],
)
def test_simulate_malformed_csv_names_the_line(tmp_path: Path, content: str, says: str) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text(content)
    result = servectl("simulate", "--csv", csv, "--json")
    assert result.exit_code == 2
    assert says in flat(result.stderr)
    assert result.stdout == ""


def test_simulate_table_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "plots" / "step.png"  # the folder does not exist yet
    result = servectl(
        "simulate", "--trace", "step", "--minutes", "2", "--compare", "oracle", "--plot", png
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert png.stat().st_size > 10_000
    table = flat(result.stdout)
    assert "step:" in table and "servectl" in table and "oracle" in table
    assert f"timeline written to {png}" in table
    assert "simulating step (2 min) with servectl" in flat(result.stderr)


# ----------------------------------------------------------------------------- bench


@pytest.fixture
def short_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard suite cut to 2 minutes a trace: the bench path, at test speed."""
    from servectl.sim import traces

    full_suite = traces.standard_suite
    monkeypatch.setattr(
        traces, "standard_suite", lambda seed=0: [traces.truncate(t, 120) for t in full_suite(seed)]
    )
    production = traces.production_suite
    monkeypatch.setattr(
        traces,
        "production_suite",
        lambda seed=0: [traces.truncate(t, 120) for t in production(seed)],
    )


def test_bench_suite_picks_the_production_traces_or_all(short_suite: None) -> None:
    result = servectl("bench", "--suite", "production", "--policies", "hpa", "--json")
    assert result.exit_code == 0, result.output
    assert [r["trace"] for r in json_lines(result.stdout)] == list(PRODUCTION_TRACES)
    both = servectl(
        "bench", "--suite", "all", "--traces", "step,flash_crowd", "--policies", "hpa", "--json"
    )
    assert both.exit_code == 0, both.output
    assert [r["trace"] for r in json_lines(both.stdout)] == ["step", "flash_crowd"]


def test_bench_json_prints_one_record_per_trace_and_policy(short_suite: None) -> None:
    result = servectl("bench", "--traces", "step,spike", "--policies", "servectl,hpa", "--json")
    assert result.exit_code == 0, result.output
    records = json_lines(result.stdout)
    assert [(r["trace"], r["policy"]) for r in records] == [
        ("step", "servectl"),
        ("step", "hpa"),
        ("spike", "servectl"),
        ("spike", "hpa"),
    ]
    for record in records:
        assert 0.0 <= record["slo_attainment"] <= 1.0
        assert record["replica_seconds"] > 0 and record["requests"] > 0


def test_bench_tables_compare_servectl_with_the_others(short_suite: None) -> None:
    result = servectl("bench", "--traces", "step", "--policies", "servectl,hpa")
    assert result.exit_code == 0, result.output
    tables = flat(result.stdout)
    assert "per trace" in tables and "suite totals and ratios" in tables
    assert "vs hpa" in tables
    assert "[1/2] step × servectl" in flat(result.stderr)


def test_bench_standby_adds_servectl_with_each_pool_and_bills_it_apart(
    short_suite: None,
) -> None:
    result = servectl(
        "bench", "--traces", "step", "--policies", "servectl", "--standby", "2,4", "--json"
    )
    assert result.exit_code == 0, result.output
    records = {r["policy"]: r for r in json_lines(result.stdout)}
    assert list(records) == ["servectl", "servectl standby=2", "servectl standby=4"]
    assert records["servectl"]["standby"] == 0 and records["servectl"]["standby_seconds"] == 0
    for size in (2, 4):
        pooled = records[f"servectl standby={size}"]
        assert pooled["standby"] == size
        assert pooled["standby_seconds"] > 0
        assert pooled["cost_replica_seconds"] > pooled["replica_seconds"]
    table = servectl("bench", "--traces", "step", "--policies", "servectl", "--standby", "2")
    assert table.exit_code == 0, table.output
    assert "standby·s" in flat(table.stdout) and "vs servectl standby=2" in flat(table.stdout)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--traces", "nope"], "--traces: unknown nope; choose from " + ", ".join(sorted(TRACES))),
        (["--policies", "servectl,nope"], "unknown policy nope; choose from servectl, hpa, kpa"),
        (["--standby", "8,0"], "--standby: '0' is not a pool size; give whole numbers >= 1"),
    ],
)
def test_bench_unknown_names_list_the_valid_ones(args: list[str], says: str) -> None:
    result = servectl("bench", *args)
    assert result.exit_code == 2
    assert says in flat(result.stderr)


def test_bench_frontier_judges_servectl_against_each_baseline_and_plots(
    short_suite: None, tmp_path: Path
) -> None:
    plots = tmp_path / "plots"
    result = servectl(
        "bench",
        "--frontier",
        "--traces",
        "spike",
        "--policies",
        "servectl,hpa",
        "--routing",
        "both",
        "--jobs",
        "1",
        "--plot-dir",
        str(plots),
    )
    assert result.exit_code == 0, result.output
    tables = flat(result.stdout)
    assert "against each baseline's frontier (round robin)" in tables
    assert "against each baseline's frontier (least request)" in tables
    assert "hpa cpu 40%" in flat(result.stderr)  # progress names each configuration
    assert "x the oracle" in flat(result.stderr)
    for routing in ("round_robin", "least_request"):
        assert (plots / f"frontier-{routing}.png").stat().st_size > 10_000
    as_json = servectl(
        "bench",
        "--frontier",
        "--traces",
        "spike",
        "--policies",
        "hpa",
        "--minutes",
        "1",
        "--jobs",
        "1",
        "--plot-dir",
        str(plots),
        "-o",
        "json",
    )
    assert as_json.exit_code == 0, as_json.output
    records = json_lines(as_json.stdout)
    kinds = [r["kind"] for r in records]
    # No servectl point was asked for: the points and no verdict.
    assert kinds == ["point"] * 7 and records[-1]["policy"] == "oracle"
    assert all(r["requests"] < 20_000 for r in records)  # one minute of ~300 rps, not two


def test_bench_forecast_names_the_forecasting_traces_on_a_bad_one(tmp_path: Path) -> None:
    result = servectl("bench", "--forecast", "--traces", "step", "--plot-dir", str(tmp_path))
    assert result.exit_code == 2
    assert "--traces: unknown step; with --forecast choose from week_business, " in flat(
        result.stderr
    )


@pytest.mark.parametrize("mode", ["--frontier", "--forecast"])
def test_bench_plots_need_a_plot_dir_they_can_create(mode: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = servectl("bench", mode, "--plot-dir", str(blocker / "plots"))
    assert result.exit_code == 2
    assert f"--plot-dir: cannot create {blocker / 'plots'}" in flat(result.stderr)


def test_bench_frontier_refuses_an_unknown_policy() -> None:
    result = servectl("bench", "--frontier", "--policies", "servectl,argo")
    assert result.exit_code == 2
    assert "--policies: unknown policy 'argo'" in flat(result.stderr)


@pytest.fixture
def fast_micro(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real --micro takes ~11 s (three simulated hours per policy, four policies'
    decisions): here a simulated hour "takes" 2.5 s and a decision 42 µs."""
    from servectl.backends.sim import bench
    from servectl.backends.sim import run as sim_run

    monkeypatch.setattr(bench, "speed_check", lambda seconds, rps, seed=0: 2.5)
    monkeypatch.setattr(bench, "decision_us", lambda subject, **kwargs: 42.0)
    monkeypatch.setattr(bench, "decision_us_full_forecast", lambda *args, **kwargs: 77.0)
    monkeypatch.setattr(sim_run, "simulate", lambda *args, **kwargs: None)


def test_bench_micro_json_prints_the_figures(fast_micro: None) -> None:
    result = servectl("bench", "--micro", "--json")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["simulate_1h_1000rps_fixed_s"] == 2.5
    assert figures["simulated_seconds_per_wall_second"] == 3600 / 2.5
    assert figures["simulated_requests_per_wall_second"] == 3_600_000 / 2.5
    assert figures["simulate_1h_1000rps_servectl_s"] >= 0
    # One decision's latency for each policy, the ready-made CEL policy included.
    assert {k: v for k, v in figures.items() if k.startswith("decide_us")} == {
        "decide_us[servectl]": 42.0,
        "decide_us[servectl+latency-slo (CEL)]": 42.0,
        "decide_us[hpa]": 42.0,
        "decide_us[kpa]": 42.0,
        "decide_us[servectl, full forecast history]": 77.0,
    }


def test_bench_micro_prints_one_figure_a_row(fast_micro: None) -> None:
    result = servectl("bench", "--micro")
    assert result.exit_code == 0, result.output
    rows = {
        cells[0]: cells[1] for line in result.stdout.splitlines() if len(cells := line.split()) == 2
    }
    assert rows["simulate_1h_1000rps_fixed_s"] == "2.5"
    assert rows["decide_us[hpa]"] == "42"
    as_json = servectl("bench", "--micro", "-o", "json")
    (figures,) = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert figures["simulate_1h_1000rps_fixed_s"] == 2.5 and figures["decide_us[hpa]"] == 42.0


# ----------------------------------------------------------------------------- policy eval


def test_policy_eval_prints_one_decision() -> None:
    result = servectl("policy", "eval", SNAPSHOT)
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    assert {"time", "policy", "replicas", "recommended", "reason", "signal", "detail"} <= set(
        decision
    )
    assert decision["policy"] == "servectl"
    assert decision["time"] == snapshot_doc()["time"]
    # Without --spec, the snapshot's bounds are the policy's bounds.
    assert 1 <= decision["replicas"] <= 50
    assert decision["signal"] in decision["proposals"]
    assert all(isinstance(v, int | float) for v in decision["proposals"].values())


def test_policy_eval_hpa_is_kubernetes_arithmetic() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--policy", "hpa")
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    assert decision["policy"] == "hpa"
    # 10.4 cores over 6 pods x 2 cores = 86 % (HPA truncates to a whole percent);
    # target 70 %: ceil(86 / 70 x 6) = ceil(7.37) = 8.
    assert decision["replicas"] == math.ceil(86 / 70 * 6) == 8


def test_policy_eval_kpa_with_a_concurrency_target(tmp_path: Path) -> None:
    spec = tmp_path / "ranker.yaml"
    spec.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata: {name: ranker}\n"
        "spec:\n  model: {name: ranker, basePath: /models/ranker}\n"
        "  autoscaling:\n    minReplicas: 1\n    maxReplicas: 50\n"
        "    signals: [{type: concurrency, targetPerReplica: 2}]\n"
    )
    result = servectl("policy", "eval", SNAPSHOT, "--policy", "kpa", "--spec", spec)
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    assert decision["policy"] == "kpa"
    # Knative aims at 70 % of the target: 14.2 in flight / (2 x 0.7) per pod = 10.1 -> 11.
    assert decision["replicas"] == math.ceil(14.2 / (2 * 0.7)) == 11


def test_policy_eval_kpa_as_the_readme_shows() -> None:
    # Without a concurrency target, Knative's default (100 per replica) applies, and says so.
    result = servectl("policy", "eval", SNAPSHOT, "--policy", "kpa")
    assert result.exit_code == 0, result.output
    assert "Knative's default of 100" in result.stderr
    decision = json.loads(result.stdout)
    assert decision["policy"] == "kpa"
    # 14.2 in flight against 70 per pod asks for 1 replica, but a new Knative autoscaler
    # starts in panic mode and never scales down while panicking: it holds 6.
    assert decision["proposals"]["concurrency"] == pytest.approx(14.2 / 70, abs=1e-4)
    assert (decision["replicas"], decision["reason"]) == (6, "PANIC")


def test_policy_eval_inline_cel_decides_with_reason_policy() -> None:
    plain = json.loads(servectl("policy", "eval", SNAPSHOT).stdout)
    result = servectl("policy", "eval", SNAPSHOT, "--cel", "recommended + 1")
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    assert decision["policy"] == "servectl+inline"
    assert decision["reason"] == "POLICY"
    assert decision["replicas"] == plain["replicas"] + 1


def test_policy_eval_cel_syntax_error_gives_line_and_column() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--cel", "1 +")
    assert result.exit_code == 2
    assert "CEL policy inline: line 1, column 4: syntax error" in flat(result.stderr)
    assert result.stdout == ""


def test_policy_eval_policy_file_and_param_override() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--policy-file", "policies/latency-slo.yaml")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == "servectl+latency-slo"
    result = servectl(
        "policy", "eval", SNAPSHOT, "--policy-file", "policies/latency-slo.yaml",
        "--param", "targetMs=90",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    # p99 180 ms over a 90 ms target: 6 ready replicas x 180 / 90 = 12.
    assert decision["replicas"] == 12
    assert decision["reason"] == "POLICY"
    assert decision["detail"].startswith("LATENCY_OVER_TARGET")


@pytest.mark.parametrize("param", ["x", "=3", "targetMs=fast"])
def test_policy_eval_malformed_param(param: str) -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--cel", "recommended", "--param", param)
    assert result.exit_code == 2
    assert f"--param {param!r}: expected NAME=NUMBER" in flat(result.stderr)


def test_policy_eval_spec_configures_the_signals() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--spec", "deploy/examples/resnet-canary.yaml")
    assert result.exit_code == 0, result.output
    decision = json.loads(result.stdout)
    # The spec adds latency and rps signals to cpu (its gpu signal has no data here).
    assert {"cpu", "rps"} <= set(decision["proposals"])
    # ... and its maxReplicas (20) bounds the decision, not the snapshot's 50.
    assert decision["replicas"] <= 20


def test_policy_eval_spec_resolves_a_policy_ref() -> None:
    result = servectl(
        "policy", "eval", SNAPSHOT, "--spec", "deploy/examples/business-hours-ref.yaml"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == "servectl+business-hours"


def test_policy_eval_unknown_policy_lists_the_valid_ones() -> None:
    result = servectl("policy", "eval", SNAPSHOT, "--policy", "nope")
    assert result.exit_code == 2
    assert "unknown policy 'nope'; choose one of: hpa, kpa, servectl" in flat(result.stderr)


def test_policy_eval_snapshot_missing_a_field_names_it(tmp_path: Path) -> None:
    doc = snapshot_doc()
    del doc["replicas"]["current"]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    result = servectl("policy", "eval", path)
    assert result.exit_code == 2
    assert f"{path}: replicas.current: required" in flat(result.stderr)


def test_policy_eval_bad_json_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(snapshot_doc()) + "\n{not json\n")
    result = servectl("policy", "eval", path)
    assert result.exit_code == 2
    assert f"{path}:2: not JSON" in flat(result.stderr)


def _trace(tmp_path: Path, count: int = 3) -> Path:
    doc = snapshot_doc()
    lines = [json.dumps({**doc, "time": doc["time"] + 15 * i}) for i in range(count)]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_policy_eval_trace_carries_the_applied_replicas(tmp_path: Path) -> None:
    # Every snapshot says current = 6; a controller would have applied the last decision.
    result = servectl("policy", "eval", _trace(tmp_path), "--cel", "replicas.current + 1")
    assert result.exit_code == 0, result.output
    decisions = json_lines(result.stdout)
    assert len(result.stdout.splitlines()) == 3  # one compact line each
    assert [d["replicas"] for d in decisions] == [7, 8, 9]
    assert [d["time"] for d in decisions] == [snapshot_doc()["time"] + 15 * i for i in range(3)]


def test_policy_eval_trace_carries_the_policy_state(tmp_path: Path) -> None:
    counter = (
        '{"replicas": 10 + (has(state.n) ? state.n : 0),'
        ' "state": {"n": has(state.n) ? state.n + 1 : 1}}'
    )
    result = servectl("policy", "eval", _trace(tmp_path), "--cel", counter, "--show-state")
    assert result.exit_code == 0, result.output
    decisions = json_lines(result.stdout)
    assert [d["replicas"] for d in decisions] == [10, 11, 12]
    assert all("state" in d for d in decisions)


# ----------------------------------------------------------------------------- policy test


def test_policy_test_runs_every_library_policy() -> None:
    result = servectl("policy", "test")
    assert result.exit_code == 0, result.output
    for path in POLICY_FILES:
        assert f"PASS policies/{path.name} (" in result.stdout
    assert "FAIL" not in result.stdout


def test_policy_test_reports_a_wrong_expectation(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    policy = tmp_path / "cost-cap.yaml"
    policy.write_text((REPO / "policies" / "cost-cap.yaml").read_text())
    trace = (REPO / "policies" / "tests" / "cost-cap.yaml").read_text()
    wrong = trace.replace(
        "expect: {replicas: 8, reason: COST_CAP}", "expect: {replicas: 7, reason: COST_CAP}"
    )
    assert wrong != trace
    (tmp_path / "tests" / "cost-cap.yaml").write_text(wrong)
    result = servectl("policy", "test", policy)
    assert result.exit_code == 1
    out = flat(result.stdout)
    assert f"FAIL {policy}" in out and "failed)" in out
    assert "replicas: expected 7, got 8" in out


def test_policy_test_without_a_trace_fails(tmp_path: Path) -> None:
    policy = tmp_path / "cost-cap.yaml"
    policy.write_text((REPO / "policies" / "cost-cap.yaml").read_text())
    result = servectl("policy", "test", policy)
    assert result.exit_code == 1
    assert f"no test trace at {tmp_path / 'tests' / 'cost-cap.yaml'}" in flat(result.stderr)


def test_policy_list_names_builtins_and_library() -> None:
    result = servectl("policy", "list")
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    for name in ("servectl", "hpa", "kpa"):
        assert "built-in" in rows[name]
    for path in POLICY_FILES:
        assert rows[path.stem].split()[1:] == ["CEL", f"policies/{path.name}"]


# ----------------------------------------------------------------------------- validate, crds


def test_validate_accepts_the_examples() -> None:
    result = servectl("validate", *EXAMPLES)
    assert result.exit_code == 0, result.output
    for path in EXAMPLES:
        assert f"{path}: ok (" in flat(result.stdout)


def test_validate_names_the_file_line_and_field(tmp_path: Path) -> None:
    source = (REPO / "deploy" / "examples" / "resnet-canary.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "minReplicas:" in text)
    source[line - 1] = source[line - 1].replace("minReplicas: 2", "minReplicas: 30")
    broken = tmp_path / "broken.yaml"
    broken.write_text("\n".join(source) + "\n")
    good = EXAMPLES[0]
    result = servectl("validate", broken, good)
    assert result.exit_code == 1
    message = flat(result.stderr)
    assert f"{broken}: invalid" in message
    assert (
        f"{broken}:{line}: spec.autoscaling.minReplicas: minReplicas (30) is greater than "
        "maxReplicas (20)" in message
    )
    assert f"{good}: ok" in flat(result.stdout)  # the others are still checked


def test_crds_generate_writes_the_committed_crds(tmp_path: Path) -> None:
    result = servectl("crds", "generate", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    committed = sorted((REPO / "deploy" / "crds").glob("*.yaml"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in committed]
    assert len(committed) == 2
    for path in committed:
        assert (tmp_path / path.name).read_text() == path.read_text()
        assert f"wrote {tmp_path / path.name}" in flat(result.stdout)


# ----------------------------------------------------------------------------- known bugs


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _bug(case: str, where: str) -> Any:
    """A case that once crashed with a traceback (``where``), now a regression test."""
    return pytest.param(case, id=case)


@pytest.mark.parametrize(
    "case",
    [
        _bug("minutes-0", "TraceError from traces.truncate escapes _load_trace (main.py:76)"),
        _bug("seed-negative", "numpy ValueError 'expected non-negative integer'; no min=0"),
        _bug("snapshot-missing", "FileNotFoundError from path.read_text() (main.py:280)"),
        _bug("trace-empty", "IndexError on snaps[0] for a `[]` trace (main.py:365)"),
        _bug("state-missing", "FileNotFoundError from state_file.read_text() (main.py:371)"),
        _bug("state-not-a-map", "TypeError from dict(state) in registry.replay (registry.py:66)"),
    ],
)
def test_bad_input_exits_2_with_a_message_not_a_traceback(tmp_path: Path, case: str) -> None:
    args: dict[str, list[str | Path]] = {
        "minutes-0": ["simulate", "--trace", "step", "--minutes", "0", "--json"],
        "seed-negative": ["simulate", "--trace", "step", "--minutes", "1", "--seed", "-1"],
        "snapshot-missing": ["policy", "eval", tmp_path / "missing.json"],
        "trace-empty": ["policy", "eval", _write(tmp_path, "empty.json", "[]")],
        "state-missing": ["policy", "eval", SNAPSHOT, "--state", tmp_path / "missing.json"],
        "state-not-a-map": [
            "policy", "eval", SNAPSHOT, "--state", _write(tmp_path, "state.json", "[1]"),
        ],
    }  # fmt: skip
    result = servectl(*args[case])
    assert result.exit_code == 2, f"exit {result.exit_code}: {result.exception!r}"
    assert "error:" in result.stderr.lower()
