"""Every table the CLI prints fits the terminal (80 columns when it is unknown) without breaking a
state, an id or a number: only free text (reasons, names, placements) wraps, at spaces.

Built from fixed models with long reasons and names (issue 21: ``succeeded`` wrapped inside the word
at 80 columns), rendered as ``xpupool`` prints them, plain text at the width given.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console, RenderableType

from xpupool.client._cli_common import console, console_width
from xpupool.client._render import (
    audit_table,
    devices_table,
    job_detail,
    jobs_table,
    nodes_table,
    queues_table,
    sites_table,
    tenants_table,
    tokens_table,
)
from xpupool.client._top import Snapshot, frame
from xpupool.client._views import (
    JOB_STATES,
    DeviceView,
    JobView,
    NodeView,
    QueueView,
    SiteView,
    TaintView,
)
from xpupool.server.schemas.audit import AuditEntry
from xpupool.server.schemas.models import CatalogModel
from xpupool.server.schemas.tenants import Tenant, Token

NOW = 1_700_000_000.0
LONG_REASON = (
    "0/14 nodes fit: 8 insufficient device memory, 6 model not allowed; A100 devices quota: "
    "2 used + 4 asked > 2 nominal + 0 borrowable"
)
UUID = "GPU-5f8e7c52-3a1b-4e4f-9d6c-1a2b3c4d5e6f"


def _lines(renderable: RenderableType, width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue().splitlines()


def _fits(lines: list[str], width: int = 80) -> None:
    too_long = [line for line in lines if len(line.rstrip()) > width]
    assert not too_long, "\n".join(too_long)


def _words(lines: list[str]) -> set[str]:
    """Every word printed, without the punctuation that ends it in a title or a sentence."""
    return {w.strip(",;()") for line in lines for w in re.split(r"[\s│┃]+", line) if w}


def _assignment(replica: int, node: str = "sh-l20-0") -> dict[str, Any]:
    device = {
        "uuid": UUID,
        "index": replica % 8,
        "vendor": "nvidia",
        "model": "NVIDIA L20",
        "memory_mib": 11517,
        "core_permille": 250,
        "card_memory_mib": 46068,
    }
    return {
        "replica": replica,
        "allocation_id": replica + 1,
        "node": node,
        "cpu_milli": 4000,
        "memory_mib": 16384,
        "devices": [device],
    }


def _job(job_id: int, state: str, **over: Any) -> JobView:
    fields: dict[str, Any] = {
        "id": job_id,
        "name": "finetune-llama-70b-on-shanghai-l20-with-lora",
        "tenant": "research-vision",
        "queue": "research-vision",
        "state": state,
        "reason": LONG_REASON,
        "priority": 100,
        "request": {"devices": {"count": 1, "models": ["L20"], "cores": "25%"}, "replicas": 6},
        "command": ["python", "train.py", "--epochs", "30", "--data", "/data/a/very/long/path"],
        "image": None,
        "env": {"EPOCHS": "3", "WANDB_PROJECT": "a-long-project-name-for-the-experiments"},
        "on_node_lost": "requeue",
        "created_at": NOW - 90,
        "updated_at": NOW,
        "events": [{"at": NOW - 90, "state": state, "reason": LONG_REASON}],
    }
    return JobView.read({**fields, **over})


def _device(index: int, jobs: list[int]) -> DeviceView:
    return DeviceView.read(
        {
            "uuid": UUID,
            "node": "bj-a100-12",
            "site": "beijing",
            "index": index,
            "vendor": "nvidia",
            "model": "NVIDIA A100-SXM4-80GB",
            "canonical_model": "A100-SXM4-80GB",
            "memory_mib": 81920,
            "driver_version": "550.54.15",
            "runtimes": {},
            "link_group": None,
            "healthy": False,
            "cordoned": False,
            "allocated_memory_mib": 81510,
            "allocated_core_permille": 1000,
            "committable_memory_mib": 81920,
            "committable_core_permille": 1000,
            "jobs": jobs,
            "metrics": {"uuid": UUID, "memory_used_mib": 81000, "utilization_pct": 99.0},
        }
    )


def _node(name: str, status: str = "ready", schedulable: bool = True) -> NodeView:
    return NodeView.read(
        {
            "name": name,
            "site": "shanghai",
            "status": status,
            "schedulable": schedulable,
            "source": "cluster",
            "cpu_milli": 192000,
            "memory_mib": 1536 * 1024,
            "cpu_allocated_milli": 123500,
            "memory_allocated_mib": 1000 * 1024,
            "labels": {},
            "arch": "x86_64",
            "os": "linux",
            "devices": 8,
            "devices_free": 3,
            "last_heartbeat": NOW - 7200,
        }
    )


def _queue() -> QueueView:
    quotas = [
        {
            "flavor": flavor,
            "resource": resource,
            "nominal": nominal,
            "borrowing_limit": None,
            "used": nominal // 2,
        }
        for flavor, resource, nominal in (
            ("A100", "devices", 4),
            ("A100-SXM4-80GB", "device_memory_mib", 163840),
            ("ascend:910B", "cores_permille", 4000),
        )
    ]
    return QueueView.read(
        {
            "name": "research-vision",
            "tenant": "research-vision",
            "cohort": "shared-gpu-cohort",
            "max_priority": 1000,
            "pending": 1234,
            "running": 567,
            "quotas": quotas,
        }
    )


STATES = list(JOB_STATES)


def test_jobs_table_fits_80_columns_and_keeps_every_state_whole() -> None:
    jobs = [
        _job(1000 + i, state, assignments=[_assignment(r) for r in range(6)])
        for i, state in enumerate(STATES)
    ]
    lines = _lines(jobs_table(jobs, NOW))
    _fits(lines)
    words = _words(lines)
    for state in STATES:
        assert state in words, f"{state!r} broken:\n" + "\n".join(lines)
    for job_id in range(1000, 1000 + len(STATES)):
        assert str(job_id) in words
    assert "research-vision" in words  # tenant and queue names are never broken
    for word in ("insufficient", "borrowable", "sh-l20-0"):  # free text wraps at spaces
        assert word in words, f"{word!r} broken:\n" + "\n".join(lines)


def test_an_admins_jobs_table_of_several_tenants_keeps_reasons_readable() -> None:
    jobs = [
        _job(1, "pending"),
        _job(2, "succeeded", tenant="nlp", queue="nlp-batch", reason="all replicas exited 0"),
    ]
    lines = _lines(jobs_table(jobs, NOW))
    _fits(lines)
    words = _words(lines)
    for word in ("research-vision", "nlp-batch", "succeeded", "insufficient", "borrowable"):
        assert word in words, f"{word!r} broken:\n" + "\n".join(lines)


@pytest.mark.parametrize("width", [80, 100, 60])
def test_job_detail_fits_and_keeps_ids_whole(width: int) -> None:
    job = _job(7, "running", assignments=[_assignment(r) for r in range(3)])
    lines = _lines(job_detail(job, NOW), width)
    _fits(lines, width)
    assert "running" in _words(lines)
    if width >= 80:
        assert "sh-l20-0" in _words(lines)


def test_devices_table_fits_and_keeps_states_and_numbers_whole() -> None:
    lines = _lines(devices_table([_device(i, [1001, 1002, 1003]) for i in range(3)]))
    _fits(lines)
    words = _words(lines)
    assert "unhealthy" in words and "79.6Gi/80Gi" in words and "bj-a100-12" in words
    assert "left out to fit:" in lines[0] and "uuid" in lines[0]  # an id: left out whole, said so


def test_nodes_table_fits() -> None:
    nodes = [_node("sh-910b-long-name-0"), _node("sh-910b-long-name-1", "lost", False)]
    lines = _lines(nodes_table(nodes, NOW))
    _fits(lines)
    words = _words(lines)
    for word in ("ready", "lost,cordoned", "sh-910b-long-name-1", "1000Gi/1536Gi", "3/8"):
        assert word in words, "\n".join(lines)


def test_nodes_table_shows_each_taint_as_kubectl_writes_it() -> None:
    tainted = replace(
        _node("gpu-0"),
        taints=(TaintView("gpu", "true", "NoSchedule"), TaintView("spot", "", "PreferNoSchedule")),
    )
    lines = _lines(nodes_table([tainted, _node("cpu-0")], NOW), width=120)
    _fits(lines, 120)
    words = _words(lines)
    assert "gpu=true:NoSchedule" in words and "spot:PreferNoSchedule" in words, "\n".join(lines)


def test_nodes_and_sites_tables_show_link_domains() -> None:
    """Each node's link domain in its row (said once in the title when every node is in one),
    and each site's domains with their nodes and free cards; nothing for a site without."""
    zoned = [replace(_node("sh-0"), link_domain="zone-1"), replace(_node("sh-1"), link_domain=None)]
    words = _words(_lines(nodes_table(zoned, NOW), width=120))
    assert "zone-1" in words and "-" in words
    title = _lines(nodes_table([zoned[0]], NOW), width=120)[0]
    assert "zone-1" in title, title
    plain = _lines(nodes_table([_node("sh-0"), _node("sh-1")], NOW), width=60)
    assert "domain" not in "\n".join(plain), "\n".join(plain)  # a pool without domains
    site = {
        "name": "shanghai", "nodes": 3, "nodes_ready": 3, "devices": 24, "devices_free": 20,
        "by_model": {"L20": 24},
        "domains": [
            {"name": "zone-1", "nodes": 2, "devices": 16, "devices_free": 12},
            {"name": None, "nodes": 1, "devices": 8, "devices_free": 8},
        ],
    }  # fmt: skip
    plain = {**site, "name": "beijing", "domains": [site["domains"][1]]}  # type: ignore[index]
    lines = _lines(sites_table([SiteView.read(site), SiteView.read(plain)]), width=160)
    _fits(lines, 160)
    text = "\n".join(lines)
    assert "zone-1: 2 nodes, 12/16 cards free" in text, text
    assert "(no label): 1 node, 8/8 cards free" in text, text
    assert text.count("(no label)") == 1, text  # beijing names no label: no domains shown


