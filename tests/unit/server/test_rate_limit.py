"""The rate limits per credential and per address (``server/rate_limit.py``) on an in-process
plane with a clock the test moves: what a bucket lets through and when, what a refusal says,
which key a request counts under (a token, a dashboard session, an address), and that memory
stays bounded. The same limits on a real server, alone and behind its HTTP workers:
``tests/integration/test_http_limits.py``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from server_kit import Server, tenant

from xpupool.server.app import create_app
from xpupool.server.auth import token_hash
from xpupool.server.client_address import address_key
from xpupool.server.rate_limit import Buckets, Rate, RateLimiter, bearer_digest, parse_rate


class Ticks:
    """Monotonic seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("50/200", Rate(50.0, 200)),
        ("2.5/3", Rate(2.5, 3)),
        ("10", Rate(10.0, 40)),  # BURST: 4 s worth
        ("0.1", Rate(0.1, 1)),
        ("0", Rate(0.0, 0)),
        ("0/10", Rate(0.0, 0)),
    ],
)
def test_rates_are_read_as_rate_and_burst(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate
    assert parse_rate(text).off == (rate.per_s == 0)


@pytest.mark.parametrize("text", ["", "fast", "-1", "5/0", "5/x", "1e3"])
def test_a_bad_rate_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"^{text!r}: .*(RATE|BURST)"):
        parse_rate(text)


def test_a_bucket_lets_its_burst_through_then_its_rate() -> None:
    buckets = Buckets(Rate(2.0, 3))
    assert [buckets.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a", 0.0) == pytest.approx(0.5)  # one more in half a second
    assert buckets.wait_s("a", 0.25) == pytest.approx(0.25)
    assert buckets.take("a", 0.5) == 0.0
    assert buckets.take("b", 0.5) == 0.0  # another key has its own
    assert buckets.take("a", 100.0) == 0.0  # refilled, never above the burst:
    assert [buckets.take("a", 100.0) for _ in range(3)][-1] > 0


def test_buckets_are_bounded_dropping_the_least_recently_used() -> None:
    buckets = Buckets(Rate(1.0, 1), max_keys=3)
    for key in ("a", "b", "c"):
        buckets.take(key, 0.0)
    buckets.take("a", 0.0)  # refused, and now the most recently used
    buckets.take("d", 0.0)
    assert len(buckets) == 3
    assert buckets.take("b", 0.0) == 0.0  # dropped: full again
    assert buckets.take("a", 0.0) > 0  # kept: still empty


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("testclient", "testclient"),
        (None, ""),
    ],
)
def test_an_address_counts_as_its_host_or_its_ipv6_slash_64(host: str | None, key: str) -> None:
    assert address_key(host) == key


@pytest.mark.parametrize(
    ("header", "digest"),
    [
        ("Bearer xpp_a", token_hash("xpp_a")),
        ("bearer xpp_a", token_hash("xpp_a")),
        ("Basic eHBwX2E=", None),
        ("Bearer", None),
        (None, None),
        ("Bearer " + "x" * 201, None),  # no token is that long: not hashed, counted as none
    ],
)
def test_the_credential_is_the_bearer_tokens_hash(header: str | None, digest: str | None) -> None:
    assert bearer_digest(header) == digest


@pytest.mark.slow
def test_each_token_has_its_own_rate_and_a_refusal_says_when_to_come_back(
    server: Server,
) -> None:
    ticks = Ticks()
    limiter = RateLimiter(server.plane, Rate(1.0, 3), Rate(1.0, 2), clock=ticks)
    alice, bob = token_hash(tenant(server, "alice")), token_hash(tenant(server, "bob"))
    assert [limiter.admit(alice, "192.0.2.1") for _ in range(3)] == [None] * 3
    refused = limiter.admit(alice, "192.0.2.2")  # another address: the same token
    assert refused is not None and refused.status == 429
    assert refused.headers == {"Retry-After": "1"}
    assert refused.body["field"] == "token"
    assert "--rate-limit" in str(refused.body["reason"])
    assert limiter.admit(bob, "192.0.2.1") is None
    ticks.now += 1.0
    assert limiter.admit(alice, "192.0.2.1") is None
    assert limiter.refused == {"token": 1}


