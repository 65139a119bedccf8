"""``servectl exporter ...``: publish local replicas' CPU and GPU under cluster metric names."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from servectl.metrics.exporters.replicas import ReplicaFile

exporter_app = typer.Typer(
    help=(
        "Exporters for the local runtime: serve the CPU and GPU of replicas running as local "
        "processes under the names a Kubernetes cluster's cAdvisor, kube-state-metrics and "
        "dcgm-exporter use, so the same PromQL works on both (docs/exporters.md)."
    ),
    no_args_is_help=True,
)

HostOpt = Annotated[
    str, typer.Option(help="Address to listen on (127.0.0.1: this machine only; :: for IPv6).")
]
OnceOpt = Annotated[
    bool,
    typer.Option(
        "--once", help="Print one scrape (Prometheus text format) to stdout and exit; no server."
    ),
]
_REPLICAS_HELP = (
    'The replica registry: a JSON file the local runtime writes ({"replicas": [{namespace, '
    "service, revision, pod, container, pid, cgroup, cpu_request_cores}, ...]}); re-read when "
    "it changes. Missing means no replicas yet; a malformed version is reported on stderr and "
    "the last good one is kept."
)


def _warn(message: str) -> None:
    typer.echo(f"servectl exporter: {message}", err=True)


def _replica_file(path: Path) -> ReplicaFile:
    from servectl.metrics.exporters.replicas import ReplicaFile

    return ReplicaFile(path, warn=_warn)


def _note_missing(source: ReplicaFile | None) -> None:
    if source is not None and not source.path.exists():
        _warn(
            f"{source.path} does not exist (yet): exporting no replicas until the runtime writes it"
        )


def _emit(registry: CollectorRegistry, source: ReplicaFile | None, once: bool) -> bool:
    """With --once: print one scrape and return True (exit 2 on a malformed file)."""
    if not once:
        return False
    from servectl.cli.console import fail
    from servectl.metrics.exporters.serve import exposition

    if source is not None:
        source.replicas()
        if source.error is not None:
            raise fail(source.error)
    typer.echo(exposition(registry), nl=False)
    return True


def _serve(registry: CollectorRegistry, host: str, port: int, what: str) -> None:
    from servectl.cli.console import fail
    from servectl.metrics.exporters.serve import serve_until_signalled

    def ready(url: str) -> None:
        typer.echo(f"serving {what} at {url} (stop with Ctrl-C or SIGTERM)")

    try:
        serve_until_signalled(registry, host, port, ready)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    _warn("stopped")


@exporter_app.command("cpu")
def cpu_cmd(
    replicas: Annotated[Path, typer.Option("--replicas", help=_REPLICAS_HELP, dir_okay=False)],
    host: HostOpt = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on; 0 picks a free one.")
    ] = 9401,
    once: OnceOpt = False,
) -> None:
    """Serve replicas' CPU use, requests and pod labels at /metrics.

    Exported, per replica in the --replicas file:

    \b
      container_cpu_usage_seconds_total{namespace,pod,container} (counter, cAdvisor's name)
      kube_pod_container_resource_requests{namespace,pod,container,resource="cpu",unit="core"}
      kube_pod_labels{namespace,pod,label_servectl_io_service,label_servectl_io_revision}

    CPU comes from the replica's cgroup (v2 cpu.stat usage_usec, v1 cpuacct.usage), or from
    /proc/<pid>/stat when it has none. A replica whose process or cgroup is gone has no CPU
    series. Example:

    \b
      servectl exporter cpu --replicas ~/.servectl/replicas.json --port 0
    """
    from prometheus_client import CollectorRegistry

    from servectl.metrics.exporters.cgroup import CpuCollector
    from servectl.metrics.exporters.replicas import ReplicaFileCollector

    source = _replica_file(replicas)
    _note_missing(source)
    registry = CollectorRegistry()
    registry.register(CpuCollector(source, warn=_warn))
    registry.register(ReplicaFileCollector(source))
    if not _emit(registry, source, once):
        _serve(registry, host, port, "replica CPU")


@exporter_app.command("gpu")
def gpu_cmd(
    replicas: Annotated[
        Path | None,
        typer.Option(
            "--replicas",
            help=_REPLICAS_HELP + " Without it, devices are exported without pod labels.",
            dir_okay=False,
        ),
    ] = None,
    host: HostOpt = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=0, max=65535, help="Port to listen on (dcgm-exporter's 9400); 0 picks one."
        ),
    ] = 9400,
    once: OnceOpt = False,
    require_gpu: Annotated[
        bool,
        typer.Option(
            "--require-gpu", help="Exit 1 instead of 0 when this machine has no usable GPU."
        ),
    ] = False,
) -> None:
    """Serve GPU duty cycle and memory from NVML, attributed to replicas, at /metrics.

    Exported, per GPU (and per replica with a process on it):

    \b
      DCGM_FI_DEV_GPU_UTIL{gpu,UUID,modelName,Hostname[,namespace,pod,container]} (%)
      DCGM_FI_DEV_FB_USED{same labels} (MiB)
      servectl_gpu_process_sm_util{gpu,UUID,namespace,pod,container} (%, where supported)

    A process belongs to a replica when it is the replica's pid, is in its cgroup, or
    descends from its pid. Without a GPU (no NVML library, no driver, no device) it says
    so on one line and exits 0 without serving (1 with --require-gpu). Check against the
    driver on a GPU machine:

    \b
      servectl exporter gpu --once | grep DCGM_FI_DEV_GPU_UTIL
      nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv
    """
    from prometheus_client import CollectorRegistry

    from servectl.metrics.exporters.gpu import GpuCollector, NoGPU
    from servectl.metrics.exporters.replicas import ReplicaFileCollector

    source = _replica_file(replicas) if replicas is not None else None
    try:
        collector = GpuCollector(source, warn=_warn)
    except NoGPU as exc:
        typer.echo(exc.message(), err=True)
        raise typer.Exit(1 if require_gpu else 0) from None
    _note_missing(source)
    try:
        registry = CollectorRegistry()
        registry.register(collector)
        if source is not None:
            registry.register(ReplicaFileCollector(source))
        if not _emit(registry, source, once):
            _serve(registry, host, port, "GPU metrics")
    finally:
        collector.close()
