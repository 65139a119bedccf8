"""Metric and label names shared by the Prometheus queries and the local exporters.

The local runtime's exporters publish the same names and labels as the in-cluster
sources, so one set of queries serves both (DESIGN §6):

- cAdvisor (kubelet): ``container_cpu_usage_seconds_total{namespace, pod, container}``,
  seconds of CPU, a counter. Pod-level aggregate series have ``container=""`` and the
  pause container is ``container="POD"``; both are excluded.
- kube-state-metrics: ``kube_pod_container_resource_requests{namespace, pod, container,
  resource="cpu", unit="core"}`` and ``kube_pod_labels{namespace, pod, label_<name>}``
  (pod label ``servectl.io/revision`` becomes ``label_servectl_io_revision``; KSM v2 needs
  ``--metric-labels-allowlist=pods=[servectl.io/service,servectl.io/revision]``).
- dcgm-exporter: ``DCGM_FI_DEV_GPU_UTIL`` (duty cycle, percent) and ``DCGM_FI_DEV_FB_USED``
  (framebuffer used, MiB), labelled ``gpu, UUID, modelName, Hostname`` and, in Kubernetes
  mode, ``namespace, pod, container`` of the pod holding the device.
- TF Serving (``--monitoring_config_file``): ``:tensorflow:serving:request_count{model_name,
  status}`` (status is the gRPC code name, ``OK`` on success) and the histogram
  ``:tensorflow:serving:request_latency{model_name, API, entrypoint}`` in microseconds.
  TF Serving has no version label: the scrape adds ``namespace, service, revision, pod``
  from the pod's labels (deploy/prometheus/scrape-config.yaml).
"""

from __future__ import annotations

# --- pod labels servectl puts on every replica (Kubernetes pods and local replicas)
POD_LABEL_SERVICE = "servectl.io/service"
POD_LABEL_REVISION = "servectl.io/revision"

# --- cAdvisor
CADVISOR_CPU = "container_cpu_usage_seconds_total"

# --- kube-state-metrics
KSM_REQUESTS = "kube_pod_container_resource_requests"
KSM_POD_LABELS = "kube_pod_labels"
KSM_LABEL_SERVICE = "label_servectl_io_service"
KSM_LABEL_REVISION = "label_servectl_io_revision"

# --- dcgm-exporter
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"

# --- TF Serving
TFS_REQUEST_COUNT = ":tensorflow:serving:request_count"
TFS_REQUEST_LATENCY = ":tensorflow:serving:request_latency"  # _bucket, _sum, _count
TFS_STATUS_OK = "OK"


def tf_serving_latency_bounds_us() -> tuple[float, ...]:
    """TF Serving's request_latency bucket upper bounds in µs, without +Inf.

    ``monitoring::Buckets::Exponential(10, 1.8, 33)``: 33 bounds 10 x 1.8^k, built by
    repeated multiplication as TensorFlow does.
    """
    bounds = []
    bound = 10.0
    for _ in range(33):
        bounds.append(bound)
        bound *= 1.8
    return tuple(bounds)


TFS_LATENCY_BOUNDS_US = tf_serving_latency_bounds_us()
