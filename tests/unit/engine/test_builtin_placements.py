"""Every built-in profile places a seeded random stream on a random heterogeneous fleet exactly as
recorded in ``tests/fixtures/placements/builtin_profiles.json``.

The fingerprint (``bench/fingerprint.py``) covers four profiles on the Alibaba traces; this covers
all of them (and xpupool learning its workload online) on a small mixed fleet with fractional,
whole, multi-card, typed, software and CPU-only replicas and departures, so that a change to how
scores are scaled or scorers are composed cannot move a placement unnoticed. The expectations were
recorded from the engine before scores were bounded (the online entry again when xpupool began to
learn refused requests too); regenerate them only for a change that is meant to move placements:
``python tests/unit/engine/test_builtin_placements.py --write``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from xpupool.engine import BUILTIN_PROFILES, ClusterState, Engine, Profile, make_profile
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.profile_file import parse_profiles
from xpupool.engine.registry import SCORERS
from xpupool.engine.scorers.base import MAX_SCORE, MIN_SCORE
from xpupool.model import Device, DeviceRequest, Node, Request, Topology, parse_software_need

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "placements" / "builtin_profiles.json"
N_NODES = 160
N_REQUESTS = 2500
SEED = 11
ONLINE = "xpupool (online workload)"

# (vendor, model, MiB per card, cards per node, cards per link group (0 = PCIe), driver)
KINDS = (
    ("nvidia", "NVIDIA A100-SXM4-80GB", 81920, 8, 4, "550.54.15"),
    ("nvidia", "NVIDIA H100 80GB HBM3", 81559, 8, 8, "535.104.05"),
    ("nvidia", "Tesla T4", 15360, 4, 0, "470.82.01"),
    ("nvidia", "NVIDIA L20", 46068, 2, 0, "550.90.07"),
    ("huawei", "910B3", 65536, 8, 8, "24.1.rc2"),
    ("amd", "AMD Instinct MI300X", 196592, 8, 8, "6.8.5"),
)


def fleet(rng: np.random.Generator) -> list[Node]:
    nodes = []
    for i in range(N_NODES):
        if rng.random() < 0.1:
            nodes.append(Node(f"cpu{i:03d}", int(rng.choice((32_000, 96_000))), 262_144))
            continue
        vendor, model, mib, count, group, driver = KINDS[int(rng.integers(len(KINDS)))]
        devices = tuple(
            Device(
                uuid=f"n{i:03d}-d{j}",
                vendor=vendor,
                model=model,
                memory_mib=mib,
                index=j,
                driver_version=driver,
                link_group=None if group == 0 else f"g{j // group}",
            )
            for j in range(count)
        )
        cpu = int(rng.choice((48_000, 96_000, 128_000)))
        nodes.append(Node(f"gpu{i:03d}", cpu, 1_048_576, devices))
    return nodes


def stream(rng: np.random.Generator) -> Iterator[Request]:
    cuda = parse_software_need("cuda>=12.1")
    for i in range(N_REQUESTS):
        roll = rng.random()
        models: tuple[str, ...] = ("A100", "H100") if rng.random() < 0.15 else ()
        software = (cuda,) if rng.random() < 0.1 else ()
        share = int(rng.choice((100, 200, 250, 300, 500, 700)))
        if roll < 0.45:
            dev = DeviceRequest(count=1, core_permille=share, models=models, software=software)
        elif roll < 0.55:
            dev = DeviceRequest(count=1, memory_mib=int(rng.choice((4096, 12288, 24576))))
        elif roll < 0.75:
            dev = DeviceRequest(count=1, models=models, software=software)
        elif roll < 0.93:
            topo = Topology.SAME_LINK_GROUP if rng.random() < 0.5 else Topology.NONE
            dev = DeviceRequest(count=int(rng.choice((2, 4, 8))), topology=topo)
        else:
            dev = DeviceRequest()
        cpu = int(rng.choice((1000, 4000, 8000, 16000)))
        yield Request(f"r{i}", cpu, int(rng.choice((4096, 16384))), dev)


def run(profile: Profile | str, online: bool = False) -> dict[str, object]:
    """Place the stream, releasing a seeded fifth of what was placed every 200 requests."""
    rng = np.random.default_rng(SEED)
    nodes = fleet(rng)
    requests = list(stream(rng))
    workload = None if online else TargetWorkload.from_requests(requests)
    engine = Engine(ClusterState(nodes, seed=SEED), profile, seed=SEED, workload=workload)
    h = hashlib.sha256()
    live: list[int] = []
    placed = 0
    for i, req in enumerate(requests):
        for a in engine.place(req).allocations:
            shares = ",".join(f"{d.uuid}:{d.memory_mib}:{d.core_permille}" for d in a.devices)
            h.update(f"{i}|{a.node}|{shares}\n".encode())
            live.append(a.id)
            placed += 1
        if i % 200 == 199:
            gone = set(rng.choice(len(live), size=len(live) // 5, replace=False).tolist())
            for j in sorted(gone):
                engine.release(live[j])
            live = [a for j, a in enumerate(live) if j not in gone]
    return {"hash": h.hexdigest()[:16], "placed": placed}


def all_runs() -> dict[str, dict[str, object]]:
    runs = {name: run(name) for name in BUILTIN_PROFILES}
    runs[ONLINE] = run("xpupool", online=True)
    return runs


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = json.loads(FIXTURE.read_text())
    return found


@pytest.mark.parametrize("profile", [*BUILTIN_PROFILES, ONLINE])
@pytest.mark.slow
def test_builtin_profile_places_as_recorded(
    profile: str, expected: dict[str, dict[str, object]]
) -> None:
    online = profile == ONLINE
    assert run("xpupool" if online else profile, online=online) == expected[profile]


@pytest.mark.parametrize("scorer", list(SCORERS))
@pytest.mark.slow
def test_every_scorer_stays_within_bounds(scorer: str) -> None:
    """On the nodes a replica fits, every scorer's scores lie in MIN_SCORE..MAX_SCORE, so that
    weights compare like with like (kube's MinNodeScore..MaxNodeScore)."""
    rng = np.random.default_rng(SEED)
    nodes = fleet(rng)
    requests = list(stream(rng))[:400]
    workload = TargetWorkload.from_requests(requests)
    profile = make_profile(f"only-{scorer}", {scorer: 1})
    engine = Engine(ClusterState(nodes, seed=SEED), profile, seed=SEED, workload=workload)
    for req in requests:
        fits, total = engine.rate(req)
        assert (total[fits] >= MIN_SCORE).all() and (total[fits] <= MAX_SCORE).all(), req
        engine.place(req)


@pytest.mark.slow
def test_plugin_arguments_rebuild_a_builtin(expected: dict[str, dict[str, object]]) -> None:
    # xpupool-greedy is xpupool without its lookahead, xpupool-fine is xpupool at FGD's
    # resolution without the packing and fullest-card terms: the same things said in a file.
    doc = {
        "profiles": [
            {
                "name": "no-look",
                "base": "xpupool",
                "plugins": {"postScore": {"disabled": [{"name": "lookahead"}]}},
            },
            {
                "name": "fine",
                "base": "xpupool",
                "plugins": {"score": {"disabled": [{"name": "packing"}, {"name": "fullest-card"}]}},
                "pluginConfig": [{"name": "fragmentation", "args": {"steps": 100}}],
            },
        ]
    }
    profiles = parse_profiles(doc)
    assert run(profiles["no-look"]) == expected["xpupool-greedy"]
    assert run(profiles["fine"]) == expected["xpupool-fine"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(all_runs(), indent=1) + "\n")
