"""The streams of bench/vs_hami.py (issue 24): Alibaba trace rows become HAMi pods exactly as the
issue says (``num_gpu`` 1 and ``gpu_milli`` m < 1000 -> ``nvidia.com/gpu: 1``,
``nvidia.com/gpumem-percentage: m/10``, ``nvidia.com/gpucores: m/10``; whole-card tasks
``nvidia.com/gpu: num_gpu`` alone; ``gpu_spec`` -> ``nvidia.com/use-gputype``), and each HAMi stack
annotates its policy. Runs without HAMi or a cluster: only the bench modules are imported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(BENCH))

from hami_stack import HamiStack, webhook_mutated  # noqa: E402
from hami_streams import alibaba_ask, alibaba_stream, make_streams  # noqa: E402
from k8s_harness import PodAsk, ask_requests, hami_pod  # noqa: E402
from xpupool.sim.alibaba import TraceTask  # noqa: E402

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
HEADER += "deletion_time,scheduled_time\n"


def task(num_gpu: int, gpu_milli: int, spec: tuple[str, ...] = ()) -> TraceTask:
    return TraceTask("t", 4000, 8192, num_gpu, gpu_milli, spec)


def limits_and_annotations(t: TraceTask) -> tuple[dict[str, str], dict[str, str]]:
    ask = alibaba_ask(t, "p-00000")
    assert ask is not None
    pod = hami_pod(ask, "hami-scheduler")
    limits = dict(pod["spec"]["containers"][0]["resources"]["limits"])
    del limits["cpu"], limits["memory"]  # every stream's pods ask the same host share
    return limits, pod["metadata"]["annotations"]


def test_a_share_asks_gpumem_percentage_and_gpucores_of_m_over_10() -> None:
    limits, annotations = limits_and_annotations(task(1, 460))
    assert limits == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": "46",
        "nvidia.com/gpucores": "46",
    }
    assert annotations == {}


def test_a_whole_card_task_asks_the_card_count_alone() -> None:
    assert limits_and_annotations(task(8, 1000))[0] == {"nvidia.com/gpu": "8"}
    assert limits_and_annotations(task(1, 1000))[0] == {"nvidia.com/gpu": "1"}


def test_gpu_spec_becomes_use_gputype_as_hami_lists_it() -> None:
    _, annotations = limits_and_annotations(task(1, 500, ("V100M32", "A10")))
    assert annotations == {"nvidia.com/use-gputype": "V100M32,A10"}


def test_a_cpu_task_is_left_out_and_an_odd_share_is_rounded_up() -> None:
    assert alibaba_ask(task(0, 0), "p") is None
    limits, _ = limits_and_annotations(task(1, 235))
    assert limits["nvidia.com/gpumem-percentage"] == limits["nvidia.com/gpucores"] == "24"


def test_the_converted_pods_read_back_as_the_tasks_engine_requests() -> None:
    """xpupool's own pod decoder sees what the task asked: a whole exclusive card for the bare
    count, 460 thousandths of memory and compute for m = 460 (the stranded-capacity target)."""
    whole = alibaba_ask(task(2, 1000), "a")
    share = alibaba_ask(task(1, 460), "b")
    assert whole is not None and share is not None
    got = ask_requests([whole, share])
    assert got["a"].devices.count == 2 and got["a"].devices.memory_permille is None
    assert got["b"].devices.memory_permille == 460 and got["b"].devices.core_permille == 460


def test_the_stream_takes_the_first_gpu_tasks_in_file_order(tmp_path: Path) -> None:
    csv = tmp_path / "pods.csv"
    csv.write_text(
        HEADER
        + "t0,1000,1024,0,0,,LS,Running,0,10,0\n"
        + "t1,1000,1024,1,810,,LS,Running,1,10,1\n"
        + "t2,1000,1024,4,1000,T4,LS,Running,2,10,2\n"
        + "t3,1000,1024,1,320,,LS,Running,3,10,3\n"
    )
    asks = alibaba_stream(2, csv)
    assert [(a.name, a.count, a.memory_pct, a.model) for a in asks] == [
        ("p-00000", 1, 81, None),
        ("p-00001", 4, None, "T4"),
    ]
    assert asks[1].count_only


def test_a_bad_trace_row_names_its_field(tmp_path: Path) -> None:
    csv = tmp_path / "pods.csv"
    csv.write_text(HEADER + "t0,1000,1024,2,500,,LS,Running,0,10,0\n")
    with pytest.raises(ValueError, match=r"gpu_milli"):
        alibaba_stream(5, csv)


def test_hami_stacks_annotate_both_policies_and_burst_is_sent_at_once() -> None:
    ask = alibaba_ask(task(1, 500), "p")
    assert ask is not None
    for policy in ("binpack", "spread"):
        stack = HamiStack(policy=policy)
        pod = stack.pod(ask)
        assert stack.name == f"hami_{policy}"
        assert pod["spec"]["schedulerName"] == "hami-scheduler"
        annotations = pod["metadata"]["annotations"]
        assert annotations["hami.io/node-scheduler-policy"] == policy
        assert annotations["hami.io/gpu-scheduler-policy"] == policy
    with pytest.raises(ValueError, match="policy"):
        HamiStack(policy="fgd")
    (burst,) = make_streams(["burst200"], pods=10, seed=1, burst=30)
    assert len(burst.asks) == 30 and burst.concurrency >= 30


def test_hami_pods_carry_what_its_admission_webhook_would_add() -> None:
    """MutateAdmission (HAMi v2.10.0 pkg/device/nvidia/device.go): a count with whole memory and
    no cores gets gpucores 100; a share keeps its cores; a share without a count gets one."""
    stack = HamiStack(policy="binpack")

    def limits(pod: dict[str, Any]) -> dict[str, str]:
        got = dict(pod["spec"]["containers"][0]["resources"]["limits"])
        del got["cpu"], got["memory"]
        return got

    bare = alibaba_ask(task(2, 1000), "a")
    share = alibaba_ask(task(1, 460), "b")
    assert bare is not None and share is not None
    assert limits(stack.pod(bare)) == {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "100"}
    assert limits(stack.pod(share))["nvidia.com/gpucores"] == "46"
    mib = PodAsk("c", 1, memory_mib=4096)
    assert "nvidia.com/gpucores" not in limits(stack.pod(mib))
    no_count = hami_pod(share, "hami-scheduler")
    del no_count["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert limits(webhook_mutated(no_count))["nvidia.com/gpu"] == "1"