def test_queues_sites_tenants_tokens_and_audit_fit() -> None:
    site = SiteView.read(
        {
            "name": "shanghai-datacentre-2",
            "nodes": 14,
            "nodes_ready": 13,
            "devices": 112,
            "devices_free": 56,
            "by_model": {"A100-SXM4-80GB": 24, "H100-SXM5-80GB": 16, "910B3": 16, "MLU370-X8": 16},
        }
    )
    tenant = Tenant(
        name="research-vision", weight=2.5, created_at=NOW - 86400 * 3, pending_jobs=999
    )
    token = Token(
        id=12345,
        tenant=None,
        role="bootstrap",
        name="a label someone gave this token to remember it by",
        node="sh-910b-long-name-0",
        expires_at=NOW + 3600,
        created_at=NOW - 60,
        revoked=True,
    )
    entry = AuditEntry(
        id=1,
        at=NOW - 5,
        token_id=17,
        role="agent",
        tenant=None,
        node="sh-910b-long-name-0",
        action="register_node",
        target="POST /v1/agents/register sh-910b-long-name-0",
        status=403,
        result="token bound to node sh-910b-long-name-1 may not speak for sh-910b-long-name-0",
    )
    for renderable, whole in (
        (queues_table([_queue()]), ("research-vision", "1234", "567", "2/4")),
        (sites_table([site]), ("shanghai-datacentre-2", "13/14", "56/112")),
        (tenants_table([tenant], NOW), ("research-vision", "999/1000", "0/4096")),
        (tokens_table([token]), ("12345", "bootstrap", "sh-910b-long-name-0", "spent")),
        (audit_table([entry], NOW), ("register_node", "403")),
    ):
        lines = _lines(renderable)
        _fits(lines)
        words = _words(lines)
        for word in whole:
            assert word in words, f"{word!r}:\n" + "\n".join(lines)


