"""Three Kubernetes sites and an agent site behind one plane (issue 51, "Tests"): the harness of
``bench/k8s_federation.py`` (one etcd, the first site's, with a key prefix per site; per site a
kube-apiserver, kube-scheduler with xpupool's extender and kwok, kwok nodes of eight cards of
the site's own mix), plus one real ``xpupool agent`` with fake devices naming its site ``edge``,
and one ``xpupool up --sites`` over the four. Every test submits through the API.

The mixes are the bench's :data:`MIXES` with ``gpu-b`` narrowed to A100 and L20, so that H100 is
``gpu-a``'s only, T4 ``gpu-c``'s only and L20 in ``gpu-b`` and ``gpu-c``; the agent's A100s and
its 910B3 (no cluster has one) make ``edge``. Links: the bench's, and ``edge`` to ``gpu-a``
at 10 Gbit/s; datasets ``small`` (10 GiB) and ``huge`` (10 TiB) live at ``edge``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import require_binaries
from test_plane_site_e2e import SLEEP, job, pods, state_is
from test_plane_two_clusters_e2e import sites

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "browser"))
from browser_kit import chromium, sign_in
from playwright.sync_api import expect
from server_proc import ServerProc, stop_process, until

import k8s_federation as fed  # the three sites, as the benchmark runs them

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[3]
N_NODES = 100  # kwok nodes per Kubernetes site: 300 in all
SEED = 7
MIXES = {**fed.MIXES, "gpu-b": (0.5, 0.0, 0.5, 0.0)}  # A100, H100, L20, T4 (bench's MODELS)
EDGE = "edge"
AGENT_FAKE = ROOT / "tests" / "fixtures" / "agent" / "fake-a100x2-910b3.yaml"  # 2 A100, 1 910B3
LINKS = (*fed.LINKS, (EDGE, "gpu-a", 10))
SLEEP_CMD = ["sleep", "600"]


@dataclass
class Fleet:
    clusters: dict[str, Any]  # site -> the bench's K8sCluster
    srv: ServerProc
    user: httpx.Client
    cards: dict[str, dict[str, int]] = field(default_factory=dict)  # site -> model token -> cards


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_binaries(("etcd", "kube-apiserver", "kube-scheduler", "kwok"))
    tmp = tmp_path_factory.mktemp("federation")
    with ExitStack() as stack:
        clusters: dict[str, Any] = {}
        for i, site in enumerate(fed.SITES):  # one etcd, the first site's
            etcd = None if not clusters else (clusters[fed.SITES[0]].etcd_url, f"/{site}")
            clusters[site] = stack.enter_context(
                fed.one_site(tmp, site, N_NODES, SEED + i, etcd, MIXES[site])
            )
        text = "sites:\n" + "".join(
            f"  - name: {site}\n    kubeconfig: {kc.kubeconfig}\n    create_namespaces: true\n"
            for site, kc in clusters.items()
        )
        text += "links:\n" + "".join(
            f"  - {{sites: [{a}, {b}], bandwidth_gbps: {g}}}\n" for a, b, g in LINKS
        )
        text += f"datasets:\n  small: {{size: 10Gi, sites: [{EDGE}]}}\n"
        text += f"  huge: {{size: 10Ti, sites: [{EDGE}]}}\n"
        (tmp / "sites.yaml").write_text(text)
        limits = ("--rate-limit", "0", "--address-rate-limit", "0")
        quick = ("--heartbeat", "1", "--lost-after", "6")  # an outage seen in seconds
        args = ("--sites", str(tmp / "sites.yaml"), *limits, *quick)
        srv = stack.enter_context(ServerProc(tmp / "data", extra_args=args))
        (tmp / EDGE).mkdir()
        agent, _ = srv.start_agent(tmp / EDGE, f"{EDGE}-0", AGENT_FAKE, "--site", EDGE)
        stack.callback(stop_process, agent)
        user = stack.enter_context(srv.tenant_client("ml"))

        def listed() -> bool:
            shown = sites(srv)
            return all(shown.get(s, {}).get("nodes") == N_NODES for s in fed.SITES) and (
                shown.get(EDGE, {}).get("nodes") == 1
            )

        until(listed, "the four sites' nodes", 180)
        cards = {
            site: fed.cards_by_model(N_NODES, SEED + i, MIXES[site])
            for i, site in enumerate(fed.SITES)
        }
        yield Fleet(clusters, srv, user, cards)


def submit(fleet: Fleet, spec: str, status: int = 201, **body: Any) -> Any:
    body.setdefault("image", SLEEP)  # image=None: an agent's command job
    sent = {"spec": spec, **{k: v for k, v in body.items() if v is not None}}
    r = fleet.user.post("/v1/jobs", json=sent, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def node_of(fleet: Fleet, job_id: int) -> str:
    (node,) = {
        a["node"] for a in state_is(fleet.srv, job_id, "running", timeout_s=120)["assignments"]
    }
    return str(node)


def site_of(node: str) -> str:
    return EDGE if node.startswith(f"{EDGE}-") else node.rsplit("-", 1)[0]


def cancel(fleet: Fleet, *job_ids: int) -> None:
    for job_id in job_ids:
        assert fleet.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    for job_id in job_ids:
        state_is(fleet.srv, job_id, "cancelled", timeout_s=90)


def events(fleet: Fleet, job_id: int) -> list[str]:
    return [str(e["reason"]) for e in job(fleet.srv, job_id).get("events", [])]


def test_sites_lists_the_four_sites_with_kind_nodes_and_cards_by_model(fleet: Fleet) -> None:
    shown = sites(fleet.srv)
    assert set(shown) == {*fed.SITES, EDGE}, shown
    for site in fed.SITES:
        got = shown[site]
        assert got["kind"] == "kubernetes" and got["reachable"] is True, got
        assert got["nodes"] == N_NODES and got["devices"] == N_NODES * 8, got
        by_token = {t: n for m, n in got["by_model"].items() for t in fleet.cards[site] if t in m}
        assert by_token == fleet.cards[site] and len(got["by_model"]) == len(by_token), got
    assert shown[EDGE]["kind"] == "agents" and shown[EDGE]["nodes"] == 1, shown[EDGE]
    assert shown[EDGE]["by_model"] == {"910B3": 1, "A100-SXM4-80GB": 2}, shown[EDGE]


def test_a_job_lands_in_the_only_site_whose_cards_fit(fleet: Fleet) -> None:
    assert "H100" not in fleet.cards["gpu-b"] and "T4" not in fleet.cards["gpu-b"]
    h100 = submit(fleet, "H100:1")["id"]
    t4 = submit(fleet, "T4:1")["id"]
    npu = submit(fleet, "910B3:1", image=None, command=SLEEP_CMD)["id"]
    assert site_of(node_of(fleet, h100)) == "gpu-a"
    assert site_of(node_of(fleet, t4)) == "gpu-c"
    assert node_of(fleet, npu) == f"{EDGE}-0"
    assert len(pods(fleet.clusters["gpu-a"], h100)) == 1
    assert all(pods(fleet.clusters[s], h100) == [] for s in ("gpu-b", "gpu-c"))
    cancel(fleet, h100, t4, npu)


def test_prefer_site_and_site_are_honoured_and_site_not_excludes(fleet: Fleet) -> None:
    """L20 is in gpu-b and gpu-c: each preference wins in turn, ``site=`` keeps a job where it
    says, ``site=!x`` keeps it out of x."""
    cases = (
        ("L20:1 prefer-site=gpu-c", "gpu-c"),
        ("L20:1 prefer-site=gpu-b", "gpu-b"),
        ("A100:1 site=gpu-b", "gpu-b"),
        ("A100:1 site=gpu-a", "gpu-a"),
        ("L20:1 site=!gpu-c", "gpu-b"),
        ("L20:1 site=!gpu-b", "gpu-c"),
    )
    ids = [submit(fleet, spec)["id"] for spec, _ in cases]
    for job_id, (spec, site) in zip(ids, cases, strict=True):
        assert site_of(node_of(fleet, job_id)) == site, spec
        assert len(pods(fleet.clusters[site], job_id)) == 1, spec
    cancel(fleet, *ids)


def test_a_job_waits_near_its_data_when_the_transfer_is_longer_than_the_wait(fleet: Fleet) -> None:
    """edge's two A100s busy: a job of ``small`` (10 GiB, 9 s at 10 Gbit/s) goes to a far site,
    whose wait is 0, rather than wait an hour (no run time known) at edge; a job of ``huge``
    (10 TiB, 8796 s) waits at edge. Each job's events give the numbers."""
    busy = [
        submit(fleet, f"A100:1 site={EDGE}", image=None, command=SLEEP_CMD)["id"] for _ in range(2)
    ]
    for job_id in busy:
        assert node_of(fleet, job_id) == f"{EDGE}-0"
    far = submit(fleet, "A100:1 data=small")["id"]
    assert site_of(node_of(fleet, far)) in ("gpu-a", "gpu-b")
    chose, runner_up = (e for e in events(fleet, far) if e.startswith(("chose", "runner-up")))
    assert "data 9 s for 10 GiB at 10 Gbit/s from edge" in chose, chose
    near = submit(fleet, "A100:1 data=huge")["id"]
    until(lambda: job(fleet.srv, near).get("site") == EDGE, "the huge job dispatched to edge", 60)
    got = events(fleet, near)
    chose = next(e for e in got if e.startswith("chose"))
    assert chose.startswith(f"chose site {EDGE}: queued at 1 for its shape, wait 3600 s"), got
    runner_up = next(e for e in got if e.startswith("runner-up"))
    assert "data 8796 s for 10240 GiB at 10 Gbit/s from edge" in runner_up, got
    assert job(fleet.srv, near)["state"] == "pending"
    assert all(pods(kc, near) == [] for kc in fleet.clusters.values())
    cancel(fleet, near, far, *busy)


