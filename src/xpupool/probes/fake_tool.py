"""A fake ``nvidia-smi mig`` and ``npu-smi`` that re-cut the cards of a fake-probe file, as the
real tools change a card: for tests and demos of re-cutting (issue 53) without the hardware.

    python -m xpupool.probes.fake_tool nvidia-smi mig -i 0 -lgi

A test puts two small scripts named ``nvidia-smi`` and ``npu-smi`` on the agent's ``PATH`` that
run this module with their name, and sets ``XPUPOOL_FAKE_DEVICES`` to the agent's ``--fake`` file.
The GPU (``-i``) and NPU ids are the fake cards' indexes (chip 0); the card's entry in the file
must have ``count: 1`` (its ``partitions`` is the card's layout). Understood: ``mig -i N -lgi``
(GPU instance ID = first memory slice + 1, profile ID 0), ``mig -i N -gi IDS -dci`` (checks the
instances exist), ``mig -i N -gi IDS -dgi``, ``mig -i N -cgi PROFILE:START,... -C``; ``info -t
info-vnpu -i N -c 0`` (vNPU id = 100 + 16 x N + its place in the layout), ``set -t destroy-vnpu
-i N -c 0 -v ID``, ``set -t create-vnpu -i N -c 0 -f TEMPLATE``. A creation the card's geometry
refuses fails as the real tool does (exit 1, the reason on stderr), and so does any command that
contains the text of ``XPUPOOL_FAKE_TOOL_FAIL`` (a failure on demand). The file is replaced
whole, so a probe reading it meanwhile sees the old layout or the new one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import layout_words, read_layout
from xpupool.catalog.partition_geometry import Layout, layout_problem

FILE_ENV = "XPUPOOL_FAKE_DEVICES"
FAIL_ENV = "XPUPOOL_FAKE_TOOL_FAIL"


class ToolError(Exception):
    """The fake tool's error: printed to stderr, exit status 1."""


def _option(argv: Sequence[str], flag: str) -> str:
    if flag not in argv or argv.index(flag) + 1 >= len(argv):
        raise ToolError(f"missing {flag}")
    return argv[argv.index(flag) + 1]


def _int(argv: Sequence[str], flag: str) -> int:
    value = _option(argv, flag)
    if not value.isdigit():
        raise ToolError(f"{flag} {value}: expected a number")
    return int(value)


