"""HAMi's node lock (``k8s/codec/node_lock.py``): the value as HAMi v2.10.0 ``nodelock.go`` writes and
reads it, its expiry, and the take/wait/release protocol against a fake Node API that answers 409
as the apiserver does when the resourceVersion moved."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from xpupool.k8s.codec import node_lock
from xpupool.k8s.codec.node_lock import (
    EXPIRY_S,
    LOCK_KEY,
    LockMode,
    LockValue,
    NodeConflictError,
    NodeLockBusyError,
    NodeLocks,
    decode_lock,
    encode_lock,
    expired,
    held_by,
    runs_hami_device_plugin,
)
from xpupool.model.errors import RequestError

T0 = datetime(2026, 11, 27, 5, 10, 45, tzinfo=UTC)
HAMI_NODE = {"hami.io/node-nvidia-register": "[]"}


# ---------------------------------------------------------------------- the value
def test_encode_is_hamis_rfc3339_namespace_pod() -> None:
    assert encode_lock(T0, "team-a", "train-0") == "2026-11-27T05:10:45Z,team-a,train-0"


def test_encode_writes_utc_whatever_the_zone_and_drops_fractions() -> None:
    east = timezone(timedelta(hours=8))
    at = datetime(2026, 11, 27, 13, 10, 45, 999_000, tzinfo=east)
    assert encode_lock(at, "ns", "p") == "2026-11-27T05:10:45Z,ns,p"
    assert encode_lock(T0.replace(tzinfo=None), "ns", "p").startswith("2026-11-27T05:10:45Z,")


def test_decode_reads_what_hami_writes_in_any_zone() -> None:
    assert decode_lock("2026-11-27T05:10:45Z,team-a,train-0") == LockValue(T0, "team-a", "train-0")
    local = decode_lock("2026-11-27T13:10:45+08:00,ns,p")  # HAMi in a UTC+8 container
    assert local.taken_at == T0


def test_decode_reads_the_legacy_time_alone() -> None:
    assert decode_lock("2026-11-27T05:10:45Z") == LockValue(T0, "", "")


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2026-11-27T05:10:45Z,ns", "2026-11-27T05:10:45Z,ns,p,x", "x,ns,p"]
)
def test_decode_refuses_what_hami_cannot_parse_naming_the_annotation(text: str) -> None:
    with pytest.raises(RequestError) as err:
        decode_lock(text)
    assert err.value.field == f"metadata.annotations[{LOCK_KEY}]"


def test_round_trip() -> None:
    assert decode_lock(encode_lock(T0, "ns", "pod-1")) == LockValue(T0, "ns", "pod-1")


def test_held_by_is_hamis_suffix_test() -> None:
    value = encode_lock(T0, "team-a", "train-0")
    assert held_by(value, "team-a", "train-0")
    assert not held_by(value, "team-a", "rain-0")  # the separator is part of the owner
    assert not held_by(value, "a", "train-0")
    assert not held_by("2026-11-27T05:10:45Z", "", "")  # legacy: no owner to match


def test_expiry_is_hamis_five_minutes_strictly_after() -> None:
    lock = LockValue(T0, "ns", "p")
    assert EXPIRY_S == 300.0
    assert not expired(lock, T0 + timedelta(seconds=300))
    assert expired(lock, T0 + timedelta(seconds=300, microseconds=1))
    assert expired(lock, T0 + timedelta(seconds=11), expiry_s=10)


def test_hami_nodes_are_told_by_their_registration() -> None:
    assert runs_hami_device_plugin(HAMI_NODE)
    assert runs_hami_device_plugin({"hami.io/node-dcu-register": "x"})
    assert not runs_hami_device_plugin({"xpupool.io/devices": "{}"})
    assert not runs_hami_device_plugin({})


# ---------------------------------------------------------------------- the protocol
class FakeNodes:
    """Nodes with a resourceVersion that every write bumps; a guarded write to an older version
    is a conflict. ``on_get`` runs after each read (another writer stepping in between)."""

    def __init__(self, annotations: Mapping[str, str] | None = None) -> None:
        self.annotations: dict[str, str] = dict(HAMI_NODE if annotations is None else annotations)
        self.version = 1
        self.gone: set[tuple[str, str]] = set()
        self.gets = 0
        self.patches: list[dict[str, str | None]] = []
        self.on_get: Any = None
        self.lock = threading.Lock()

    def get_node(self, name: str) -> dict[str, Any]:
        with self.lock:
            self.gets += 1
            node = {
                "metadata": {
                    "name": name,
                    "resourceVersion": str(self.version),
                    "annotations": dict(self.annotations),
                }
            }
        if self.on_get is not None:
            self.on_get(self)
        return node

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: Mapping[str, str | None]
    ) -> None:
        with self.lock:
            if resource_version != str(self.version):
                raise NodeConflictError(f"node {name}: 409 Conflict")
            self.patches.append(dict(annotations))
            for key, value in annotations.items():
                if value is None:
                    self.annotations.pop(key, None)
                else:
                    self.annotations[key] = value
            self.version += 1

    def write(self, key: str, value: str | None) -> None:
        """Another client's unguarded write."""
        self.patch_node_annotations("n", str(self.version), {key: value})

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        return (namespace, name) in self.gone


