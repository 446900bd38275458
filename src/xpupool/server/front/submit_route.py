"""``POST /v1/jobs`` in an HTTP worker: FastAPI's own handling of the request (the body read as
JSON, the token, the body validated against the API's ``JobIn``), and the plane told the rest.

FastAPI answers in an order that a client sees: a body that is not JSON (422) or not text (400)
before the token, then the token (401) and its role (403), then the body's fields (422). The
worker knows the body but not the tokens, so it sends the plane either a valid job (the body as it
came) with the credentials (:data:`wire.SUBMIT`), or the refusal it would answer and whether the token comes
first (:data:`wire.REFUSE`); the plane authenticates, applies its rate limits, audits and says
the final answer (``front/plane_side.py``). Nothing of the request's parsing is written twice:
the plane's routes and this one share FastAPI, ``JobIn`` and ``error_answers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from xpupool.server.error_answers import ErrorAnswer, error_answer, validation_answer
from xpupool.server.front.channel_client import Caller, PlaneAnswer, PlaneUnreachable, SubmitClient
from xpupool.server.front.wire import render
from xpupool.server.schemas.jobs import JobIn

_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
BEFORE_THE_TOKEN = frozenset({"json_invalid"})
"""Validation errors FastAPI raises before it resolves the token: the body is not JSON."""


def submission_app(channel: Callable[[], SubmitClient]) -> FastAPI:
    """The worker's app for ``POST /v1/jobs`` (``channel``: the connections to the plane)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.post("/v1/jobs", status_code=201)
    async def submit(body: JobIn, creds: Credentials, request: Request) -> Response:
        # the body as it came, which FastAPI read as JSON (a dump of ``body`` would not say which
        # fields the client gave: ``spec`` and ``request`` fill each other)
        del body
        job = await request.body()
        return _response(await channel().submit(_caller(request, creds), job))

    async def refuse(request: Request, answer: ErrorAnswer, token_first: bool) -> Response:
        creds = await _bearer(request)
        refused = PlaneAnswer(answer.status, dict(answer.headers), render(answer.body))
        return _response(await channel().refuse(_caller(request, creds), refused, token_first))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        token_first = not any(e.get("type") in BEFORE_THE_TOKEN for e in errors)
        return await refuse(request, validation_answer(errors), token_first)

    @app.exception_handler(HTTPException)  # FastAPI's 400 for a body that is not text
    async def _http(request: Request, exc: HTTPException) -> Response:
        answer = error_answer(exc)
        assert answer is not None
        return await refuse(request, answer, token_first=False)

    @app.exception_handler(PlaneUnreachable)
    async def _unreachable(_: Request, exc: PlaneUnreachable) -> Response:
        return _response(unreachable(str(exc)))

    return app


def unreachable(why: str) -> PlaneAnswer:
    """The 503 a worker answers when the plane does not take a request."""
    body: dict[str, Any] = {
        "field": None,
        "value": None,
        "reason": f"the control plane is not answering: {why}",
    }
    return PlaneAnswer(503, {}, render(body))


def _caller(request: Request, creds: HTTPAuthorizationCredentials | None) -> Caller:
    client = request.client
    return Caller(
        None if creds is None else creds.scheme,
        None if creds is None else creds.credentials,
        client.host if client else "",
    )


def _response(answer: PlaneAnswer) -> Response:
    headers = dict(answer.headers)
    kind = headers.pop("content-type", "application/json")
    return Response(answer.body, answer.status, headers=headers, media_type=kind)