def test_requests_without_a_valid_token_count_against_their_address(server: Server) -> None:
    ticks = Ticks()
    limiter = RateLimiter(server.plane, Rate(1.0, 1), Rate(0.5, 2), clock=ticks)
    assert limiter.admit(None, "192.0.2.1") is None
    assert limiter.admit(token_hash("xpp_unknown"), "192.0.2.1") is None
    refused = limiter.admit(None, "192.0.2.1")
    assert refused is not None and refused.headers == {"Retry-After": "2"}
    assert refused.body["field"] == "address"
    assert "--address-rate-limit" in str(refused.body["reason"])
    assert limiter.admit(None, "192.0.2.2") is None  # another address is not held back


@pytest.mark.slow
def test_past_its_address_limit_a_token_not_seen_yet_is_not_looked_up(server: Server) -> None:
    """A token guess from an address over its limit costs no store query (the cache of live
    tokens stays without it); a token already seen goes by its own rate."""
    ticks = Ticks()
    limiter = RateLimiter(server.plane, Rate(1.0, 5), Rate(1.0, 1), clock=ticks)
    seen = token_hash(tenant(server, "seen"))
    assert limiter.admit(seen, "192.0.2.1") is None
    assert limiter.admit(None, "192.0.2.1") is None  # the address's one
    fresh = token_hash(tenant(server, "fresh"))
    server.plane.forget_principals(fresh)
    refused = limiter.admit(fresh, "192.0.2.1")
    assert refused is not None and refused.body["field"] == "address"
    assert server.plane.cached_principal(fresh) is None
    assert limiter.admit(seen, "192.0.2.1") is None
    assert limiter.admit(fresh, "192.0.2.9") is None  # from elsewhere it is looked up
    assert server.plane.cached_principal(fresh) is not None


def test_an_expired_token_counts_as_none(server: Server) -> None:
    assert server.client.post("/v1/tenants", json={"name": "x"}, headers=server.admin)
    r = server.client.post("/v1/tenants/x/tokens", json={"expires_in_s": 10}, headers=server.admin)
    expiring = token_hash(r.json()["token"])
    limiter = RateLimiter(server.plane, Rate(1.0, 5), Rate(1.0, 1), clock=Ticks())
    server.clock.advance(11)
    assert limiter.admit(expiring, "192.0.2.1") is None  # the address's one
    assert limiter.admit(expiring, "192.0.2.1") is not None


def test_off_means_no_limit(server: Server) -> None:
    limiter = RateLimiter(server.plane, Rate(0.0, 0), Rate(0.0, 0), clock=Ticks())
    admin = token_hash(server.admin_token)
    assert limiter.off
    assert all(limiter.admit(d, "192.0.2.1") is None for d in [admin, None] * 500)


def _limited_app(server: Server, token: Rate, address: Rate) -> TestClient:
    limiter = RateLimiter(server.plane, token, address, clock=Ticks())
    return TestClient(create_app(server.plane, background=False, limiter=limiter))


@pytest.mark.slow
def test_the_app_answers_429_before_any_route_with_retry_after(server: Server) -> None:
    with _limited_app(server, Rate(1.0, 2), Rate(1.0, 2)) as client:
        assert [client.get("/v1/jobs", headers=server.admin).status_code for _ in range(3)] == [
            200,
            200,
            429,
        ]
        r = client.get("/v1/nodes", headers=server.admin)  # every route: one bucket per token
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert r.headers["content-type"] == "application/json"
        assert r.json()["field"] == "token"
        assert client.get("/metrics", headers=server.admin).status_code == 429
        # without a token: the address's bucket
        assert [client.get("/healthz").status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.slow
def test_a_dashboard_session_counts_as_its_token(server: Server) -> None:
    with _limited_app(server, Rate(1.0, 4), Rate(1.0, 100)) as client:
        client.follow_redirects = False
        r = client.post(
            "/signin", data={"token": server.admin_token}, headers={"Origin": "http://testserver"}
        )
        assert r.status_code == 303  # the address's: no session yet
        assert client.get("/").status_code == 200  # the session's token, from here on
        assert client.get("/v1/jobs", headers=server.admin).status_code == 200
        assert client.get("/").status_code == 200
        assert client.get("/v1/jobs", headers=server.admin).status_code == 200
        assert client.get("/").status_code == 429
