"""deploy/prometheus passes promtool: the rules load, their unit tests pass, and a
prometheus.yml made of scrape-config.yaml's jobs plus the rules is a valid config.

Needs ``promtool`` (Debian package ``prometheus``): skipped without it, failed in CI
(``SERVECTL_REQUIRE_PROMETHEUS=1``). The rules against a real Prometheus and the scrape
job's relabelling are in tests/integration/test_deploy_prometheus_live.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.fixtures import DEPLOY_PROMETHEUS as DEPLOY
from tests.integration.fixtures import require_binary, without_kubernetes_sd

RULES = DEPLOY / "recording-rules.yaml"
RULE_TESTS = DEPLOY / "recording-rules.test.yaml"
SCRAPE_CONFIG = DEPLOY / "scrape-config.yaml"


@pytest.fixture
def promtool() -> str:
    return require_binary("promtool")


def _run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=60, check=False
    )


def _assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"


def test_recording_rules_pass_promtool_check(promtool: str) -> None:
    result = _run(promtool, "check", "rules", RULES)
    _assert_ok(result)
    assert "SUCCESS" in result.stdout


def test_recording_rules_unit_tests_pass(promtool: str) -> None:
    # recording-rules.test.yaml names its rule file relative to itself.
    _assert_ok(_run(promtool, "test", "rules", RULE_TESTS))


def _check_config(promtool: str, jobs: list[dict[str, Any]], path: Path) -> str:
    config: dict[str, Any] = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": [str(RULES)],
        "scrape_configs": jobs,
    }
    path.write_text(yaml.safe_dump(config))
    result = _run(promtool, "check", "config", path)
    _assert_ok(result)
    return result.stdout


def test_scrape_config_with_the_rules_is_a_valid_prometheus_config(
    promtool: str, tmp_path: Path
) -> None:
    jobs = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    # As written, where this promtool has Kubernetes discovery (upstream builds do).
    original = tmp_path / "original.yml"
    original.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "scrape_configs": jobs}))
    result = _run(promtool, "check", "config", original)
    if "field kubernetes_sd_configs not found" not in result.stdout + result.stderr:
        _assert_ok(result)
    # Always: the same jobs on file discovery, so that the relabelling is checked too.
    swapped = without_kubernetes_sd(jobs, tmp_path / "sd.json")
    stdout = _check_config(promtool, swapped, tmp_path / "prometheus.yml")
    assert "SUCCESS: 13 rules found" in stdout


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    # The checks above would pass vacuously if promtool accepted anything.
    broken = tmp_path / "broken.yaml"
    broken.write_text(RULES.read_text().replace("[1m]", "[1m", 1))
    assert _run(promtool, "check", "rules", broken).returncode != 0


def test_rule_names_follow_level_metric_operations() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = [r["record"] for g in groups for r in g["rules"] if "record" in r]
    assert recorded, "no recording rules"
    for name in recorded:
        level, metric, operations = name.split(":")
        assert level == "servectl" and metric and operations, name


def test_the_tf_serving_job_labels_series_from_the_pod() -> None:
    [job] = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
    mapped = {
        r["target_label"]: r["source_labels"]
        for r in job["relabel_configs"]
        if r.get("target_label") and not r["target_label"].startswith("__")
    }
    assert mapped["namespace"] == ["__meta_kubernetes_namespace"]
    assert mapped["pod"] == ["__meta_kubernetes_pod_name"]
    assert mapped["service"] == ["__meta_kubernetes_pod_label_servectl_io_service"]
    assert mapped["revision"] == ["__meta_kubernetes_pod_label_servectl_io_revision"]
    assert job["metrics_path"] == "/monitoring/prometheus/metrics"
