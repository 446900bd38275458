"""The HTTP client's error mapping, over httpx's MockTransport (a real transport, no server):
a 4xx body becomes one ``ApiError`` line naming the field, a refused token says where the token
came from, a dead server is ``Unreachable``, and answers parse leniently."""

from __future__ import annotations

import httpx
import pytest

from xpupool.client import ApiError, Client, ClientConfig, Unreachable


def _client(handler: httpx.MockTransport, token: str | None = "t") -> Client:
    return Client(ClientConfig("http://pool:8080", token, "XPUPOOL_TOKEN"), transport=handler)


def test_a_422_names_the_field_on_one_line() -> None:
    body = {"field": "spec.devices.memory", "value": "24Gx", "reason": "unknown unit 'Gx'"}
    transport = httpx.MockTransport(lambda _: httpx.Response(422, json=body))
    with pytest.raises(ApiError) as err:
        _client(transport).jobs()
    assert (err.value.status, err.value.field, err.value.value) == (422, *list(body.values())[:2])
    assert str(err.value) == "spec.devices.memory: unknown unit 'Gx' (got '24Gx')"


def test_a_401_says_where_the_token_came_from() -> None:
    body = {"field": None, "value": None, "reason": "unknown or revoked token"}
    transport = httpx.MockTransport(lambda _: httpx.Response(401, json=body))
    with pytest.raises(ApiError) as err:
        _client(transport).nodes()
    assert str(err.value) == "unknown or revoked token (token from XPUPOOL_TOKEN)"
    with pytest.raises(ApiError) as err:
        _client(transport, token=None).nodes()
    assert "no token" in str(err.value)


def test_a_non_json_error_keeps_its_first_line() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(502, text="bad gateway\nmore"))
    with pytest.raises(ApiError) as err:
        _client(transport).sites()
    assert str(err.value) == "server answered 502: bad gateway"


def test_a_refused_connection_is_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(Unreachable) as err:
        _client(httpx.MockTransport(refuse)).nodes()
    assert (
        str(err.value) == "cannot reach xpupool at http://pool:8080: [Errno 111] Connection refused"
    )


def test_answers_are_read_leniently_and_requests_carry_the_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        site = {"name": "bj", "nodes": 1, "nodes_ready": 1, "devices": 8, "devices_free": 8}
        return httpx.Response(200, json=[{**site, "by_model": {}, "added_later": True}])

    sites = _client(httpx.MockTransport(handler)).sites()
    assert sites[0].name == "bj"
    assert seen[0].headers["authorization"] == "Bearer t"


def test_a_404_is_its_reason_alone() -> None:
    body = {"field": "job", "value": "5", "reason": "job '5' not found"}
    transport = httpx.MockTransport(lambda _: httpx.Response(404, json=body))
    with pytest.raises(ApiError) as err:
        _client(transport).job(5)
    assert str(err.value) == "job '5' not found"


def test_node_taint_arguments_are_kubectls() -> None:
    import click

    from xpupool.client.cli_fleet import taint_change

    change = taint_change(
        ["gpu=true:NoSchedule", "spot:PreferNoSchedule", "old:NoSchedule-", "infra-"], True
    )
    assert [(t.key, t.value, t.effect) for t in change.add] == [
        ("gpu", "true", "NoSchedule"),
        ("spot", "", "PreferNoSchedule"),
    ]
    assert [(r.key, r.effect) for r in change.remove] == [("old", "NoSchedule"), ("infra", None)]
    assert change.overwrite
    for bad in ("gpu=true", "gpu:NoExecute", "bad key-", "gpu:Nope-"):
        with pytest.raises(click.BadParameter):
            taint_change([bad], False)
