"""Output formatting from fixed models: what a person sees in each table and in ``top``'s frame.
Unknown readings are '-', never 0; units stay in the cells."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

from rich.console import Console, RenderableType

from xpupool.client._render import (
    ago,
    devices_table,
    job_detail,
    jobs_table,
    placement_summary,
    queues_table,
)
from xpupool.client._top import Snapshot, bar, frame
from xpupool.client._views import DeviceView, JobView, NodeView, QueueView, QuotaUsageView

NOW = 1_700_000_000.0


def _text(renderable: RenderableType) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return out.getvalue()


def _job(**over: Any) -> JobView:
    fields: dict[str, Any] = {
        "id": 7,
        "name": "train",
        "tenant": "lab",
        "queue": "lab",
        "state": "pending",
        "reason": "A100 devices quota: 2 used + 4 asked > 2 nominal + 0 borrowable",
        "priority": 0,
        "request": {"devices": {"count": 4, "models": ["A100"]}},
        "command": ["python", "train.py"],
        "image": None,
        "env": {"EPOCHS": "3"},
        "on_node_lost": "requeue",
        "created_at": NOW - 90,
        "updated_at": NOW,
        "events": [{"at": NOW - 90, "state": "pending", "reason": "submitted"}],
    }
    return JobView.read({**fields, **over})


def _device(uuid: str, node: str, allocated_mib: int, metrics: dict[str, Any] | None) -> DeviceView:
    return DeviceView.read(
        {
            "uuid": uuid,
            "node": node,
            "site": "bj",
            "index": 0,
            "vendor": "nvidia",
            "model": "NVIDIA A100-SXM4-80GB",
            "canonical_model": "A100-SXM4-80GB",
            "memory_mib": 81920,
            "driver_version": "550",
            "runtimes": {},
            "link_group": None,
            "healthy": True,
            "cordoned": False,
            "allocated_memory_mib": allocated_mib,
            "allocated_core_permille": 0,
            "jobs": [7] if allocated_mib else [],
            "metrics": metrics,
        }
    )


def _node(name: str) -> NodeView:
    return NodeView.read(
        {
            "name": name,
            "site": "bj",
            "status": "ready",
            "schedulable": True,
            "source": "cluster",
            "cpu_milli": 64000,
            "memory_mib": 1 << 20,
            "cpu_allocated_milli": 0,
            "memory_allocated_mib": 0,
            "labels": {},
            "arch": "x86_64",
            "os": "linux",
            "devices": 2,
            "devices_free": 1,
            "last_heartbeat": None,
        }
    )


def _queue() -> QueueView:
    return QueueView.read(
        {
            "name": "lab",
            "tenant": "lab",
            "cohort": "gpu",
            "pending": 1,
            "running": 2,
            "quotas": [
                {
                    "flavor": "A100",
                    "resource": "device_memory_mib",
                    "nominal": 163840,
                    "borrowing_limit": None,
                    "used": 40960,
                }
            ],
        }
    )


def test_ago_counts_down_in_the_largest_unit() -> None:
    assert [ago(NOW - d, NOW) for d in (5, 90, 7200, 200000)] == [
        "5s ago",
        "1m ago",
        "2h ago",
        "2d ago",
    ]
    assert ago(None) == "-"


def test_jobs_table_shows_the_request_when_not_placed() -> None:
    text = _text(jobs_table([_job()], NOW))
    assert "4× A100" in text and "pending" in text and "1m ago" in text


def test_job_detail_calls_out_the_pending_reason_and_events() -> None:
    text = _text(job_detail(_job(), NOW))
    assert "pending reason" in text and "quota" in text
    assert "EPOCHS=3" in text and "submitted" in text and "python train.py" in text


def test_job_detail_lists_each_device_of_an_assignment() -> None:
    device = {
        "uuid": "GPU-1",
        "index": 3,
        "vendor": "nvidia",
        "model": "A100",
        "memory_mib": 20480,
        "core_permille": 250,
        "card_memory_mib": 81920,
    }
    assigned = {
        "replica": 0,
        "allocation_id": 1,
        "node": "bj-a100-0",
        "cpu_milli": 4000,
        "memory_mib": 16384,
        "devices": [device],
    }
    text = _text(job_detail(_job(state="scheduled", assignments=[assigned]), NOW))
    row = next(line for line in text.splitlines() if "bj-a100-0" in line)
    assert row.split()[:5] == ["0", "bj-a100-0", "4", "16Gi", "3"]
    assert "20Gi/80Gi" in row and " 25% " in row and row.endswith("GPU-1")


def test_devices_table_shows_unknown_metrics_as_dash() -> None:
    text = _text(
        devices_table(
            [
                _device("GPU-a", "n1", 20480, {"uuid": "GPU-a", "memory_used_mib": 10240}),
                _device("GPU-b", "n1", 0, None),
            ]
        )
    )
    row_b = next(line for line in text.splitlines() if "GPU-b" in line)
    assert "10Gi" in text and "20Gi/80Gi" in text
    assert row_b.count(" - ") >= 2  # used memory and utilisation unknown, not 0


def test_devices_table_shows_another_tenants_use_as_in_use() -> None:
    """A tenant's listing names its own jobs only; others' use is anonymous (docs/security.md)."""
    mine = _device("GPU-a", "n1", 20480, None)
    theirs = replace(_device("GPU-b", "n1", 0, None), in_use_by_others=True)
    both = replace(mine, uuid="GPU-c", in_use_by_others=True)
    rows = {
        u: next(
            line
            for line in _text(devices_table([mine, theirs, both])).splitlines()
            if line.rstrip().endswith(u)
        )
        for u in ("GPU-a", "GPU-b", "GPU-c")
    }
    assert " 7 " in rows["GPU-a"] and "in use" not in rows["GPU-a"]
    assert "in use (others)" in rows["GPU-b"] and " 7 " not in rows["GPU-b"]
    assert "7, in use (others)" in rows["GPU-c"]


def test_queue_quota_shows_use_nominal_and_unlimited_borrowing() -> None:
    text = _text(queues_table([_queue()]))
    assert "A100 memory: 40Gi/160Gi +∞" in text


def test_bar_fills_in_tenths() -> None:
    assert str(bar(3, 10)) == "███░░░░░░░  30%"
    assert str(bar(1, 0)) == "-"


def test_top_frame_sums_allocated_and_probed_memory_per_site_and_node() -> None:
    snap = Snapshot(
        nodes=[_node("n1"), _node("n2")],
        devices=[
            _device("GPU-a", "n1", 40960, {"uuid": "GPU-a", "memory_used_mib": 30720}),
            _device("GPU-b", "n2", 0, None),
        ],
        queues=[_queue()],
        taken_at=NOW,
    )
    text = _text(frame(snap))
    assert "jobs pending 1 running 2" in text
    site_row = next(line for line in text.splitlines() if line.startswith("bj "))
    assert "1/2" in site_row and "40Gi/160Gi" in site_row and "30Gi" in site_row
    n2_row = next(line for line in text.splitlines() if line.startswith("n2 "))
    assert "0/1" in n2_row and "0Mi/80Gi" in n2_row


def _replica(replica: int, node: str, *devices: tuple[str, int, int, int]) -> dict[str, Any]:
    """A replica's assignment; each device is (model, memory MiB, compute ‰, card memory MiB)."""
    return {
        "replica": replica,
        "allocation_id": replica + 1,
        "node": node,
        "cpu_milli": 1000,
        "memory_mib": 1024,
        "devices": [
            {
                "uuid": f"{node}-{replica}-{i}",
                "index": i,
                "vendor": "nvidia",
                "model": model,
                "memory_mib": memory,
                "core_permille": cores,
                "card_memory_mib": card,
            }
            for i, (model, memory, cores, card) in enumerate(devices)
        ],
    }


