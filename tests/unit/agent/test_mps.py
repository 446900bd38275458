"""MPS per (card, tenant uid, caps) against a fake ``nvidia-cuda-mps-control`` (fake_mps.py): the
daemon's argv, env, directories and the caps the agent sets on it (which a job's own variables
cannot raise), one daemon per key, its stop after the last replica, and adoption after an agent
restart; then a real runner's replica reading its MPS env back."""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import fake_mps
import pytest
from agent_work import device, poll_until, settings, started, work

from xpupool.agent.launch import LaunchSpec, build_spec
from xpupool.agent.launch.identity import UidRange
from xpupool.agent.launch.mps import MpsDaemons, mps_root
from xpupool.agent.runner import Runner

SHARE = device(1, memory_mib=20480, core_permille=250)
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="owners of the pipe dirs need root")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Path]:
    fake_mps.install(tmp_path)
    yield tmp_path
    fake_mps.kill_all(mps_root(tmp_path / "jobs"))


def _path(where: Path) -> str:
    return f"{where / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _spec(
    tmp_path: Path, tenant_index: int = 0, devices: object = None, **kw: object
) -> LaunchSpec:
    cfg = settings(tmp_path, uid_range=UidRange(200000, 299999))
    w = work(["true"], devices=devices or [SHARE], tenant_index=tenant_index, **kw)  # type: ignore[arg-type]
    return build_spec(w, tmp_path / "l.log", cfg)


def _daemons(where: Path) -> MpsDaemons:
    return MpsDaemons(mps_root(where / "jobs"), _path(where))


def _mode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return stat.S_IMODE(st.st_mode), st.st_uid


def test_first_replica_starts_the_daemon_with_its_card_and_dirs(fake: Path) -> None:
    mps = _daemons(fake)
    spec = mps.attach(_spec(fake))
    root = mps_root(fake / "jobs")
    top = root / "nvidia-1-200000-m20480-t25"
    assert spec.env["CUDA_MPS_PIPE_DIRECTORY"] == str(top / "pipe")
    assert spec.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "nvidia-1"
    assert spec.limits.endswith(f"; device share: mps {top / 'pipe'}")
    started_ = [c for c in fake_mps.calls(fake) if c["argv"] == ["-d"]]
    assert len(started_) == 1
    env = started_[0]["env"]
    assert isinstance(env, dict)
    assert env["CUDA_VISIBLE_DEVICES"] == "nvidia-1"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(top / "pipe")
    assert env["CUDA_MPS_LOG_DIRECTORY"] == str(top / "log")
    assert _mode(root) == (0o711, 0) and _mode(top) == (0o711, 0)
    assert _mode(top / "pipe") == (0o700, 200000)
    assert _mode(top / "log") == (0o700, 0)
    assert len(fake_mps.live_daemons(root)) == 1


def test_a_job_that_raises_its_caps_in_its_own_env_is_held_to_its_grant(fake: Path) -> None:
    """The caps are the control daemon's, set by the agent before any client: a job that sets
    the client variables higher itself (in its script, before CUDA starts) gets its grant."""
    mps = _daemons(fake)
    spec = mps.attach(_spec(fake))
    own = {
        **spec.env,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=81920M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
    }
    assert fake_mps.client_caps(own) == (20480, 25)
    assert fake_mps.client_caps(spec.env) == (20480, 25)
    said = [(c["argv"], c["input"]) for c in fake_mps.calls(fake)]
    start = said.index((["-d"], ""))
    assert said[start + 1 :] == [
        ([], "set_default_device_pinned_mem_limit 0 20480M"),
        ([], "set_default_active_thread_percentage 25"),
    ]


def test_one_tenants_shares_with_other_caps_get_a_daemon_each(fake: Path) -> None:
    mps = _daemons(fake)
    small = mps.attach(_spec(fake))
    big = mps.attach(_spec(fake, replica=1, devices=[device(1, memory_mib=40960)]))
    assert small.env["CUDA_MPS_PIPE_DIRECTORY"] != big.env["CUDA_MPS_PIPE_DIRECTORY"]
    assert fake_mps.client_caps(small.env) == (20480, 25)
    assert fake_mps.client_caps(big.env) == (40960, None)  # all of the SMs: no cap