def test_top_frame_fits() -> None:
    snap = Snapshot(
        nodes=[_node("sh-910b-long-name-0"), _node("sh-910b-long-name-1", "lost", False)],
        devices=[_device(i, [1]) for i in range(8)],
        queues=[_queue()],
        taken_at=NOW,
    )
    lines = _lines(frame(snap))
    _fits(lines)
    assert "sh-910b-long-name-0" in _words(lines)


def test_the_console_width_is_columns_else_the_terminal_else_80(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    assert console_width() == 132
    assert console().width == 132
    monkeypatch.delenv("COLUMNS")
    assert console_width() == 80  # pytest captures stdout: not a terminal
    assert console().width == 80  # rich alone would take a terminal's width from stdin or stderr


def test_simulate_tables_fit_80_columns() -> None:
    from xpupool.client.sim_tables import print_summary, print_timed

    policies = ("xpupool", "fgd", "gpupacking-with-a-long-name")
    figures = {"mean": 4.0612, "sd": 0.123, "paper_mean": 4.77, "stranded_mean": 1.2}
    result = {
        "trace": "openb_pod_list_default",
        "runs": [{"policy": p, "seconds": 1.27, "notes": []} for p in policies],
        "summary": dict.fromkeys(policies, figures),
    }
    timed = {
        "trace": "openb_pod_list_default",
        "policy": "gpupacking-with-a-long-name",
        "seed": 42,
        "mean_util_pct": 55.5,
        "peak_util_pct": 99.0,
        "mean_wait_s": 12345.6,
        "p95_wait_s": 99999.0,
        "mean_jct_s": 123456.0,
        "never_placed": 0.0,
        "preemptions": 12.0,
        "seconds": 3.2,
    }
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    print_summary(console, result)
    print_timed(console, [timed])
    lines = out.getvalue().splitlines()
    _fits(lines)
    words = _words(lines)
    for word in ("gpupacking-with-a-long-name", "4.06", "-0.71", "12,346", "123,456", "preempted"):
        assert word in words, f"{word!r}:\n" + "\n".join(lines)


def test_models_table_fits_80_columns_and_keeps_names_and_numbers_whole() -> None:
    """Issue 42 part 4: at 80 columns ``deepseek-r1-distill-qwen-…`` and ``72.…`` were cut,
    because no column of the shipped catalog's table could give way."""
    from dataclasses import asdict

    from xpupool.catalog.models import load_models
    from xpupool.client.cli_models import models_table

    rows = [
        CatalogModel.model_validate(
            asdict(m)
            | {
                "aliases": list(m.aliases),
                "precisions": list(m.precisions),
                "runtimes": list(m.runtimes),
            }
        )
        for m in load_models().models
    ]
    lines = _lines(models_table(rows))
    _fits(lines)
    assert not any("…" in line for line in lines), "\n".join(lines)
    words = _words(lines)
    for m in rows:
        for word in (m.name, f"{m.params_b:g}B", str(m.max_context)):
            assert word in words, f"{word!r} broken:\n" + "\n".join(lines)
    assert "left out to fit:" in lines[0] and "hub id" in lines[0]  # said, not silently cut
