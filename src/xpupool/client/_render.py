"""Tables for the API's objects. Pure: models in, renderables out (tested without a server).

Every table is a :class:`~xpupool.client.fit_table.FitTable`: it fits the terminal, and only free text
(reasons, names, placements) wraps; states, ids and numbers stay whole.

Quantities keep their unit in the column name or the cell (``20Gi``, ``35%``); compute is in
percent of a card, as requests write it (``cores=25%``), though the API counts thousandths. A value
the server does not know (no metrics yet) is ``-``, never ``0``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from xpupool.client._views import (
    DeviceAssignmentView,
    DeviceView,
    JobView,
    NodeView,
    QueueView,
    QuotaUsageView,
    SiteDomainView,
    SiteView,
    TaintView,
)
from xpupool.client.fit_table import Column, FitTable
from xpupool.model.quantity import format_mib

if TYPE_CHECKING:  # jobs and the fleet's tables read client/_views.py's records: no pydantic
    from xpupool.server.schemas.audit import AuditEntry
    from xpupool.server.schemas.tenants import Tenant, Token

_STATE_STYLE = {
    "pending": "yellow",
    "admitted": "cyan",
    "scheduled": "cyan",
    "running": "green",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "lost": "red",
    "unknown": "yellow",
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


def percent(permille: int) -> str:
    """Thousandths of a card as percent: 250 -> '25%', 125 -> '12.5%', 4000 -> '400%'."""
    return f"{permille / 10:g}%"


def _short_model(vendor: str, model: str) -> str:
    """'NVIDIA L20' -> 'L20': the vendor's name in front of a model says nothing more."""
    head, sep, rest = model.partition(" ")
    return rest if sep and rest and head.lower() == vendor.lower() else model


def _share(d: DeviceAssignmentView) -> str:
    """The part of the card granted: '' for all of it, '25%' for that share of its compute and
    memory, '20Gi' for memory alone (compute shared best-effort), else '40Gi 30%'."""
    if d.core_permille >= 1000 and d.memory_mib >= d.card_memory_mib:
        return ""
    cores = percent(d.core_permille)
    memory_permille = round(1000 * d.memory_mib / d.card_memory_mib) if d.card_memory_mib else 0
    if d.core_permille and abs(memory_permille - d.core_permille) <= 1:
        return cores
    if not d.core_permille:
        return format_mib(d.memory_mib)
    return f"{format_mib(d.memory_mib)} {cores}"


def placement_summary(job: JobView) -> list[str]:
    """Where a job's replicas hold devices, one entry per (node, share of a card, model) in
    replica order of first appearance: six quarter L20s on one node read '6× 25% L20 on
    sh-l20-0', not six lines. Before placement: what all its replicas ask for ('6× 25% L20')."""
    if job.assignments:
        held: dict[tuple[str, str], int] = {}  # (node, what) -> devices, in first-seen order
        for a in sorted(job.assignments, key=lambda a: a.replica):
            cards: list[DeviceAssignmentView | None] = [*a.devices] or [None]
            for d in cards:
                what = "" if d is None else f"{_share(d)} {_short_model(d.vendor, d.model)}"
                held[a.node, what.strip()] = held.get((a.node, what.strip()), 0) + 1
        return [
            f"{n}× {what} on {node}" if what else f"{'' if n == 1 else f'{n}× '}cpu only on {node}"
            for (node, what), n in held.items()
        ]
    devices = job.request.get("devices")
    if not isinstance(devices, dict):
        return ["cpu only"]
    names = devices.get("models") or devices.get("vendors") or ["any"]
    what = ",".join(str(n) for n in names) if isinstance(names, list) else str(names)
    share = " ".join(str(devices[k]) for k in ("memory", "cores") if devices.get(k))
    count, replicas = devices.get("count", 1), job.request.get("replicas", 1)
    total = count * replicas if isinstance(count, int) and isinstance(replicas, int) else count
    return [f"{total}× {share} {what}".replace("  ", " ")]


def _columns(
    *names: str, text: Sequence[str] = (), spare: Sequence[str] = (), same: Sequence[str] = ()
) -> list[Column]:
    """Columns by header; those in ``text`` hold free text, those in ``spare`` may be left out
    (first named, first left out),
    in that order, those in ``same`` go to the title when every row agrees (see ``FitTable``)."""
    rank = {name: i + 1 for i, name in enumerate(spare)}
    return [Column(n, text=n in text, spare=rank.get(n, 0), same=n in same) for n in names]


