"""``servectl bench --local``'s arithmetic and its process readings (the parts that start
HAProxy and Prometheus are in tests/integration/test_local_bench.py)."""

from __future__ import annotations

import os
import statistics
from collections import Counter

import pytest

from servectl.backends.local import bench


def test_an_exact_split_is_zero_requests_off() -> None:
    figure = bench.split_figure(
        "~1 request/s", Counter({"a": 90, "b": 10}), 0, {"a": 90, "b": 10}, 50.0
    )
    assert figure.value == 0
    assert figure.unit == "requests"
    assert "a 90/90, b 10/10" in figure.detail
    assert "100 requests at 2.0/s" in figure.detail


def test_a_split_counts_errors_as_requests_and_reports_the_worst_revision() -> None:
    # 98 answered + 2 errors = 100 requests: exact would be 90/10.
    figure = bench.split_figure("x", Counter({"a": 85, "b": 13}), 2, {"a": 90, "b": 10}, 1.0)
    assert figure.value == 5  # a is 5 short; b is 3 over
    assert "2 errors" in figure.detail


def test_a_revision_that_got_nothing_is_off_by_its_whole_share() -> None:
    figure = bench.split_figure("x", Counter({"a": 100}), 0, {"a": 90, "b": 10}, 1.0)
    assert figure.value == 10
    assert "b 0/10" in figure.detail


def test_overhead_is_routed_minus_direct_at_the_median_and_at_p99() -> None:
    direct = [1.0] * 99 + [2.0]
    routed = [1.5] * 99 + [4.0]
    figures = {f.name: f.value for f in bench.overhead_figures("router", "x", direct, routed)}
    assert figures["x: HAProxy adds, median"] == pytest.approx(0.5)
    assert figures["x: HAProxy adds, p99"] == pytest.approx(bench.p99(routed) - bench.p99(direct))
    assert figures["x: direct, median"] == statistics.median(direct)
    assert bench.p99(routed) > 1.5  # the slow request pulls p99 up


def test_p90_is_an_observed_value() -> None:
    assert bench.p90([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]) == 10.0
    assert bench.p90([3.0]) == 3.0


@pytest.mark.parametrize(
    ("figure", "shown"),
    [
        (bench.Figure("router", "n", 0.0412, "ms"), "0.041 ms"),
        (bench.Figure("demo", "n", 169.4, "s"), "169.4 s"),
        (bench.Figure("demo", "n", 4171, "requests"), "4,171 requests"),
        (bench.Figure("replica", "n", 255.26, "MiB"), "255.3 MiB"),
        (bench.Figure("replica", "n", None, "MiB", "no memory cgroup here"), "—"),
    ],
)
def test_figures_are_shown_with_their_unit(figure: bench.Figure, shown: str) -> None:
    assert figure.shown() == shown
    assert figure.to_record()["unit"] == figure.unit


def test_this_process_has_cpu_time_and_a_proportional_set_size() -> None:
    sum(i * i for i in range(200_000))  # some CPU to count
    used = bench.cpu_seconds(os.getpid())
    assert used is not None and used > 0
    pss = bench.pss_bytes(os.getpid())
    assert pss is not None and pss > 1 << 20


def test_cpu_of_several_processes_is_their_sum() -> None:
    mine = bench.cpu_seconds(os.getpid())
    init = bench.cpu_seconds(1)
    both = bench.cpu_seconds(os.getpid(), 1)
    assert mine is not None and init is not None and both is not None
    assert both >= mine + init - 0.05  # this process ran on a little between the reads


def test_a_gone_process_reads_as_unknown() -> None:
    assert bench.cpu_seconds(None) is None
    assert bench.cpu_seconds() is None
    assert bench.cpu_seconds(os.getpid(), 2**22 + 1) is None
    assert bench.cpu_seconds(2**22 + 1) is None  # above the kernel's pid_max
    assert bench.pss_bytes(2**22 + 1) is None


def test_missing_binaries_are_named_per_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.missing_binaries([bench.Part.ROUTER]) == ["haproxy"]
    assert bench.missing_binaries([bench.Part.CONTROLLER]) == ["haproxy", "prometheus"]
    assert bench.missing_binaries([]) == []
    with pytest.raises(bench.BenchError, match="apt-get install haproxy prometheus"):
        bench.run([bench.Part.DEMO])


def test_a_failed_part_is_a_figure_and_the_next_part_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda name: f"/usr/sbin/{name}")

    def broken(work: object, **_: object) -> list[bench.Figure]:
        raise bench.router_mod.RouterError("HAProxy refuses the config: no")

    def controller(work: object, services: object, **_: object) -> list[bench.Figure]:
        return [bench.Figure(bench.Part.CONTROLLER, "CPU per tick, 1 service", 20.0, "ms")]

    monkeypatch.setattr(bench, "router_figures", broken)
    monkeypatch.setattr(bench, "controller_figures", controller)
    lines: list[str] = []
    figures = bench.run([bench.Part.ROUTER, bench.Part.CONTROLLER], progress=lines.append)
    assert [(f.part, f.name) for f in figures] == [
        ("router", bench.FAILED),
        ("controller", "CPU per tick, 1 service"),
    ]
    failed = figures[0]
    assert failed.value is None
    assert failed.detail.startswith("RouterError: HAProxy refuses the config: no (files: ")
    kept = failed.detail.rsplit("(files: ", 1)[1].rstrip(")")
    assert os.path.isdir(kept)  # kept for its logs
    os.rmdir(kept)
    assert any("router: FAILED" in line for line in lines)