L20_QUARTER = ("NVIDIA L20", 11517, 250, 46068)
A100_WHOLE = ("NVIDIA A100-SXM4-80GB", 81920, 1000, 81920)


def test_replicas_with_the_same_placement_are_one_entry() -> None:
    job = _job(
        state="running", assignments=[_replica(r, "sh-l20-0", L20_QUARTER) for r in range(6)]
    )
    assert placement_summary(job) == ["6× 25% L20 on sh-l20-0"]
    text = _text(jobs_table([job], NOW))
    assert text.count("sh-l20-0") == 1 and "NVIDIA L20" not in text


def test_different_placements_stay_apart_in_replica_order() -> None:
    replicas = [
        _replica(0, "sh-l20-1", L20_QUARTER),
        _replica(1, "bj-a100-0", A100_WHOLE, A100_WHOLE),
        _replica(2, "sh-l20-1", L20_QUARTER),
        _replica(3, "bj-a100-0", ("NVIDIA A100-SXM4-80GB", 20480, 0, 81920)),
        _replica(4, "bj-a100-0", A100_WHOLE, A100_WHOLE),
        _replica(5, "bj-h100-0", ("NVIDIA H100 80GB HBM3", 40960, 300, 81559)),
        _replica(6, "bj-h100-0"),
    ]
    assert placement_summary(_job(state="running", assignments=replicas)) == [
        "2× 25% L20 on sh-l20-1",
        "4× A100-SXM4-80GB on bj-a100-0",
        "1× 20Gi A100-SXM4-80GB on bj-a100-0",
        "1× 40Gi 30% H100 80GB HBM3 on bj-h100-0",
        "cpu only on bj-h100-0",
    ]


