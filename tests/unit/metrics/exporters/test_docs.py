"""docs/exporters.md stays true: its example file, messages and names come from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servectl.metrics import names
from servectl.metrics.exporters.gpu import PROCESS_SM_UTIL, NoGPU
from servectl.metrics.exporters.replicas import ReplicasFileError, parse_replicas

DOC = (Path(__file__).resolve().parents[4] / "docs" / "exporters.md").read_text("utf-8")


def test_the_documented_replicas_file_parses() -> None:
    body = re.search(r"```json\n(.*?)```", DOC, re.S)
    assert body is not None
    (r,) = parse_replicas(body.group(1))
    assert r.cgroup == "/sys/fs/cgroup/cpu/servectl/resnet-v2-0"


def test_the_documented_error_is_what_the_code_prints() -> None:
    example = {"namespace": "d", "service": "s", "revision": "r", "container": "c", "pid": 1}
    doc = {"replicas": [example | {"pod": "a"}, example | {"pod": "b"}, example | {"pod": "c"}]}
    doc["replicas"][2]["pid"] = -1
    with pytest.raises(ReplicasFileError) as info:
        parse_replicas(json.dumps(doc), "replicas.json")
    assert f"`{info.value}`" in DOC


def test_the_documented_no_gpu_line_is_what_the_code_prints() -> None:
    assert NoGPU("NVML library not found (libnvidia-ml.so.1)").message() in DOC


def test_every_exported_name_is_documented() -> None:
    for name in (
        names.CADVISOR_CPU,
        names.KSM_REQUESTS,
        names.KSM_POD_LABELS,
        names.KSM_LABEL_SERVICE,
        names.KSM_LABEL_REVISION,
        names.DCGM_GPU_UTIL,
        names.DCGM_FB_USED,
        PROCESS_SM_UTIL,
        "servectl_exporter_replicas",
        "servectl_exporter_replicas_file_error",
    ):
        assert f"`{name}" in DOC, name
