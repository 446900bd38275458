"""Rich tables for the API's objects. Pure: models in, renderables out (tested without a server).

Quantities keep their unit in the column name or the cell (``20Gi``, ``350‰``); a value the server
does not know (no metrics yet) is ``-``, never ``0``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from xpupool.model.quantity import format_mib
from xpupool.server import schemas as s

_STATE_STYLE = {
    "pending": "yellow",
    "admitted": "cyan",
    "scheduled": "cyan",
    "running": "green",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "lost": "red",
}


def ago(at: float | None, now: float | None = None) -> str:
    if at is None:
        return "-"
    delta = max((now if now is not None else time.time()) - at, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit} ago"
    return f"{int(delta)}s ago"


def state_text(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, ""))


def _devices_summary(job: s.Job) -> str:
    """'2× A100 (40Gi each) on bj-a100-0' from the assignment, else the requested spec."""
    if job.assignments:
        parts = []
        for a in job.assignments:
            models = sorted({d.model for d in a.devices})
            parts.append(f"{len(a.devices)}× {'/'.join(models) or 'cpu'} on {a.node}")
        return "; ".join(parts)
    devices = job.request.get("devices")
    if isinstance(devices, dict):
        names = devices.get("models") or devices.get("vendors") or ["any"]
        what = ",".join(str(n) for n in names) if isinstance(names, list) else str(names)
        return f"{devices.get('count', 1)}× {what}"
    return "cpu only"


def jobs_table(jobs: Sequence[s.Job], now: float | None = None) -> Table:
    table = Table(title=f"{len(jobs)} jobs", title_justify="left")
    for col in ("id", "name", "tenant", "queue", "state", "prio", "devices", "age", "reason"):
        table.add_column(col, overflow="fold")
    for j in jobs:
        table.add_row(
            str(j.id),
            j.name,
            j.tenant,
            j.queue,
            state_text(j.state.value),
            str(j.priority),
            _devices_summary(j),
            ago(j.created_at, now),
            j.reason,
        )
    return table


def retries_text(job: s.Job) -> str:
    """``1 of 2 (on exit_nonzero)``: retries used, the limit, the causes retried."""
    limit = "no limit" if job.max_retries is None else str(job.max_retries)
    causes = ", ".join(job.retry_on) or "nothing"
    stopped = f"; stopped: {job.stop_cause}" if job.stop_cause else ""
    return f"{job.retries} of {limit} (on {causes}){stopped}"


def job_detail(job: s.Job, now: float | None = None) -> RenderableType:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("job", f"{job.id} ({job.name})"),
        ("tenant / queue", f"{job.tenant} / {job.queue}"),
        ("state", state_text(job.state.value)),
        ("pending reason" if job.state is s.JobState.PENDING else "reason", job.reason),
        ("priority", str(job.priority)),
        ("flavor", job.flavor or "-"),
        ("command", " ".join(job.command) or "(image entry point)"),
        ("image", job.image or "(host)"),
        ("on node lost", job.on_node_lost),
        ("attempts", str(job.attempts)),
        ("retries", retries_text(job)),
        ("max runtime", "-" if job.max_runtime_s is None else f"{job.max_runtime_s:g} s"),
        ("exit code", "-" if job.exit_code is None else str(job.exit_code)),
        ("created", ago(job.created_at, now)),
    ]
    if job.env:
        rows.append(("env", " ".join(f"{k}={v}" for k, v in sorted(job.env.items()))))
    for key, value in rows:
        head.add_row(key, value)
    parts: list[RenderableType] = [head]
    if job.assignments:
        assigned = Table(title="assignments", title_justify="left")
        for col in (
            "replica",
            "node",
            "cpu",
            "memory",
            "device",
            "model",
            "device memory",
            "cores",
        ):
            assigned.add_column(col)
        for a in job.assignments:
            for i, d in enumerate(a.devices or [None]):
                first = i == 0
                assigned.add_row(
                    str(a.replica) if first else "",
                    a.node if first else "",
                    f"{a.cpu_milli / 1000:g}" if first else "",
                    format_mib(a.memory_mib) if first else "",
                    "-" if d is None else f"{d.index} {d.uuid}",
                    "-" if d is None else d.model,
                    "-"
                    if d is None
                    else f"{format_mib(d.memory_mib)}/{format_mib(d.card_memory_mib)}",
                    "-" if d is None else f"{d.core_permille}‰",
                )
        parts.append(assigned)
    if job.events:
        events = Table(title="events", title_justify="left")
        for col in ("when", "state", "reason"):
            events.add_column(col, overflow="fold")
        for e in job.events:
            events.add_row(ago(e.at, now), state_text(e.state.value), e.reason)
        parts.append(events)
    return Group(*parts)


def nodes_table(nodes: Sequence[s.Node], now: float | None = None) -> Table:
    table = Table(title=f"{len(nodes)} nodes", title_justify="left")
    for col in (
        "name",
        "site",
        "status",
        "sched",
        "source",
        "devices free",
        "cpu",
        "memory",
        "heartbeat",
    ):
        table.add_column(col)
    for n in nodes:
        table.add_row(
            n.name,
            n.site,
            Text(n.status.value, style="green" if n.status is s.NodeStatus.READY else "red"),
            "yes" if n.schedulable else Text("cordoned", style="yellow"),
            n.source,
            f"{n.devices_free}/{n.devices}",
            f"{n.cpu_allocated_milli / 1000:g}/{n.cpu_milli / 1000:g}",
            f"{format_mib(n.memory_allocated_mib)}/{format_mib(n.memory_mib)}",
            ago(n.last_heartbeat, now),
        )
    return table


def _metric(value: float | int | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def devices_table(devices: Sequence[s.Device]) -> Table:
    table = Table(title=f"{len(devices)} devices", title_justify="left")
    for col in (
        "node",
        "idx",
        "model",
        "uuid",
        "alloc mem",
        "alloc cores",
        "used mem",
        "util",
        "state",
        "jobs",
    ):
        table.add_column(col, overflow="fold")
    for d in devices:
        m = d.metrics
        state = "cordoned" if d.cordoned else ("healthy" if d.healthy else "unhealthy")
        table.add_row(
            d.node,
            str(d.index),
            d.canonical_model or d.model,
            d.uuid,
            f"{format_mib(d.allocated_memory_mib)}/{format_mib(d.memory_mib)}",
            f"{d.allocated_core_permille}‰",
            "-" if m is None or m.memory_used_mib is None else format_mib(m.memory_used_mib),
            _metric(m.utilization_pct if m else None, "{:.0f}%"),
            Text(state, style={"healthy": "", "cordoned": "yellow"}.get(state, "red")),
            ",".join(str(j) for j in d.jobs) or "-",
        )
    return table


def sites_table(sites: Sequence[s.Site]) -> Table:
    table = Table(title=f"{len(sites)} sites", title_justify="left")
    for col in ("site", "nodes ready", "devices free", "models"):
        table.add_column(col, overflow="fold")
    for site in sites:
        table.add_row(
            site.name,
            f"{site.nodes_ready}/{site.nodes}",
            f"{site.devices_free}/{site.devices}",
            ", ".join(f"{k}×{v}" for k, v in sorted(site.by_model.items())),
        )
    return table


def _quota_amount(resource: s.QuotaResource, amount: int | None) -> str:
    if amount is None:
        return "∞"
    if resource is s.QuotaResource.DEVICE_MEMORY_MIB:
        return format_mib(amount)
    if resource is s.QuotaResource.CORES_PERMILLE:
        return f"{amount}‰"
    return str(amount)


def quota_text(q: s.QuotaUsage, has_cohort: bool) -> str:
    """'A100 devices: 2/4', plus what it may borrow when it is in a cohort."""
    text = f"{q.flavor} {q.resource.value}: "
    text += f"{_quota_amount(q.resource, q.used)}/{_quota_amount(q.resource, q.nominal)}"
    if has_cohort and q.borrowing_limit != 0:
        text += f" +{_quota_amount(q.resource, q.borrowing_limit)}"
    return text


def queues_table(queues: Sequence[s.Queue]) -> Table:
    table = Table(title=f"{len(queues)} queues", title_justify="left")
    for col in (
        "queue",
        "tenant",
        "cohort",
        "max prio",
        "pending",
        "running",
        "quotas (used/nominal +borrow)",
    ):
        table.add_column(col, overflow="fold")
    for q in queues:
        table.add_row(
            q.name,
            q.tenant,
            q.cohort or "-",
            str(q.max_priority),
            str(q.pending),
            str(q.running),
            "\n".join(quota_text(u, q.cohort is not None) for u in q.quotas) or "no limit",
        )
    return table


def tenants_table(tenants: Sequence[s.Tenant], now: float | None = None) -> Table:
    """Limits read as used/limit: pending jobs, pending replicas; replicas per job alone."""
    table = Table(title=f"{len(tenants)} tenants", title_justify="left")
    for col in ("tenant", "weight", "pending jobs", "pending replicas", "replicas/job", "created"):
        table.add_column(col)
    for t in tenants:
        table.add_row(
            t.name,
            f"{t.weight:g}",
            f"{t.pending_jobs}/{t.max_pending_jobs}",
            f"{t.pending_replicas}/{t.max_pending_replicas}",
            str(t.max_replicas_per_job),
            ago(t.created_at, now),
        )
    return table


def until(at: float | None, now: float | None = None) -> str:
    """'in 3h', 'expired', or '-' for never."""
    if at is None:
        return "-"
    delta = at - (now if now is not None else time.time())
    if delta <= 0:
        return "expired"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"in {int(delta // size)}{unit}"
    return f"in {int(delta)}s"


def tokens_table(tokens: Sequence[s.Token], now: float | None = None) -> Table:
    table = Table(title=f"{len(tokens)} tokens", title_justify="left")
    for col in ("id", "tenant", "role", "node", "name", "created", "expires", "revoked"):
        table.add_column(col)
    for t in tokens:
        spent = t.role == "bootstrap" and t.revoked and t.node is not None
        table.add_row(
            str(t.id),
            t.tenant or "-",
            t.role,
            t.node or "-",
            t.name or "-",
            ago(t.created_at, now),
            until(t.expires_at, now),
            Text("spent" if spent else "revoked", style="red") if t.revoked else "",
        )
    return table


def audit_table(entries: Sequence[s.AuditEntry], now: float | None = None) -> Table:
    table = Table(title=f"{len(entries)} audit entries", title_justify="left")
    for col in ("when", "who", "action", "target", "status", "result"):
        table.add_column(col)
    for e in entries:
        who = e.role if e.token_id is None else f"{e.role} (token {e.token_id})"
        if e.tenant:
            who += f" {e.tenant}"
        if e.node:
            who += f" node {e.node}"
        table.add_row(
            ago(e.at, now),
            who,
            e.action,
            e.target,
            Text(str(e.status), style="red" if e.status >= 400 else ""),
            e.result,
        )
    return table
