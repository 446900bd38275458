"""The client's transport: one HTTP request with the standard library, its failures mapped to
``ApiError`` (the server's ``{field, value, reason}``) or ``Unreachable``, its answer read as JSON.

No httpx and no pydantic here: every CLI command pays for what this module imports, and
``http.client`` costs a fraction of httpx's import for the one-request-per-command use the CLI
makes of it (docs/benchmarks/startup-42.md). ``send`` is the seam tests replace to answer without
a network, as httpx's MockTransport did.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from xpupool.client._config import ClientConfig
from xpupool.client._errors import ApiError, BadAnswer, Unreachable


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as the client needs it."""

    status: int
    reason: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased


Send = Callable[[str, str, Mapping[str, str], bytes | None], Answer]
"""``send(method, path_with_query, headers, body) -> Answer``; raises ``OSError`` or
``http.client.HTTPException`` when no answer came."""


class Wire:
    """Requests to one server with one token; a connection per request (a CLI command makes one
    to four), so there is no pool to keep or to find closed."""

    def __init__(
        self, config: ClientConfig, *, timeout_s: float = 30.0, send: Send | None = None
    ) -> None:
        self.config = config
        url = urlsplit(config.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise Unreachable(config.url, "the URL must be http://HOST[:PORT] or https://...")
        self._scheme = url.scheme
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if config.token:
            self._headers["Authorization"] = f"Bearer {config.token}"
        self._send = send or self._send_http

    def _send_http(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> Answer:
        conn: http.client.HTTPConnection
        if self._scheme == "https":
            context = ssl.create_default_context(cafile=self.config.ca)
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout_s, context=context
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            conn.request(method, target, body=body, headers=dict(headers))
            response = conn.getresponse()
            body = response.read()
            headers = {k.lower(): v for k, v in response.getheaders()}
            return Answer(response.status, response.reason, body, headers)
        finally:
            conn.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        json_body: object = None,
    ) -> Answer:
        """The 2xx answer to one request; a 4xx or 5xx is raised as ``ApiError``."""
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        target = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        headers = dict(self._headers)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        try:
            answer = self._send(method, target, headers, body)
        except (OSError, http.client.HTTPException) as exc:
            detail = str(exc) or type(exc).__name__
            if "CERTIFICATE_VERIFY_FAILED" in detail:
                detail += " (set XPUPOOL_CA to the CA file that signed the server's certificate)"
            raise Unreachable(self.config.url, detail) from None
        if answer.status >= 400:
            raise self._error(answer)
        return answer

    def json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        json_body: object = None,
    ) -> Any:
        """The 2xx answer's JSON; one that is not JSON is ``BadAnswer``."""
        answer = self.call(method, path, params=params, json_body=json_body)
        try:
            return json.loads(answer.body)
        except ValueError:
            first = answer.body[:80].decode(errors="replace")
            raise BadAnswer(f"{method} {path}", first, "not JSON") from None

    def _error(self, answer: Answer) -> ApiError:
        """The server's ``{field, value, reason}`` (ErrorBody) as one ``ApiError``; a body of
        another shape is its first line."""
        status = answer.status
        try:
            body = json.loads(answer.body)
        except ValueError:
            body = None
        field = body.get("field") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("reason"), str)
            or not isinstance(field, str | None)
        ):
            text = answer.body.decode(errors="replace").strip().splitlines()
            reason = text[0][:200] if text else answer.reason
            return ApiError(status, None, None, f"server answered {status}: {reason}")
        reason = body["reason"]
        value = body.get("value")
        if status == 401:
            reason = f"{reason} (token from {self.config.token_source})"
            if self.config.token is None:
                reason = "no token: give --token, set XPUPOOL_TOKEN or a config file"
        if status == 404:  # the reason already names it: "job '5' not found"
            return ApiError(status, None, value, reason)
        return ApiError(status, field, value, reason)


def _param(value: object) -> str:
    """A query value as the server's FastAPI reads it: booleans lower-case."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
