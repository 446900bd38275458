"""Gavel's traces and matrix in the timed replay: both trace formats read alike, scale factors map
into the matrix, run times follow the card a job gets, and the throughput policy gives each job
its fast card where the default policy does not look."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import RequestError
from xpupool.sim import gavel_trace
from xpupool.sim.timed_replay import timed_replay

# Two job types: "fast" runs 10x faster on a V100 than on a K80; "flat" the same on both.
MATRIX = {
    w: {
        "('fast', 1)": {"null": {"v100": 10.0, "p100": 5.0, "k80": 1.0}[w]},
        "('fast', 2)": {"null": {"v100": 18.0, "p100": 9.0, "k80": 0.0}[w]},
        "('flat', 1)": {"null": 1.0},
    }
    for w in ("v100", "p100", "k80")
}


@pytest.fixture
def matrix(tmp_path: Path) -> gavel_trace.GavelMatrix:
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(MATRIX))
    return gavel_trace.GavelMatrix.load(path)


def test_both_trace_formats_read_alike(tmp_path: Path) -> None:
    seven = tmp_path / "msr.trace"
    seven.write_text("fast\tcmd\t-n\t1\t1000\t6.000000\t4\n")
    ten = tmp_path / "new.trace"
    ten.write_text("fast\tcmd\t.\t-n\t1\t1000\t4\t1\t-1\t6.0\n")
    assert gavel_trace.read_trace(seven) == gavel_trace.read_trace(ten)
    assert gavel_trace.read_trace(ten)[0] == gavel_trace.GavelJob("fast", 1000, 4, 6.0)
    bad = tmp_path / "bad.trace"
    bad.write_text("fast\t1\t2\n")
    with pytest.raises(RequestError) as exc:
        gavel_trace.read_trace(bad)
    assert exc.value.field == "bad.trace[0]"


def test_scale_factors_map_to_the_largest_in_the_matrix(matrix: gavel_trace.GavelMatrix) -> None:
    assert [matrix.scale_factor("fast", s) for s in (1, 2, 3, 7, 64)] == [1, 2, 2, 2, 2]
    assert matrix.scale_factor("flat", 8) == 1


def test_cluster_keeps_whole_servers_per_type() -> None:
    nodes = gavel_trace.cluster("20:10:0", 8)
    assert [n.name for n in nodes] == ["v100-0", "v100-1", "p100-0"]
    assert {d.model for d in nodes[0].devices} == {"V100"}


def _replay(matrix: gavel_trace.GavelMatrix, policy: str) -> tuple[np.ndarray, list[str]]:
    jobs = [
        gavel_trace.GavelJob("fast", 36_000, 1, 0.0),
        gavel_trace.GavelJob("fast", 1_000, 2, 10.0),
    ]
    work = gavel_trace.GavelWorkload(jobs, matrix)
    nodes = gavel_trace.cluster("8:0:8", 8)[::-1]  # the K80 server first: the packers' pick
    workload = TargetWorkload.from_requests(work.request(i, t) for i, t in enumerate(work.tasks))
    got: list[str] = []

    class Watch(gavel_trace.GavelWorkload):
        def duration_s(self, index, allocations):  # type: ignore[no-untyped-def]
            got.append(allocations[0].node)
            return super().duration_s(index, allocations)

    watched = Watch(jobs, matrix)
    result = timed_replay(nodes, work.tasks, policy, 0, workload, speeds=watched)
    return result.jct_s, got


def test_run_time_follows_the_card_and_throughput_picks_the_fast_one(
    matrix: gavel_trace.GavelMatrix,
) -> None:
    jct, where = _replay(matrix, "throughput")
    assert where == ["v100-0", "v100-0"]
    assert jct.tolist() == [3_600.0, 56.0]  # 36,000 steps at 10/s; 1,000 at 18/s
    jct, where = _replay(matrix, "binpack")
    # packing takes the first server, the K80s, and the job runs ten times longer there; the
    # two-card job does not fit on K80s (throughput 0) and goes to the V100s whatever the policy
    assert where == ["k80-0", "v100-0"]
    assert jct.tolist() == [36_000.0, 56.0]


def _tiny_data(tmp_path: Path) -> Path:
    """A data folder laid out as ../shared/traces/gavel: the matrix above and one MSR trace of
    twelve jobs, half 'fast', a few asking for more GPUs than the matrix has."""
    (tmp_path / "msr" / "seed=0").mkdir(parents=True)
    (tmp_path / "simulation_throughputs.json").write_text(json.dumps(MATRIX))
    rows = []
    for i in range(12):
        job_type, gpus = ("fast" if i % 2 else "flat"), 16 if i % 4 == 3 else 1
        rows.append(f"{job_type}\tcmd\t-n\t1\t{3600 * (1 + i % 3)}\t{60.0 * i}\t{gpus}")
    (tmp_path / "msr" / "seed=0" / "tiny.trace").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_simulate_replays_a_gavel_trace(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from xpupool.cli import main

    data = _tiny_data(tmp_path)
    args = ["simulate", "--mode", "timed", "--pods", str(data / "msr" / "seed=0" / "tiny.trace")]
    args += ["--throughputs", str(data / "simulation_throughputs.json"), "--seeds", "0"]
    args += ["--gavel-cluster", "8:8:8", "--policy", "xpupool,throughput", "--json"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    runs = json.loads(out.output)["runs"]
    assert [(r["policy"], r["tasks"], r["never_placed"]) for r in runs] == [
        ("xpupool", 12.0, 0.0),
        ("throughput", 12.0, 0.0),
    ]
    assert runs[1]["mean_jct_s"] < runs[0]["mean_jct_s"]  # the fast jobs on V100s
    wrong = CliRunner().invoke(main, [*args[:1], *args[3:]])  # without --mode timed
    assert wrong.exit_code == 2 and "--throughputs" in wrong.output


@pytest.mark.slow
def test_heterogeneity_bench_xpupool_side(tmp_path: Path) -> None:
    """bench/heterogeneity.py without Gavel: every rate and policy gives its figures."""
    import importlib.util
    import sys

    bench = Path(__file__).resolve().parents[3] / "bench" / "heterogeneity.py"
    spec = importlib.util.spec_from_file_location("heterogeneity_bench", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = _tiny_data(tmp_path)
    argv = ["heterogeneity.py", "--json", "--data", str(data), "--vc", "tiny", "--jobs", "12"]
    argv += ["--window", "2:10", "--rates", "low=6,high=60"]
    old = sys.argv
    sys.argv = argv
    try:
        import contextlib
        import io

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            module.main()
    finally:
        sys.argv = old
    report = json.loads(printed.getvalue())
    for rate in ("low", "high"):
        for policy in ("xpupool:xpupool", "xpupool:throughput", "xpupool:throughput+faster"):
            row = report["runs"][rate][policy]
            assert row["window_done"] == 8 and row["avg_jct_h"] > 0, (rate, policy, row)
        assert report["runs"][rate]["xpupool:throughput+faster"]["moves"] >= 0
    assert report["decision"]["throughput"]["decisions"] > 0


def test_fixed_tasks_run_on_one_card_type_and_leave_out_jobs_that_do_not_fit(
    matrix: gavel_trace.GavelMatrix,
) -> None:
    jobs = [
        gavel_trace.GavelJob("fast", 1_000, 1, 5.0),
        gavel_trace.GavelJob("fast", 1_000, 3, 7.0),  # scale factor 3 -> 2 in the matrix
        gavel_trace.GavelJob("flat", 10, 8, 9.0),  # 8 -> 1: the only one "flat" has
    ]
    v100 = gavel_trace.fixed_tasks(jobs, matrix)
    assert [(t.num_gpu, t.gpu_spec, t.creation_time, t.duration_s) for t in v100] == [
        (1, ("V100",), 5, 100),  # 1,000 steps at 10/s
        (2, ("V100",), 7, 56),  # 1,000 steps at 18/s, rounded up
        (1, ("V100",), 9, 10),
    ]
    assert all(t.gpu_milli == 1000 and t.qos == "" for t in v100)
    k80 = gavel_trace.fixed_tasks(jobs, matrix, "k80")  # "fast" at 2 cards does not fit a K80
    assert [t.name for t in k80] == ["job-0", "job-2"]
    with pytest.raises(RequestError) as exc:
        gavel_trace.fixed_tasks(jobs, matrix, "a100")
    assert exc.value.field == "worker"
