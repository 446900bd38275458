"""The top functions of a py-spy profile in its "raw" format (``bench/api.py --py-spy FILE``).

    python bench/profile_top.py FILE [--top 20] [--under schedule_pass] [--only xpupool/] [--json]

Each line of the file is one stack (frames joined by ';', outermost first) and its sample count.
Prints, per function (``name (module)``), its share of the samples: inclusive (the function or
anything it called was running) and self (it was the innermost frame). ``--under NAME`` keeps the
stacks that pass through a function whose name contains NAME (``submit``, ``schedule_pass``), and
the shares are then of those samples; ``--only TEXT`` lists only the functions whose module
path has TEXT (``xpupool/``: our code, without the threads and frameworks above it).
Site-packages and source paths are cut to the module path, so the same function reads the same
whichever checkout ran it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"(?P<name>.*) \((?P<path>.*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """``function (module path)`` without the line number or the checkout's prefix."""
    m = FRAME.match(frame)
    if m is None:
        return frame
    path = m["path"].split("site-packages/")[-1].split("/src/")[-1]
    return f"{m['name']} ({path})"


def top(path: Path, n: int, under: str | None, only: str | None = None) -> dict[str, object]:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = kept = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        names = [frame_name(f) for f in stack.split(";")]
        if under is not None and not any(under in x.split(" (")[0] for x in names):
            continue
        kept += samples
        inclusive.update(dict.fromkeys(set(names), samples))
        own[names[-1]] += samples

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        listed = [(k, v) for k, v in counter.most_common() if only is None or only in k][:n]
        return [(k, round(100 * v / kept, 1)) for k, v in listed] if kept else []

    return {
        "file": str(path),
        "samples": total,
        "under": under,
        "kept": kept,
        "inclusive_pct": shares(inclusive),
        "self_pct": shares(own),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("file", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=20, help="functions per list")
    parser.add_argument("--under", help="only stacks through a function whose name has this")
    parser.add_argument("--only", help="list only functions whose module path has this")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    args = parser.parse_args()
    out = top(args.file, args.top, args.under, args.only)
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"{out['kept']} of {out['samples']} samples" + (f" under {args.under}" * bool(args.under))
    )
    for title in ("inclusive_pct", "self_pct"):
        print(f"-- {title}")
        for name, pct in out[title]:  # type: ignore[attr-defined]
            print(f"{pct:5.1f}%  {name}")


if __name__ == "__main__":
    main()
