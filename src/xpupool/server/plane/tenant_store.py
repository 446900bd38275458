"""The plane's writes of tenant and token rows: each one store transaction under the plane's lock,
with the books that follow from it (grants, tenant indices, queue specs, cached principals)
changed in the same step. ``ControlPlane`` inherits these; the services call them instead of
taking the lock themselves (issue 44, item 2: the lock private to the package;
tests/unit/server/test_plane_lock_boundary.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select, update

from xpupool.model.errors import Conflict, NotFound
from xpupool.server.auth import new_token, token_hash
from xpupool.server.storage.tenants import assign_tenant_indices
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.storage.tenants import tokens as t_tokens

if TYPE_CHECKING:
    from xpupool.engine.cycle.admission import QueueSpec


class TenantStore:
    """The tenant and token writes over ``ControlPlane``'s store and books."""

    if TYPE_CHECKING:  # what ControlPlane holds and does, that these methods use
        clock: Callable[[], float]

        def write(self) -> AbstractContextManager[Connection]: ...
        def forget_grants(self) -> None: ...
        def forget_principals(self, *digests: str) -> None: ...
        def set_tenant_indices(self, indices: dict[str, int]) -> None: ...
        def put_queue(self, name: str, spec: QueueSpec) -> None: ...
        def set_queue_profile(self, name: str, profile: str | None) -> None: ...
        def rebuild_admission(self) -> None: ...
        @property
        def queue_specs(self) -> Mapping[str, QueueSpec]: ...

    def ensure_admin_token(self) -> str | None:
        """Create the admin token on first start and return it; None when one exists already."""
        with self.write() as conn:
            found = conn.execute(select(t_tokens.c.id).where(t_tokens.c.role == "admin")).first()
            if found is not None:
                return None
            token = new_token()
            self._insert_admin_token(conn, token)
            return token

    def rotate_admin_token(self, token: str) -> None:
        """``token`` is the one admin token now: every earlier one is revoked, in one step."""
        with self.write() as conn:
            self._only_admin_token(conn, token)

    def _only_admin_token(self, conn: Connection, token: str) -> None:
        conn.execute(
            update(t_tokens)
            .where(t_tokens.c.role == "admin", t_tokens.c.revoked.is_(False))
            .values(revoked=True)
        )
        self._insert_admin_token(conn, token)
        self.forget_principals()

    def adopt_admin_token(self, token: str) -> None:
        """Make ``token`` the one admin token (as :meth:`rotate_admin_token`) unless it is a live
        admin token already."""
        with self.write() as conn:
            live = conn.execute(
                select(t_tokens.c.id).where(
                    t_tokens.c.role == "admin",
                    t_tokens.c.hash == token_hash(token),
                    t_tokens.c.revoked.is_(False),
                )
            ).first()
            if live is None:
                self._only_admin_token(conn, token)

    def _insert_admin_token(self, conn: Connection, token: str) -> None:
        """Store ``token`` (its hash) as an admin token in ``conn``'s transaction."""
        conn.execute(
            insert(t_tokens).values(
                tenant=None,
                role="admin",
                name="admin",
                hash=token_hash(token),
                created_at=self.clock(),
                revoked=False,
            )
        )

    def add_tenant(self, values: dict[str, Any], queue: QueueSpec, now: float) -> None:
        """Store tenant ``values`` (its ``name`` and settings) and its own queue ``queue``
        (stored with no quota), and serve them; :class:`Conflict` when a tenant or a queue of
        that name exists."""
        name = values["name"]
        with self.write() as conn:
            if conn.execute(select(t_tenants).where(t_tenants.c.name == name)).first():
                raise Conflict(f"tenant {name!r} already exists")
            if conn.execute(select(t_queues).where(t_queues.c.name == name)).first():
                raise Conflict(f"a queue named {name!r} already exists")
            conn.execute(insert(t_tenants).values(**values, created_at=now))
            self.forget_grants()
            self.set_tenant_indices(assign_tenant_indices(conn))
            conn.execute(
                insert(t_queues).values(
                    name=queue.name, tenant=name, cohort=None, quotas=[], created_at=now
                )
            )
            self.put_queue(queue.name, queue)
            self.rebuild_admission()

    def update_tenant(self, name: str, values: dict[str, Any]) -> dict[str, Any]:
        """Set tenant ``name``'s ``values`` and return its row as stored now; a new weight goes
        to its queues' specs at once. :class:`NotFound` when there is no such tenant."""
        with self.write() as conn:
            if not tenant_exists(conn, name):
                raise NotFound("tenant", name)
            conn.execute(update(t_tenants).where(t_tenants.c.name == name).values(**values))
            self.forget_grants()
            row = conn.execute(select(t_tenants).where(t_tenants.c.name == name)).mappings().one()
            if "weight" in values:
                for queue, spec in list(self.queue_specs.items()):
                    if spec.tenant == name:
                        self.put_queue(queue, replace(spec, weight=values["weight"]))
                self.rebuild_admission()
            return dict(row)

    def add_token(self, tenant: str | None, values: dict[str, Any]) -> int:
        """Store a token row (``values``: its columns, the hash among them) and return its id;
        ``tenant``: the tenant it is issued under, :class:`NotFound` when there is none."""
        with self.write() as conn:
            if tenant is not None and not tenant_exists(conn, tenant):
                raise NotFound("tenant", tenant)
            result = conn.execute(insert(t_tokens).values(**values))
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    def revoke_token(self, token_id: int) -> bool:
        """Revoke token ``token_id``; whether there was one. Cached principals are read again."""
        with self.write() as conn:
            done = conn.execute(
                update(t_tokens).where(t_tokens.c.id == token_id).values(revoked=True)
            ).rowcount
            self.forget_principals()
        return bool(done)

    def store_queue(
        self,
        name: str,
        values: dict[str, Any],
        spec: Callable[[float], QueueSpec],
        then: Callable[[Connection], object],
    ) -> None:
        """Create or replace queue ``name`` with row ``values`` (its ``tenant`` among them) and
        serve it: ``spec(weight)`` with its tenant's weight, its profile, admission rebuilt, and
        ``then(conn)`` in the same step (what waits in it under a lowered cap). :class:`NotFound`
        when the tenant does not exist, :class:`Conflict` when another tenant has the name."""
        tenant = values["tenant"]
        with self.write() as conn:
            row = conn.execute(select(t_tenants).where(t_tenants.c.name == tenant)).first()
            if row is None:
                raise NotFound("tenant", tenant)
            existing = conn.execute(select(t_queues).where(t_queues.c.name == name)).first()
            if existing is not None and existing.tenant != tenant:
                raise Conflict(f"queue {name!r} belongs to tenant {existing.tenant!r}")
            if existing is None:
                conn.execute(insert(t_queues).values(name=name, created_at=self.clock(), **values))
            else:
                conn.execute(update(t_queues).where(t_queues.c.name == name).values(**values))
            self.forget_grants()
            self.put_queue(name, spec(row.weight))
            self.set_queue_profile(name, values.get("profile"))
            self.rebuild_admission()
            then(conn)


def tenant_exists(conn: Connection, name: str) -> bool:
    return (
        conn.execute(select(t_tenants.c.name).where(t_tenants.c.name == name)).first() is not None
    )
