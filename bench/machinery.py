"""Each piece of the server's performance machinery against its own removal, in one command.

    python bench/machinery.py --json                      # both, 5 rounds each
    python bench/machinery.py --only driver-sql --rounds 7 --json

Issue 44 part 8: a piece of machinery stays only if it buys at least 10 % on its own figure, a
gain inside the spread of the runs counting as none. Each piece is measured by ``bench/api.py``
(a real ``xpupool up`` on a generated pool, open-loop submissions) with and without it, the two
interleaved round by round (which goes first alternates), so that what else the machine does
falls on both alike:

- ``heap-freeze`` (``server/heap_freeze.py``): submit -> scheduled p99 at 5,000 nodes and 200
  submissions/s; off is ``XPUPOOL_WITHOUT=heap-freeze`` (``server/machinery_switch.py``).
- ``driver-sql`` (``server/storage/driver_insert.py``): the plane's CPU per submission at 1,000
  nodes and 500/s; off is ``XPUPOOL_WITHOUT=driver-sql``.

Per piece it prints every run's figure, the medians with and without, the spread (lowest and
highest of each side), the gain of the median (positive: the piece helps), whether the two sides'
ranges overlap (``inside_spread``), each run's ``cpu_steal_fraction`` and the load average, and
``keep``: a gain of at least 10 % outside the spread. A p99 swings run to run far more than a
median, so two sides' ranges can overlap while every round favours one side: each round's own
gain (its two runs back to back, under the same load) is given too (``paired_gains``), and
``keep_paired`` says whether their median is at least 10 % with every round's gain positive.
Current figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

API = Path(__file__).resolve().parent / "api.py"
KEEP_GAIN = 0.10
"""The least a piece must buy on its own figure (issue 44 part 8)."""


@dataclass(frozen=True)
class Piece:
    name: str
    args: tuple[str, ...]  # bench/api.py's, both sides
    figure: str  # the key of bench/api.py's JSON it is judged on
    lower_is_better: bool
    without_env: dict[str, str]
    without_args: tuple[str, ...] = ()
    with_args: tuple[str, ...] = ()


PIECES = {
    p.name: p
    for p in (
        Piece(
            "heap-freeze",
            ("--nodes", "5000", "--rate", "200"),
            "scheduled_latency_p99_ms",
            True,
            {"XPUPOOL_WITHOUT": "heap-freeze"},
        ),
        Piece(
            "driver-sql",
            ("--nodes", "1000", "--rate", "500"),
            "plane_cpu_ms_per_job",
            True,
            {"XPUPOOL_WITHOUT": "driver-sql"},
        ),
    )
}


def run(piece: Piece, on: bool, seconds: float) -> dict[str, Any]:
    """One ``bench/api.py`` run with the piece (``on``) or without it."""
    env = {k: v for k, v in os.environ.items() if k != "XPUPOOL_WITHOUT"}
    extra = piece.with_args
    if not on:
        env.update(piece.without_env)
        extra = piece.without_args
    argv = [sys.executable, str(API), *piece.args, *extra, "--seconds", f"{seconds:g}", "--json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def judge(piece: Piece, on: list[float], off: list[float]) -> dict[str, Any]:
    """Medians, spread, the gain of the median and whether it counts (see the module's text)."""
    med_on, med_off = statistics.median(on), statistics.median(off)
    if piece.lower_is_better:
        gain = (med_off - med_on) / med_off if med_off else 0.0
    else:
        gain = (med_on - med_off) / med_off if med_off else 0.0
    inside = max(on) >= min(off) and max(off) >= min(on)
    # round by round (the two sides of a round ran back to back, under the same load)
    paired = [
        ((b - a) / b if piece.lower_is_better else (a - b) / b) if b else 0.0
        for a, b in zip(on, off, strict=True)
    ]
    return {
        "median_with": round(med_on, 3),
        "median_without": round(med_off, 3),
        "spread_with": [round(min(on), 3), round(max(on), 3)],
        "spread_without": [round(min(off), 3), round(max(off), 3)],
        "gain": round(gain, 4),
        "inside_spread": inside,
        "keep": gain >= KEEP_GAIN and not inside,
        "paired_gains": [round(g, 4) for g in paired],
        "paired_median_gain": round(statistics.median(paired), 4),
        "keep_paired": statistics.median(paired) >= KEEP_GAIN and min(paired) > 0,
    }


def measure(names: list[str], rounds: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds, "seconds_per_run": seconds, "pieces": {}}
    for name in names:
        piece = PIECES[name]
        on: list[float] = []
        off: list[float] = []
        steal: list[float | None] = []
        load: list[float] = []
        for r in range(rounds):
            for side in (True, False) if r % 2 == 0 else (False, True):
                result = run(piece, side, seconds)
                (on if side else off).append(float(result[piece.figure]))
                steal.append(result.get("cpu_steal_fraction"))
                load.append(round(os.getloadavg()[0], 2))
                print(f"{name} round {r + 1} {'with' if side else 'without'}: "
                      f"{piece.figure} {result[piece.figure]}", file=sys.stderr, flush=True)  # fmt: skip
        out["pieces"][name] = {
            "figure": piece.figure,
            "lower_is_better": piece.lower_is_better,
            "args": list(piece.args),
            "with": on,
            "without": off,
            **judge(piece, on, off),
            "cpu_steal_fraction": steal,
            "load_average": load,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5, help="runs per side (at least 5)")
    parser.add_argument("--seconds", type=float, default=10.0, help="submitting time per run")
    parser.add_argument(
        "--only", default=",".join(PIECES), help=f"comma-separated: {', '.join(PIECES)}"
    )
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in PIECES]
    if unknown:
        parser.error(f"--only: unknown piece(s) {', '.join(unknown)}; known: {', '.join(PIECES)}")
    out = measure(names, args.rounds, args.seconds)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
