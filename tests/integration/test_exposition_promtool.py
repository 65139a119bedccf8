"""The exposition builders (servectl.testing.exposition) pass promtool's parser and lint
as the real exporters' text does."""

from __future__ import annotations

import subprocess

from servectl.testing.exporters import Pod, Scenario
from tests.integration.fixtures import require_binary


def test_builders_parse_and_lint_like_the_real_exporters() -> None:
    promtool = require_binary("promtool")
    scenario = Scenario(live=False, spare_gpus=1)
    scenario.add_pod(Pod("p", cpu_cores=0.5, rps=10, error_share=0.1, gpu_util_percent=40))
    scenario.advance(5)

    def lint(text: str) -> tuple[int, str]:
        result = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
        )
        return result.returncode, result.stdout + result.stderr

    assert lint(scenario.render_cadvisor()) == (0, "")
    assert lint(scenario.render_kube_state_metrics()) == (0, "")
    # Exit 3: lint findings only, no parse error; the findings are the real exporters' own.
    code, out = lint(scenario.render_dcgm())
    assert code == 3 and "camelCase" in out
    code, out = lint(scenario.render_tf_serving("p"))
    assert code == 3 and 'should have "_total" suffix' in out and "no help text" in out
    assert lint("broken{ 1\n")[0] == 1
