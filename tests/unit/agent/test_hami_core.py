"""HAMi-core's library: the start-time check of its path, the env and bind it gives a replica
holding a share of an NVIDIA card, and a real runner's replica reading that env back."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agent_work import device, poll_until, settings, started, work

from xpupool.agent.launch import build_spec
from xpupool.agent.launch.container import ContainerBackend, container_env
from xpupool.agent.launch.hami_core import check_library, holds_share, preload_env
from xpupool.agent.runner import Runner

SHARE = device(1, memory_mib=20480, core_permille=250)


def _lib(tmp_path: Path, mode: int = 0o644) -> Path:
    d = tmp_path / "hami"
    d.mkdir(mode=0o755, exist_ok=True)
    lib = d / "libvgpu.so"
    lib.write_bytes(b"")
    lib.chmod(mode)
    return lib


def test_a_safe_library_is_taken(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    assert check_library(str(lib), owner=os.geteuid()) == lib


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_a_library_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(ValueError, match="writable by group or others"):
        check_library(str(_lib(tmp_path, mode)), owner=os.geteuid())


def test_a_link_a_directory_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    (tmp_path / "link.so").symlink_to(lib)
    with pytest.raises(ValueError, match="not a regular file"):
        check_library(str(tmp_path / "link.so"), owner=os.geteuid())
    with pytest.raises(ValueError, match="not a regular file"):
        check_library(str(lib.parent), owner=os.geteuid())
    with pytest.raises(ValueError, match="No such file"):
        check_library(str(tmp_path / "none.so"), owner=os.geteuid())


def test_a_library_of_another_owner_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not root"):
        check_library(str(_lib(tmp_path)), owner=os.geteuid() + 1)


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    lib.parent.chmod(0o777)
    with pytest.raises(ValueError, match="writable by others"):
        check_library(str(lib), owner=os.geteuid())


def test_a_sticky_directory_like_tmp_is_taken(tmp_path: Path) -> None:
    """With the sticky bit only root or an entry's owner may rename it, and every entry on the
    path is root's: ``/tmp/...`` is safe (CI's own temporary directories live there)."""
    lib = _lib(tmp_path)
    lib.parent.chmod(0o1777)
    assert check_library(str(lib), owner=os.geteuid()) == lib


def test_only_a_share_of_an_nvidia_card_is_preloaded(tmp_path: Path) -> None:
    lib = Path("/opt/hami/libvgpu.so")
    assert holds_share([SHARE])
    assert holds_share([device(0, memory_mib=81920, core_permille=500)])
    assert not holds_share([device(0)])  # a whole card: nothing to limit
    assert not holds_share([device(0, vendor="huawei", memory_mib=100)])
    assert preload_env({"A": "1"}, lib, [device(0)]) == {"A": "1"}
    assert preload_env({"A": "1"}, None, [SHARE]) == {"A": "1"}
    env = preload_env({"LD_PRELOAD": "/job/a.so /job/b.so"}, lib, [SHARE])
    assert env["LD_PRELOAD"] == "/opt/hami/libvgpu.so:/job/a.so:/job/b.so"


def test_spec_env_and_limits_event(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    cfg = settings(tmp_path, hami_core=lib)
    w = work(["true"], devices=[SHARE], env={"LD_PRELOAD": "/job/own.so"})
    spec = build_spec(w, tmp_path / "l.log", cfg)
    assert spec.env["LD_PRELOAD"] == f"{lib}:/job/own.so"
    assert spec.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"
    assert spec.env["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert spec.limits.endswith(f"; device share: hami-core {lib}")
    whole = build_spec(work(["true"], devices=[device(0)]), tmp_path / "l.log", cfg)
    assert "LD_PRELOAD" not in whole.env and "hami-core" not in whole.limits
    assert whole.preload == ""


def test_container_binds_the_library_read_only_at_its_path(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    cfg = settings(tmp_path, runtime="docker", hami_core=lib)
    spec = build_spec(work([], image="busybox", devices=[SHARE]), tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    mounts = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-v"]
    assert f"{lib}:{lib}:ro" in mounts
    assert container_env(spec)["LD_PRELOAD"] == str(lib)
    whole = build_spec(work([], image="busybox", devices=[device(0)]), tmp_path / "l.log", cfg)
    assert not any(str(lib) in a for a in ContainerBackend(cfg).argv(whole))


@pytest.mark.slow
def test_a_real_replica_starts_with_the_library_preloaded(tmp_path: Path) -> None:
    lib = _lib(tmp_path)
    runner = Runner("n1", tmp_path, settings=settings(tmp_path, hami_core=lib))
    code = (
        "import os; print('|'.join(os.environ.get(k, '-') for k in"
        " ('LD_PRELOAD', 'CUDA_DEVICE_MEMORY_LIMIT_0', 'CUDA_DEVICE_SM_LIMIT')), flush=True)"
    )
    rep = started(runner.start(work([sys.executable, "-c", code], devices=[SHARE])), runner)
    poll_until(lambda: runner.replicas[(7, 0)].state != "running", runner)
    assert f"{lib}|20480m|25" in rep.log_path.read_text()
    assert f"hami-core {lib}" in rep.limits


def test_the_agent_refuses_to_start_with_an_unsafe_path(tmp_path: Path) -> None:
    import click

    from xpupool.agent.launch.options import launch_settings

    lib = _lib(tmp_path, 0o666)
    with pytest.raises(click.BadParameter, match="writable by group or others") as caught:
        launch_settings("200000-299999", str(tmp_path / "jobs"), "64Mi", hami_core=str(lib))
    assert caught.value.param_hint == "--hami-core"
    assert "\n" not in caught.value.format_message()
