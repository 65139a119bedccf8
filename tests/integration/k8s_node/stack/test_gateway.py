"""Traefik on the real node as a conformant Gateway: installed as a user installs it, it
accepts an HTTPRoute (its status says Accepted and ResolvedRefs), splits requests entering
on 127.0.0.1 between two Services by the route's weights, sends a header match to one
backend only, and follows a weight change in place. Every request goes to 127.0.0.1."""

from __future__ import annotations

import collections
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes

from servectl.testing.k8s import gateway, images
from servectl.testing.k8s.node import Node
from tests.integration.k8s_node.conftest import until

HTTPD = "servectl.test/httpd:1"
NS = "shop"
HOST = "shop.test"
"""The route's hostname: on the package's Gateway, servectl's routes are the other ones."""


def backend(name: str) -> list[dict[str, Any]]:
    """A pod answering its own name at /, and its Service."""
    script = (
        "mkdir -p /tmp/www && echo $POD > /tmp/www/index.html && echo ok > /tmp/www/healthz"
        " && exec /bin/busybox httpd -f -p 8080 -h /tmp/www"
    )
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": HTTPD,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/busybox", "sh", "-c", script],
                        "env": [{"name": "POD", "value": name}],
                        "readinessProbe": {
                            "httpGet": {"path": "/healthz", "port": 8080},
                            "periodSeconds": 1,
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
    ]


def route(weights: dict[str, int], header_to: str | None = None) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    if header_to is not None:
        rules.append(
            {
                "matches": [{"headers": [{"name": "x-variant", "value": "b"}]}],
                "backendRefs": [{"name": header_to, "port": 80, "weight": 1}],
            }
        )
    rules.append(
        {"backendRefs": [{"name": n, "port": 80, "weight": w} for n, w in weights.items()]}
    )
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": NS},
        "spec": {
            "parentRefs": [{"name": gateway.GATEWAY, "namespace": gateway.NAMESPACE}],
            "hostnames": [HOST],
            "rules": rules,
        },
    }


def ask(port: int, count: int, headers: dict[str, str] | None = None) -> collections.Counter[str]:
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        sent = {"Host": HOST, **(headers or {})}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                seen[answer.read().decode().strip()] += 1
        except OSError as error:
            seen[f"error: {error}"] += 1
    return seen


def route_conditions(node: Node) -> dict[str, str]:
    status, answer = node.cluster.request(
        "GET", f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/shop"
    )
    parents = (answer.get("status") or {}).get("parents") or [] if status == 200 else []
    return {c["type"]: c["status"] for p in parents for c in p.get("conditions", [])}


def test_the_gateway_splits_by_weight_and_routes_a_header_to_one_backend(
    node: Node, traefik: gateway.Ports, tmp_path: Path
) -> None:
    try:
        _splits(node, traefik, tmp_path)
    finally:  # the node goes on serving the package's other tests
        node.cluster.request("DELETE", f"/api/v1/namespaces/{NS}")


def _splits(node: Node, traefik: gateway.Ports, tmp_path: Path) -> None:
    images.httpd_test_image(tmp_path / "httpd.tar", HTTPD)
    node.load_image(tmp_path / "httpd.tar")
    node.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
    node.apply(backend("shop-a") + backend("shop-b"))
    core = kubernetes.client.CoreV1Api(node.cluster.api_client())

    def both_ready() -> bool:
        pods = core.list_namespaced_pod(NS).items
        return len(pods) == 2 and all(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods
        )

    until(both_ready, "both backends Ready")
    node.apply([route({"shop-a": 90, "shop-b": 10}, header_to="shop-b")])
    until(
        lambda: route_conditions(node) == {"Accepted": "True", "ResolvedRefs": "True"},
        "the HTTPRoute Accepted with its references resolved",
    )
    until(
        lambda: ask(traefik.web, 1).get("shop-a") or ask(traefik.web, 1).get("shop-b"),
        "the route answering through the Gateway",
    )
    split = ask(traefik.web, 1000)
    print(f"\n90/10 route, 1000 requests through the Gateway: {dict(split)}")
    assert split["shop-a"] + split["shop-b"] == 1000, split
    assert abs(split["shop-b"] / 1000 - 0.10) <= 0.02, split
    matched = ask(traefik.web, 200, {"x-variant": "b"})
    assert matched == {"shop-b": 200}, matched
    # A weight change is applied in place: the next thousand follow the new weights.
    node.apply([route({"shop-a": 50, "shop-b": 50}, header_to="shop-b")])
    until(lambda: abs(ask(traefik.web, 100)["shop-b"] - 50) <= 5, "the new weights in force")
    split = ask(traefik.web, 1000)
    print(f"50/50 route, 1000 requests: {dict(split)}")
    assert abs(split["shop-b"] / 1000 - 0.50) <= 0.02, split
