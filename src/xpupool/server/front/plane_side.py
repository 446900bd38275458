"""The plane's end of the channel from its HTTP workers: job submissions, answered in the API's
own words, on the plane's event loop.

An HTTP worker (``front/app.py``) takes a ``POST /v1/jobs`` off the network and sends the plane
what the request said: the ``Authorization`` and ``Content-Type`` headers and the body, as bytes.
Nothing of it is trusted: the plane authenticates the token, parses and validates the body and
submits exactly as the route does (``routers/jobs.py``), in the order FastAPI does it (the body's
JSON, then the token, then the body's fields), and answers the status, headers and JSON body the
route would have answered (``error_answers.py``), which the worker sends on as they are; for a
job it stored, the row as stored, which the worker renders (``front/app.py``). What the plane saves
is HTTP and the answer's rendering, the larger part of what a submission cost it through the
framework (issue 25; docs/benchmarks.md). The submissions that come in one turn of the event loop
are stored in one transaction (``jobs.submit_many``): one commit for several.

The channel is a Unix socket in a directory of mode 0700 (the plane's user only). A connection
carries one request at a time, answered in order; a worker keeps several.
"""

from __future__ import annotations

import asyncio
import email.message
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from fastapi.security.utils import get_authorization_scheme_param
from pydantic import ValidationError

from xpupool.model.errors import Unavailable
from xpupool.server.audit_http import audit_reason, audited, submit_target
from xpupool.server.auth import Principal
from xpupool.server.error_answers import ErrorAnswer, error_answer, validation_answer
from xpupool.server.front.wire import JOB, SUBMIT, FrameError, frame, read_frame, render
from xpupool.server.plane import ControlPlane
from xpupool.server.rate_limit import RateLimiter, bearer_digest
from xpupool.server.routers.deps import bearer_principal, check_user
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.services import jobs

log = logging.getLogger("xpupool.server")
MAX_BATCH = 32
"""Submissions taken in one store transaction at most: a batch holds the event loop (and the
scheduling passes) for its length, about a millisecond a submission."""


