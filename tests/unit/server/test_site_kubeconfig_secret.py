"""A Kubernetes site's kubeconfig kept as the admin's own secret (issue 49, sites file
``kubeconfig_secret``): read from the plane's encrypted store as the site is attached, refused
naming the field when missing or not a kubeconfig, and, when the admin sets it again, taken by
the site's watches and requests without a restart and without losing what the site holds. The
site talks real HTTP to a small API server on 127.0.0.1 (``fake_apiserver.py``) whose tokens can
be revoked."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable

import pytest
from fake_apiserver import FakeApiServer, node_object
from server_kit import Server, tenant

from xpupool.k8s.site.credentials import parse_kubeconfig
from xpupool.k8s.site.site import KubernetesSite
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError
from xpupool.server.schemas.nodes import NodeStatus

pytestmark = pytest.mark.slow  # a site's threads against an HTTP server: seconds

SECRET = "gpu-a-kubeconfig"


def until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def set_admin_secret(server: Server, name: str, value: str) -> int:
    body = {"secret_base64": base64.b64encode(value.encode()).decode()}
    r = server.client.put(f"/v1/secrets/{name}", json=body, headers=server.admin)
    assert r.status_code in (200, 201), r.text
    return r.status_code


def site_of(name: str, secret: str = SECRET) -> KubernetesSite:
    config = KubernetesSiteConfig(name=name, kubeconfig_secret=secret)
    return KubernetesSite(config, resync_s=0)


def test_a_missing_or_bad_secret_is_refused_as_the_site_starts(server: Server) -> None:
    site = site_of("gpu-a", "nope")
    server.plane.sites.add(site)
    with pytest.raises(RequestError) as err:
        site.attach(server.plane)
    assert err.value.field == "sites[gpu-a].kubeconfig_secret" and err.value.value == "nope"
    assert "no such secret of the admin's" in err.value.reason
    site.detach()
    set_admin_secret(server, "garbled", "{not: [yaml")
    bad = site_of("gpu-b", "garbled")
    with pytest.raises(RequestError, match=r"sites\[gpu-b\]\.kubeconfig_secret: not YAML"):
        bad.attach(server.plane)
    bad.detach()
    # a tenant's secret of that name is not the admin's: still refused
    lab = tenant(server, "lab")
    r = server.client.put("/v1/secrets/nope", json={"secret": "x"}, headers=server.as_(lab))
    assert r.status_code == 201, r.text
    with pytest.raises(RequestError, match="no such secret of the admin's"):
        site_of("gpu-c", "nope").attach(server.plane)


def test_what_a_secret_must_hold_to_be_a_kubeconfig() -> None:
    site = KubernetesSiteConfig(name="gpu-a", kubeconfig_secret=SECRET, context="other")
    with FakeApiServer(tokens=set()) as api:
        good = api.kubeconfig("t").encode()
    with pytest.raises(RequestError, match="Context 'other' not found"):
        parse_kubeconfig(site, good)
    plain = KubernetesSiteConfig(name="gpu-a", kubeconfig_secret=SECRET)
    assert parse_kubeconfig(plain, good).cluster.server == api.url
    for value, why in (
        (b"- a list", "expected a kubeconfig object"),
        (b"\xff\xfe", "not YAML"),
        (b"x" * ((1 << 20) + 1), "more than a kubeconfig's"),
    ):
        with pytest.raises(RequestError, match=why):
            parse_kubeconfig(plain, value)


def test_a_rotated_secret_is_taken_without_a_restart_and_nothing_is_lost(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The site connects with the old token; the admin sets the secret to a new one, the old is
    revoked, a node is added: the site's watch sees it through the new token, and the node it
    had stays registered and ready (the informer kept what it held: no delete, no second add)."""
    caplog.set_level(logging.INFO, logger="xpupool.k8s.site.site")
    plane = server.plane
    with FakeApiServer(tokens={"old"}) as api:
        api.add_node(node_object("n1"))
        assert set_admin_secret(server, SECRET, api.kubeconfig("old")) == 201
        site = site_of("gpu-a")
        plane.sites.add(site)
        site.attach(plane)
        try:
            until(lambda: plane.node("n1") is not None, "n1 registered through the old token")
            api.tokens = {"old", "new"}
            assert set_admin_secret(server, SECRET, api.kubeconfig("new")) == 200
            until(lambda: "credentials of secret" in caplog.text, "the site switched")
            assert "new" in api.tokens_seen("/api/v1/nodes")
            api.tokens = {"new"}  # the old one revoked
            api.add_node(node_object("n2"))
            until(lambda: plane.node("n2") is not None, "n2 seen through the new token")
            n1 = plane.node("n1")
            assert n1 is not None and n1.status is NodeStatus.READY
            assert n1.source == "kubernetes:gpu-a"
            seen = len(api.seen)
            time.sleep(1.0)  # watches go on, with the new token alone
            assert {t for t, _ in api.seen[seen:]} == {"new"}, api.seen[seen:]
            # set again to the same value: nothing to switch
            set_admin_secret(server, SECRET, api.kubeconfig("new"))
        finally:
            site.detach()
