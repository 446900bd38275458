"""The API server's answers a site's worker takes as done: a create that finds the object there
(409: names are idempotent, so it is the one made before a restart or a retry) and a delete that
finds it gone (404)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from lightkube.core.exceptions import ApiError


@contextlib.contextmanager
def exists_ok() -> Iterator[None]:
    """A create whose object exists already (409) is done."""
    try:
        yield
    except ApiError as exc:
        if exc.status.code != 409:
            raise


@contextlib.contextmanager
def gone_ok() -> Iterator[None]:
    """A delete (or read) of an object that is gone (404) is done."""
    try:
        yield
    except ApiError as exc:
        if exc.status.code != 404:
            raise


@contextlib.contextmanager
def forbidden_ok() -> Iterator[None]:
    """A create the plane's identity has no right to (403) of an object the installer makes (the
    chart's PriorityClass): taken as there; the objects that name it are refused naming it if
    it is not."""
    try:
        yield
    except ApiError as exc:
        if exc.status.code != 403:
            raise
