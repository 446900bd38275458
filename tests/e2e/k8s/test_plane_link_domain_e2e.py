"""A gang kept inside one zone of a Kubernetes site (issue 51): the sites file names
``topology.kubernetes.io/zone`` as the site's link domain and its extender runs with
``--link-domain-label`` of it; kwok nodes of one A100 each, three per zone. With one card taken
in each zone, a gang of three (two free cards per zone, four in the site) waits in the plane with
the reason; a gang of two binds all its pods in one zone; a gang of four is refused at submit
(no zone could ever hold it); and once a zone's card is free, the gang of three runs there."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import K8sCluster, require_binaries
from kwok_site import kwok_site
from test_plane_site_e2e import SLEEP, job, kwok_node, pods, state_is

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from server_proc import ServerProc, until

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

SITE = "gpu-z"
ZONE = "topology.kubernetes.io/zone"
ZONES = {f"{SITE}-{z}-{i}": f"zone-{z}" for z in (1, 2) for i in range(3)}
Plane = tuple[K8sCluster, ServerProc]


def zoned_node(name: str) -> dict[str, Any]:
    node = kwok_node(name, cards=1)
    node["metadata"]["labels"][ZONE] = ZONES[name]
    return node


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok"))
    tmp = tmp_path_factory.mktemp("link-domain")
    with ExitStack() as stack:
        kc, _ = stack.enter_context(
            kwok_site(tmp, SITE, (), extender_args=("--link-domain-label", ZONE))
        )
        for name in ZONES:
            r = kc.api.post("/api/v1/nodes", json=zoned_node(name))
            assert r.status_code == 201, r.text
        (tmp / "sites.yaml").write_text(
            f"sites:\n  - name: {SITE}\n    kubeconfig: {kc.kubeconfig}\n"
            f"    create_namespaces: true\n    link_domain_label: {ZONE}\n"
        )
        srv = stack.enter_context(
            ServerProc(tmp / "data", extra_args=("--sites", str(tmp / "sites.yaml")))
        )

        def listed() -> bool:
            r = httpx.get(f"{srv.url}/v1/sites", headers=srv.headers(), timeout=30)
            shown = {s["name"]: s for s in r.json()} if r.status_code == 200 else {}
            return shown.get(SITE, {}).get("nodes") == len(ZONES)

        until(listed, "the site's six nodes", 90)
        yield kc, srv


def submit(user: httpx.Client, spec: str) -> int:
    r = user.post("/v1/jobs", json={"spec": f"{spec} site={SITE}", "image": SLEEP})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def bound_zones(kc: K8sCluster, job_id: int, count: int) -> list[str]:
    """The zones of the nodes ``job_id``'s ``count`` pods are bound to, once all are bound."""

    def check() -> list[str] | None:
        made = pods(kc, job_id)
        nodes = [p["spec"].get("nodeName") for p in made]
        return [ZONES[n] for n in nodes] if len(made) == count and all(nodes) else None

    return list(until(check, f"job {job_id}'s {count} pods bound", 120))


def test_a_gang_is_kept_to_one_zone(plane: Plane) -> None:
    kc, srv = plane
    with srv.tenant_client("ml") as user:
        fillers = {
            zone: submit(user, f"A100:1 label={ZONE}={zone}") for zone in ("zone-1", "zone-2")
        }
        for zone, filler in fillers.items():
            state_is(srv, filler, "running", timeout_s=120)
            assert bound_zones(kc, filler, 1) == [zone]

        four = {"spec": f"A100:1 replicas=4 gang site={SITE}", "image": SLEEP}
        r = user.post("/v1/jobs", json=four)
        assert r.status_code == 422, r.text
        assert "no single link domain holds 4 replicas" in r.text, r.text

        three = submit(user, "A100:1 replicas=3 gang")

        def waiting_reason() -> str:
            got = job(srv, three)
            assert got["state"] in ("pending", "admitted"), got
            reason = str(got.get("reason") or "")
            return reason if "link domain" in reason else ""

        reason = until(waiting_reason, "the gang of three's reason naming the link domain", 60)
        assert "no single link domain holds 3 replicas at once" in reason, reason
        assert pods(kc, three) == []

        two = submit(user, "A100:1 replicas=2 gang")
        state_is(srv, two, "running", timeout_s=120)
        (zone,) = set(bound_zones(kc, two, 2))

        def books() -> set[str]:
            return {ZONES[a["node"]] for a in job(srv, two)["assignments"]}

        until(lambda: books() == {zone}, "the plane's books on the zone the pods bound in", 30)

        (free_zone,) = set(ZONES.values()) - {zone}
        assert user.post(f"/v1/jobs/{fillers[free_zone]}/cancel").status_code == 200
        state_is(srv, three, "running", timeout_s=120)
        assert bound_zones(kc, three, 3) == [free_zone] * 3
        for job_id in (three, two, fillers[next(z for z in fillers if z != free_zone)]):
            assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
