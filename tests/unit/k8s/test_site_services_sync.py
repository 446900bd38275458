"""A Kubernetes site's service keeper (``site_services.py``) making the cluster match what the
controller wants, against a recording stand-in of the lightkube client (the real apiserver's side
is tests/e2e/k8s/test_plane_services_e2e.py): applied once per change and again on a resync, the
first pass sweeps Deployments of services the plane no longer has, one no longer wanted is
deleted, and what no pod can say is the service's problem with nothing applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube.core.exceptions import ApiError

from xpupool.k8s.site.api_errors import SETTLING_TRIES
from xpupool.k8s.site.site_services import SiteServices
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.server.schemas.services import ServiceIn
from xpupool.server.service_sites import ServiceWant


class Recorder:
    """Records the site's requests; lists ``deployments`` for the sweep."""

    def __init__(self, deployments: list[dict[str, Any]] | None = None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.deployments = deployments or []

    def apply(self, obj: Any, **_: Any) -> Any:
        body = obj.to_dict()
        self.calls.append(("apply", body["kind"], body["metadata"]["name"]))
        return {**body, "metadata": {**body["metadata"], "uid": "u-1"}}

    def create(self, obj: Any, **_: Any) -> Any:
        self.calls.append(("create", obj.to_dict()["kind"], ""))
        return obj

    def delete(self, resource: Any, name: str, namespace: str | None = None) -> None:
        self.calls.append(("delete", resource.__name__, name))

    def list(self, resource: Any, **_: Any) -> list[dict[str, Any]]:
        return self.deployments


def want(name: str = "web", replicas: int = 1, **job: Any) -> ServiceWant:
    spec = ServiceIn.model_validate(
        {"name": name, "port": 8000, "job": {"image": "srv:1", "spec": "A100:1", **job}}
    )
    return ServiceWant("ml", name, spec, "ml", replicas)


def keeper(tmp_path: Path, client: Recorder) -> SiteServices:
    (tmp_path / "kc").write_text("")
    config = KubernetesSiteConfig(name="gpu-a", kubeconfig=tmp_path / "kc")
    services = SiteServices(config, lambda: {"nvidia"})
    services._client = client  # type: ignore[assignment]
    return services


def test_a_want_is_applied_once_per_change_and_a_dropped_one_deleted(tmp_path: Path) -> None:
    old = {"metadata": {"name": "xps-old", "namespace": "xpupool-ml", "labels": {}}}
    old["metadata"]["labels"] = {"xpupool.io/tenant": "ml", "xpupool.io/service": "old"}
    client = Recorder([old])
    services = keeper(tmp_path, client)
    services._sync()  # told nothing yet: nothing done
    assert client.calls == []
    services.want({("ml", "web"): want()})
    services._sync()
    assert ("delete", "RawDeployment", "xps-old") in client.calls  # the sweep
    assert ("apply", "Deployment", "xps-web") in client.calls
    assert ("apply", "Service", "xps-web") in client.calls
    client.calls.clear()
    services._sync()  # nothing changed: nothing sent
    assert client.calls == []
    services.want({("ml", "web"): want(replicas=2)})
    services._sync()
    assert [c for c in client.calls if c[0] == "apply"] == [
        ("apply", "Deployment", "xps-web"),
        ("apply", "Service", "xps-web"),
    ]
    client.calls.clear()
    services.want({})
    services._sync()
    assert client.calls == [
        ("delete", "RawService", "xps-web"),
        ("delete", "RawDeployment", "xps-web"),
    ]


def test_what_no_pod_can_say_is_the_services_problem_and_nothing_is_applied(
    tmp_path: Path,
) -> None:
    client = Recorder()
    services = keeper(tmp_path, client)
    services.want({("ml", "web"): want(secrets=[{"name": "token"}])})
    services._sync()
    assert not [c for c in client.calls if c[0] == "apply"]
    assert "job.secrets" in services.problem("ml", "web")
    services.want({("ml", "web"): want()})
    services._sync()
    assert services.problem("ml", "web") == ""
    assert ("apply", "Deployment", "xps-web") in client.calls


def api_error(code: int) -> ApiError:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    request = httpx.Request("PATCH", "https://127.0.0.1/apis/apps/v1/deployments/xps-web")
    return ApiError(response=httpx.Response(code, json=body, request=request))


class Settling(Recorder):
    """Answers the first ``refusals`` applies with ``code``, as a kube-apiserver that has just
    started answers 403 until its RBAC authorizer has synced."""

    def __init__(self, code: int, refusals: int) -> None:
        super().__init__()
        self.code, self.refusals = code, refusals

    def apply(self, obj: Any, **kw: Any) -> Any:
        if self.refusals:
            self.refusals -= 1
            raise api_error(self.code)
        return super().apply(obj, **kw)


def test_a_403_while_the_server_settles_is_tried_again_not_the_services_problem(
    tmp_path: Path,
) -> None:
    client = Settling(403, refusals=2)
    services = keeper(tmp_path, client)
    services.want({("ml", "web"): want()})
    for _ in range(2):  # the thread retries with its backoff: each try raises to it
        with pytest.raises(ApiError):
            services._sync()
        assert services.problem("ml", "web") == ""
    services._sync()
    assert ("apply", "Deployment", "xps-web") in client.calls
    assert services.problem("ml", "web") == ""


def test_a_403_that_lasts_is_the_services_problem(tmp_path: Path) -> None:
    client = Settling(403, refusals=100)
    services = keeper(tmp_path, client)
    services.want({("ml", "web"): want()})
    for _ in range(SETTLING_TRIES - 1):
        with pytest.raises(ApiError):
            services._sync()
    services._sync()  # the last try: the server's word
    assert "the API server refused it" in services.problem("ml", "web")


def test_another_4xx_is_the_services_problem_at_once(tmp_path: Path) -> None:
    client = Settling(422, refusals=1)
    services = keeper(tmp_path, client)
    services.want({("ml", "web"): want()})
    services._sync()
    assert "the API server refused it" in services.problem("ml", "web")