class FakeCards:
    """The fake-probe file, its cards by index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: Any = yaml.safe_load(path.read_text())

    def _at(self, index: int) -> int:
        """The place in the file's device list of card ``index``'s entry."""
        cards = 0
        for at, entry in enumerate(self.data["devices"]):
            count = int(entry.get("count", 1))
            if cards <= index < cards + count:
                if count != 1:
                    raise ToolError(f"card {index}: its entry needs count: 1 to be re-cut")
                return at
            cards += count
        raise ToolError(f"no card {index}")

    def entry(self, index: int) -> dict[str, Any]:
        return dict(self.data["devices"][self._at(index)])

    def layout(self, index: int) -> Layout:
        words = self.entry(index).get("partitions")
        return () if words is None else read_layout("partitions", words)

    def cut(self, index: int, layout: Layout) -> None:
        entry = self.entry(index)
        scheme = load_partitions().scheme_for(
            str(entry["model"]), str(entry.get("vendor", "")), load_accelerators()
        )
        if scheme is None:
            raise ToolError(f"card {index}: {entry['model']} has no partitions")
        problem = layout_problem(scheme, layout)
        if problem is not None:
            raise ToolError(f"card {index}: Insufficient Resources: {problem}")
        if layout:
            entry["partitions"] = layout_words(layout)
        else:
            entry.pop("partitions", None)
        self.data["devices"][self._at(index)] = entry
        temp = self.path.with_name(self.path.name + ".cutting")
        temp.write_text(yaml.safe_dump(self.data, sort_keys=False))
        os.replace(temp, self.path)


def nvidia_smi(cards: FakeCards, argv: Sequence[str]) -> str:
    if not argv or argv[0] != "mig":
        raise ToolError("only 'mig' is faked")
    gpu = _int(argv, "-i")
    layout = cards.layout(gpu)
    ids = {start + 1: (name, start) for name, start in layout if start is not None}
    if "-lgi" in argv:
        lines = ["| GPU instances:", "| GPU   Name   Profile  Instance   Placement  |", "|===|"]
        for gi, (name, start) in sorted(ids.items()):
            size = _slices(cards, gpu, name)
            lines.append(f"|   {gpu}  MIG {name}   0   {gi}   {start}:{size}   |")
        return "\n".join(lines) + "\n"
    if "-dci" in argv or "-dgi" in argv:
        wanted = [int(x) for x in _option(argv, "-gi").split(",")]
        missing = [x for x in wanted if x not in ids]
        if missing:
            raise ToolError(f"Unable to find GPU instance {missing[0]} on GPU {gpu}")
        if "-dgi" in argv:
            gone = {ids[x] for x in wanted}
            cards.cut(gpu, tuple(i for i in layout if i not in gone))
        return f"Successfully destroyed instances {wanted} on GPU {gpu}\n"
    if "-cgi" in argv:
        added = []
        for spec in _option(argv, "-cgi").split(","):
            profile, _, first = spec.partition(":")
            if not first.isdigit():
                raise ToolError(f"{spec}: the fake needs PROFILE:START")
            added.append((profile, int(first)))
        cards.cut(gpu, (*layout, *added))
        return f"Successfully created GPU instances {added} on GPU {gpu}\n"
    raise ToolError("unknown mig command")


def _slices(cards: FakeCards, gpu: int, name: str) -> int:
    entry = cards.entry(gpu)
    scheme = load_partitions().scheme_for(str(entry["model"]), None, load_accelerators())
    profile = scheme.profile(name) if scheme is not None else None
    return profile.memory_slices if profile is not None else 0


def npu_smi(cards: FakeCards, argv: Sequence[str]) -> str:
    npu = _int(argv, "-i")
    if _int(argv, "-c") != 0:
        raise ToolError("fake cards have one chip, 0")
    layout = cards.layout(npu)
    base = 100 + 16 * npu
    kind = _option(argv, "-t")
    if argv[0] == "info" and kind == "info-vnpu":
        rows = [f"| {base + i} | {name} |" for i, (name, _) in enumerate(layout)]
        return "\n".join(["| Vnpu ID | Template Name |", *rows]) + "\n"
    if argv[0] == "set" and kind == "destroy-vnpu":
        place = _int(argv, "-v") - base
        if not 0 <= place < len(layout):
            raise ToolError(f"vNPU {place + base} does not exist")
        cards.cut(npu, layout[:place] + layout[place + 1 :])
        return "Status : OK\n"
    if argv[0] == "set" and kind == "create-vnpu":
        cards.cut(npu, (*layout, (_option(argv, "-f"), None)))
        return "Status : OK\n"
    raise ToolError(f"unknown command {' '.join(argv)}")


def main(argv: Sequence[str]) -> int:
    """``argv``: the tool's name (``nvidia-smi``, ``npu-smi``), then its arguments."""
    try:
        if len(argv) < 2:
            raise ToolError("usage: fake_tool nvidia-smi|npu-smi ARGS...")
        fail = os.environ.get(FAIL_ENV)
        if fail and fail in " ".join(argv):
            raise ToolError(f"failed on demand ({FAIL_ENV}={fail})")
        cards = FakeCards(Path(os.environ[FILE_ENV]))
        tools = {"nvidia-smi": nvidia_smi, "npu-smi": npu_smi}
        if argv[0] not in tools:
            raise ToolError(f"no fake {argv[0]}")
        sys.stdout.write(tools[argv[0]](cards, argv[1:]))
        return 0
    except (ToolError, KeyError, OSError) as exc:
        sys.stderr.write(f"{argv[0] if argv else 'fake_tool'}: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
