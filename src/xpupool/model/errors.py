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


class CatalogError(XpupoolError):
    """A catalog data file is malformed; names the file, the entry and the field."""
