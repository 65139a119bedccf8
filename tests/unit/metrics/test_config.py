"""The metrics config: defaults, YAML (camelCase) aliases, and errors naming the field."""

from __future__ import annotations

import pytest
import yaml

from servectl.metrics import names
from servectl.metrics.config import (
    PART_KEYS,
    SIGNAL_PARTS,
    SIGNALS,
    MetricsConfig,
    MetricsConfigError,
    parse_config,
)


def test_defaults() -> None:
    config = parse_config(None)
    assert config == MetricsConfig()
    assert config.rate_window == "1m"
    assert config.rate_window_seconds == 60.0
    assert config.timeout_seconds == 5.0
    assert config.stale_after_seconds == 60.0
    assert config.percentiles == (50.0, 90.0, 95.0, 99.0)
    assert config.namespaces == ()
    assert (config.cpu_labels.namespace, config.cpu_labels.pod) == ("namespace", "pod")
    assert (config.gpu_labels.namespace, config.gpu_labels.pod) == ("namespace", "pod")
    assert config.pod_info.metric == names.KSM_POD_LABELS == "kube_pod_labels"
    assert config.pod_info.service_label == "label_servectl_io_service"
    assert config.pod_info.revision_label == "label_servectl_io_revision"
    tfs = config.tf_serving_labels
    assert (tfs.namespace, tfs.service, tfs.revision, tfs.pod) == (
        "namespace",
        "service",
        "revision",
        "pod",
    )
    assert config.gateway is None
    assert config.queries == {}
    assert parse_config({}) == config


def test_signals_and_part_keys() -> None:
    assert SIGNALS == ("cpu", "cpu_requests", "gpu", "requests", "latency")
    assert len(PART_KEYS) == sum(len(p) for p in SIGNAL_PARTS.values()) == 17
    assert "latency.count" in PART_KEYS
    assert "latency.busy" in PART_KEYS
    assert "cpu_requests.total" not in PART_KEYS


YAML_DOC = """
rateWindow: 1m30s
timeoutSeconds: 2.5
staleAfterSeconds: 45
percentiles: [50, 99.9]
namespaces: [prod, staging]
cpuLabels: {namespace: kubernetes_namespace, pod: kubernetes_pod_name}
gpuLabels: {namespace: exported_namespace, pod: exported_pod}
podInfo: {metric: my_pod_info, serviceLabel: label_app, revisionLabel: label_rev}
tfServingLabels: {namespace: ns, service: svc, revision: rev, pod: instance_pod}
gateway: sum by (namespace, service, revision, code) (rate(router_requests_total[1m]))
queries:
  latency.rate: 'sum by ({{namespace}}, {{service}}, {{revision}}, le) (rate(x[{{window}}]))'
"""


def test_camel_case_aliases_from_yaml() -> None:
    config = parse_config(yaml.safe_load(YAML_DOC))
    assert config.rate_window == "1m30s"
    assert config.rate_window_seconds == 90.0
    assert config.timeout_seconds == 2.5
    assert config.stale_after_seconds == 45.0
    assert config.percentiles == (50.0, 99.9)
    assert config.namespaces == ("prod", "staging")
    assert config.cpu_labels.namespace == "kubernetes_namespace"
    assert config.cpu_labels.pod == "kubernetes_pod_name"
    assert config.gpu_labels.namespace == "exported_namespace"
    assert config.gpu_labels.pod == "exported_pod"
    assert config.pod_info.metric == "my_pod_info"
    assert config.pod_info.service_label == "label_app"
    assert config.pod_info.revision_label == "label_rev"
    tfs = config.tf_serving_labels
    assert (tfs.namespace, tfs.service, tfs.revision, tfs.pod) == (
        "ns",
        "svc",
        "rev",
        "instance_pod",
    )
    assert config.gateway is not None and "router_requests_total" in config.gateway
    assert set(config.queries) == {"latency.rate"}


def test_python_field_names_are_accepted_too() -> None:
    config = parse_config({"rate_window": "30s", "stale_after_seconds": 10})
    assert config.rate_window_seconds == 30.0
    assert config.stale_after_seconds == 10.0


