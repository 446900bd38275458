"""The plane's end of the channel from its HTTP workers: job submissions, answered in the API's
own words, on the plane's event loop.

An HTTP worker takes a ``POST /v1/jobs`` off the network and reads it as the plane's routes do,
with FastAPI (``front/submit_route.py``): it sends the plane either the body, once valid, with the
caller's credentials and address (``wire.SUBMIT``), or the refusal it would answer and whether
the token comes before it (``wire.REFUSE``). The plane applies its rate limits, authenticates the
token as the routes do (``routers/deps.py``), submits (``services/jobs.py``), writes the audit
row as the middleware does (``audit_http.py``), and answers the status, headers and JSON body
(``error_answers.py``), which the worker sends on as they are; for a job it stored, the row as
stored, which the worker renders. What the plane saves is HTTP, the framework's dispatch and the
answer's rendering (docs/benchmarks.md, API). The submissions that come in one turn of the event
loop are stored in one transaction (``jobs.submit_many``): one commit for several.

The same channel carries the workers' service proxies' polls for the services' endpoints and
their token checks (``wire.SNAPSHOT``, ``wire.CALLER``), answered by ``front/proxy_plane.py``.

The channel is a Unix socket in a directory of mode 0700 (the plane's user only). A connection
carries one request at a time, answered in order; a worker keeps several.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from xpupool.server.audit_http import audited, submit_target, write_row
from xpupool.server.auth import Principal
from xpupool.server.error_answers import ErrorAnswer, error_answer
from xpupool.server.front.proxy_plane import ProxyAnswers
from xpupool.server.front.wire import (
    CALLER,
    JOB,
    REFUSE,
    SNAPSHOT,
    SUBMIT,
    FrameError,
    frame,
    read_frame,
    render,
)
from xpupool.server.plane import ControlPlane
from xpupool.server.rate_limit import RateLimiter, bearer_digest
from xpupool.server.routers.deps import bearer_principal, check_user
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.services import jobs
from xpupool.server.store_off_loop import on_store

log = logging.getLogger("xpupool.server")
MAX_BATCH = 32
"""Submissions taken in one store transaction at most: a batch holds the event loop (and the
scheduling passes) for its length, about a millisecond a submission."""
Credentials = tuple[str, str] | None
"""The Authorization header's scheme and credentials as the worker's ``HTTPBearer`` read them."""


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
    plane: ControlPlane, asks: Sequence[tuple[Credentials, bytes]]
) -> list[tuple[Answer, Principal | None]]:
    """What ``POST /v1/jobs`` answers for each (credentials, body the worker validated), and who
    asked (None when the token was refused), for the audit. Those whose token may submit are
    submitted together (``jobs.submit_many``: one store transaction), each answered as it
    would be alone."""
    answers: list[tuple[Answer, Principal | None] | None] = []
    valid: list[tuple[int, Principal, JobIn]] = []
    for i, (creds, job) in enumerate(asks):
        who, refused = caller(plane, creds)
        if refused is None:
            assert who is not None
            try:  # as FastAPI validated it in the worker: the JSON, then its fields
                valid.append((i, who, JobIn.model_validate(json.loads(job), from_attributes=True)))
                answers.append(None)
                continue
            except (ValueError, ValidationError) as exc:  # not from a worker of this release
                log.error("a worker sent a job it should have refused: %s", exc)
                refused = _answer_500()
        answers.append((refused, who))
    results = jobs.submit_many(plane, [(who, job_in) for _, who, job_in in valid])
    for (i, who, _), result in zip(valid, results, strict=True):
        if isinstance(result, Exception):
            answers[i] = (_answer(result), who)
        else:  # ASCII: a lone surrogate in a name reaches the worker as the store holds it
            answers[i] = (Answer(201, json.dumps(result.wire()).encode(), render=JOB), who)
    assert all(a is not None for a in answers), "every submission has its answer"
    return cast(list[tuple[Answer, Principal | None]], answers)


def caller(plane: ControlPlane, creds: Credentials) -> tuple[Principal | None, Answer | None]:
    """Who ``creds`` act as, and the refusal when they may not submit (401 unknown, 403 not a
    user: ``routers/deps.py``, as the route's dependency says it); who is None when unknown."""
    try:
        who = bearer_principal(plane, creds)
    except Exception as exc:
        return None, _answer(exc)
    try:
        check_user(who)
    except Exception as exc:
        return who, _answer(exc)
    return who, None


def refused_answer(
    plane: ControlPlane, creds: Credentials, worker: Answer, token_first: bool
) -> tuple[Answer, Principal | None]:
    """The answer to a submission the worker refused with ``worker``: the token's own refusal
    first when FastAPI checks the token before the refusal (``token_first``), else the worker's;
    and who asked, when the token was read."""
    if not token_first:  # the body is not JSON: FastAPI answers before it reads the token
        return worker, None
    who, refused = caller(plane, creds)
    return (refused or worker), who


def _answer(exc: Exception) -> Answer:
    error = error_answer(exc)
    if error is None:  # a bug
        log.error("job submission failed", exc_info=exc)
        return _answer_500()
    return Answer.of(error)


def _answer_500() -> Answer:
    """The app's 500, as it says it."""
    return Answer(500, b"Internal Server Error", {"content-type": "text/plain; charset=utf-8"})


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
        self.proxy: ProxyAnswers | None = None  # the workers' proxies' answers (create_app's)
        self.server: asyncio.AbstractServer | None = None
        self.batches: set[asyncio.Task[None]] = set()  # on threads (PostgreSQL)
        self.waiting: list[
            tuple[tuple[Credentials, bytes], asyncio.Future[tuple[Answer, Principal | None]]]
        ] = []

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)  # left by a server that was killed: DirLock is ours
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                meta, body = await read_frame(reader, self.max_body)
                if meta.get("op") in (SNAPSHOT, CALLER) and self.proxy is not None:
                    answered = await self.proxy.answer(str(meta["op"]), body)
                    writer.write(frame({"status": 200, "headers": {}}, answered))
                    await writer.drain()
                    continue
                answer, who, target = await self._answer(meta, body)
                if who is not None and audited(who, "submit", "POST", answer.status):
                    source = _text(meta, "client") or None
                    await write_row(
                        self.plane, who, "submit", target, answer.status, answer.body, source
                    )
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

    async def _answer(
        self, meta: Mapping[str, object], body: bytes
    ) -> tuple[Answer, Principal | None, str]:
        """The answer to one frame, who asked (None: no audit row) and the audit row's target
        (what the route names: the job, else the tenant asked for; a request the route never
        ran for is named by its method and path, as the audit middleware names it)."""
        op = meta.get("op")
        if op not in (SUBMIT, REFUSE):
            raise FrameError(f"unknown operation {op!r}")
        creds = _credentials(meta)
        refused = await self._over_rate(creds, _text(meta, "client"))
        if refused is not None:
            return refused, None, ""
        if op == REFUSE:
            worker = _worker_answer(meta, body)
            token_first = meta.get("token_first") is True
            answer, who = await on_store(
                self.plane, refused_answer, self.plane, creds, worker, token_first
            )
            return answer, who, "POST /v1/jobs"
        answered: asyncio.Future[tuple[Answer, Principal | None]]
        answered = asyncio.get_running_loop().create_future()
        self.waiting.append(((creds, body), answered))
        if len(self.waiting) == 1:  # the first since the last batch: on the next turn
            asyncio.get_running_loop().call_soon(self._answer_waiting)
        answer, who = await answered
        return answer, who, _submit_target(who, body, answer)

    async def _over_rate(self, creds: Credentials, client: str | None) -> Answer | None:
        """The 429 for a submission over its token's or address's rate (``rate_limit.py``)."""
        if self.limiter is None:
            return None
        authorization = None if creds is None else f"{creds[0]} {creds[1]}"
        refused = await self.limiter.admit_off_loop(bearer_digest(authorization), client)
        return None if refused is None else Answer.of(refused)

    def _answer_waiting(self) -> None:
        """Answer the waiting frames, ``MAX_BATCH`` at a time (the rest on the next turn); on
        PostgreSQL on a thread (``store_off_loop.py``, issue 50)."""
        batch, self.waiting = self.waiting[:MAX_BATCH], self.waiting[MAX_BATCH:]
        if self.waiting:
            asyncio.get_running_loop().call_soon(self._answer_waiting)
        if self.plane.store_is_local:
            self._settle(batch, self._submit(batch))
            return
        task = asyncio.get_running_loop().create_task(self._answer_on_thread(batch))
        self.batches.add(task)  # kept until done: the loop holds a task weakly
        task.add_done_callback(self.batches.discard)

    async def _answer_on_thread(
        self, batch: list[tuple[tuple[Credentials, bytes], asyncio.Future[Any]]]
    ) -> None:
        self._settle(batch, await asyncio.to_thread(self._submit, batch))

    def _submit(
        self, batch: list[tuple[tuple[Credentials, bytes], asyncio.Future[Any]]]
    ) -> list[tuple[Answer, Principal | None]]:
        try:
            return submit_answers(self.plane, [ask for ask, _ in batch])
        except Exception as exc:  # a bug: each connection's request fails with it
            log.error("job submissions failed", exc_info=exc)
            return [(_answer_500(), None)] * len(batch)

    @staticmethod
    def _settle(
        batch: list[tuple[tuple[Credentials, bytes], asyncio.Future[Any]]],
        answers: list[tuple[Answer, Principal | None]],
    ) -> None:
        for (_, answered), answer in zip(batch, answers, strict=True):
            if not answered.done():  # its connection may have gone while it waited
                answered.set_result(answer)


def _submit_target(who: Principal | None, job: bytes, answer: Answer) -> str:
    """The audit target the route names (:func:`submit_target`): the stored job from the answer,
    else the tenant the job asked for (or the caller's)."""
    if answer.status < 400:
        stored = _json_object(answer.body)
        if isinstance(stored.get("id"), int):
            return submit_target(str(stored.get("tenant")), stored["id"])
    asked = _json_object(job).get("tenant")
    return submit_target(asked if isinstance(asked, str) else who.tenant if who else None)


def _json_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; empty when it is not one."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _credentials(meta: Mapping[str, object]) -> Credentials:
    scheme, credentials = _text(meta, "scheme"), _text(meta, "credentials")
    return (scheme, credentials) if scheme and credentials else None


def _worker_answer(meta: Mapping[str, object], body: bytes) -> Answer:
    """The refusal a worker sent, checked as the frame's format: a 4xx status, string headers."""
    status, headers = meta.get("status"), meta.get("headers")
    if not isinstance(status, int) or not 400 <= status < 500 or not isinstance(headers, dict):
        raise FrameError("a refusal without a 4xx status and headers")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise FrameError("a refusal's headers are not strings")
    return Answer(status, body, headers)


def _text(meta: Mapping[str, object], key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None
