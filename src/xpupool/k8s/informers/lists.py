"""A whole list of one kind from kube-apiserver, read in pages, started again from its first page
when the API server no longer holds the list a page's continue token points into.

A paged list reads one snapshot: each page's ``continue`` token names the resourceVersion of the
first page. Once etcd has compacted that version (five minutes by default, sooner on a busy
cluster, and a list of 10,000 pods read by a loaded plane takes a while) the next page is answered
``410 Gone`` (reason ``Expired``: "The provided continue parameter is too old to display a
consistent list result"). The pages read so far are then of no use: the only consistent list is a
new one, from its first page (client-go's pager falls back to a whole unpaged list instead, which
at this size is one huge answer). :func:`list_whole` starts again at most :data:`LIST_TRIES`
times, then raises :class:`ExpiredError`, which its callers take as a passing failure (the
informer lists again after its backoff, a site's worker does its task again after its own),
never as the API server refusing the request for good.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import Generic as RawObject

log = logging.getLogger(__name__)

__all__ = ["LIST_CHUNK", "LIST_TRIES", "ExpiredError", "Listed", "is_expired", "list_whole"]

LIST_TRIES = 3  # reads of a list from its first page, when a continue token expired each time
LIST_CHUNK = 500  # objects a page when a whole kind is listed (client-go's pager reads 500)


class ExpiredError(Exception):
    """The apiserver no longer has the version we asked for (HTTP 410, Expired): a watch's
    resourceVersion, or a list's continue token."""


@dataclass(frozen=True, slots=True)
class Listed:
    """A whole list: its objects, in the API server's order, and the version it was read at."""

    items: list[dict[str, Any]]
    version: str | None


def is_expired(exc: ApiError) -> bool:
    """Is ``exc`` the API server's ``410 Gone`` (a version or continue token too old)?"""
    status = exc.status
    return getattr(status, "code", None) == 410 or getattr(status, "reason", None) in (
        "Expired",
        "Gone",
    )


def list_whole(
    client: Client,
    resource: type[RawObject],
    *,
    chunk_size: int,
    what: str,
    **selectors: Any,
) -> Listed:
    """Every object of ``resource`` that ``selectors`` (lightkube's ``namespace``, ``labels``,
    ``fields``) select, read ``chunk_size`` a page (lightkube's dicts); started again from its first
    page when a page is answered 410, at most :data:`LIST_TRIES` reads in all, then
    :class:`ExpiredError`. ``what`` names the list in the log. Any other error passes through."""
    for tries in range(1, LIST_TRIES + 1):
        pages = client.list(resource, chunk_size=chunk_size, **selectors)  # type: ignore[type-var]
        try:
            items: list[dict[str, Any]] = list(pages)
            return Listed(items, pages.resourceVersion)
        except ApiError as exc:
            if not is_expired(exc):
                raise
            if tries == LIST_TRIES:
                raise ExpiredError(f"{what}: {exc}") from exc
            log.info("%s: a page's continue token expired (%s); listing from the start", what, exc)
    raise AssertionError("unreachable")  # pragma: no cover
