"""What can go wrong talking to the server, by what the user can do about it."""

from __future__ import annotations

from xpupool.model.errors import XpupoolError


class ApiError(XpupoolError):
    """The server refused the request (4xx) or failed (5xx); carries its ``{field, value, reason}``.

    ``str()`` is one line: ``field: reason (got value)``, or just the reason when no field is named.
    """

    def __init__(self, status: int, field: str | None, value: object, reason: str) -> None:
        self.status = status
        self.field = field
        self.value = value
        self.reason = reason
        text = reason if not field else f"{field}: {reason}"
        if field and value is not None:
            text += f" (got {value!r})"
        super().__init__(text)


class Unreachable(XpupoolError):  # noqa: N818 - names what happened, as NotFound does
    """No answer from the server: refused connection, DNS failure, timeout."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = url
        self.detail = detail
        super().__init__(f"cannot reach xpupool at {url}: {detail}")


class BadAnswer(XpupoolError):  # noqa: N818 - names what happened, as Unreachable does
    """The server answered 2xx with something the client cannot read: not JSON, or a field it
    needs missing or of the wrong type (a server of another version, or not xpupool at all)."""

    def __init__(self, where: str, value: object, reason: str) -> None:
        self.where = where
        self.value = value
        self.reason = reason
        shown = repr(value)
        super().__init__(
            f"unexpected answer from the server: {where}: {reason}"
            + ("" if value is None else f" (got {shown[:80]})")
        )
