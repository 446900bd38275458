"""The API server's answers a site's worker takes as done: a create that finds the object there
(409: names are idempotent, so it is the one made before a restart or a retry) and a delete that
finds it gone (404); and which refusals pass (:func:`refused`: a 403 or 429 while the server
settles is tried again)."""

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


SETTLING = frozenset({403, 429})
"""Refusals that pass: a kube-apiserver that has just started answers 403 to a ServiceAccount
until its RBAC authorizer has synced, and 429 when it sheds load."""
SETTLING_TRIES = 8
"""How many times a request answered with one of :data:`SETTLING` is made before the answer is
taken as the server's word (with the worker's backoff, about half a minute)."""


def refused(exc: ApiError, tries: int) -> bool:
    """Is ``exc`` the API server refusing a request for good (a 4xx, which the worker does not
    try again), rather than a passing state? ``tries``: how many answers in a row were among
    :data:`SETTLING` (connection errors before them do not count)."""
    code = exc.status.code
    if code is None or not 400 <= code < 500:
        return False
    return code not in SETTLING or tries >= SETTLING_TRIES
