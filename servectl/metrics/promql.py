"""The PromQL servectl sends: one query per signal per tick, for every service at once.

Pure: strings in, strings out. Each signal's query is made of *parts* (a rate, a
cumulative total, the newest sample's timestamp...). The parts are joined with ``or``
after each is tagged with a ``servectl_part`` label, so one HTTP round trip returns them
all; :mod:`servectl.metrics.assemble` splits them again. The number of queries per tick is
therefore fixed (at most ``len(SIGNALS)`` plus the optional gateway query), whatever the
number of services, revisions and pods.

Templates use ``{{name}}`` placeholders:

``{{window}}``     the rate window (``MetricsConfig.rate_window``)
``{{namespace}}``  the source's namespace label, ``{{pod}}`` its pod label
``{{service}}`` ``{{revision}}``  TF Serving's target labels (``tfServingLabels``)
``{{match}}``      extra label matchers, with a leading comma: the namespace filter, and
                   for the ``total`` parts the services under analysis
``{{pod_info}}``   one sample per pod with ``service`` and ``revision`` labels (from
                   kube_pod_labels), joined onto cAdvisor and DCGM series
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from servectl.metrics import names
from servectl.metrics.config import PART_KEYS, SIGNAL_PARTS, MetricsConfig, SeriesLabels

#: The label the ``or`` of parts is tagged with.
PART_LABEL = "servectl_part"

_JOIN = "* on ({{namespace}}, {{pod}}) group_left (service, revision) {{pod_info}}"
_CPU = 'container_cpu_usage_seconds_total{container!="", container!="POD"{{match}}}'
_GPU = '{{pod}}!=""{{match}}'
_BY_POD = "by ({{namespace}}, {{pod}})"
_BY_REV = "by ({{namespace}}, {{service}}, {{revision}}"  # closed by the caller
_TFS = '{{{service}}!=""{{match}}}'  # TF Serving series the scrape labelled
_COUNT = names.TFS_REQUEST_COUNT + _TFS
_LATENCY = names.TFS_REQUEST_LATENCY
# The model servers' scrape targets (Prometheus' own `up`, carrying the target labels).
_UP = 'up{{{service}}!="", {{revision}}!=""{{match}}}'
# Per revision: the oldest successful scrape among its targets, or 0 when one of them
# fails (up is 0, so the product is 0). TF Serving creates its request and latency series
# at the first request: a revision scraped fine with no such series has served nothing,
# a measurement of zero; one whose scrape fails is a gap (docs/metrics.md).
_SCRAPED = f"min {_BY_REV}) ({_UP} * timestamp({_UP}))"

DEFAULT_TEMPLATES: dict[str, str] = {
    "cpu.value": f"sum {_BY_POD} (rate({_CPU}[{{{{window}}}}])) {_JOIN}",
    "cpu.total": f"sum {_BY_POD} ({_CPU}) {_JOIN}",
    "cpu.sample_time": f"max {_BY_POD} (timestamp({_CPU})) {_JOIN}",
    "cpu_requests.value": (
        f"sum {_BY_POD} (" + names.KSM_REQUESTS + '{resource="cpu"{{match}}}) ' + _JOIN
    ),
    "gpu.util": f"avg {_BY_POD} (" + names.DCGM_GPU_UTIL + "{" + _GPU + "}) " + _JOIN,
    "gpu.memory": f"sum {_BY_POD} (" + names.DCGM_FB_USED + "{" + _GPU + "}) " + _JOIN,
    "gpu.sample_time": (
        f"max {_BY_POD} (timestamp(" + names.DCGM_GPU_UTIL + "{" + _GPU + "})) " + _JOIN
    ),
    "requests.rate": f"sum {_BY_REV}, status) (rate({_COUNT}[{{{{window}}}}]))",
    "requests.total": f"sum {_BY_REV}, {{{{pod}}}}, status) ({_COUNT})",
    "requests.sample_time": f"max {_BY_REV}) (timestamp({_COUNT}))",
    "requests.scraped": _SCRAPED,
    # Only the buckets strictly between empty and full (0 < cumulative < total): the rest
    # follow from the layout (latencyBoundsUs) and the total, so a revision whose requests
    # span three buckets returns three samples, not 34 (docs/metrics.md).
    "latency.rate": (
        f"(sum {_BY_REV}, le) (rate({_LATENCY}_bucket{_TFS}[{{{{window}}}}])) > 0)"
        f" < on ({{{{namespace}}}}, {{{{service}}}}, {{{{revision}}}}) group_left ()"
        f" sum {_BY_REV}) (rate({_LATENCY}_count{_TFS}[{{{{window}}}}]))"
    ),
    "latency.count": f"sum {_BY_REV}) (rate({_LATENCY}_count{_TFS}[{{{{window}}}}]))",
    "latency.busy": f"sum {_BY_REV}) (rate({_LATENCY}_sum{_TFS}[{{{{window}}}}]))",
    "latency.total": f"sum {_BY_REV}, {{{{pod}}}}, le) ({_LATENCY}_bucket{_TFS})",
    "latency.sample_time": f"max {_BY_REV}) (timestamp({_LATENCY}_count{_TFS}))",
    "latency.scraped": _SCRAPED,
}
assert set(DEFAULT_TEMPLATES) == set(PART_KEYS)

# Any {{...}} is a placeholder, so a misspelt one ({{Window}}, {{pod-info}}) is refused
# at load instead of reaching Prometheus as a parse error every tick.
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
PLACEHOLDERS = ("window", "namespace", "pod", "service", "revision", "match", "pod_info")


class TemplateError(ValueError):
    """A query template uses an unknown placeholder."""


def render_template(template: str, values: Mapping[str, str], *, key: str = "query") -> str:
    """Replace ``{{name}}`` placeholders; an unknown name raises TemplateError naming it."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise TemplateError(
                f"queries.{key}: unknown placeholder {{{{{name}}}}}; "
                f"known: {', '.join('{{' + p + '}}' for p in PLACEHOLDERS)}"
            )
        return values[name]

    # Fragments such as `{container!=""{{match}}}` end in three braces: the placeholder
    # is the innermost pair, so match lazily from the left.
    return _PLACEHOLDER.sub(substitute, template)


