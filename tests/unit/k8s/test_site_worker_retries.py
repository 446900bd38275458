"""The site's worker and the API server's refusals (issue 49, "API server down then back"): a
kube-apiserver that has just started answers 403 to a ServiceAccount's requests until its RBAC
authorizer has synced (seen in tests/e2e/k8s/test_plane_faults_e2e.py's server log), and 429
under load. Such an answer is retried, as a connection refused is; only one that lasts is taken
as the server's word."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from lightkube.core.exceptions import ApiError

from xpupool.k8s.site import api_errors
from xpupool.k8s.site.site import KubernetesSite, _DeletePod
from xpupool.k8s.site.sites_file import KubernetesSiteConfig

pytestmark = pytest.mark.slow  # a worker thread and its backoff: seconds


def api_error(code: int) -> ApiError:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    request = httpx.Request("DELETE", "https://127.0.0.1/api/v1/namespaces/ns/pods/p")
    return ApiError(response=httpx.Response(code, json=body, request=request))


class Client:
    """Answers each delete with the next of ``answers`` (an ApiError's code; 0: the connection
    refused), then 200."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers)
        self.deletes = 0
        self.done = threading.Event()

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self.deletes += 1
        if self.answers:
            code = self.answers.pop(0)
            if not code:
                raise httpx.ConnectError("[Errno 111] Connection refused")
            raise api_error(code)
        self.done.set()


def run(client: Client, wait_s: float = 20) -> None:
    site = KubernetesSite(KubernetesSiteConfig(name="gpu-a", in_cluster=True), resync_s=0)
    site._client = client  # type: ignore[assignment]
    worker = threading.Thread(target=site._work, daemon=True)
    worker.start()
    site._tasks.put(_DeletePod("ns", "p"))
    client.done.wait(wait_s)
    time.sleep(0.2)
    site._tasks.put(None)
    worker.join(60)


def test_a_delete_answered_403_then_429_while_the_server_settles_is_tried_again() -> None:
    client = Client(403, 429)
    run(client)
    assert client.done.is_set(), client.deletes
    assert client.deletes == 3


def test_the_tries_count_the_servers_refusals_not_its_absence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Down (connection refused) for a while, then a 403 as it comes back: still tried again."""
    monkeypatch.setattr(api_errors, "SETTLING_TRIES", 3)
    client = Client(0, 0, 0, 403)
    run(client)
    assert client.done.is_set(), client.deletes
    assert client.deletes == 5


def test_a_refusal_that_lasts_is_the_servers_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_errors, "SETTLING_TRIES", 3)
    client = Client(*[403] * 40)
    run(client, wait_s=5)
    assert not client.done.is_set()
    assert client.deletes == 3


def test_any_other_refusal_is_taken_at_once() -> None:
    client = Client(422)
    run(client, wait_s=2)
    assert client.deletes == 1 and not client.done.is_set()
