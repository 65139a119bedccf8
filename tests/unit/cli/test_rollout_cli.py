"""``servectl rollout simulate`` and ``servectl bench --rollouts``, in-process."""

from __future__ import annotations

import json
from pathlib import Path

from servectl.backends.sim import rollout_bench
from tests.unit.cli.helpers import servectl

REPO = Path(__file__).resolve().parents[3]


def test_rollout_simulate_promotes_a_good_canary_and_plots(tmp_path: Path) -> None:
    png = tmp_path / "rollout.png"
    result = servectl(
        "rollout", "simulate", "--trace", "diurnal", "--minutes", "25", "--at", "120",
        "--compare", "argo-style", "--plot", png,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "servectl" in result.stdout and "argo-style" in result.stdout
    # The phase timeline is a result to keep: on stdout, whole, even in a pipe.
    assert "Progressing at 120 s -> Completed" in result.stdout
    assert png.stat().st_size > 10_000


def test_rollout_simulate_json_aborts_an_erroring_canary() -> None:
    result = servectl(
        "rollout", "simulate", "--trace", "diurnal", "--minutes", "15", "--at", "60",
        "--canary-error-rate", "0.05", "--compare", "", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert record["controller"] == "servectl"
    assert record["final_phase"] == "Aborted"
    assert record["lost_unready"] == 0 and record["lost_cut"] == 0


def test_rollout_simulate_reads_a_spec_file() -> None:
    result = servectl(
        "rollout", "simulate", "deploy/examples/bluegreen.yaml", "--trace", "diurnal",
        "--minutes", "15", "--at", "60", "--compare", "", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout.strip().splitlines()[0])
    # autoPromote: false, and the preview gets no traffic in the simulator, so its analysis
    # stays Inconclusive: the rollout waits at the preview, old version serving, nothing lost.
    assert record["final_phase"] == "Progressing"
    assert record["lost"] == 0 and record["revisions"] == ["model-v1", "model-v2"]


def test_rollout_simulate_bad_input_names_the_option(tmp_path: Path) -> None:
    result = servectl("rollout", "simulate", "--compare", "istio", "--minutes", "5")
    assert result.exit_code == 2 and "--compare" in result.output
    result = servectl("rollout", "simulate", "--at", "99999", "--minutes", "5")
    assert result.exit_code == 2 and "--at" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata: {name: m}\n"
        "spec:\n  model: {name: m, basePath: /m}\n  rollout:\n    steps:\n"
        "      - setWeight: 50\n      - setWeight: 20\n"
    )
    result = servectl("rollout", "simulate", bad, "--minutes", "5")
    assert result.exit_code == 2
    assert "steps[1].setWeight" in " ".join(result.output.split())
    no_rollout = tmp_path / "plain.yaml"
    no_rollout.write_text(
        "apiVersion: servectl.io/v1alpha1\nkind: ModelService\nmetadata: {name: m}\n"
        "spec:\n  model: {name: m, basePath: /m}\n"
    )
    result = servectl("rollout", "simulate", no_rollout, "--minutes", "5")
    assert result.exit_code == 2 and "spec.rollout is missing" in result.output


def test_bench_rollouts_unknown_controller() -> None:
    result = servectl("bench", "--rollouts", "--policies", "servectl,nginx")
    assert result.exit_code == 2 and "nginx" in result.output


def test_rollout_bench_record_compares_with_and_without() -> None:
    (record,) = rollout_bench.run_rollout_bench(["diurnal"], ["servectl"])
    rec = record.to_record()
    assert rec["lost"] == 0
    assert abs(rec["slo_delta_pp"]) < 0.5
    assert rec["final_phase"] == "Completed"
    assert rec["rollout_duration_s"] is not None and rec["rollout_duration_s"] > 0
    assert rec["peak_extra_replicas"] == record.peak_extra_replicas >= 0
    assert rec["replica_seconds"] > rec["replica_seconds_no_rollout"]
