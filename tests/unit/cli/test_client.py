"""The HTTP client's error mapping, over the client's ``send`` seam (no server): a 4xx body
becomes one ``ApiError`` line naming the field, a refused token says where the token came from, a
dead server is ``Unreachable``, an answer the client cannot read is ``BadAnswer`` naming the
field, and answers parse leniently. One test sends through the real transport to a local server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from xpupool.client import ApiError, Client, ClientConfig, Unreachable
from xpupool.client._errors import BadAnswer
from xpupool.client._wire import Answer

Sent = tuple[str, str, Mapping[str, str], bytes | None]


def _client(
    answer: Callable[[Sent], Answer], token: str | None = "t", url: str = "http://pool:8080"
) -> Client:
    def send(method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> Answer:
        return answer((method, target, headers, body))

    return Client(ClientConfig(url, token, "XPUPOOL_TOKEN"), send=send)


def _json(status: int, body: object) -> Callable[[Sent], Answer]:
    return lambda _: Answer(status, "", json.dumps(body).encode())


def test_a_422_names_the_field_on_one_line() -> None:
    body = {"field": "spec.devices.memory", "value": "24Gx", "reason": "unknown unit 'Gx'"}
    with pytest.raises(ApiError) as err:
        _client(_json(422, body)).jobs()
    assert (err.value.status, err.value.field, err.value.value) == (422, *list(body.values())[:2])
    assert str(err.value) == "spec.devices.memory: unknown unit 'Gx' (got '24Gx')"


def test_a_401_says_where_the_token_came_from() -> None:
    body = {"field": None, "value": None, "reason": "unknown or revoked token"}
    with pytest.raises(ApiError) as err:
        _client(_json(401, body)).nodes()
    assert str(err.value) == "unknown or revoked token (token from XPUPOOL_TOKEN)"
    with pytest.raises(ApiError) as err:
        _client(_json(401, body), token=None).nodes()
    assert "no token" in str(err.value)


def test_a_non_json_error_keeps_its_first_line() -> None:
    with pytest.raises(ApiError) as err:
        _client(lambda _: Answer(502, "Bad Gateway", b"bad gateway\nmore")).sites()
    assert str(err.value) == "server answered 502: bad gateway"
    with pytest.raises(ApiError) as err:  # JSON, but not the server's error shape
        _client(_json(500, {"detail": "boom"})).sites()
    assert str(err.value).startswith("server answered 500: ")


def test_a_refused_connection_is_unreachable() -> None:
    def refuse(_: Sent) -> Answer:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(Unreachable) as err:
        _client(refuse).nodes()
    assert (
        str(err.value) == "cannot reach xpupool at http://pool:8080: [Errno 111] Connection refused"
    )


def test_answers_are_read_leniently_and_requests_carry_the_token() -> None:
    seen: list[Sent] = []

    def answer(sent: Sent) -> Answer:
        seen.append(sent)
        site = {"name": "bj", "nodes": 1, "nodes_ready": 1, "devices": 8, "devices_free": 8}
        return Answer(
            200, "OK", json.dumps([{**site, "by_model": {}, "added_later": True}]).encode()
        )

    sites = _client(answer).sites()
    assert sites[0].name == "bj"
    assert seen[0][2]["Authorization"] == "Bearer t"


def test_an_answer_missing_a_field_names_it() -> None:
    site = {"name": "bj", "nodes": 1, "nodes_ready": "one", "devices": 8, "devices_free": 8}
    with pytest.raises(BadAnswer) as err:
        _client(_json(200, [{**site, "by_model": {}}])).sites()
    assert "sites[0].nodes_ready: not int (got 'one')" in str(err.value)
    with pytest.raises(BadAnswer) as err:
        _client(lambda _: Answer(200, "OK", b"<html>")).nodes()
    assert "GET /v1/nodes: not JSON" in str(err.value)


def test_query_values_and_paths_are_sent_as_the_server_reads_them() -> None:
    seen: list[Sent] = []

    def answer(sent: Sent) -> Answer:
        seen.append(sent)
        return Answer(200, "OK", b'{"name": "a b", "deleted": true}')

    _client(answer, url="http://pool:8080/prefix/").delete_node("a b", drain=False)
    assert seen[0][:2] == ("DELETE", "/prefix/v1/nodes/a%20b?drain=false")


def test_a_404_is_its_reason_alone() -> None:
    body = {"field": "job", "value": "5", "reason": "job '5' not found"}
    with pytest.raises(ApiError) as err:
        _client(_json(404, body)).job(5)
    assert str(err.value) == "job '5' not found"


@pytest.fixture
def local_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"path": self.path, "auth": self.headers["Authorization"]})
            self.send_response(418)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"field": None, "reason": body}).encode())

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_standard_library_transport_sends_the_request(local_server: str) -> None:
    config = ClientConfig(local_server, "t", "XPUPOOL_TOKEN")
    with pytest.raises(ApiError) as err:
        Client(config).nodes(site="bj")
    assert err.value.status == 418
    assert json.loads(err.value.reason) == {"path": "/v1/nodes?site=bj", "auth": "Bearer t"}


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
