"""The elector's pure parts: MicroTime's wire form and the timing rule client-go enforces."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from xpupool.k8s.informers.kubeconfig import load_config
from xpupool.k8s.informers.leader import LeaderElector, micro_time


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    at = datetime(2026, 11, 27, 6, 5, 4, 3, tzinfo=timezone(timedelta(hours=2)))
    assert micro_time(at) == "2026-11-27T04:05:04.000003Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro_time(datetime.now(UTC)))


def test_timings_must_leave_room_to_renew(tmp_path: Path) -> None:
    conf = tmp_path / "kubeconfig"
    conf.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
        ' "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}],'
        ' "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}'
    )
    config = load_config(conf)
    with pytest.raises(ValueError, match="renew_deadline_s"):
        LeaderElector(config, name="l", namespace="ns", identity="a", renew_deadline_s=20)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(config, name="l", namespace="ns", identity="")
    elector = LeaderElector(config, name="l", namespace="ns", identity="a")
    assert not elector.is_leader
    elector.stop()