def test_a_daemon_the_agent_did_not_start_is_never_used(fake: Path) -> None:
    """A tenant owns its pipe directory and may run a daemon of its own there, with no caps:
    the next replica is refused rather than attached to it."""
    from xpupool.agent.launch import LaunchError

    first = _daemons(fake)
    spec = first.attach(_spec(fake))
    again = _daemons(fake)  # no adopt: nothing tells it that daemon is the agent's
    with pytest.raises(LaunchError, match="did not start answers on"):
        again.attach(_spec(fake, replica=1))
    first.detach(spec.slug)


def test_a_cap_the_daemon_refuses_refuses_the_replica_and_stops_it(fake: Path) -> None:
    from xpupool.agent.launch import LaunchError

    script = fake / "bin" / "nvidia-cuda-mps-control"
    script.write_text(
        script.read_text().replace(
            'elif words[:1] in (["set_default_device_pinned_mem_limit"]',
            'elif words[:1] == ["set_default_device_pinned_mem_limit"]:\n'
            '    print("Command not supported", file=sys.stderr); sys.exit(1)\n'
            'elif words[:1] in (["set_default_device_pinned_mem_limit"]',
        )
    )
    mps = _daemons(fake)
    with pytest.raises(LaunchError, match="refused 'set_default_device_pinned_mem_limit"):
        mps.attach(_spec(fake))
    assert fake_mps.live_daemons(mps_root(fake / "jobs")) == []


def test_one_daemon_per_card_and_uid_stopped_after_its_last_replica(fake: Path) -> None:
    mps = _daemons(fake)
    root = mps_root(fake / "jobs")
    a = mps.attach(_spec(fake))
    b = mps.attach(_spec(fake, replica=1))
    other_tenant = mps.attach(_spec(fake, tenant_index=1))
    other_card = mps.attach(_spec(fake, devices=[device(2, memory_mib=1024)]))
    assert a.env["CUDA_MPS_PIPE_DIRECTORY"] == b.env["CUDA_MPS_PIPE_DIRECTORY"]
    pipes = {s.env["CUDA_MPS_PIPE_DIRECTORY"] for s in (a, other_tenant, other_card)}
    assert len(pipes) == 3
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in other_card.env  # all of the SMs granted
    assert len(fake_mps.live_daemons(root)) == 3
    mps.detach(a.slug)
    assert len(fake_mps.live_daemons(root)) == 3  # b still uses it
    mps.detach(b.slug)
    assert len(fake_mps.live_daemons(root)) == 2
    quits = [c for c in fake_mps.calls(fake) if c["argv"] == [] and c["env"]]
    assert quits  # 'echo quit | nvidia-cuda-mps-control' on that pipe dir
    mps.detach(other_tenant.slug)
    mps.detach(other_card.slug)
    assert fake_mps.live_daemons(root) == []


def test_whole_cards_images_and_two_cards_get_no_daemon(fake: Path) -> None:
    mps = _daemons(fake)
    whole = _spec(fake, devices=[device(0)])
    assert mps.attach(whole) == whole
    two = mps.attach(_spec(fake, devices=[SHARE, device(2, memory_mib=1024)]))
    assert "CUDA_MPS_PIPE_DIRECTORY" not in two.env
    assert two.limits.endswith("; mps: not applied (shares of 2 cards)")
    assert fake_mps.calls(fake) == []


