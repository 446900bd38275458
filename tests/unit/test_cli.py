"""The ``xpupool`` command through click's runner: output shapes and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from xpupool.cli import main

from factories import tiny_trace


def test_spec_prints_the_json_form() -> None:
    result = CliRunner().invoke(main, ["spec", "A100:80GB:2"])
    assert result.exit_code == 0
    assert json.loads(result.output)["devices"]["count"] == 2


def test_bad_spec_is_one_clean_line_naming_the_field() -> None:
    result = CliRunner().invoke(main, ["spec", "ascend:910B mem=24Gx"])
    assert result.exit_code == 1
    assert "devices.memory" in result.output and "Traceback" not in result.output


def test_demo_shows_placements_and_refusals() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0
    assert "placements" in result.output and "0/14 nodes fit" in result.output


def _trace(tmp_path: Path) -> tuple[str, str]:
    return tiny_trace(tmp_path)


def test_simulate_json_has_the_documented_keys(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path)
    args = [
        "simulate",
        "--nodes",
        nodes,
        "--pods",
        pods,
        "--policy",
        "bestfit,fgd",
        "--seeds",
        "1-2",
        "--json",
        "--bound",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["trace"] == "pods"
    run = payload["runs"][0]
    assert {
        "policy",
        "seed",
        "seconds",
        "alloc_pct",
        "frag_ratio_pct",
        "frag_amount_pct",
        "unallocated_pct_at_100",
    } <= set(run)
    assert len(run["alloc_pct"]) == 131
    assert set(payload["summary"]) == {"bestfit", "fgd"}
    assert payload["summary"]["fgd"]["paper_mean"] is None
    assert 0.0 <= payload["lower_bound_pct"] <= payload["summary"]["fgd"]["mean"] + 1e-9


def test_simulate_reports_a_bad_trace_row_cleanly(tmp_path: Path) -> None:
    nodes, _ = _trace(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,abc,1,1,1000,\n")
    result = CliRunner().invoke(main, ["simulate", "--nodes", nodes, "--pods", str(bad)])
    assert result.exit_code == 1
    assert "bad.csv[0].cpu_milli" in result.output and "Traceback" not in result.output


def test_simulate_timed_mode_runs(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path)
    args = [
        "simulate",
        "--nodes",
        nodes,
        "--pods",
        pods,
        "--policy",
        "bestfit",
        "--seeds",
        "1",
        "--mode",
        "timed",
        "--json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["mode"] == "timed" and payload["runs"][0]["never_placed"] == 0


def test_probe_lists_fake_devices_and_absent_vendors(tmp_path: Path) -> None:
    devices = tmp_path / "devices.yaml"
    devices.write_text("devices:\n  - {vendor: huawei, model: 910B3, memory: 64Gi, count: 2}\n")
    result = CliRunner().invoke(main, ["probe", "--fake", str(devices), "-o", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [d["canonical_model"] for d in payload["devices"]] == ["910B3", "910B3"]
    assert "nvidia" in payload["absent"] or any(
        f["vendor"] == "nvidia" for f in payload["failures"]
    )
    table = CliRunner().invoke(main, ["probe", "--fake", str(devices)])
    assert table.exit_code == 0 and "2 devices on this host" in table.output


def test_simulate_timed_with_a_queue_config(tmp_path: Path) -> None:
    nodes, _ = _trace(tmp_path)
    pods = tmp_path / "timed.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        + "".join(f"p{i},2000,1024,1,1000,,{i},{i + 100}\n" for i in range(6))
    )
    config = tmp_path / "queues.yaml"
    config.write_text(
        "queues:\n"
        "  - {name: q, tenant: t, quotas: [{flavor: '*', resource: devices, nominal: 2}]}\n"
        "assign:\n  - {queue: q}\n"
    )
    args = ["simulate", "--nodes", nodes, "--pods", str(pods), "--policy", "bestfit"]
    args += ["--seeds", "1", "--mode", "timed", "--queue-config", str(config), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["wait_by_queue"]["q"] > 0  # two devices of quota for six tasks: they queue
    config.write_text("queues:\n  - {name: q, tenant: t}\nassign:\n  - {queue: q, priority: 3}\n")
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2
    assert "assign[0].priority" in refused.output and "Traceback" not in refused.output


def test_simulate_timed_with_sites_compares_the_three_rules(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path)
    sites = tmp_path / "sites.yaml"
    sites.write_text(
        "sites: [{name: a, models: [T4]}, {name: b, models: [T4]}]\n"
        "links: [{sites: [a, b], bandwidth_gbps: 10}]\n"
        "datasets: {d: {size: 10Gi, sites: [a]}}\n"
        "data: {share: 1.0}\n"
    )
    args = ["simulate", "--nodes", nodes, "--pods", pods, "--policy", "bestfit", "--seeds", "1"]
    args += ["--mode", "timed", "--sites", str(sites), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["sites"] for r in runs] == ["xpupool", "least-loaded", "random"]
    assert all("gib_moved" in r for r in runs)
    sites.write_text("sites: [{name: a}, {name: b}]\ndata: {share: 3}\n")
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2
    assert "data.share" in refused.output and "Traceback" not in refused.output


def test_simulate_timed_at_a_peak_with_checkpoints(tmp_path: Path) -> None:
    nodes, _ = _trace(tmp_path)
    pods = tmp_path / "timed.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        + "".join(f"p{i},2000,1024,1,1000,,{100 * i},{100 * i + 50}\n" for i in range(6))
    )
    args = ["simulate", "--nodes", nodes, "--pods", str(pods), "--policy", "bestfit"]
    args += ["--seeds", "1", "--mode", "timed", "--queue", "priority"]
    args += ["--checkpoints", "--checkpoint-aware"]
    result = CliRunner().invoke(main, [*args, "--peak", "0.1", "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["compress"] >= 1 and run["gpu_hours_lost"] == 0  # no preemption in this queue
    assert 0 <= run["unallocated_at_peak_pct"] <= 100
    refused = CliRunner().invoke(main, [*args, "--peak", "50"])
    assert refused.exit_code == 2
    assert "--peak" in refused.output and "tile the trace" in refused.output


def test_simulate_timed_with_elastic_tasks(tmp_path: Path) -> None:
    nodes, _ = _trace(tmp_path)  # ten nodes of four cards
    pods = tmp_path / "elastic.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        + "".join(f"p{i},2000,1024,4,1000,,{10 * i},{10 * i + 500}\n" for i in range(6))
    )
    args = ["simulate", "--nodes", nodes, "--pods", str(pods), "--policy", "bestfit"]
    args += ["--seeds", "1", "--mode", "timed", "--json"]
    result = CliRunner().invoke(main, [*args, "--elastic-share", "1"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["grows"] >= 6 and run["shrinks"] == 0  # each admitted at 2 cards, grown to 4
    fixed = json.loads(CliRunner().invoke(main, args).stdout)["runs"][0]
    assert "grows" not in fixed
    refused = CliRunner().invoke(main, [*args[:-3], "--elastic-share", "0.5"])  # not timed
    assert refused.exit_code == 2 and "--elastic-share" in refused.output


def test_simulate_timed_with_defragmentation(tmp_path: Path) -> None:
    nodes, _ = _trace(tmp_path)  # ten nodes of four cards
    pods = tmp_path / "defrag.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        + "".join(f"p{i},2000,1024,2,1000,,{10 * i},{10 * i + 500}\n" for i in range(6))
    )
    args = ["simulate", "--nodes", nodes, "--pods", str(pods), "--policy", "bestfit"]
    args += ["--seeds", "1", "--mode", "timed", "--json", "--checkpoints"]
    result = CliRunner().invoke(main, [*args, "--defrag", "--defrag-moves-per-hour", "1"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["moves"] == 0 and run["gpu_hours_lost_moves"] == 0  # room enough: nothing moves
    assert run["large_mean_wait_s"] == 0 and run["lost_moves_pct_of_served"] == 0
    refused = CliRunner().invoke(main, [*args[:-1], "--defrag"])  # no checkpoints: none movable
    assert refused.exit_code == 2 and "--checkpoints" in refused.output
    quiet = [*args, "--defrag", "--consolidate", "--consolidate-quiet", "5m"]
    result = CliRunner().invoke(main, quiet)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"][0]["consolidation_moves"] == 0  # nothing scattered
    alone = CliRunner().invoke(main, [*args, "--consolidate"])
    assert alone.exit_code == 2 and "--consolidate" in alone.output and "--defrag" in alone.output
    bad = CliRunner().invoke(main, [*quiet[:-1], "soon"])
    assert bad.exit_code == 2 and "--consolidate-quiet" in bad.output
    loose = CliRunner().invoke(main, [*args, "--defrag", "--consolidate-quiet", "5m"])
    assert loose.exit_code == 2 and "needs --consolidate" in loose.output


def test_simulate_runs_the_profiles_of_a_file(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "profiles:\n"
        "  - {name: fgd-spread, base: fgd, devicePolicy: spread}\n"
        "  - {name: packed, plugins: {score: {enabled: [{name: bestfit, weight: 3}]}}}\n"
    )
    common = ["simulate", "--nodes", nodes, "--pods", pods, "--seeds", "1", "--json"]
    result = CliRunner().invoke(main, [*common, "--profile", str(profiles)])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["summary"]) == {"fgd-spread", "packed"}
    picked = [*common, "--profile", str(profiles), "--policy", "packed,bestfit"]
    result = CliRunner().invoke(main, picked)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert summary["packed"]["mean"] == summary["bestfit"]["mean"]  # one scorer: same choices


def test_simulate_refuses_a_bad_profile_file_naming_the_field(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path)
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "profiles: [{name: p, plugins: {score: {enabled: [{name: fgd, weight: -1}]}}}]"
    )
    args = ["simulate", "--nodes", nodes, "--pods", pods, "--profile", str(profiles)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "profiles[0].plugins.score.enabled[0].weight" in result.output
    result = CliRunner().invoke(main, ["simulate", "--nodes", nodes, "--policy", "nope"])
    assert result.exit_code == 2 and "--policy" in result.output


def test_up_refuses_a_lease_outside_heartbeat_and_lost_after_before_touching_anything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    for lease, why in (("30", "below --lost-after"), ("0.1", "longer than --heartbeat")):
        args = ["up", "--data", str(data), "--lease", lease, "--lost-after", "30"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert "--lease" in result.output and why in result.output, result.output
    assert not data.exists()


def test_up_refuses_a_bad_rate_limit_naming_the_option_before_touching_anything(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    for option, value in (
        ("--rate-limit", "fast"),
        ("--rate-limit", "5/0"),
        ("--address-rate-limit", "-1"),
        ("--header-timeout", "0"),
        ("--connections-per-address", "-1"),
        ("--metrics-auth", "none"),
        ("--model-cache", "Models/HF"),
    ):
        result = CliRunner().invoke(main, ["up", "--data", str(data), option, value])
        assert result.exit_code == 2, result.output
        assert option in result.output, result.output
    assert not data.exists()


def test_demo_and_replay_honour_the_cluster_files_taints(tmp_path: Path) -> None:
    # The sim front takes the cluster file's nodes as they are: a NoSchedule taint on one of two
    # nodes keeps every task of a trace (which tolerates nothing) off it.
    from xpupool.engine.fragmentation import TargetWorkload
    from xpupool.probes.cluster_file import load_cluster
    from xpupool.sim.alibaba import TraceTask, to_request
    from xpupool.sim.replay import replay

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n"
        "  - {name: kept, cpu: 64, memory: 256Gi, taints: [gpu=true:NoSchedule], devices: [\n"
        "      {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi}]}\n"
        "  - {name: open, cpu: 64, memory: 256Gi, devices: [\n"
        "      {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 2, memory: 80Gi}]}\n"
    )
    nodes = load_cluster(cluster)
    tasks = [TraceTask(f"t{i}", 1000, 1024, 1, 1000, ()) for i in range(3)]
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    trace = replay(nodes, tasks, "binpack", 42, workload)
    assert trace.failed == 1  # two fit on 'open'; the third finds only the tainted node
    result = CliRunner().invoke(main, ["demo", "--cluster", str(cluster)])
    assert result.exit_code == 0
    assert "untolerated taint gpu=true:NoSchedule" in result.output, result.output


def test_simulate_timed_with_reservations_reports_when_the_booked_tasks_started(
    tmp_path: Path,
) -> None:
    nodes, _ = _trace(tmp_path)
    pods = tmp_path / "timed.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        + "".join(f"p{i},2000,1024,1,1000,,{100 * i},{100 * i + 5000}\n" for i in range(60))
    )
    args = ["simulate", "--nodes", nodes, "--pods", str(pods), "--policy", "bestfit"]
    args += ["--seeds", "1", "--mode", "timed", "--reservations", "2", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["reserved_start_delay_s"] == [0.0, 0.0]  # lent until each began, then on time
    assert run["preemptions"] > 0  # borrowers of the reserved cards, reclaimed at the start
    assert run["tasks"] == 62