def test_a_gang_no_single_site_holds_is_refused_though_the_fleet_has_room(fleet: Fleet) -> None:
    """L20 nodes are in gpu-b and gpu-c: a gang of one more whole L20 node each than either has
    fits in the two together and in neither, and is refused at submission saying so."""
    nodes = {s: fleet.cards[s].get("L20", 0) // 8 for s in ("gpu-b", "gpu-c")}
    largest = max(nodes, key=lambda s: nodes[s])
    replicas = nodes[largest] + 1
    assert replicas <= sum(nodes.values())  # the fleet has room
    before = fleet.user.get("/v1/jobs").json()
    got = submit(fleet, f"L20:8 replicas={replicas}", status=422)
    assert got["field"] == "spec.replicas", got
    reason = f"no single site holds {replicas} replicas of this, even empty (the largest: {largest}"
    assert reason in got["reason"], got
    assert fleet.user.get("/v1/jobs").json() == before  # refused: nothing changed


def test_a_site_down_holds_its_jobs_unknown_and_on_return_nothing_is_lost_or_twice(
    fleet: Fleet,
) -> None:
    """gpu-c's kube-apiserver stopped: its running job goes ``unknown`` (it keeps its cards), the
    site reads unreachable, and a new L20 job (gpu-b or gpu-c) goes to gpu-b. The server back, the
    job runs again on the same pod, run once; the new job has one pod, in gpu-b."""
    kc = fleet.clusters["gpu-c"]
    held = submit(fleet, "T4:1")["id"]
    node = node_of(fleet, held)
    ((_, uid),) = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods(kc, held)]
    with kc.apiserver_down():
        state_is(fleet.srv, held, "unknown", timeout_s=120)
        until(lambda: sites(fleet.srv)["gpu-c"]["reachable"] is False, "gpu-c unreachable", 60)
        moved = submit(fleet, "L20:1")["id"]
        assert site_of(node_of(fleet, moved)) == "gpu-b"
        assert job(fleet.srv, held)["state"] == "unknown"
    state_is(fleet.srv, held, "running", timeout_s=120)
    until(lambda: sites(fleet.srv)["gpu-c"]["reachable"] is True, "gpu-c reachable again", 60)
    got = job(fleet.srv, held)
    assert [a["node"] for a in got["assignments"]] == [node] and got["attempts"] == 1, got
    assert [p["metadata"]["uid"] for p in pods(kc, held)] == [uid]
    assert len(pods(fleet.clusters["gpu-b"], moved)) == 1 and pods(kc, moved) == []
    assert job(fleet.srv, moved)["attempts"] == 1
    cancel(fleet, held, moved)