def test_after_a_restart_a_running_daemon_is_adopted_never_killed(
    fake: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _daemons(fake)
    root = mps_root(fake / "jobs")
    kept = first.attach(_spec(fake))
    orphan = first.attach(_spec(fake, tenant_index=3))
    pids = fake_mps.live_daemons(root)
    assert len(pids) == 2
    again = _daemons(fake)  # the agent started again: the first one's memory is gone
    with caplog.at_level(logging.WARNING, logger="xpupool.agent"):
        again.adopt([kept])
    assert sorted(fake_mps.live_daemons(root)) == sorted(pids)  # none killed
    assert "runs with no replica of this agent: left running" in caplog.text
    assert str(orphan.env["CUDA_MPS_PIPE_DIRECTORY"]) in caplog.text
    # a new replica on the adopted pair uses it; no second daemon
    before = len([c for c in fake_mps.calls(fake) if c["argv"] == ["-d"]])
    more = again.attach(_spec(fake, replica=2))
    assert more.env["CUDA_MPS_PIPE_DIRECTORY"] == kept.env["CUDA_MPS_PIPE_DIRECTORY"]
    assert len([c for c in fake_mps.calls(fake) if c["argv"] == ["-d"]]) == before
    again.detach(kept.slug)
    again.detach(more.slug)
    assert len(fake_mps.live_daemons(root)) == 1  # the orphan: the operator's to stop


def test_a_daemon_that_does_not_start_refuses_the_replica(tmp_path: Path) -> None:
    from xpupool.agent.launch import LaunchError

    mps = MpsDaemons(mps_root(tmp_path / "jobs"), str(tmp_path / "empty"))
    with pytest.raises(LaunchError, match="MPS control daemon for card nvidia-1 did not start"):
        mps.attach(_spec(tmp_path))


@pytest.mark.slow
def test_a_real_replica_gets_its_daemon_and_it_quits_after(fake: Path) -> None:
    root = mps_root(fake / "jobs")
    runner = Runner("n1", fake, settings=settings(fake, mps=True, base_path=_path(fake)))
    code = (
        "import os; print('|'.join(os.environ.get(k, '-') for k in ('CUDA_MPS_PIPE_DIRECTORY',"
        " 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')), flush=True)"
    )
    rep = started(runner.start(work([sys.executable, "-c", code], devices=[SHARE])), runner)
    assert len(fake_mps.live_daemons(root)) == 1
    poll_until(lambda: runner.replicas[(7, 0)].state != "running", runner)
    pipe = root / f"nvidia-1-{os.geteuid()}-m20480-t25" / "pipe"
    assert f"{pipe}|0=20480M|25" in rep.log_path.read_text()
    assert f"mps {pipe}" in rep.limits
    runner.ship_logs(lambda *_: None)
    runner.acknowledge(runner.reports())  # the replica is over: its daemon's last user gone
    assert fake_mps.live_daemons(root) == []


def test_an_older_agents_daemons_are_adopted_with_their_replicas_and_quit_with_the_last(
    fake: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent before caps were the daemon's named its directories ``<uuid>-<uid>/``: after an
    upgrade, the daemon of a replica that re-attaches is taken back and told to quit when that
    replica ends; one no replica uses is logged and left running, as any orphan is."""
    from dataclasses import replace

    root = mps_root(fake / "jobs")
    older = _daemons(fake)
    kept, orphan = older.attach(_spec(fake)), older.attach(_spec(fake, tenant_index=3))
    renamed = {}
    for spec in (kept, orphan):  # as the older agent named them
        pipe = Path(spec.env["CUDA_MPS_PIPE_DIRECTORY"])
        top = pipe.parent
        old_top = top.with_name(top.name.rsplit("-m", 1)[0])
        top.rename(old_top)
        renamed[spec.slug] = replace(
            spec, env={**spec.env, "CUDA_MPS_PIPE_DIRECTORY": str(old_top / "pipe")}
        )
    assert len(fake_mps.live_daemons(root)) == 2
    upgraded = _daemons(fake)
    with caplog.at_level(logging.WARNING, logger="xpupool.agent"):
        upgraded.adopt([renamed[kept.slug]])
    assert renamed[orphan.slug].env["CUDA_MPS_PIPE_DIRECTORY"] in caplog.text
    assert renamed[kept.slug].env["CUDA_MPS_PIPE_DIRECTORY"] not in caplog.text
    new = upgraded.attach(_spec(fake, replica=2))  # a new replica: never the older daemon
    assert new.env["CUDA_MPS_PIPE_DIRECTORY"] != renamed[kept.slug].env["CUDA_MPS_PIPE_DIRECTORY"]
    upgraded.detach(kept.slug)
    upgraded.detach(new.slug)
    assert len(fake_mps.live_daemons(root)) == 1  # the orphan: the operator's to stop
