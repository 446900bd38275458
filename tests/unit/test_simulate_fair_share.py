"""``xpupool simulate --mode timed --fair-share history`` (issue 52): the timed replay orders
tenants by the share each held over a decaying window, as the server's ``--fair-share history``
does, instead of DRF on what each holds now. A trace of three tasks on one card where the two
orders disagree: tenant a has held the card for a long time (queue ``held``); when it frees,
a's next task (waiting longer, queue ``qa``) and b's first (``qb``) both wait. DRF sees neither
holding anything and keeps arrival order; the order by history serves b first."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from xpupool.cli import main


def _files(tmp_path: Path) -> list[str]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
        "a0,1000,1024,1,1000,T4|P100,0,1000\n"  # tenant a holds the card from 0 to 1000
        "a1,1000,1024,1,1000,T4,10,110\n"
        "b0,1000,1024,1,1000,,20,120\n"
    )
    config = tmp_path / "queues.yaml"
    config.write_text(
        "queues:\n  - {name: held, tenant: a}\n  - {name: qa, tenant: a}\n"
        "  - {name: qb, tenant: b}\n"
        "assign:\n  - {queue: held, gpu_spec: P100}\n  - {queue: qa, gpu_spec: T4}\n"
        "  - {queue: qb}\n"
    )
    return ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit"]


def _waits(args: list[str]) -> dict[str, float]:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    return dict(run["wait_by_queue"])


def test_the_order_by_history_serves_the_tenant_that_held_less(tmp_path: Path) -> None:
    args = _files(tmp_path)
    args += ["--seeds", "1", "--mode", "timed", "--queue-config", str(tmp_path / "queues.yaml")]
    drf = _waits([*args, "--json"])
    assert drf["qa"] < drf["qb"]  # a0 then a1 by arrival: neither tenant holds the card at 1000
    history = _waits([*args, "--fair-share", "history", "--fair-share-half-life", "1h", "--json"])
    assert history["qb"] < history["qa"]  # a held the card 1000 s: b goes first


def test_a_bad_half_life_or_mode_is_refused_naming_the_option(tmp_path: Path) -> None:
    args = [*_files(tmp_path), "--seeds", "1"]
    bad = CliRunner().invoke(
        main, [*args, "--mode", "timed", "--fair-share", "history", "--fair-share-half-life", "0s"]
    )
    assert bad.exit_code == 2 and "--fair-share-half-life" in bad.output, bad.output
    fgd = CliRunner().invoke(main, [*args, "--fair-share", "history"])
    assert fgd.exit_code == 2 and "--fair-share" in fgd.output and "timed" in fgd.output