class Clock:
    """Wall and monotonic time that move only when the lock sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def locks(api: FakeNodes, clock: Clock, mode: LockMode = LockMode.AUTO, **kw: Any) -> NodeLocks:
    return NodeLocks(api, mode, now=clock.now, monotonic=clock.monotonic, sleep=clock.sleep, **kw)


def test_a_free_hami_node_is_locked_in_hamis_format_with_its_resource_version() -> None:
    api, clock = FakeNodes(), Clock()
    assert locks(api, clock).acquire("n", "team-a", "p1") is True
    assert api.annotations[LOCK_KEY] == "2026-11-27T05:10:45Z,team-a,p1"
    assert clock.slept == []


def test_nodes_without_hamis_device_plugin_are_not_locked_in_auto() -> None:
    api, clock = FakeNodes({"xpupool.io/devices": "{}"}), Clock()
    assert locks(api, clock).acquire("n", "ns", "p") is False
    assert api.patches == []
    assert locks(api, clock, LockMode.ON).acquire("n", "ns", "p") is True


def test_off_never_reads_the_node() -> None:
    api, clock = FakeNodes(), Clock()
    assert locks(api, clock, LockMode.OFF).acquire("n", "ns", "p") is False
    assert api.gets == 0


def test_a_bind_waits_for_the_release_then_takes_the_lock() -> None:
    api, clock = FakeNodes(), Clock()
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "first")
    nl = locks(api, clock)

    def device_plugin(nodes: FakeNodes) -> None:  # allocates "first" after ~0.1 s
        if (
            clock.t >= 0.1
            and LOCK_KEY in nodes.annotations
            and "first" in nodes.annotations[LOCK_KEY]
        ):
            nodes.write(LOCK_KEY, None)

    api.on_get = device_plugin
    assert nl.acquire("n", "ns", "second") is True
    assert held_by(api.annotations[LOCK_KEY], "ns", "second")
    assert nl.waits == 1
    assert 0.1 <= clock.t < 0.5
    assert clock.slept[:3] == [0.02, 0.04, 0.08]


def test_a_lock_never_released_refuses_the_bind_when_the_budget_runs_out_writing_nothing() -> None:
    api, clock = FakeNodes(), Clock()
    held = encode_lock(T0, "ns", "first")
    api.annotations[LOCK_KEY] = held
    with pytest.raises(NodeLockBusyError) as err:
        locks(api, clock, wait_s=2.0).acquire("n", "ns", "second")
    assert err.value.node == "n"
    assert err.value.holder == held
    assert clock.t == pytest.approx(2.0)
    assert max(clock.slept) == 0.2
    assert api.patches == []


def test_an_expired_lock_is_taken_over() -> None:
    api, clock = FakeNodes(), Clock()
    clock.t = EXPIRY_S + 1
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "stale")
    nl = locks(api, clock)
    assert nl.acquire("n", "ns", "p") is True
    assert held_by(api.annotations[LOCK_KEY], "ns", "p")
    assert nl.takeovers == 1
    assert clock.slept == []


def test_a_lock_whose_pod_is_gone_is_taken_over() -> None:
    api, clock = FakeNodes(), Clock()
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "deleted")
    api.gone.add(("ns", "deleted"))
    assert locks(api, clock).acquire("n", "ns", "p") is True
    assert held_by(api.annotations[LOCK_KEY], "ns", "p")


def test_the_pods_own_lock_is_kept_not_rewritten() -> None:
    api, clock = FakeNodes(), Clock()
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "p")
    assert locks(api, clock).acquire("n", "ns", "p") is True
    assert api.patches == []


def test_a_conflicting_write_is_read_again() -> None:
    api, clock = FakeNodes(), Clock()
    bumped: list[bool] = []

    def other_writer(nodes: FakeNodes) -> None:  # someone patches the node once, after our read
        if not bumped:
            bumped.append(True)
            nodes.write("other", "x")

    api.on_get = other_writer
    assert locks(api, clock).acquire("n", "ns", "p") is True
    assert api.gets == 2
    assert held_by(api.annotations[LOCK_KEY], "ns", "p")


def test_an_unreadable_lock_refuses_at_once() -> None:
    api, clock = FakeNodes(), Clock()
    api.annotations[LOCK_KEY] = "garbage,x"
    with pytest.raises(RequestError):
        locks(api, clock).acquire("n", "ns", "p")
    assert api.patches == []


def test_release_deletes_only_the_owners_lock() -> None:
    api, clock = FakeNodes(), Clock()
    nl = locks(api, clock)
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "other")
    assert nl.release("n", "ns", "p") is False
    assert LOCK_KEY in api.annotations
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "p")
    assert nl.release("n", "ns", "p") is True
    assert LOCK_KEY not in api.annotations
    assert nl.release("n", "ns", "p") is False  # nothing left to release


def test_a_watched_release_ends_the_wait_before_the_next_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no fake sleep, the pause between two reads is cut short by ``node_changed`` (the
    extender's Node watch): here the poll would be 30 s, the bind goes on at once."""
    monkeypatch.setattr(node_lock, "FIRST_POLL_S", 30.0)
    api = FakeNodes()
    api.annotations[LOCK_KEY] = encode_lock(T0, "ns", "first")
    nl = NodeLocks(api, now=lambda: T0, wait_s=60.0)

    def device_plugin_releases(nodes: FakeNodes) -> None:  # after our first read
        if nodes.gets == 1:
            nodes.write(LOCK_KEY, None)
            nl.node_changed("n")

    api.on_get = device_plugin_releases
    started = time.monotonic()
    assert nl.acquire("n", "ns", "second") is True
    assert api.gets == 2
    assert time.monotonic() - started < 10.0
