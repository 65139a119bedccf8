"""``servectl controller --kubernetes``: the in-cluster controller (docs/kubernetes.md)."""

from __future__ import annotations

import logging
import signal
from typing import Any

from servectl.cli.console import fail


def run_controller(
    *,
    kubeconfig: str | None,
    context: str | None,
    namespaces: list[str],
    prometheus_url: str | None,
    traffic: str,
    gateway: str | None,
    http_listener: str | None = None,
    grpc_listener: str | None = None,
    hostnames: str | None = None,
    grpc_hostnames: str | None = None,
    leader_elect: bool,
    lease_name: str,
    lease_namespace: str | None,
    probe_port: int,
    metrics_port: int,
    period: float,
    rate_window: str = "1m",
) -> None:
    import os

    from servectl.backends.kubernetes import objects as obj
    from servectl.backends.kubernetes.controller import Controller, ControllerConfig, identity
    from servectl.backends.kubernetes.kube import Kube, KubeError, load_api_client
    from servectl.backends.kubernetes.leader import LeaseConfig

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if traffic not in (obj.TrafficProvider.GATEWAY, obj.TrafficProvider.SERVICE):
        raise fail(f"--traffic {traffic!r}: use gateway or service", 2)
    parent: tuple[str, str] | None = None
    if gateway:
        ns, _, name = gateway.rpartition("/")
        if not name:
            raise fail(f"--gateway {gateway!r}: give NAME or NAMESPACE/NAME", 2)
        parent = (ns, name)
    elif traffic == obj.TrafficProvider.GATEWAY:
        raise fail(
            "--gateway: required with --traffic gateway (routes without a parent attach to "
            "no Gateway); name it as NAME or NAMESPACE/NAME, or use --traffic service",
            2,
        )
    for flag, pattern in (("--hostnames", hostnames), ("--grpc-hostnames", grpc_hostnames)):
        problem = obj.hostname_pattern_problem(pattern)
        if problem:
            raise fail(f"{flag} {pattern!r}: {problem}", 2)
    if period <= 0:
        raise fail(f"--period {period}: must be > 0 seconds", 2)
    from servectl.metrics.config import MetricsConfigError, parse_config

    try:
        metrics = parse_config({"rateWindow": rate_window})
    except MetricsConfigError as exc:
        raise fail(f"--rate-window {rate_window!r}: {str(exc).split(': ', 1)[-1]}", 2) from None
    try:
        api = load_api_client(kubeconfig, context)
    except KubeError as exc:
        raise fail(exc.message + " (give --kubeconfig, or run in a pod)", 1) from None
    lease_ns = lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
    config = ControllerConfig(
        namespaces=tuple(namespaces),
        period_s=period,
        options=obj.Options(
            traffic=traffic,
            gateway=parent,
            http_listener=http_listener or None,
            grpc_listener=grpc_listener or None,
            hostnames=hostnames or None,
            grpc_hostnames=grpc_hostnames or None,
        ),
        prometheus_url=prometheus_url,
        metrics=metrics,
        leader_elect=leader_elect,
        lease=LeaseConfig(namespace=lease_ns, name=lease_name, identity=identity()),
    )
    controller = Controller(Kube(api), config)
    log = logging.getLogger("servectl.kubernetes")

    def stop(signum: int, frame: Any) -> None:
        log.info("signal %d: stopping (the Lease is released)", signum)
        controller.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    controller.serve(probe_port, metrics_port)
    try:
        controller.start()
    except KubeError as exc:
        controller.stop()
        raise fail(f"cannot watch the cluster: {exc}", 1) from None
    scope = ", ".join(namespaces) if namespaces else "all namespaces"
    log.info(
        "watching ModelServices in %s; traffic: %s; leader election: %s",
        scope,
        traffic,
        f"Lease {lease_ns}/{lease_name}" if leader_elect else "off",
    )
    controller.run()
