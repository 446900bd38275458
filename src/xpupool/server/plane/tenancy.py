"""The plane's books of tenants, queues and tokens: the queues' specs and profiles, the tenants'
indices, the limits read per queue, the principals of live tokens, and the nodes the in-process
agent no longer speaks for. Reached through these methods only (``ControlPlane`` inherits them);
call them under the plane's lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from xpupool.engine.cycle.admission import QueueSpec
from xpupool.server.auth import Principal


class TenancyBooks:
    """The methods over ``ControlPlane``'s tenant, queue and token books."""

    if TYPE_CHECKING:  # what ControlPlane holds, that these methods use
        _queue_specs: dict[str, QueueSpec]
        _queue_profiles: dict[str, str]
        _tenant_index: dict[str, int]
        _grant_rows: dict[str, Any]
        _principals: dict[str, Principal]
        _released_nodes: set[str]

    @property
    def queue_specs(self) -> Mapping[str, QueueSpec]:
        """Every queue's spec by name; read-only (:meth:`put_queue` changes one)."""
        return MappingProxyType(self._queue_specs)

    @property
    def queue_profiles(self) -> Mapping[str, str]:
        """Queue -> the profile of its jobs that name none; read-only."""
        return MappingProxyType(self._queue_profiles)

    def put_queue(self, name: str, spec: QueueSpec) -> None:
        """Queue ``name`` is ``spec`` now (stored by the caller under the lock); the caller
        rebuilds the admission books (:meth:`rebuild_admission`)."""
        self._queue_specs[name] = spec

    def set_queue_profile(self, name: str, profile: str | None) -> None:
        """The profile of queue ``name``'s jobs that name none (None: the server's)."""
        if profile is None:
            self._queue_profiles.pop(name, None)
        else:
            self._queue_profiles[name] = profile

    @property
    def tenant_index(self) -> Mapping[str, int]:
        """Tenant name -> its stable index (the job uid's offset); read-only."""
        return MappingProxyType(self._tenant_index)

    def set_tenant_indices(self, indices: dict[str, int]) -> None:
        """The tenants' indices as stored now (``storage/tenants.py``)."""
        self._tenant_index = indices

    def grant_row(self, queue: str) -> Any:
        """The queue's and its tenant's limits as last read (None: read them again)."""
        return self._grant_rows.get(queue)

    def keep_grant_row(self, queue: str, row: Any) -> None:
        """Keep ``row``, just read, until tenants or queues change (:meth:`forget_grants`)."""
        self._grant_rows[queue] = row

    def cached_principal(self, digest: str) -> Principal | None:
        """The principal of the live token whose SHA-256 is ``digest``, if cached."""
        return self._principals.get(digest)

    def cache_principal(self, digest: str, who: Principal) -> None:
        self._principals[digest] = who

    def forget_principals(self, *digests: str) -> None:
        """Tokens were revoked, bound or expired: read their principals again when next asked
        (``digests``: those tokens' SHA-256; none: every token)."""
        if not digests:
            self._principals.clear()
        for digest in digests:
            self._principals.pop(digest, None)

    def is_released(self, node: str) -> bool:
        """The admin deleted or took over ``node`` while this server runs: the in-process agent,
        which has no token to revoke, speaks for it no more."""
        return node in self._released_nodes

    def released_among(self, nodes: Iterable[str]) -> set[str]:
        return self._released_nodes.intersection(nodes)

    def release_node(self, node: str) -> None:
        """The in-process agent speaks for ``node`` no more (``services/node_identity.py``)."""
        self._released_nodes.add(node)
