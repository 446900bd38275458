"""``XPUPOOL_WITHOUT`` switches one piece of the performance machinery off for its benchmark
(bench/machinery.py): each switch must really take its piece out, and a misspelt one must stop
the process naming the variable rather than measure the piece against itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _run(code: str, without: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XPUPOOL_WITHOUT": without}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


FREEZE = (
    "import gc\n"
    "from xpupool.server.heap_freeze import SurvivorFreeze, freeze_start_heap\n"
    "s = SurvivorFreeze(quiet=lambda: True)\n"
    "s.start()\n"
    "print(freeze_start_heap(), s.after_collection in gc.callbacks)\n"
)

SQL = (
    "from sqlalchemy import Column, Integer, MetaData, Table, create_engine, event\n"
    "from xpupool.server.storage.driver_insert import insert_rows\n"
    "t = Table('t', MetaData(), Column('a', Integer))\n"
    "e = create_engine('sqlite://')\n"
    "t.metadata.create_all(e)\n"
    "seen = []\n"
    "event.listen(e, 'before_cursor_execute', lambda *a: seen.append(1))\n"
    "with e.begin() as c:\n"
    "    insert_rows(c, t, [{'a': 1}, {'a': 2}])\n"
    "    through = bool(seen)\n"
    "    n = c.exec_driver_sql('select count(*) from t').scalar()\n"
    "print(n, through)\n"
)


def test_heap_freeze_off_freezes_nothing_and_installs_no_sweep() -> None:
    on, off = _run(FREEZE, ""), _run(FREEZE, "heap-freeze")
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    frozen, installed = on.stdout.split()
    assert int(frozen) > 0 and installed == "True"
    assert off.stdout.split() == ["0", "False"]


def test_driver_sql_off_sends_the_rows_through_sqlalchemy() -> None:
    # SQLAlchemy's cursor events see its own statements, not the driver-level path's
    on, off = _run(SQL, ""), _run(SQL, "driver-sql")
    assert on.returncode == off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.split() == ["2", "False"]
    assert off.stdout.split() == ["2", "True"]


def test_an_unknown_piece_stops_the_process_naming_the_variable() -> None:
    done = _run("import xpupool.server.machinery_switch", "heap-freze")
    assert done.returncode != 0
    assert "XPUPOOL_WITHOUT: unknown piece(s) heap-freze" in done.stderr
    assert "driver-sql, heap-freeze" in done.stderr


def test_the_judgement_counts_a_gain_every_round_shows_though_the_ranges_overlap() -> None:
    """A p99 swings run to run: the ranges of the two sides overlap (the strict rule counts no
    gain) while each round, its two runs back to back, favours the piece; the paired rule keeps
    it, and a piece one round disfavours is not kept by it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from machinery import PIECES, judge

    p99 = PIECES["heap-freeze"]  # lower is better
    verdict = judge(p99, [200.0, 10.0, 40.0, 60.0, 100.0], [250.0, 160.0, 90.0, 420.0, 150.0])
    assert verdict["inside_spread"] and not verdict["keep"]
    assert verdict["paired_gains"] == [0.2, 0.9375, 0.5556, 0.8571, 0.3333]
    assert verdict["paired_median_gain"] == 0.5556 and verdict["keep_paired"]
    mixed = judge(p99, [200.0, 10.0, 40.0, 60.0, 100.0], [150.0, 160.0, 90.0, 420.0, 150.0])
    assert mixed["paired_gains"][0] < 0 and not mixed["keep_paired"]