def jobs_table(jobs: Sequence[JobView], now: float | None = None) -> FitTable:
    columns = _columns(
        "id", "name", "tenant", "queue", "state", "prio", "devices", "age", "reason",
        text=("name", "devices", "reason"), spare=("prio", "age", "name"),
        same=("tenant", "queue", "prio"),
    )  # fmt: skip
    table = FitTable(columns, f"{len(jobs)} jobs")
    for j in jobs:
        table.add_row(
            str(j.id),
            j.name,
            j.tenant,
            j.queue,
            state_text(j.state),
            str(j.priority),
            "\n".join(placement_summary(j)),
            ago(j.created_at, now),
            j.reason,
        )
    return table


def retries_text(job: JobView) -> str:
    """``1 of 2 (on exit_nonzero)``: retries used, the limit, the causes retried."""
    limit = "no limit" if job.max_retries is None else str(job.max_retries)
    causes = ", ".join(job.retry_on) or "nothing"
    stopped = f"; stopped: {job.stop_cause}" if job.stop_cause else ""
    return f"{job.retries} of {limit} (on {causes}){stopped}"


def _listens(port: int) -> str:
    """JobIn.port as the user reads it; the node's port is under its assignment."""
    return "$PORT (a node port)" if port == 0 else f"{port} in its container"


def job_detail(job: JobView, now: float | None = None) -> RenderableType:
    head = FitTable([Column("field"), Column("value", text=True)], show_header=False)
    rows: list[tuple[str, str | Text]] = [
        ("job", f"{job.id} ({job.name})"),
        ("tenant / queue", f"{job.tenant} / {job.queue}"),
        ("state", state_text(job.state)),
        ("pending reason" if job.state == "pending" else "reason", job.reason),
        ("priority", str(job.priority)),
        ("qos", job.qos),
        ("flavor", job.flavor or "-"),
        *((("site", job.site),) if job.site else ()),
        ("command", " ".join(job.command) or "(image entry point)"),
        ("image", job.image or "(host)"),
        *((("pull", job.pull),) if job.pull else ()),
        *((("pull secret", job.pull_secret),) if job.pull_secret else ()),
        *((("listens on", _listens(job.port)),) if job.port is not None else ()),
        ("on node lost", job.on_node_lost),
        ("on site lost", job.on_site_lost),
        ("attempts", str(job.attempts)),
        ("retries", retries_text(job)),
        ("max runtime", "-" if job.max_runtime_s is None else f"{job.max_runtime_s:g} s"),
        ("exit code", "-" if job.exit_code is None else str(job.exit_code)),
        ("created", ago(job.created_at, now)),
    ]
    if job.env:
        rows.append(("env", " ".join(f"{k}={v}" for k, v in sorted(job.env.items()))))
    if job.volumes:
        mounts = [f"{v.name} at {v.path}{' (ro)' if v.read_only else ''}" for v in job.volumes]
        rows.append(("volumes", ", ".join(mounts)))
    if job.secrets:
        given = [s.name if s.env is None else f"{s.name} (as {s.env})" for s in job.secrets]
        rows.append(("secrets", ", ".join(given)))
    for key, value in rows:
        head.add_row(Text(key, style="bold"), value)
    parts: list[RenderableType] = [head]
    if job.assignments:
        columns = _columns(
            "replica", "node", "cpu", "memory", "device", "model", "device memory", "cores",
            "ports", "uuid", text=("model",), spare=("uuid",),
        )  # fmt: skip
        assigned = FitTable(columns, "assignments")
        for a in job.assignments:
            for i, d in enumerate(a.devices or [None]):
                first = i == 0
                assigned.add_row(
                    str(a.replica) if first else "",
                    a.node if first else "",
                    f"{a.cpu_milli / 1000:g}" if first else "",
                    format_mib(a.memory_mib) if first else "",
                    "-" if d is None else str(d.index),
                    "-" if d is None else d.model,
                    "-"
                    if d is None
                    else f"{format_mib(d.memory_mib)}/{format_mib(d.card_memory_mib)}",
                    "-" if d is None else percent(d.core_permille),
                    (",".join(map(str, a.ports)) or "-") if first else "",
                    "-" if d is None else d.uuid,
                )
        parts.append(assigned)
    if job.events:
        events = FitTable(_columns("when", "state", "reason", text=("reason",)), "events")
        for e in job.events:
            events.add_row(ago(e.at, now), state_text(e.state), e.reason)
        parts.append(events)
    return Group(*parts)