@pytest.mark.browser  # Chromium, as tests/browser: a failure where they must run, never a skip
def test_the_dashboard_overview_shows_the_four_sites(fleet: Fleet) -> None:
    """The overview's table of sites, in real Chromium, has one row per site with its kind, its
    state and its cards as ``GET /v1/sites`` gives them."""
    # the test before stops and restarts a site: wait until the plane hears every site again
    until(
        lambda: all(s.get("reachable") is not False for s in sites(fleet.srv).values()),
        "every site reachable",
        120,
    )
    shown = sites(fleet.srv)
    with chromium() as browser:
        page = sign_in(browser, fleet.srv.url, fleet.srv.admin_token)
        rows = page.locator("#sites tr[data-site]")
        expect(rows).to_have_count(len(shown), timeout=30_000)  # the table may render late
        assert sorted(r.get_attribute("data-site") for r in rows.all()) == sorted(shown)
        for name, facts in shown.items():
            row = page.locator(f'#sites tr[data-site="{name}"]')
            expect(row.locator('[data-k="kind"]')).to_have_text(facts["kind"])
            expect(row.locator('[data-k="state"]')).to_have_text("reachable", timeout=30_000)
            expect(row.locator('[data-k="devices_total"]')).to_have_text(f"{facts['devices']:,}")
