"""The text a person types for a job's environment and retry causes, read one way by the CLI's
flags (``--env K=V``, ``--retry-on``) and the dashboard's submit form, so that the two never read
the same words differently. Only the shape is read here; the names and causes are the API's to
check (``server/schemas/jobs.py`` ``JobIn``), which names the field of any it refuses."""

from __future__ import annotations

from xpupool.model.errors import RequestError


def env_pair(text: str, field: str) -> tuple[str, str]:
    """``'KEY=VALUE'`` as ``(KEY, VALUE)``, split at the first '=' (the value may hold more);
    :class:`RequestError` naming ``field`` without an '=' or with an empty key."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise RequestError(field, text, "use KEY=VALUE")
    return key, value


def retry_causes(text: str | None) -> list[str] | None:
    """A comma list of causes; None = not given (the API's default); 'none' = retry nothing
    (``[]``). Unknown names pass through for the API to refuse at ``retry_on[i]``."""
    if text is None:
        return None
    return [] if text.strip() == "none" else [c.strip() for c in text.split(",") if c.strip()]