def test_a_pending_job_shows_what_it_asks_for_all_replicas() -> None:
    asked = {"devices": {"count": 1, "models": ["L20"], "cores": "25%"}, "replicas": 6}
    assert placement_summary(_job(request=asked)) == ["6× 25% L20"]
    asked = {"devices": {"count": 2, "models": ["A100", "H100"], "memory": "40Gi"}}
    assert placement_summary(_job(request=asked)) == ["2× 40Gi A100,H100"]
    assert placement_summary(_job(request={"cpu": "4"})) == ["cpu only"]


def test_compute_shows_in_percent_of_a_card_never_permille() -> None:
    """Requests say 'cores=25%'; what was granted, what is allocated and the quotas say it the same
    way (issue 21: they showed 250‰)."""
    job = _job(state="running", assignments=[_replica(0, "sh-l20-0", L20_QUARTER)])
    device = replace(_device("GPU-a", "n1", 20480, None), allocated_core_permille=125)
    quota = {"flavor": "A100", "resource": "cores_permille", "nominal": 4000, "used": 1500}
    queue = replace(_queue(), quotas=(QuotaUsageView.read({**quota, "borrowing_limit": 500}, "q"),))
    texts = [
        _text(r) for r in (job_detail(job, NOW), devices_table([device]), queues_table([queue]))
    ]
    assert not [t for t in texts if "‰" in t]
    detail, devices, queues = texts
    assert " 25% " in detail
    assert " 12.5% " in devices
    assert "A100 cores: 150%/400% +50%" in queues


def test_devices_table_shows_a_partitions_profile_and_place() -> None:
    card = _device("GPU-a", "n1", 0, None)
    mig = replace(
        card, uuid="MIG-a-4", partition="3g.40gb", partition_of="GPU-a", partition_start=4
    )
    vnpu = replace(card, uuid="n-2-vnpu0", partition="vir05_1c_16g", partition_of="n-2")
    text = _text(devices_table([mig, vnpu]))
    assert "3g.40gb@4" in next(line for line in text.splitlines() if "MIG-a-4" in line)
    row = next(line for line in text.splitlines() if "vnpu0" in line)
    assert "vir05_1c_16g" in row and "vir05_1c_16g@" not in row