def _matcher(label: str, values: Iterable[str]) -> str:
    """``, label=~"a|b"`` or "" when ``values`` is empty. Names are DNS labels (no escaping)."""
    wanted = sorted(set(values))
    if not wanted:
        return ""
    for value in wanted:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", value):
            raise ValueError(f"{value!r} is not a Kubernetes name (lowercase DNS label)")
    return f', {label}=~"{"|".join(wanted)}"'


def pod_info(config: MetricsConfig, source: SeriesLabels, services: Iterable[str] = ()) -> str:
    """One sample per servectl pod with its ``service`` and ``revision`` as labels.

    The pod-info series carries the KSM (``cpuLabels``) namespace/pod label names; they are
    renamed to ``source``'s when those differ, so the join's ``on (...)`` labels match.
    """
    info = config.pod_info
    ksm = config.cpu_labels
    namespaces = _matcher(ksm.namespace, config.namespaces)
    namespaces += _matcher(info.service_label, services)
    selector = f'{info.metric}{{{info.service_label}!=""{namespaces}}}'
    expr = (
        f'label_replace(label_replace({selector}, "service", "$1", "{info.service_label}", '
        f'"(.+)"), "revision", "$1", "{info.revision_label}", "(.+)")'
    )
    for ours, theirs in ((ksm.namespace, source.namespace), (ksm.pod, source.pod)):
        if ours != theirs:
            expr = f'label_replace({expr}, "{theirs}", "$1", "{ours}", "(.*)")'
    return f"max by ({source.namespace}, {source.pod}, service, revision) ({expr})"


@dataclass(frozen=True)
class SignalQuery:
    """One signal's query for this tick and the labels its result is keyed by."""

    signal: str
    promql: str
    parts: tuple[str, ...]


def _values(
    config: MetricsConfig, signal: str, part: str, analysis_services: Iterable[str]
) -> dict[str, str]:
    tfs = config.tf_serving_labels
    if signal in ("cpu", "cpu_requests", "gpu"):
        source = config.gpu_labels if signal == "gpu" else config.cpu_labels
        values = {
            "namespace": source.namespace,
            "pod": source.pod,
            "service": "service",
            "revision": "revision",
            # The cumulative CPU total feeds only the analysis: the pods of analysed services.
            "pod_info": pod_info(config, source, analysis_services if part == "total" else ()),
        }
        namespace_label = source.namespace
    else:
        values = {
            "namespace": tfs.namespace,
            "pod": tfs.pod,
            "service": tfs.service,
            "revision": tfs.revision,
            "pod_info": "",
        }
        namespace_label = tfs.namespace
    match = _matcher(namespace_label, config.namespaces)
    if part == "total" and signal in ("requests", "latency"):
        match += _matcher(tfs.service, analysis_services)
    values["match"] = match
    values["window"] = config.rate_window
    return values


def template(config: MetricsConfig, key: str) -> str:
    """The template in force for ``signal.part``: the config's override or the default."""
    return config.queries.get(key, DEFAULT_TEMPLATES[key])


def build_queries(
    config: MetricsConfig, *, analysis_services: Iterable[str] | None = None
) -> list[SignalQuery]:
    """This tick's queries, one per signal.

    ``analysis_services``: services whose cumulative per-pod counters the rollout analysis
    needs; ``None`` or empty leaves the ``total`` parts of cpu, requests and latency out (they
    are the only parts whose size grows with pods x buckets).
    """
    services = tuple(analysis_services or ())
    queries = []
    for signal, parts in SIGNAL_PARTS.items():
        skip_totals = signal in ("cpu", "requests", "latency") and not services
        used = tuple(p for p in parts if not (p == "total" and skip_totals))
        rendered = []
        for part in used:
            key = f"{signal}.{part}"
            expr = render_template(
                template(config, key), _values(config, signal, part, services), key=key
            )
            rendered.append(f'label_replace({expr}, "{PART_LABEL}", "{part}", "", "")')
        queries.append(SignalQuery(signal, "\n  or ".join(rendered), used))
    if config.gateway:
        queries.append(SignalQuery("gateway", config.gateway, ("rate",)))
    return queries


def check_templates(config: MetricsConfig) -> None:
    """Render every template once so a bad placeholder fails at load time, not mid-run."""
    for key in PART_KEYS:
        signal, part = key.split(".")
        render_template(template(config, key), _values(config, signal, part, ("x",)), key=key)