def node_status(node: NodeView) -> Text:
    """'ready', 'lost', ..., or 'cordoned' for a ready node taken out of scheduling
    ('lost,cordoned' for a lost one)."""
    if node.schedulable:
        return Text(node.status, style="green" if node.status == "ready" else "red")
    if node.status == "ready":
        return Text("cordoned", style="yellow")
    return Text(f"{node.status},cordoned", style="red")


def nodes_table(nodes: Sequence[NodeView], now: float | None = None) -> FitTable:
    """One row per node; the ``domain`` column only where some node has a link domain (a pool
    without them reads as before)."""
    domains = any(n.link_domain for n in nodes)
    names = ["name", "site", "domain", "status", "devices free", "cpu", "memory", "taints"]
    names += ["heartbeat", "source"]
    if not domains:
        names.remove("domain")
    columns = _columns(
        *names,
        text=("taints",),
        spare=("source", "heartbeat", "domain", "taints"),
        same=("domain",),
    )
    table = FitTable(columns, f"{len(nodes)} nodes")
    for n in nodes:
        row: list[str | Text] = (
            [n.name, n.site, n.link_domain or "-"] if domains else [n.name, n.site]
        )
        table.add_row(
            *row,
            node_status(n),
            f"{n.devices_free}/{n.devices}",
            f"{n.cpu_allocated_milli / 1000:g}/{n.cpu_milli / 1000:g}",
            f"{format_mib(n.memory_allocated_mib)}/{format_mib(n.memory_mib)}",
            "\n".join(taint_text(t) for t in n.taints),
            ago(n.last_heartbeat, now),
            n.source,
        )
    return table


def taint_text(t: TaintView) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as ``kubectl taint`` writes it."""
    return f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}"


def _metric(value: float | int | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _model_text(d: DeviceView) -> str:
    """The model, and for a hardware partition its profile and place on its card: ``A100-SXM4-80GB
    3g.40gb@4`` (a vNPU has no place: ``910B3 vir05_1c_16g``)."""
    model = d.canonical_model or d.model
    if d.partition is None:
        return model
    place = "" if d.partition_start is None else f"@{d.partition_start}"
    return f"{model} {d.partition}{place}"


def devices_table(devices: Sequence[DeviceView]) -> FitTable:
    columns = _columns(
        "node", "idx", "model", "alloc mem", "alloc cores", "state", "jobs", "used mem", "util",
        "uuid",
        text=("jobs",), spare=("uuid", "util", "used mem"),
    )  # fmt: skip
    table = FitTable(columns, f"{len(devices)} devices")
    for d in devices:
        m = d.metrics
        state = "cordoned" if d.cordoned else ("healthy" if d.healthy else "unhealthy")
        table.add_row(
            d.node,
            str(d.index),
            _model_text(d),
            f"{format_mib(d.allocated_memory_mib)}/{format_mib(d.memory_mib)}",
            percent(d.allocated_core_permille),
            Text(state, style={"healthy": "", "cordoned": "yellow"}.get(state, "red")),
            ", ".join(
                [str(j) for j in d.jobs] + (["in use (others)"] if d.in_use_by_others else [])
            )
            or "-",
            "-" if m is None or m.memory_used_mib is None else format_mib(m.memory_used_mib),
            _metric(m.utilization_pct if m else None, "{:.0f}%"),
            d.uuid,
        )
    return table


def sites_table(sites: Sequence[SiteView]) -> FitTable:
    columns = _columns(
        "site",
        "kind",
        "last contact",
        "nodes ready",
        "devices allocated",
        "devices free",
        "pending",
        "models",
        "link domains",
        text=("models", "link domains"),
    )
    table = FitTable(columns, f"{len(sites)} sites")
    for site in sites:
        state = ("" if site.reachable else " (unreachable)") + (
            " (drained)" if site.drained else ""
        )
        table.add_row(
            site.name + state,
            site.kind,
            ago(site.last_contact),
            f"{site.nodes_ready}/{site.nodes}",
            f"{site.devices_allocated}/{site.devices}",
            f"{site.devices_free}/{site.devices}",
            str(site.pending),
            ", ".join(f"{k}×{v}" for k, v in sorted(site.by_model.items())),
            "\n".join(domain_text(d) for d in site.domains if _has_domains(site)),
        )
    return table


def _has_domains(site: SiteView) -> bool:
    """Whether ``site`` has link domains of its own (a label some of its nodes carry)."""
    return any(d.name is not None for d in site.domains)


def domain_text(d: SiteDomainView) -> str:
    """``zone-1: 2 nodes, 12/16 cards free``; the site's nodes without one read ``(no label)``."""
    nodes = f"{d.nodes} node{'' if d.nodes == 1 else 's'}"
    cards = f"{d.devices_free}/{d.devices} card{'' if d.devices == 1 else 's'} free"
    return f"{d.name or '(no label)'}: {nodes}, {cards}"


