"""Link domains in the overview and ``/metrics`` through a real ``xpupool up`` (issue 51): the
sites file names the agent pool's ``link_domain_label``, two agents register in one site (one
carrying the label, one not) and a third in another site without it; ``GET /v1/fleet/overview``
lists the first site's domains as ``GET /v1/sites`` does, ``/metrics`` has the same figures as
``xpupool_domain_*`` gauges, and a job held in the domain shows there in both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from server_proc import ServerProc, stop_process, until

from xpupool.cli import main

FAKE_A100 = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
LABEL = "rack"
SITE = "lab"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    root: Path = tmp_path_factory.mktemp("domains")
    sites_file = root / "sites.yaml"
    sites_file.write_text(f"sites: []\nagents: {{link_domain_label: {LABEL}}}\n")
    agents = []
    with ServerProc(root / "data", extra_args=("--sites", str(sites_file))) as s:
        try:
            for node, site, labels in (
                ("racked", SITE, ("--label", f"{LABEL}=row-1")),
                ("loose", SITE, ()),
                ("elsewhere", "far", ()),
            ):
                tmp = root / node
                tmp.mkdir()
                fake = tmp / "fake.yaml"  # the node's own card UUIDs
                fake.write_text(FAKE_A100.read_text().replace("GPU-fake-a100", f"GPU-{node}"))
                proc, _ = s.start_agent(tmp, node, fake, "--site", site, *labels)
                agents.append(proc)
            until(lambda: len(get(s, "/v1/nodes")) == 3, "the three agents' registrations")
            yield s
        finally:
            for proc in agents:
                stop_process(proc)


def get(srv: ServerProc, path: str) -> Any:
    r = httpx.get(srv.url + path, headers=srv.headers(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json() if path != "/metrics" else r.text


def gauges(srv: ServerProc) -> dict[tuple[str, str], dict[str, float]]:
    """(site, domain) -> {family: value} of the ``xpupool_domain_*`` gauges."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for f in text_string_to_metric_families(get(srv, "/metrics")):
        if f.name.startswith("xpupool_domain_"):
            for s in f.samples:
                key = (s.labels["site"], s.labels["domain"])
                out.setdefault(key, {})[f.name.removeprefix("xpupool_domain_")] = s.value
    return out


def views(srv: ServerProc) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """The overview's domains, the site's domains in /v1/sites, and the gauges."""
    (site,) = [x for x in get(srv, "/v1/sites") if x["name"] == SITE]
    return get(srv, "/v1/fleet/overview")["domains"], site["domains"], gauges(srv)


def agree(srv: ServerProc) -> tuple[list[dict[str, Any]], Any] | None:
    """The overview's domains and the gauges when the three views say the same, else None."""
    ov, sites, metered = views(srv)
    as_sites = [
        {
            "name": d["name"],
            "nodes": d["nodes"],
            "devices": d["devices_total"],
            "devices_free": d["devices_free"],
        }
        for d in ov
    ]
    as_gauges = {
        (d["site"], d["name"] or ""): {
            "nodes": d["nodes"],
            "devices": d["devices_total"],
            "devices_free": d["devices_free"],
            "devices_allocated": d["devices_allocated"],
        }
        for d in ov
    }
    return (ov, metered) if as_sites == sites and as_gauges == metered else None


def test_the_overview_and_metrics_show_the_sites_domains_as_the_api(srv: ServerProc) -> None:
    ov, _ = until(lambda: agree(srv), "the overview, /v1/sites and /metrics agreeing")
    assert [(d["site"], d["name"], d["nodes"], d["devices_total"]) for d in ov] == [
        (SITE, "row-1", 1, 2),
        (SITE, None, 1, 2),
    ]  # the site "far" names no domain: neither view lists it


def test_a_job_held_in_the_domain_shows_in_both(srv: ServerProc) -> None:
    with srv.tenant_client("team") as team:
        r = team.post(
            "/v1/jobs", json={"spec": f"A100:2 label={LABEL}=row-1", "command": ["sleep", "60"]}
        )
        assert r.status_code == 201, r.text

    def held() -> Any:
        found = agree(srv)
        if found is None:
            return None
        ov, _ = found
        row = next(d for d in ov if d["name"] == "row-1")
        return found if row["devices_allocated"] == 2 else None

    ov, metered = until(held, "the job's two cards allocated in row-1 in every view")
    assert next(d for d in ov if d["name"] == "row-1")["devices_free"] == 0
    assert metered[(SITE, "row-1")]["devices_allocated"] == 2
    assert metered[(SITE, "")]["devices_free"] == 2


def test_xpupool_sites_json_carries_each_sites_domains(srv: ServerProc, tmp_path: Path) -> None:
    """``xpupool sites -o json`` gives each site's domains as ``GET /v1/sites`` does."""
    env = {
        "XPUPOOL_URL": srv.url,
        "XPUPOOL_TOKEN": srv.admin_token,
        "HOME": str(tmp_path),
        "XPUPOOL_CONFIG": None,
    }
    result = CliRunner().invoke(main, ["sites", "-o", "json"], env=env)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    by_cli = {s["name"]: s["domains"] for s in json.loads(result.stdout)}
    by_api = {s["name"]: s["domains"] for s in get(srv, "/v1/sites")}
    assert by_cli == by_api
    assert [d["name"] for d in by_cli[SITE]] == ["row-1", None]
