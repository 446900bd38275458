"""The store's owner row and its fence (``server/ownership.py``) in one process, on a real SQLite
file and on a real PostgreSQL (``store_url``): two :class:`StoreOwnership` stand for two servers,
with clocks the test moves."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Connection, insert, select, text, update

from xpupool.server.ownership import Identity, StoreFenced, StoreInUseError, StoreOwnership
from xpupool.server.storage import meta
from xpupool.server.storage.audit import audit
from xpupool.server.storage.owner import store_owner


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def owner(url: str, name: str, clock: Clock, **kw: object) -> StoreOwnership:
    return StoreOwnership(url, Identity("h", 1, name), lease_s=10.0, clock=clock, **kw)  # type: ignore[arg-type]


def row(conn: Connection, n: int) -> None:
    values = {"at": float(n), "role": "admin", "action": "a", "target": "t", "status": 200}
    conn.execute(insert(audit).values(**values, result="ok"))


def count(url: str) -> int:
    db = meta.connect(url)
    try:
        with db.connect() as conn:
            return int(conn.execute(select(text("count(*)")).select_from(audit)).scalar_one())
    finally:
        db.dispose()


def test_a_live_owner_refuses_a_second_claim_and_an_ended_lease_is_taken(store_url: str) -> None:
    url, clock = store_url, Clock()
    first = owner(url, "/a", clock)
    first.claim()
    second = owner(url, "/b", clock)
    with pytest.raises(StoreInUseError, match=r"data dir /a, epoch 1\); its lease ends"):
        second.claim()
    clock.now += 10 + 2.5  # past the lease and the skew allowance
    second.claim()
    assert second.epoch == 2
    for o in (first, second):
        o.release()


def test_a_write_after_a_take_over_is_rolled_back_and_every_later_one_too(store_url: str) -> None:
    url, clock = store_url, Clock()
    first = owner(url, "/a", clock)
    first.claim()
    told: list[str] = []
    first.on_lost.append(told.append)
    db = meta.connect(url)
    first.fence(db)
    kept = db.connect()  # as ControlPlane.write keeps its connection
    with kept.begin():
        row(kept, 1)
    with kept.begin():  # a transaction that wrote nothing is not checked
        kept.execute(select(audit.c.id)).all()
    clock.now += 13
    taker = owner(url, "/standby", clock)
    taker.claim()
    lost = r"lost the store to another xpupool up \(host h, pid 1, data dir /standby"
    with pytest.raises(StoreFenced, match=lost), kept.begin():
        row(kept, 2)
    assert count(url) == 1 and len(told) == 1
    with pytest.raises(StoreFenced), kept.begin():  # the connection is clean, still refused
        row(kept, 3)
    assert count(url) == 1
    assert not first.renew()  # the renewal neither takes it back
    assert taker.renew()
    kept.close()
    db.dispose()
    first.release()
    taker.release()


def test_release_frees_the_store_at_once_and_the_dir_lock_proves_a_crash(store_url: str) -> None:
    url, clock = store_url, Clock()
    first = owner(url, "/a", clock)
    first.claim()
    first.release()
    again = owner(url, "/b", clock)
    again.claim()  # released: no wait
    again._renewer.stop()  # type: ignore[union-attr]  # as if it crashed: no release
    with pytest.raises(StoreInUseError):
        owner(url, "/c", clock).claim()
    restarted = owner(url, "/b", clock, dir_locked=True)
    restarted.claim()  # same host and data dir, its lock held: the old process is gone
    assert restarted.epoch == 3
    restarted.release()


def test_claiming_a_store_already_held_keeps_it_as_it_is(store_url: str) -> None:
    """A standby claims before its start claims again (server/standby.py): the second claim
    changes nothing, neither the epoch nor the lease."""
    clock = Clock()
    standby = owner(store_url, "/b", clock)
    standby.claim()
    clock.now += 3
    standby.claim()
    assert standby.epoch == 1
    with pytest.raises(StoreInUseError, match=r"epoch 1\); its lease ends"):
        owner(store_url, "/c", clock).claim()
    standby.release()


def test_a_lease_that_runs_out_unrenewed_is_given_up_without_asking_the_database(
    store_url: str,
) -> None:
    """A renewal stuck on the database (here behind a lock; in production a partition that
    drops packets) tells nothing: the lease's end, timed in this process, gives the store up.
    The server is told once, with why; the stuck renewal, when it gets through, commits nothing
    (the row keeps the lease it had)."""
    first = StoreOwnership(store_url, Identity("h", 1, "/a"), lease_s=1.0)  # real clocks
    told: list[str] = []
    first.on_lost.append(told.append)
    first.claim()
    blocker = meta.connect(store_url)
    conn = blocker.connect()
    tx = conn.begin()
    try:
        conn.execute(update(store_owner).where(store_owner.c.id == 1).values(id=1))  # its lock
        held = conn.execute(select(store_owner.c.lease_until)).scalar_one()
        deadline = time.monotonic() + 60
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(told) == 1 and "past its lease" in told[0], told
    finally:
        tx.rollback()
        conn.close()
    renewer = first._renewer
    assert renewer is not None
    renewer.join(timeout=60)  # the stuck renewal ends, refused
    assert not renewer.is_alive()
    first.fence(blocker)
    with pytest.raises(StoreFenced), blocker.begin() as c:
        row(c, 1)
    assert count(store_url) == 0
    with blocker.connect() as c:
        assert c.execute(select(store_owner.c.lease_until)).scalar_one() == held
    blocker.dispose()
    first.release()