class Answer:
    """An HTTP answer as the worker sends it: status, extra headers, a body as bytes (JSON unless
    the headers give another content-type). ``render`` :data:`JOB`: the body is a stored job
    (``jobs.Submitted.wire()``) that the worker renders as the route's answer."""

    __slots__ = ("body", "headers", "render", "status")

    def __init__(
        self,
        status: int,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        render: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        self.render = render

    @classmethod
    def of(cls, error: ErrorAnswer) -> Answer:
        return cls(error.status, render(error.body), error.headers)


def submit_answers(
    plane: ControlPlane, asks: Sequence[_Ask]
) -> list[tuple[Answer, Principal | None]]:
    """What ``POST /v1/jobs`` answers for each (Authorization, Content-Type, body), and who
    asked (None when the token was refused), for the audit. Those that pass the token and the
    body's validation are submitted together (``jobs.submit_many``: one store transaction),
    each answered as it would be alone."""
    answers: list[tuple[Answer, Principal | None] | None] = []
    valid: list[tuple[int, Principal, JobIn]] = []
    for i, (authorization, content_type, body) in enumerate(asks):
        checked = _validated(plane, authorization, content_type, body)
        if isinstance(checked[0], Answer):
            answers.append((checked[0], checked[1]))
        else:
            who, job_in = checked
            assert who is not None and isinstance(job_in, JobIn)
            valid.append((i, who, job_in))
            answers.append(None)
    results = jobs.submit_many(plane, [(who, job_in) for _, who, job_in in valid])
    for (i, who, _), result in zip(valid, results, strict=True):
        if isinstance(result, Exception):
            answers[i] = (_answer(result), who)
        else:  # ASCII: a lone surrogate in a name reaches the worker as the store holds it
            answers[i] = (Answer(201, json.dumps(result.wire()).encode(), render=JOB), who)
    assert all(a is not None for a in answers), "every submission has its answer"
    return cast(list[tuple[Answer, Principal | None]], answers)


def _validated(
    plane: ControlPlane, authorization: str | None, content_type: str | None, body: bytes
) -> tuple[Answer, Principal | None] | tuple[Principal, JobIn]:
    """The token's principal and the validated body, or the refusal (and who asked, if known),
    checked in FastAPI's order: the body's JSON, the token, the body's fields."""
    parsed, refused = _json_body(content_type, body)
    if refused is not None:
        return refused, None
    try:
        who = bearer_principal(plane, _bearer(authorization))
    except Exception as exc:
        return _answer(exc), None
    missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
    try:
        check_user(who)
        if parsed is _MISSING:
            return Answer.of(validation_answer([missing])), who
        # from_attributes as FastAPI validates a body: its wording for what is not an object
        return who, JobIn.model_validate(parsed, from_attributes=True)
    except ValidationError as exc:
        return Answer.of(validation_answer(_under_body(exc.errors()))), who
    except Exception as exc:
        return _answer(exc), who


_MISSING = object()


def _json_body(content_type: str | None, body: bytes) -> tuple[object, Answer | None]:
    """The body as FastAPI reads it for a JSON body parameter: parsed as JSON when the content
    type says JSON (application/json or +json; no content type is not JSON), else the bytes as
    they are (refused by validation); an empty body is a missing one. A body that is not JSON
    is refused here, before the token is looked at, as FastAPI does."""
    if not body:
        return _MISSING, None
    if content_type is None:
        return body, None
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    if message.get_content_maintype() != "application" or not (
        subtype == "json" or subtype.endswith("+json")
    ):
        return body, None
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        error = {
            "type": "json_invalid",
            "loc": ("body", exc.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": exc.msg},
        }
        return None, Answer.of(validation_answer([error]))
    except ValueError:  # bytes that are not UTF-8, -16 or -32: FastAPI's own 400, as it says it
        return None, Answer(400, render({"detail": "There was an error parsing the body"}))


def _bearer(authorization: str | None) -> tuple[str, str] | None:
    """(scheme, credentials) of an Authorization header, as FastAPI's ``HTTPBearer`` reads it."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    return (scheme, credentials) if authorization and scheme and credentials else None


def _under_body(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """pydantic's errors located under 'body', as FastAPI reports a body's."""
    out = []
    for error in errors:
        item = dict(error)
        item["loc"] = ("body", *error.get("loc", ()))
        out.append(item)
    return out


def _answer(exc: Exception) -> Answer:
    error = error_answer(exc)
    if error is None:  # a bug
        log.error("job submission failed", exc_info=exc)
        return _answer_500()
    return Answer.of(error)


def _answer_500() -> Answer:
    """The app's 500, as it says it."""
    return Answer(500, b"Internal Server Error", {"content-type": "text/plain; charset=utf-8"})


_Ask = tuple[str | None, str | None, bytes]  # (Authorization, Content-Type, body)


class SubmitChannel:
    """The plane's listener on ``path``: it answers the frames with :func:`submit_answers`, on
    the event loop that runs it (the one that runs the scheduling passes). The frames that came
    in one turn of the loop (``MAX_BATCH`` at most) are taken together, in one store
    transaction; while a scheduling batch holds the loop, the next frames wait in their sockets
    and are taken together after it."""

    def __init__(
        self,
        plane: ControlPlane,
        path: Path,
        max_body: int,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.plane = plane
        self.path = path
        self.max_body = max_body
        self.limiter = limiter  # the app's: a submission counts as any other request
        self.server: asyncio.AbstractServer | None = None
        self.waiting: list[tuple[_Ask, asyncio.Future[tuple[Answer, Principal | None]]]] = []

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)  # left by a server that was killed: DirLock is ours
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                meta, body = await read_frame(reader, self.max_body)
                if meta.get("op") != SUBMIT:
                    raise FrameError(f"unknown operation {meta.get('op')!r}")
                ask = (_text(meta, "authorization"), _text(meta, "content_type"), body)
                client = _text(meta, "client")
                refused = self._over_rate(ask[0], client)
                if refused is not None:
                    answer, who = refused, None
                else:
                    answered: asyncio.Future[tuple[Answer, Principal | None]]
                    answered = loop.create_future()
                    self.waiting.append((ask, answered))
                    if len(self.waiting) == 1:  # the first since the last batch: next turn
                        loop.call_soon(self._answer_waiting)
                    answer, who = await answered
                if who is not None and audited(who, "submit", "POST", answer.status):
                    await self._audit(who, answer, _submit_target(who, body, answer), client)
                head: dict[str, object] = {"status": answer.status, "headers": answer.headers}
                if answer.render is not None:
                    head["render"] = answer.render
                writer.write(frame(head, answer.body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the worker went away
        except FrameError as exc:
            log.warning("HTTP worker channel: %s; connection dropped", exc)
        finally:
            writer.close()

    def _over_rate(self, authorization: str | None, client: str | None) -> Answer | None:
        """The 429 for a submission over its token's or address's rate (``rate_limit.py``)."""
        if self.limiter is None:
            return None
        refused = self.limiter.admit(bearer_digest(authorization), client)
        return None if refused is None else Answer.of(refused)

    def _answer_waiting(self) -> None:
        """Answer the waiting frames, ``MAX_BATCH`` at a time (the rest on the next turn)."""
        batch, self.waiting = self.waiting[:MAX_BATCH], self.waiting[MAX_BATCH:]
        if self.waiting:
            asyncio.get_running_loop().call_soon(self._answer_waiting)
        try:
            answers = submit_answers(self.plane, [ask for ask, _ in batch])
        except Exception as exc:  # a bug: each connection's request fails with it
            log.error("job submissions failed", exc_info=exc)
            answers = [(_answer_500(), None)] * len(batch)
        for (_, answered), answer in zip(batch, answers, strict=True):
            if not answered.done():  # its connection may have gone while it waited
                answered.set_result(answer)

    async def _audit(self, who: Principal, answer: Answer, target: str, source: str | None) -> None:
        """The row the audit middleware writes for the route (an admin's submission, refused or
        not), off the loop as it does; ``source``: the address the worker saw."""
        reason = audit_reason(answer.status, answer.body)
        record = self.plane.audit.record
        try:
            await asyncio.to_thread(
                record, who, "submit", target, answer.status, reason, source=source or None
            )
        except Unavailable:
            pass  # the store cannot be written: its health said so once
        except Exception:
            log.exception("audit row for submit not written")


def _submit_target(who: Principal, body: bytes, answer: Answer) -> str:
    """The audit target the route names (:func:`submit_target`): the stored job from the answer,
    else the tenant the request asked for (or the caller's)."""
    if answer.status < 400:
        job = _json_object(answer.body)
        if isinstance(job.get("id"), int):
            return submit_target(str(job.get("tenant")), job["id"])
    asked = _json_object(body).get("tenant")
    return submit_target(asked if isinstance(asked, str) else who.tenant)


def _json_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; empty when it is not one (a refused body may be anything)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(meta: Mapping[str, object], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None
