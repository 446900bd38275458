"""The audit trail's rows (``GET /v1/audit``): what an admin or agent action, or an agent
credential's refused requests, left behind (docs/security.md).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from xpupool.server.schemas.base import Lenient


class AuditKind(StrEnum):
    """What an audit row records; each kind is kept to its own number of rows (``xpupool up
    --audit-keep``, ``--audit-keep-refused``), so one kind never evicts another's."""

    ADMIN = "admin"  # the admin's requests, and what the server did on the admin's behalf
    AGENT = "agent"  # an agent credential's registrations, bootstrap exchanges and bindings
    REFUSED = "refused"  # an agent credential's refused requests, aggregated with a count


class AuditEntry(Lenient):
    """One admin or agent action, or an agent credential's refused requests of one kind in one
    window, aggregated (docs/security.md)."""

    id: int
    at: float = Field(description="Unix time, seconds: the last occurrence.")
    token_id: int | None = Field(description="The credential; 0 = the in-process agent.")
    role: str
    tenant: str | None
    node: str | None = Field(description="The node an agent credential is bound to.")
    action: str = Field(description="The endpoint or event, e.g. 'cordon_node', 'register'.")
    target: str = Field(
        description="What it acted on: path parameters, the node, the token (the last "
        "occurrence's)."
    )
    status: int = Field(description="HTTP status of the answer (200 for an event recorded).")
    result: str = Field(description="'ok', or the reason it was refused (the last occurrence's).")
    kind: AuditKind = Field(AuditKind.ADMIN, description="What the row records (AuditKind).")
    count: int = Field(
        1,
        description="Occurrences the row stands for: 1, or a refused credential's requests "
        "from first_at to at (one row per credential, source, action and status a window).",
    )
    first_at: float | None = Field(
        None, description="Unix time, seconds: the first occurrence; null: the same as at."
    )
    source: str | None = Field(
        None, description="The client's address as the server saw it; null: not over TCP."
    )
