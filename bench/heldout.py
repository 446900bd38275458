"""xpupool, FGD and BestFit on held-out workloads: synthetic traces no policy was tuned on.

    python bench/heldout.py --jobs 2 [--mixes eighths,random1] [--policies xpupool,fgd,bestfit]
        [--seeds 42-51] [--random 10] [--nodes openb_node_list_all_node.csv | --fleet modern]
        [--out docs/results/heldout-results.jsonl] [--reuse] [--keep DIR]

The mixes (``xpupool.sim.synthetic``: five designed, ``--random`` (10) drawn at random from seed 2026) are
written as ``openb_pod_list_<mix>.csv`` beside the Alibaba GPU node list, then replayed under the FGD
protocol exactly as ``bench/policy_table.py`` replays the Alibaba traces: per seed, shuffled and tuned
to 130 % of capacity, unallocated GPU % at arrived = 100 %. Prints one line per mix: what it is made
of, each policy's mean +- sd, and xpupool against FGD. About 15 minutes on 2 cores. ``--nodes``
replays them on another fleet (``openb_node_list_all_node.csv`` adds the trace's 310 CPU-only nodes),
``--fleet modern`` on a generated one (H100, A100, L40S, T4 and A10 nodes).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from policy_table import TRACES, load, measure, record, run_arguments, seed_range
from xpupool.sim.alibaba import read_nodes
from xpupool.sim.synthetic import MODERN_FLEET, Mix, generate, held_out, write_fleet, write_tasks

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "heldout-results.jsonl"
TASKS = 8000  # per mix, about the size of the default trace (the protocol resamples to 130 %)
NODES = "openb_node_list_gpu_node.csv"


def describe(mix: Mix) -> str:
    """What the mix is made of, in one table cell."""
    shares = ", ".join(f"{milli / 1000:g}" for milli, _ in mix.shares)
    cards = "/".join(str(c) for c, _ in mix.multi)
    return (
        f"{100 * mix.shared:.0f} % shared ({shares}), {100 * mix.multi_card:.0f} % {cards} cards, "
        f"{100 * mix.typed:.0f} % typed, {100 * mix.cpu_only:.0f} % CPU-only, "
        f"CPU x{mix.cpu_per_gpu:.2f}"
    )


def table(results: dict[tuple[str, str], dict[str, object]], mixes: list[Mix]) -> str:
    def cell(name: str, policy: str) -> str:
        r = results.get((name, policy))
        return "" if r is None else f"{float(r['mean']):.2f} ± {float(r['sd']):.2f}"  # type: ignore[arg-type]

    lines = [
        "| mix | made of (GPU tasks; CPU per GPU vs the fleet's) | xpupool | fgd | bestfit "
        "| xpupool vs fgd |",
        "|---|---|---|---|---|---|",
    ]
    for mix in mixes:
        ours, fgd = results.get((mix.name, "xpupool")), results.get((mix.name, "fgd"))
        change = ""
        if ours and fgd:
            a, b = float(ours["mean"]), float(fgd["mean"])  # type: ignore[arg-type]
            change = f"{100 * (a - b) / b:+.1f} %" if b else ""
        lines.append(
            f"| {mix.name} | {describe(mix)} | {cell(mix.name, 'xpupool')} | "
            f"{cell(mix.name, 'fgd')} | {cell(mix.name, 'bestfit')} | {change} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=TRACES, help="where the node list is")
    parser.add_argument(
        "--nodes", default=NODES, help=f"the fleet: a node list in --data (default {NODES})"
    )
    parser.add_argument(
        "--fleet", choices=["modern"], help="a generated fleet instead (synthetic.MODERN_FLEET)"
    )
    parser.add_argument("--mixes", help="comma-separated mix names (default: all)")
    parser.add_argument("--random", type=int, default=10, help="random mixes besides the designed")
    run_arguments(parser, DEFAULT_OUT)
    parser.add_argument("--keep", type=Path, help="write the generated traces here and keep them")
    args = parser.parse_args()
    mixes = held_out(args.random)
    if args.mixes:
        wanted = args.mixes.split(",")
        unknown = sorted(set(wanted) - {m.name for m in mixes})
        if unknown:
            parser.error(f"--mixes: unknown mix {', '.join(unknown)}")
        mixes = [m for m in mixes if m.name in wanted]
    seeds = seed_range(args.seeds)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="xpupool-heldout-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.fleet:
        write_fleet(MODERN_FLEET, folder / NODES)  # the name the replay reads
    else:
        shutil.copyfile(args.data / args.nodes, folder / NODES)
    nodes = read_nodes(folder / NODES)
    results = load(args.out)
    try:
        for mix in mixes:
            policies = [
                p for p in args.policies.split(",") if not (args.reuse and (mix.name, p) in results)
            ]
            if policies:  # generate the trace only when something will replay it
                path = folder / f"openb_pod_list_{mix.name}.csv"
                write_tasks(generate(mix, nodes, TASKS, seed=1), path)
            for policy in policies:
                row = measure(folder, mix.name, policy, seeds, args.jobs)
                row["mix"] = describe(mix)
                record(results, (mix.name, policy), row, args.out)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    print(table(results, mixes))


if __name__ == "__main__":
    main()