def test_config_is_frozen() -> None:
    config = MetricsConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.rate_window = "5m"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("window", "seconds"),
    [
        ("1m30s", 90.0),
        ("30s", 30.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("500ms", 0.5),
        ("1m500ms", 60.5),
        ("1h1m1s", 3661.0),
    ],
)
def test_rate_window_seconds(window: str, seconds: float) -> None:
    assert MetricsConfig(rate_window=window).rate_window_seconds == pytest.approx(seconds)


@pytest.mark.parametrize(
    "window",
    # The last three match a naive ([0-9]+unit)+ pattern, but Prometheus refuses them
    # ("not a valid duration string": units must come largest first, each once).
    ["", "1", "m", "1.5m", "1 m", "-1m", "1min", "1M", "5x", "30s1m", "1m1m", "500ms1s"],
)
def test_bad_duration_names_the_field(window: str) -> None:
    with pytest.raises(MetricsConfigError, match=r"^rateWindow: .*not a PromQL duration"):
        parse_config({"rateWindow": window})


@pytest.mark.parametrize("window", ["0s", "0m0s", "0ms"])
def test_a_zero_rate_window_is_refused(window: str) -> None:
    # Prometheus: "duration must be greater than 0"; refuse it at load, not at every tick.
    with pytest.raises(MetricsConfigError, match=r"^rateWindow: .*longer than 0"):
        parse_config({"rateWindow": window})


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"cpuLabels": {"pod": "pod-name"}}, "cpuLabels.pod"),
        ({"gpuLabels": {"namespace": "1ns"}}, "gpuLabels.namespace"),
        ({"podInfo": {"revisionLabel": "label.rev"}}, "podInfo.revisionLabel"),
        ({"podInfo": {"serviceLabel": ""}}, "podInfo.serviceLabel"),
        ({"tfServingLabels": {"revision": "servectl.io/revision"}}, "tfServingLabels.revision"),
    ],
)
def test_bad_label_name_names_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(MetricsConfigError) as info:
        parse_config(doc)
    message = str(info.value)
    assert message.startswith(f"{field}: ")
    assert "not a Prometheus label name" in message


@pytest.mark.parametrize("percentile", [0, 100, -1, 150])
def test_percentiles_out_of_range(percentile: float) -> None:
    with pytest.raises(MetricsConfigError, match=r"^percentiles: .*between 0 and 100"):
        parse_config({"percentiles": [50, percentile]})


def test_percentiles_just_inside_the_range() -> None:
    assert parse_config({"percentiles": [0.1, 99.99]}).percentiles == (0.1, 99.99)


def test_unknown_query_key_lists_the_known_ones() -> None:
    with pytest.raises(MetricsConfigError) as info:
        parse_config({"queries": {"cpu.rate": "x", "latency.busy": "y"}})
    message = str(info.value)
    assert "queries: unknown part(s) cpu.rate;" in message
    assert "latency.busy" in message.split("known:")[1]  # the list of known keys
    assert "cpu.value" in message


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"rateWindw": "1m"}, "rateWindw"),
        ({"podInfo": {"revision": "x"}}, "podInfo.revision"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"staleAfterSeconds": -5}, "staleAfterSeconds"),
        ({"percentiles": "50"}, "percentiles"),
    ],
)
def test_other_errors_name_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(MetricsConfigError, match=rf"^{field}: "):
        parse_config(doc)


def test_several_errors_are_all_reported() -> None:
    with pytest.raises(MetricsConfigError) as info:
        parse_config({"rateWindow": "soon", "percentiles": [100]})
    assert "rateWindow: " in str(info.value)
    assert "percentiles: " in str(info.value)


@pytest.mark.parametrize("doc", [[], "rateWindow: 1m", 3])
def test_a_document_that_is_not_a_mapping(doc: object) -> None:
    with pytest.raises(MetricsConfigError, match="expected a mapping"):
        parse_config(doc)
