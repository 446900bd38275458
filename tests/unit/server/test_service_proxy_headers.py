"""What a replica gets of a proxied request's headers and path (``server/service_proxy.py``):
never the caller's credentials, no hop-by-hop header, the forwarding headers set, the path as
the client encoded it."""

from __future__ import annotations

from typing import Any

from xpupool.server.service_proxy import forwarded_headers, upstream_path


def _scope(headers: list[tuple[bytes, bytes]], **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "headers": headers,
        "client": ("10.1.2.3", 5555),
        "scheme": "https",
        **extra,
    }


def test_credentials_and_hop_by_hop_headers_stay_behind() -> None:
    out, authorization = forwarded_headers(
        _scope(
            [
                (b"host", b"pool.example"),
                (b"authorization", b"Bearer xpp_secret"),
                (b"x-upstream-authorization", b"Bearer sk-1"),
                (b"cookie", b"xpupool_session=abc; lang=en"),
                (b"x-xpupool-client", b"6.6.6.6"),
                (b"connection", b"keep-alive, x-private"),
                (b"x-private", b"1"),
                (b"te", b"trailers"),
                (b"transfer-encoding", b"chunked"),
                (b"x-forwarded-for", b"192.0.2.1"),
                (b"accept", b"text/event-stream"),
            ]
        )
    )
    assert authorization == "Bearer xpp_secret"
    assert out == [
        (b"cookie", b"lang=en"),
        (b"accept", b"text/event-stream"),
        (b"authorization", b"Bearer sk-1"),
        (b"x-forwarded-for", b"192.0.2.1, 10.1.2.3"),
        (b"x-forwarded-proto", b"https"),
        (b"x-forwarded-host", b"pool.example"),
    ]


def test_a_cookie_of_xpupool_alone_is_not_sent() -> None:
    out, _ = forwarded_headers(_scope([(b"cookie", b"xpupool_session=abc")]))
    assert [k for k, _ in out] == [b"x-forwarded-for", b"x-forwarded-proto"]


def test_the_path_is_what_follows_proxy_as_encoded_with_its_query() -> None:
    scope = _scope(
        [],
        path="/v1/services/chat/proxy/a b/c%2Fd",
        raw_path=b"/v1/services/chat/proxy/a%20b/c%2Fd",
        query_string=b"x=1&y=%2F",
        path_params={"name": "chat", "path": "a b/c/d"},
    )
    assert upstream_path(scope, "chat") == b"/a%20b/c%2Fd?x=1&y=%2F"
    bare = _scope(
        [],
        path="/v1/services/chat/proxy/",
        raw_path=b"/v1/services/chat/proxy/",
        path_params={"name": "chat", "path": ""},
    )
    assert upstream_path(bare, "chat") == b"/"
