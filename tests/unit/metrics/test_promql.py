"""The PromQL servectl sends: a constant number of queries, label mapping, templates."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from servectl.metrics import names
from servectl.metrics.config import PART_KEYS, SIGNAL_PARTS, SIGNALS, MetricsConfig, SeriesLabels
from servectl.metrics.promql import (
    DEFAULT_TEMPLATES,
    PART_LABEL,
    PLACEHOLDERS,
    SignalQuery,
    TemplateError,
    _matcher,
    build_queries,
    check_templates,
    pod_info,
    render_template,
)

GATEWAY = "sum by (namespace, service, revision, code) (rate(router_requests_total[1m]))"
REMAPPED_GPU = SeriesLabels(namespace="exported_namespace", pod="exported_pod")


def _configs() -> dict[str, MetricsConfig]:
    return {
        "default": MetricsConfig(),
        "namespaces": MetricsConfig(namespaces=("prod", "dev")),
        "gpu-remapped": MetricsConfig(namespaces=("prod",), gpu_labels=REMAPPED_GPU),
        "custom-labels": MetricsConfig.model_validate(
            {
                "rateWindow": "2m",
                "namespaces": ["prod"],
                "cpuLabels": {"namespace": "kubernetes_namespace", "pod": "kubernetes_pod"},
                "podInfo": {"metric": "pod_info", "serviceLabel": "label_a", "revisionLabel": "b"},
                "tfServingLabels": {"namespace": "ns", "service": "svc", "revision": "rev"},
                "gateway": GATEWAY,
            }
        ),
    }


CONFIGS = _configs()


def _all_queries() -> list[tuple[str, str]]:
    out = []
    for name, config in CONFIGS.items():
        for services in (None, ["a"], ["a", "b"]):
            for q in build_queries(config, analysis_services=services):
                out.append((f"{name}/{q.signal}/{services}", q.promql))
    return out


ALL_QUERIES = _all_queries()


# ----------------------------------------------------------------------------- count


@pytest.mark.parametrize("services", [0, 1, 2, 10, 1000])
def test_one_query_per_signal_whatever_the_number_of_services(services: int) -> None:
    wanted = [f"svc-{i}" for i in range(services)]
    queries = build_queries(MetricsConfig(), analysis_services=wanted)
    assert [q.signal for q in queries] == list(SIGNALS)
    assert len(queries) == 5
    with_gateway = build_queries(MetricsConfig(gateway=GATEWAY), analysis_services=wanted)
    assert len(with_gateway) == 6
    assert with_gateway[-1] == SignalQuery("gateway", GATEWAY, ("rate",))


def test_query_text_does_not_grow_with_services_outside_the_analysis() -> None:
    # Only the analysed services' names enter the text (in the `total` parts' matcher).
    plain = build_queries(MetricsConfig())
    again = build_queries(MetricsConfig(), analysis_services=[])
    assert [q.promql for q in plain] == [q.promql for q in again]


def test_parts_of_each_signal() -> None:
    without = {q.signal: q.parts for q in build_queries(MetricsConfig())}
    assert without == {
        "cpu": ("value", "sample_time"),
        "cpu_requests": ("value",),
        "gpu": ("util", "memory", "sample_time"),
        "requests": ("rate", "sample_time", "scraped"),
        "latency": ("rate", "count", "busy", "sample_time", "scraped"),
    }
    with_analysis = {
        q.signal: q.parts for q in build_queries(MetricsConfig(), analysis_services=["a"])
    }
    assert with_analysis == SIGNAL_PARTS


def test_every_part_is_tagged_with_the_part_label() -> None:
    for q in build_queries(MetricsConfig(), analysis_services=["a"]):
        tags = re.findall(rf'"{PART_LABEL}", "([a-z_]+)", "", ""\)', q.promql)
        assert tuple(tags) == q.parts, q.signal
        assert q.promql.count("\n  or ") == len(q.parts) - 1


def test_total_parts_only_for_the_analysed_services() -> None:
    queries = {
        q.signal: q for q in build_queries(MetricsConfig(), analysis_services=["b", "a", "a"])
    }
    for signal in ("requests", "latency"):
        parts = _split_parts(queries[signal].promql)
        assert 'service=~"a|b"' in parts["total"], signal
        for part, text in parts.items():
            if part != "total":
                assert "service=~" not in text, (signal, part)
    # The per-pod totals are cumulative counters, never rates.
    assert "rate(" not in _split_parts(queries["requests"].promql)["total"]
    assert "rate(" not in _split_parts(queries["latency"].promql)["total"]
    for q in build_queries(MetricsConfig()):
        assert "service=~" not in q.promql


def _split_parts(promql: str) -> dict[str, str]:
    out = {}
    for text in promql.split("\n  or "):
        tag = re.search(rf'"{PART_LABEL}", "([a-z_]+)", "", ""\)$', text)
        assert tag is not None, text
        out[tag.group(1)] = text
    return out


# ----------------------------------------------------------------------------- shape


def _selectors(promql: str) -> list[tuple[str, str]]:
    """(metric, matchers) of every ``metric{...}`` selector."""
    return re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}", promql)


def _strip_strings(promql: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)


@pytest.mark.parametrize(("name", "promql"), ALL_QUERIES, ids=[n for n, _ in ALL_QUERIES])
def test_rendered_queries_are_balanced_and_fully_substituted(name: str, promql: str) -> None:
    assert "{{" not in promql and "}}" not in promql
    bare = _strip_strings(promql)
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for char in bare:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            assert depth[closing[char]] >= 0, name
    assert depth == {"(": 0, "{": 0, "[": 0}, name


@pytest.mark.parametrize("services", [None, ["a", "b"]])
def test_namespace_filter_on_every_selector(services: list[str] | None) -> None:
    config = MetricsConfig(namespaces=("prod", "dev"))
    for q in build_queries(config, analysis_services=services):
        selectors = _selectors(q.promql)
        assert selectors, q.signal
        for metric, matchers in selectors:
            assert re.search(r'(^|[ ,])namespace=~"dev\|prod"', matchers), (q.signal, metric)


def test_namespace_filter_follows_the_label_names() -> None:
    config = CONFIGS["custom-labels"]
    seen = set()
    for q in build_queries(config, analysis_services=["a"]):
        if q.signal == "gateway":
            continue
        for metric, matchers in _selectors(q.promql):
            label = {
                names.CADVISOR_CPU: "kubernetes_namespace",
                names.KSM_REQUESTS: "kubernetes_namespace",
                "pod_info": "kubernetes_namespace",
                names.DCGM_GPU_UTIL: "namespace",  # gpuLabels left at its default
                names.DCGM_FB_USED: "namespace",
            }.get(metric, "ns")  # TF Serving series
            assert re.search(rf'(^|[ ,]){label}=~"prod"', matchers), (q.signal, metric)
            seen.add(metric)
    assert names.TFS_REQUEST_COUNT in seen
    assert names.TFS_REQUEST_LATENCY + "_bucket" in seen
    assert "pod_info" in seen


def test_no_namespace_filter_by_default() -> None:
    for q in build_queries(MetricsConfig(), analysis_services=["a"]):
        assert "namespace=~" not in q.promql


def test_rate_window_is_used_for_every_rate() -> None:
    config = MetricsConfig(rate_window="1m30s")
    text = "\n".join(q.promql for q in build_queries(config, analysis_services=["a"]))
    windows = re.findall(r"\[([^\]]+)\]", text)
    assert windows and set(windows) == {"1m30s"}
    assert text.count("rate(") == len(windows)


def test_tf_serving_label_names_are_used() -> None:
    config = CONFIGS["custom-labels"]
    queries = {q.signal: q.promql for q in build_queries(config, analysis_services=["a"])}
    assert "sum by (ns, svc, rev, status)" in queries["requests"]
    assert "sum by (ns, svc, rev, pod, status)" in queries["requests"]
    assert "sum by (ns, svc, rev, le)" in queries["latency"]
    assert 'svc!=""' in queries["latency"]
    assert 'svc=~"a"' in queries["latency"]
    assert "by (namespace," not in queries["requests"]


# ----------------------------------------------------------------------------- joins


def test_default_pod_info_join() -> None:
    config = MetricsConfig()
    info = pod_info(config, config.cpu_labels)
    assert info.startswith("max by (namespace, pod, service, revision) (")
    assert 'kube_pod_labels{label_servectl_io_service!=""}' in info
    assert '"service", "$1", "label_servectl_io_service", "(.+)"' in info
    assert '"revision", "$1", "label_servectl_io_revision", "(.+)"' in info
    assert "exported" not in info
    cpu = build_queries(config)[0]
    assert cpu.promql.count("* on (namespace, pod) group_left (service, revision) max by") == 2
    analysed = build_queries(config, analysis_services=["a"])[0]
    assert analysed.promql.count("* on (namespace, pod) group_left (service, revision) max by") == 3
    # The CPU total joins only the analysed services' pods.
    assert 'label_servectl_io_service=~"a"' in analysed.promql


def test_gpu_labels_remap_the_pod_info_join() -> None:
    config = MetricsConfig(namespaces=("prod",), gpu_labels=REMAPPED_GPU)
    gpu = next(q for q in build_queries(config) if q.signal == "gpu")
    parts = _split_parts(gpu.promql)
    assert set(parts) == {"util", "memory", "sample_time"}
    for text in parts.values():
        assert "* on (exported_namespace, exported_pod) group_left (service, revision)" in text
        assert "max by (exported_namespace, exported_pod, service, revision)" in text
        # pod-info's (KSM) namespace/pod labels are copied to the names dcgm-exporter uses.
        assert '"exported_namespace", "$1", "namespace", "(.*)"' in text
        assert '"exported_pod", "$1", "pod", "(.*)"' in text
        assert 'exported_pod!=""' in text
        assert "by (exported_namespace, exported_pod) (" in text
        # The KSM selector keeps filtering on its own label; DCGM's on the exported one.
        assert 'kube_pod_labels{label_servectl_io_service!="", namespace=~"prod"}' in text
        assert 'exported_namespace=~"prod"' in text
    # CPU keeps the KSM/cAdvisor names: nothing is renamed there.
    cpu = next(q for q in build_queries(config) if q.signal == "cpu")
    assert "exported" not in cpu.promql


def test_pod_info_renames_only_the_labels_that_differ() -> None:
    config = MetricsConfig(gpu_labels=SeriesLabels(pod="exported_pod"))
    info = pod_info(config, config.gpu_labels)
    assert '"exported_pod", "$1", "pod", "(.*)"' in info
    assert '"exported_namespace"' not in info
    assert info.startswith("max by (namespace, exported_pod, service, revision)")


# ----------------------------------------------------------------------------- templates


def test_default_templates_cover_every_part_key() -> None:
    assert set(DEFAULT_TEMPLATES) == set(PART_KEYS)
    used = set()
    for template in DEFAULT_TEMPLATES.values():
        used.update(re.findall(r"\{\{([a-z_]+)\}\}", template))
    assert used == set(PLACEHOLDERS)


def test_override_replaces_one_part() -> None:
    override = (
        "sum by ({{namespace}}, {{service}}, {{revision}}, le) "
        '(rate(my_hist{{{service}}!=""{{match}}}[{{window}}]))'
    )
    config = MetricsConfig(namespaces=("prod",), queries={"latency.rate": override})
    latency = next(q for q in build_queries(config) if q.signal == "latency")
    parts = _split_parts(latency.promql)
    assert parts["rate"] == (
        "label_replace(sum by (namespace, service, revision, le) "
        '(rate(my_hist{service!="", namespace=~"prod"}[1m])), "servectl_part", "rate", "", "")'
    )
    assert names.TFS_REQUEST_LATENCY + "_sum" in parts["busy"]  # the others keep the default


@pytest.mark.parametrize("placeholder", ["{{nope}}", "{{Window}}", "{{pod-info}}", "{{ }}"])
def test_unknown_placeholder_names_key_and_placeholder(placeholder: str) -> None:
    config = MetricsConfig(queries={"requests.rate": f"sum(rate(x[{placeholder}]))"})
    shown = "{{" + placeholder.strip("{} ") + "}}"
    with pytest.raises(TemplateError) as info:
        check_templates(config)
    message = str(info.value)
    assert message.startswith(f"queries.requests.rate: unknown placeholder {shown};")
    assert "{{window}}" in message  # the known ones are listed
    with pytest.raises(TemplateError, match=r"queries\.requests\.rate"):
        build_queries(config)


def test_check_templates_covers_parts_not_queried_this_tick() -> None:
    # latency.total is only rendered during an analysis; a bad one still fails at load.
    config = MetricsConfig(queries={"latency.total": "sum({{bogus}})"})
    build_queries(config)  # no analysis: the part is not rendered
    with pytest.raises(
        TemplateError, match=r"queries\.latency\.total: unknown placeholder \{\{bogus\}\}"
    ):
        check_templates(config)
    with pytest.raises(TemplateError):
        build_queries(config, analysis_services=["a"])


def test_render_template() -> None:
    values = {"service": "svc", "match": ', ns="x"'}
    assert render_template('m{{{service}}!=""{{match}}}', values) == 'm{svc!="", ns="x"}'
    assert render_template("{{ service }}-{{service}}", values) == "svc-svc"
    assert render_template("no placeholders {a}", values) == "no placeholders {a}"
    with pytest.raises(TemplateError, match=r"^queries\.k: unknown placeholder \{\{window\}\}"):
        render_template("{{window}}", values, key="k")


def test_check_templates_accepts_the_defaults() -> None:
    for config in CONFIGS.values():
        check_templates(config)


# ----------------------------------------------------------------------------- matcher


def test_matcher() -> None:
    assert _matcher("namespace", []) == ""
    assert _matcher("namespace", ["b", "a", "b"]) == ', namespace=~"a|b"'
    assert _matcher("svc", ["my-svc-1"]) == ', svc=~"my-svc-1"'


@pytest.mark.parametrize(
    "bad", ["", "Prod", "a|b", 'a"', "a.*", "-a", "a-", "a b", "a\\", "ünïcode", ".*"]
)
def test_matcher_rejects_non_dns_names(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        _matcher("namespace", ["ok", bad])


def test_bad_names_never_reach_a_query() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        build_queries(MetricsConfig(), analysis_services=['a"} or vector(1) #'])
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        build_queries(MetricsConfig(namespaces=("Prod",)))


# ----------------------------------------------------------------------------- promtool


def _promtool() -> str | None:
    found = shutil.which("promtool")
    if found is None and os.environ.get("SERVECTL_REQUIRE_PROMETHEUS") == "1":
        pytest.fail("promtool not on PATH (Debian package `prometheus`), required here")
    return found


def test_promtool_parses_every_rendered_query(tmp_path: Path) -> None:
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    rules = [
        {"record": f"servectl:query_{i}:test", "expr": promql}
        for i, (_, promql) in enumerate(ALL_QUERIES)
    ]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "servectl", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_promtool_catches_a_broken_query(tmp_path: Path) -> None:
    """The check above can fail: promtool does parse each expression."""
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    broken = build_queries(MetricsConfig())[0].promql.replace("group_left (", "group_left ((", 1)
    path = tmp_path / "rules.yaml"
    rule = {"record": "servectl:broken:test", "expr": broken}
    path.write_text(yaml.safe_dump({"groups": [{"name": "servectl", "rules": [rule]}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "parse error" in done.stdout + done.stderr
