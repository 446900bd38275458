"""A replica's volumes on the agent (agent/launch/volume_mounts.py): the tenant's own directory
of a per-tenant volume, opened without following a link, and the binds each back end makes.
Real directories; the hostile ones planted as a tenant (or a careless admin) would plant them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agent_work import settings, work

from xpupool.agent.launch import LaunchError, build_spec
from xpupool.agent.launch.bwrap import sandbox_argv
from xpupool.agent.launch.container import ContainerBackend
from xpupool.agent.launch.volume_mounts import env_name, prepare
from xpupool.server.schemas.agent_protocol import VolumeGrant

ROOT = os.geteuid() == 0


def grant(
    path: Path, mount: str = "/data", *, per_tenant: bool = False, ro: bool = False
) -> VolumeGrant:
    return VolumeGrant(
        name="scratch", host_path=str(path), per_tenant=per_tenant, mount_path=mount, read_only=ro
    )


def spec_for(tmp_path: Path, image: str | None = None):  # type: ignore[no-untyped-def]
    cfg = settings(tmp_path, runtime="podman" if image else None)
    return build_spec(work(["true"], image=image, tenant="lab"), tmp_path / "l.log", cfg)


def volume_root(tmp_path: Path) -> Path:
    root = tmp_path / "vol"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    return root


def test_a_per_tenant_volume_gives_the_tenant_its_own_directory(tmp_path: Path) -> None:
    root = volume_root(tmp_path)
    spec = prepare(spec_for(tmp_path), [grant(root, per_tenant=True)], "host")
    mine = root / "lab"
    assert spec.volumes == ((str(mine), "/data", False),)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    assert mine.stat().st_uid == (spec.uid if spec.uid is not None else os.geteuid())
    assert spec.env[env_name("scratch")] == str(mine)  # the host back end: the host path
    assert env_name("my-data.v2") == "XPUPOOL_VOLUME_MY_DATA_V2"


def test_a_link_planted_for_the_tenants_directory_is_refused(tmp_path: Path) -> None:
    root = volume_root(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "lab").symlink_to(outside)
    with pytest.raises(LaunchError, match="not a directory of its own"):
        prepare(spec_for(tmp_path), [grant(root, per_tenant=True)], "host")
    (root / "lab").unlink()
    (root / "lab").write_text("a file")
    with pytest.raises(LaunchError, match="not a directory of its own"):
        prepare(spec_for(tmp_path), [grant(root, per_tenant=True)], "host")


def test_a_volume_others_may_write_is_refused_per_tenant(tmp_path: Path) -> None:
    root = volume_root(tmp_path)
    root.chmod(0o777)
    with pytest.raises(LaunchError, match="others may write"):
        prepare(spec_for(tmp_path), [grant(root, per_tenant=True)], "host")
    assert not (root / "lab").exists()


@pytest.mark.skipif(not ROOT, reason="another uid's directory needs root to make")
def test_another_uids_directory_is_refused(tmp_path: Path) -> None:
    root = volume_root(tmp_path)
    (root / "lab").mkdir()
    os.chown(root / "lab", 54321, 54321)
    with pytest.raises(LaunchError, match="belongs to uid 54321"):
        prepare(spec_for(tmp_path), [grant(root, per_tenant=True)], "host")


def test_a_missing_volume_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="cannot be used"):
        prepare(spec_for(tmp_path), [grant(tmp_path / "nowhere")], "host")


def test_the_back_ends_bind_at_the_asked_path(tmp_path: Path) -> None:
    root = volume_root(tmp_path)
    image = prepare(spec_for(tmp_path, "busybox"), [grant(root, "/data", ro=True)], "container")
    argv = ContainerBackend(settings(tmp_path, runtime="podman")).argv(image)
    assert f"{root}:/data:ro" in argv
    assert image.env[env_name("scratch")] == "/data"
    target = tmp_path / "mnt"
    target.mkdir()
    sandboxed = prepare(spec_for(tmp_path), [grant(root, str(target))], "bwrap")
    bw = sandbox_argv(sandboxed, settings(tmp_path), "bwrap")
    at = bw.index(str(root))
    assert bw[at - 1] == "--bind" and bw[at + 1] == str(target)
    with pytest.raises(LaunchError, match="under bwrap"):
        prepare(spec_for(tmp_path), [grant(root, "/no/such/dir")], "bwrap")


def test_the_model_cache_is_bound_read_write_at_the_runtimes_cache_path(tmp_path: Path) -> None:
    """``xpupool up --model-cache``: the server grants the cache volume at the serving runtime's
    cache path (server/services/model_cache.py); the container binds it there, writable, so
    every replica on the node reads and writes the same weights."""
    root = volume_root(tmp_path)
    cache = "/root/.cache/huggingface"  # not a directory here: a container needs none
    models = VolumeGrant(
        name="models", host_path=str(root), per_tenant=False, mount_path=cache, read_only=False
    )
    spec = prepare(spec_for(tmp_path, "vllm/vllm-openai:v0.8.5"), [models], "container")
    argv = ContainerBackend(settings(tmp_path, runtime="podman")).argv(spec)
    assert argv[argv.index(f"{root}:{cache}") - 1] == "-v"
    assert spec.env[env_name("models")] == cache
