"""``xpupool up --logs ROOT`` (issue 43, item 5): the logs and the in-process agent's files on a
filesystem of their own belong to one pool, as the data dir does. A pool started on another
pool's ROOT would serve that pool's job logs under its own job ids, so it is refused; a new pool
over an old ROOT is refused unless told ``--reinitialise``, which moves the old logs aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpupool.server.datadir import DataDirError, open_pool


def _url(data: Path) -> str:
    data.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{data / 'state.db'}"


def test_a_logs_root_belongs_to_one_pool(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    pool_a = open_pool(a, _url(a), reinitialise=False, logs_root=root)
    assert (root / "pool-id").read_text().strip() == pool_a.pool_id
    assert open_pool(a, _url(a), reinitialise=False, logs_root=root).pool_id == pool_a.pool_id
    pool_b = open_pool(b, _url(b), reinitialise=False)  # pool b, logs in its data dir
    with pytest.raises(DataDirError, match=f"holds the logs of pool {pool_a.pool_id}"):
        open_pool(b, _url(b), reinitialise=False, logs_root=root)
    assert (root / "pool-id").read_text().strip() == pool_a.pool_id  # refused: untouched
    assert pool_b.pool_id != pool_a.pool_id


def test_a_new_pool_over_an_old_logs_root_is_refused_unless_reinitialised(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    data = tmp_path / "data"
    old = open_pool(data, _url(data), reinitialise=False, logs_root=root)
    (root / "logs" / "41").mkdir(parents=True)
    (root / "logs" / "41" / "0.log").write_text("an old tenant's output\n")
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data / name).unlink(missing_ok=True)
    (data / "pool").unlink()  # only the logs root is left of the old pool
    with pytest.raises(DataDirError, match="missing or empty") as refused:
        open_pool(data, _url(data), reinitialise=False, logs_root=root)
    assert f"{root}/logs/" in str(refused.value)
    new = open_pool(data, _url(data), reinitialise=True, logs_root=root)
    assert new.pool_id != old.pool_id
    assert new.job_ids_below > 41  # no new job gets the old job's id, hence its log
    aside = [p for p in root.iterdir() if p.name.startswith("old-")]
    assert len(aside) == 1 and (aside[0] / "logs" / "41" / "0.log").exists()
    assert (root / "pool-id").read_text().strip() == new.pool_id