def _quota_amount(resource: str, amount: int | None) -> str:
    if amount is None:
        return "∞"
    if resource == "device_memory_mib":
        return format_mib(amount)
    if resource == "cores_permille":
        return percent(amount)
    return str(amount)


_QUOTA_LABELS = {"devices": "devices", "device_memory_mib": "memory", "cores_permille": "cores"}


def quota_text(q: QuotaUsageView, has_cohort: bool) -> str:
    """'A100 devices: 2/4', plus what it may borrow when it is in a cohort; device memory reads
    'memory' (MiB, shown as 40Gi) and compute 'cores' (thousandths, shown in %)."""
    text = f"{q.flavor} {_QUOTA_LABELS[q.resource]}: "
    text += f"{_quota_amount(q.resource, q.used)}/{_quota_amount(q.resource, q.nominal)}"
    if has_cohort and q.borrowing_limit != 0:
        text += f" +{_quota_amount(q.resource, q.borrowing_limit)}"
    return text


def queues_table(queues: Sequence[QueueView]) -> FitTable:
    quotas = "quotas (used/nominal +borrow)"
    columns = _columns(
        "queue", "tenant", "pending", "running", quotas, "cohort", "max prio",
        text=(quotas,), spare=("cohort", "max prio"), same=("tenant",),
    )  # fmt: skip
    table = FitTable(columns, f"{len(queues)} queues")
    for q in queues:
        table.add_row(
            q.name,
            q.tenant,
            str(q.pending),
            str(q.running),
            "\n".join(quota_text(u, q.cohort is not None) for u in q.quotas) or "no limit",
            q.cohort or "-",
            str(q.max_priority),
        )
    return table


def tenants_table(tenants: Sequence[Tenant], now: float | None = None) -> FitTable:
    """Limits read as used/limit: pending jobs, pending replicas, logs kept (MiB); replicas and
    log MiB per job alone."""
    columns = _columns(
        "tenant",
        "weight",
        "pending jobs",
        "pending replicas",
        "replicas/job",
        "logs MiB",
        "log MiB/job",
        "created",
        spare=("log MiB/job", "created", "logs MiB"),
    )
    table = FitTable(columns, f"{len(tenants)} tenants")
    for t in tenants:
        table.add_row(
            t.name,
            f"{t.weight:g}",
            f"{t.pending_jobs}/{t.max_pending_jobs}",
            f"{t.pending_replicas}/{t.max_pending_replicas}",
            str(t.max_replicas_per_job),
            f"{math.ceil(t.log_bytes / (1 << 20))}/{t.max_log_mib}",
            str(t.max_job_log_mib),
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


def tokens_table(tokens: Sequence[Token], now: float | None = None) -> FitTable:
    columns = _columns(
        "id", "tenant", "role", "node", "name", "created", "expires", "revoked", text=("name",)
    )
    table = FitTable(columns, f"{len(tokens)} tokens")
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


def audit_table(entries: Sequence[AuditEntry], now: float | None = None) -> FitTable:
    columns = _columns(
        "when", "who", "action", "target", "status", "result", text=("who", "target", "result")
    )
    table = FitTable(columns, f"{len(entries)} audit entries")
    for e in entries:
        who = e.role if e.token_id is None else f"{e.role} (token {e.token_id})"
        if e.tenant:
            who += f" {e.tenant}"
        if e.node:
            who += f" node {e.node}"
        if e.source:
            who += f" from {e.source}"
        table.add_row(
            ago(e.at, now),
            who,
            e.action,
            e.target,
            Text(str(e.status), style="red" if e.status >= 400 else ""),
            audit_result(e),
        )
    return table


def audit_result(e: AuditEntry) -> str:
    """The row's result; an aggregated row says how many and over how long first, the reason
    given being the last one's: '285x in 58 s, last: node n2: ...'."""
    if e.count <= 1:
        return e.result
    span_s = e.at - (e.first_at if e.first_at is not None else e.at)
    return f"{e.count}x in {span_s:.0f} s, last: {e.result}"
