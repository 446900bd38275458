"""Error families shared by every layer.

One base class, small families by what the caller can do about it. Data lives in attributes
(``field``, ``value``, ``reason``) so that tests and the API never parse messages.
"""

from __future__ import annotations


class XpupoolError(Exception):
    """Base of every error xpupool raises on purpose."""


class RequestError(XpupoolError, ValueError):
    """Bad input: names the field (a path such as ``devices.memory``), quotes the value, says why.

    The API maps it to HTTP 422 with ``{field, value, reason}``.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason} (got {value!r})")

    def under(self, prefix: str) -> RequestError:
        """The same error with its field nested under ``prefix`` (``replicas[0]`` + ``cpu``)."""
        if not prefix:
            return self
        field = f"{prefix}{self.field}" if self.field.startswith("[") else f"{prefix}.{self.field}"
        return RequestError(field, self.value, self.reason)


class NotFound(XpupoolError, LookupError):  # noqa: N818 - family name from STYLE.md §5
    """A named object (node, device, job) does not exist."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f"{kind} {name!r} not found")


class Conflict(XpupoolError):  # noqa: N818 - family name from STYLE.md §5
    """The operation contradicts current state (a duplicate node name, a double release)."""


class OverCommit(Conflict):
    """An allocation would take more than a node or device has left. ``uuid`` is the device
    (None: the node's CPU or memory)."""

    def __init__(self, allocation_id: int, node: str, uuid: str | None) -> None:
        self.allocation_id = allocation_id
        self.node = node
        self.uuid = uuid
        where = f"device {uuid}" if uuid is not None else f"node {node}"
        super().__init__(f"allocation {allocation_id} over-commits {where}")


class CatalogError(XpupoolError):
    """A catalog data file is malformed; names the file, the entry and the field."""


class Unavailable(XpupoolError):  # noqa: N818 - a family by what the caller can do: retry later
    """The server cannot do it now: its store cannot be written (disk full, read-only). Nothing
    was changed; the API maps it to 503."""


class Forbidden(XpupoolError):  # noqa: N818 - a family by what the caller can do: ask the admin
    """The caller's credential may not do this (an agent credential acting for a node it is not
    bound to, a bootstrap token used twice). Nothing was changed; the API maps it to 403."""


class NotGranted(Forbidden):
    """Valid input beyond what the admin granted (a priority above the queue's cap, more
    replicas than the tenant may ask for): names the field, quotes the value, says which grant
    and how to get more. Nothing was changed; the API maps it to 403 with ``{field, value,
    reason}``."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: {reason} (got {value!r})")


class OverLimit(NotGranted):
    """A per-tenant limit on queued work is reached: the same request succeeds once some of the
    tenant's queued work has started or been cancelled. The API maps it to 429."""
