"""``servectl exporter cpu|gpu``: --once in-process, serving and SIGTERM in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from servectl.cli import main as cli_main
from servectl.metrics import names
from servectl.metrics.exporters import gpu
from servectl.metrics.exporters.gpu import PROCESS_SM_UTIL
from servectl.testing.exporters import scrape
from servectl.testing.exposition import label_set, parse_samples, samples_named
from tests.unit.metrics.exporters.helpers import (
    FakeDevice,
    FakeNVML,
    NVMLError_LibraryNotFound,
    busy_child,
    end,
    replica,
    write_replicas,
)

REPO = Path(__file__).resolve().parents[4]
runner = CliRunner()


def servectl(*args: str | Path) -> Result:
    return runner.invoke(cli_main.app, [str(arg) for arg in args])


def test_help_teaches_the_names_and_the_replicas_file() -> None:
    result = servectl("exporter", "--help")
    assert result.exit_code == 0 and "cpu" in result.stdout and "gpu" in result.stdout
    cpu = servectl("exporter", "cpu", "--help").stdout
    for name in (names.CADVISOR_CPU, names.KSM_REQUESTS, names.KSM_POD_LABELS, "cpuacct.usage"):
        assert name in cpu
    assert "the local runtime writes" in cpu
    gpu_help = servectl("exporter", "gpu", "--help").stdout
    for name in (names.DCGM_GPU_UTIL, names.DCGM_FB_USED, PROCESS_SM_UTIL, "--require-gpu"):
        assert name in gpu_help
    assert "nvidia-smi" in gpu_help


def test_cpu_once_prints_one_scrape(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    me = replica("self-0", os.getpid(), cpu_request_cores=0.25)
    write_replicas(path, [me])
    result = servectl("exporter", "cpu", "--replicas", path, "--once")
    assert result.exit_code == 0, result.output
    series = parse_samples(result.stdout)
    key = label_set(namespace="default", pod="self-0", container="model-server")
    assert samples_named(series, names.CADVISOR_CPU)[key] > 0  # this test process has used CPU
    assert samples_named(series, names.KSM_REQUESTS) == {
        label_set(namespace="default", pod="self-0", container="model-server", resource="cpu",
               unit="core"): 0.25,
    }  # fmt: skip
    assert series[("servectl_exporter_replicas", frozenset())] == 1


def test_cpu_once_without_the_file_exports_no_replicas(tmp_path: Path) -> None:
    result = servectl("exporter", "cpu", "--replicas", tmp_path / "absent.json", "--once")
    assert result.exit_code == 0
    assert "does not exist (yet)" in result.stderr
    assert samples_named(parse_samples(result.stdout), names.KSM_POD_LABELS) == {}


def test_cpu_once_with_a_malformed_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "replicas.json"
    path.write_text('{"replicas": [{"namespace": "default", "pod": "x"}]}')
    result = servectl("exporter", "cpu", "--replicas", path, "--once")
    assert result.exit_code == 2
    assert "replicas[0].pid: Field required" in result.stderr
    assert result.stdout == ""


def test_gpu_once_with_a_fake_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML([FakeDevice("GPU-0", util=42, used_bytes=2**30, compute=[100])])
    monkeypatch.setattr(gpu, "load_nvml", lambda: nvml)
    path = tmp_path / "replicas.json"
    write_replicas(path, [replica("a-0", 100)])
    result = servectl("exporter", "gpu", "--replicas", path, "--once")
    assert result.exit_code == 0, result.output
    util = samples_named(parse_samples(result.stdout), names.DCGM_GPU_UTIL)
    assert [(dict(k)["pod"], v) for k, v in util.items()] == [("a-0", 42.0)]
    assert nvml.initialised == 0  # shut down after the scrape


@pytest.mark.parametrize(("flag", "code"), [((), 0), (("--require-gpu",), 1)])
def test_gpu_without_a_gpu_says_so_and_does_not_serve(
    monkeypatch: pytest.MonkeyPatch, flag: tuple[str, ...], code: int
) -> None:
    nvml = FakeNVML([], init_error=NVMLError_LibraryNotFound())
    monkeypatch.setattr(gpu, "load_nvml", lambda: nvml)
    absent = "/nonexistent/replicas.json"  # its note would be a second line
    result = servectl("exporter", "gpu", "--replicas", absent, "--port", "0", *flag)
    assert result.exit_code == code
    assert result.stderr == (
        "no GPU: NVML library not found (libnvidia-ml.so.1); GPU duty cycle will be absent "
        "— nothing to export\n"
    )
    assert result.stdout == ""


def test_gpu_on_this_machine_without_a_gpu_exits_0_with_the_message() -> None:
    try:
        gpu.GpuCollector(None).close()
        pytest.skip("this machine has a GPU")
    except gpu.NoGPU:
        pass
    result = servectl("exporter", "gpu", "--port", "0")  # would block if it served
    assert result.exit_code == 0
    assert result.stderr.startswith("no GPU: ") and "nothing to export" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cpu_serves_until_signalled(tmp_path: Path, sig: signal.Signals) -> None:
    path = tmp_path / "replicas.json"
    child = busy_child()
    try:
        write_replicas(path, [replica("busy-0", child.pid)])
        exporter = subprocess.Popen(
            [sys.executable, "-m", "servectl", "exporter", "cpu", "--replicas", str(path),
             "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert exporter.stdout is not None
            line = exporter.stdout.readline()
            assert line.startswith("serving replica CPU at http://127.0.0.1:"), line
            url = line.split(" at ")[1].split()[0]
            series = scrape(url)[1]
            assert label_set(
                namespace="default", pod="busy-0", container="model-server"
            ) in samples_named(series, names.CADVISOR_CPU)
            # The file is re-read: a replica that goes away leaves the next scrape.
            write_replicas(path, [])
            assert samples_named(scrape(url)[1], names.KSM_POD_LABELS) == {}
            exporter.send_signal(sig)
            assert exporter.wait(5) == 0
            assert exporter.stderr is not None and "stopped" in exporter.stderr.read()
        finally:
            if exporter.poll() is None:
                exporter.kill()
            exporter.wait(5)
    finally:
        end(child)
