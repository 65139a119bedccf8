"""``servectl bench --local``'s router and controller parts against the real HAProxy and
Prometheus, shortened (the figures themselves are in docs/benchmarks.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from servectl.backends.local import bench
from servectl.backends.local.router import INSTALL_HINT
from tests.integration.fixtures import require_binary


def _processes_under(path: Path) -> list[int]:
    """Processes whose command line names ``path`` (what a part started under it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if str(path) in cmdline:
            found.append(int(entry))
    return found


def _require_haproxy() -> None:
    if shutil.which("haproxy") is not None:
        return
    message = f"haproxy not found on PATH; {INSTALL_HINT}"
    if os.environ.get("SERVECTL_REQUIRE_HAPROXY") == "1":
        pytest.fail(f"{message} (SERVECTL_REQUIRE_HAPROXY=1)")
    pytest.skip(message)


@pytest.mark.haproxy
def test_the_router_part_measures_an_exact_split_and_the_overhead(tmp_path: Path) -> None:
    _require_haproxy()
    figures = bench.router_figures(
        tmp_path, slow_s=10.0, fast_rate=200.0, fast_s=1.0, latency_requests=200
    )
    by_name = {f.name: f for f in figures}
    slow = by_name["split off exact, ~1 request/s"]
    fast = by_name["split off exact, ~200 requests/s"]
    # 10 requests from a fresh counter, then 200 in a row (two whole 100-request cycles):
    # the counter-and-map split is exact for both.
    assert slow.value == 0, slow.detail
    assert fast.value == 0, fast.detail
    assert "0 errors" in fast.detail and "200 requests" in fast.detail
    for what in ("direct", "through HAProxy"):
        median = by_name[f"fake replica: {what}, median"].value
        assert median is not None and 0 < median < 100
    assert by_name["fake replica: HAProxy adds, median"].value is not None
    assert _processes_under(tmp_path) == []  # HAProxy and the replicas are gone


def test_the_controller_part_times_ticks_with_a_serving_service(tmp_path: Path) -> None:
    _require_haproxy()
    require_binary("prometheus")
    figures = bench.controller_figures(tmp_path, (1,), ticks=3)
    by_name = {f.name: f for f in figures}
    cpu = by_name["CPU per tick, 1 service"]
    wall = by_name["wall time per tick, 1 service"]
    assert cpu.value is not None and 0 < cpu.value < 1000
    assert wall.value is not None and wall.value > 0
    assert "median over 3 ticks" in cpu.detail
    for name in ("HAProxy", "Prometheus"):
        other = by_name[f"{name} CPU, 1 service"]
        assert other.value is not None and other.value >= 0, other.detail
    assert _processes_under(tmp_path) == []  # every replica, HAProxy, Prometheus
