"""The benchmark harness configures kube-scheduler's extender with the chart's managed resources.

``bench/k8s_harness.py`` writes its own scheduler configuration; a name the chart hands to the
extender but the harness does not (``nvidia.com/priority`` was one, issue 56) is checked by
kube-scheduler itself there, finds no node with that extended resource, and leaves the pod Pending
in the benchmark although the chart would schedule it. The harness runs NVIDIA nodes only, so its
list is the chart's NVIDIA names.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from k8s_harness import MANAGED  # noqa: E402

VALUES = yaml.safe_load((ROOT / "deploy/helm/xpupool/values.yaml").read_text())


def test_the_harness_manages_the_charts_nvidia_resources() -> None:
    chart = [n for n in VALUES["extender"]["managedResources"] if n.startswith("nvidia.com/")]
    assert sorted(MANAGED) == sorted(chart)
    assert "nvidia.com/priority" in MANAGED
