"""``xpupool plan`` says how fast each card type runs the model relative to the best, and where
the figures come from."""

from __future__ import annotations

import re

from click.testing import CliRunner

from xpupool.cli import main


def test_plan_states_expected_speed_per_card_type() -> None:
    out = CliRunner().invoke(main, ["plan", "--model", "qwen2.5-7b", "--catalog-only"])
    assert out.exit_code == 0, out.output
    line = out.output.strip().splitlines()[-1]
    assert line.startswith("expected speed: ") and line.endswith("(estimated)"), line
    speeds = [float(x) for x in re.findall(r": ([0-9.]+)x", line)]
    assert speeds[0] == 1.0 and speeds == sorted(speeds, reverse=True) and len(speeds) > 3
