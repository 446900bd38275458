"""Energy per job on the timed replay: spread, binpack, the default policy and ``energy`` (issue 55),
in one run, on the same load.

    python bench/energy.py [--json] [--tasks N] [--peak 1.3] [--seed 42] [--node-off-after 600]

Replays the Alibaba default trace (``openb_pod_list_default.csv`` on its GPU node list) with
departures through the server's scheduling cycle (``xpupool.sim.timed_replay``), one FIFO queue,
tiled and compressed as ``bench/governance.py`` does until peak demand is ``--peak`` times capacity
(queues form), and meters the cards' energy (``xpupool.sim.energy``: a card holding work draws
idle + (busy - idle) x share, an idle card its sleep power, a node idle for ``--node-off-after``
seconds is powered down; host power not counted). Power figures: the catalog's where it has them,
else the stand-ins in :data:`STAND_INS` (the trace's G2 and G3 are undisclosed models; idle figures
for the disclosed ones are not sourced in the catalog either). Main rows: a sleeping card draws
:data:`SLEEP_FRACTION` of its idle power (a stand-in); the sensitivity rows: sleep power = idle
power (no low-power state), the ``energy`` policy told the same. Prints, per policy: kWh per
completed job, total kWh, mean JCT and wait, utilisation. ``--tasks N`` replays a seeded sample of
N tasks on a proportional seeded sample of the nodes (a smoke test). The sensitivity rows meter
the main rows' replays again (the same placements), but for ``energy``, replayed with its sleep
power.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Any

from xpupool.catalog.power import Override, PowerModel
from xpupool.engine import BUILTIN_PROFILES, Profile
from xpupool.engine.scorers.energy import EnergyArgs
from xpupool.sim.energy import EnergyMeter
from xpupool.sim.load import default_trace_at_peak
from xpupool.sim.timed_replay import TimedResult, timed_replay
from xpupool.sim.trace_files import DEFAULT_PODS

SLEEP_FRACTION = 0.3  # stand-in: a card in its low-power state draws 30 % of its idle power
STAND_INS: tuple[Override, ...] = (
    # (name, idle W, busy W): board power from the vendors' data sheets where the catalog has
    # none; idle figures are stand-ins of the order nvidia-smi shows for an idle card (P0/P8)
    Override("T4", idle_watts=10.0),
    Override("A10", idle_watts=20.0),
    Override("P100", idle_watts=30.0, busy_watts=250.0),
    Override("V100M16", idle_watts=40.0, busy_watts=300.0),
    Override("V100M32", idle_watts=40.0, busy_watts=300.0),
    Override("G1", idle_watts=40.0, busy_watts=300.0),  # undisclosed: a V100-class stand-in
    Override("G2", idle_watts=40.0, busy_watts=300.0),  # undisclosed: a V100-class stand-in
    Override("G3", idle_watts=50.0, busy_watts=400.0),  # undisclosed: an A100-class stand-in
)
POLICIES = ("spread", "binpack", "xpupool", "energy")


def energy_profile(sleep_fraction: float) -> Profile:
    """The built-in ``energy`` profile with the bench's figures."""
    args = EnergyArgs(overrides=STAND_INS, sleep_fraction=sleep_fraction)
    return replace(BUILTIN_PROFILES["energy"], args=(("energy", args),))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    started = time.perf_counter()
    load = default_trace_at_peak(args.peak, sample=args.tasks, seed=args.seed)
    nodes, tiled, compress, workload = load.nodes, load.tasks, load.compress, load.workload
    power = PowerModel(overrides=STAND_INS)
    models = sorted({d.model for n in nodes for d in n.devices})
    out: dict[str, Any] = {
        "trace": DEFAULT_PODS,
        **load.describe(),
        "seed": args.seed,
        "node_off_after_s": args.node_off_after,
        "sleep_fraction": SLEEP_FRACTION,
        "watts": {m: [power.figures(m).idle_watts, power.figures(m).busy_watts] for m in models},
        "host_power": "not counted (cards only)",
    }
    replays: dict[str, tuple[EnergyMeter, TimedResult]] = {}  # the same placements: metered again
    for row, sleep in (("main", SLEEP_FRACTION), ("sleep_equals_idle", 1.0)):
        figures: dict[str, dict[str, float]] = {}
        for name in POLICIES:
            if name == "energy" or name not in replays:  # energy is told the sleep power
                policy: Profile | str = energy_profile(sleep) if name == "energy" else name
                meter = EnergyMeter()
                replays[name] = (
                    meter,
                    timed_replay(
                        nodes, tiled, policy, args.seed, workload, compress=compress, on_run=meter
                    ),
                )
            meter, result = replays[name]
            summary = result.summary()
            done = summary["tasks"] - summary["never_placed"]
            used = meter.energy(
                nodes, power, sleep_fraction=sleep, node_off_after_s=args.node_off_after
            )
            figures[name] = {
                "kwh_per_job": round(used.kwh / done, 4) if done else 0.0,
                "kwh": round(used.kwh, 1),
                "busy_kwh": round(used.busy_j / 3.6e6, 1),
                "idle_kwh": round(used.idle_j / 3.6e6, 1),
                "off_card_h": round(used.off_card_s / 3600, 1),
                "mean_jct_s": summary["mean_jct_s"],
                "mean_wait_s": summary["mean_wait_s"],
                "mean_util_pct": summary["mean_util_pct"],
                "never_placed": summary["never_placed"],
                "replay_s": round(result.seconds, 1),
            }
            print(f"{row} {name}: {figures[name]}", file=sys.stderr)
        base = figures["xpupool"]
        for got in figures.values():
            got["kwh_per_job_vs_default_pct"] = _change(base["kwh_per_job"], got["kwh_per_job"])
            got["jct_vs_default_pct"] = _change(base["mean_jct_s"], got["mean_jct_s"])
        out[row] = figures
    out["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def _change(before: float, after: float) -> float:
    return round(100 * (after - before) / before, 1) if before else 0.0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--tasks", type=int, default=0, help="a seeded sample (smoke test)")
    parser.add_argument("--peak", type=float, default=1.3, help="peak demand / capacity")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--node-off-after", type=float, default=600.0, help="seconds idle")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
