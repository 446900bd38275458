"""One small replay through the whole simulator: trace files -> protocol -> engine -> curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import ShapeTable, stranded_capacity
from xpupool.sim.alibaba import capacity_milli, to_request
from xpupool.sim.fgd_protocol import DEFAULT_TUNE, tuned_workload
from xpupool.sim.runner import RunSpec, _load, run_all, run_one, summarise


def write_trace(tmp_path: Path) -> tuple[str, str]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},32000,65536,4,T4\n" for i in range(20))
        + "".join(f"m{i},64000,131072,8,V100M32\n" for i in range(10))
    )
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    shapes = [
        (4000, 1, 500, ""),
        (8000, 1, 1000, ""),
        (2000, 1, 250, "T4"),
        (16000, 2, 1000, ""),
        (1000, 0, 0, ""),
        (6000, 1, 700, "V100M32"),
    ]
    for i in range(300):
        cpu, num, milli, spec = shapes[i % len(shapes)]
        rows.append(f"p{i:03d},{cpu},1024,{num},{milli},{spec}")
    pods.write_text("\n".join(rows) + "\n")
    return str(nodes), str(pods)


@pytest.mark.slow
def test_small_replay_produces_paper_shaped_results(tmp_path: Path) -> None:
    nodes, pods = write_trace(tmp_path)
    run = run_one(RunSpec(nodes, pods, "fgd", 42))
    alloc = run["alloc_pct"]
    assert isinstance(alloc, list) and len(alloc) == 131
    # 50 cycles of 4.45 GPUs = 222.5 GPUs asked of 160: tuned down to 130 % (208 GPUs)
    assert run["tasks"] < 300
    assert 0.0 <= float(run["unallocated_pct_at_100"]) <= 100.0  # type: ignore[arg-type]
    values = [v for v in alloc if v is not None]
    assert values == sorted(values)  # allocation never goes down without departures
    assert run_one(RunSpec(nodes, pods, "fgd", 42))["alloc_pct"] == alloc  # deterministic
    assert run["notes"] == []  # FGD chooses nothing for itself


@pytest.mark.slow
def test_a_replay_reports_what_xpupool_chose(tmp_path: Path) -> None:
    nodes, pods = write_trace(tmp_path)
    (note,) = run_one(RunSpec(nodes, pods, "xpupool", 42))["notes"]  # type: ignore[misc]
    assert note.startswith("xpupool: half resolution for one-card replicas; ")
    assert "; lookahead over " in note
    assert "% of device tasks); target workload given" in note


@pytest.mark.slow
def test_parallel_runs_equal_serial_runs_and_summary(tmp_path: Path) -> None:
    nodes, pods = write_trace(tmp_path)
    specs = [RunSpec(nodes, pods, p, s) for p in ("bestfit", "random") for s in (1, 2)]
    serial = run_all(specs, jobs=1)
    parallel = run_all(specs, jobs=2)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in serial]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in parallel]
    summary = summarise(serial, "pods", None)
    assert set(summary) == {"bestfit", "random"}
    assert summary["bestfit"]["paper_mean"] is None


def test_a_replay_reports_the_capacity_stranded_when_arrived_demand_reaches_capacity(
    tmp_path: Path,
) -> None:
    """The run's ``stranded_*`` figures are ``stranded_capacity`` of the state reached by placing
    the same tasks, in the same way, until the arrived demand first reaches capacity."""
    nodes_path, pods_path = write_trace(tmp_path)
    run = run_one(RunSpec(nodes_path, pods_path, "bestfit", 42))
    nodes, tasks, workload = _load(nodes_path, pods_path)
    capacity = capacity_milli(nodes)
    sequence = tuned_workload(tasks, capacity, 42, DEFAULT_TUNE)
    state = ClusterState(nodes, seed=42)
    engine = Engine(state, "bestfit", seed=42, workload=workload)
    arrived = 0
    for task in sequence:
        arrived += task.gpu_request_milli
        engine.place(to_request(task))
        if arrived >= capacity:
            break
    expected = stranded_capacity(state, ShapeTable(state, engine.pipeline, workload))
    assert expected.total_core_milli > 0  # something is stranded on this mixed T4/V100 fleet
    assert run["stranded_core_milli_at_100"] == expected.total_core_milli
    assert run["stranded_memory_mib_at_100"] == expected.total_memory_mib
    share = 100.0 * expected.total_core_milli / capacity
    assert run["stranded_gpu_pct_at_100"] == round(share, 3)
    summary = summarise([run], "pods", None)
    assert summary["bestfit"]["stranded_mean"] == round(share, 3)
