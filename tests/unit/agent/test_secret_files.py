"""A replica's secret files (agent/launch/secret_files.py): where they go, who may read them, what
the spec file carries (names, never values), how the back ends see them, and what is removed.
Real files on this machine's /dev/shm (or the job root where there is none)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from agent_work import settings, work

from xpupool.agent.launch import LaunchError, build_spec, spec_file
from xpupool.agent.launch.bwrap import sandbox_argv
from xpupool.agent.launch.container import ContainerBackend
from xpupool.agent.launch.secret_files import (
    CONTAINER_DIR,
    place,
    place_pull_auth,
    remove,
    remove_leftovers,
    secret_env,
    secrets_root,
)
from xpupool.server.schemas.agent_protocol import SecretGrant

VALUE = b"s3cr3t-value"


def grant(name: str, value: bytes = VALUE, env: str | None = None) -> SecretGrant:
    return SecretGrant(name=name, value_base64=base64.b64encode(value).decode(), env=env)


def test_files_are_the_jobs_alone_and_the_spec_names_no_value(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    root = secrets_root(tmp_path / "work", "n1", cfg.job_root)
    spec = build_spec(work(["true"]), tmp_path / "l.log", cfg)
    placed = place(root, spec, [grant("hf", env="HF"), grant("key", b"\x00\x01")])
    files = Path(placed.secrets_dir)
    assert placed.env["XPUPOOL_SECRETS_DIR"] == str(files)
    assert (files / "hf").read_bytes() == VALUE
    assert stat.S_IMODE((files / "hf").stat().st_mode) == 0o400
    assert stat.S_IMODE(files.stat().st_mode) == 0o500
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert placed.secret_env == (("HF", "hf"),)
    assert secret_env(placed) == {"HF": VALUE.decode()}
    data = spec_file.dumps(spec_file.SpecFile("host", cfg, placed, 1.0))
    assert VALUE not in data and base64.b64encode(VALUE) not in data
    back = spec_file.loads(data).spec
    assert back.secrets_dir == placed.secrets_dir and back.secret_env == placed.secret_env
    remove(root, placed)
    assert not files.exists()


def test_no_secrets_change_nothing(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    spec = build_spec(work(["true"]), tmp_path / "l.log", cfg)
    assert place(tmp_path / "root", spec, []) is spec
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", ".", ".."])
def test_a_name_that_is_a_path_is_refused_and_nothing_stays(tmp_path: Path, name: str) -> None:
    cfg = settings(tmp_path)
    root = tmp_path / "root"
    spec = build_spec(work(["true"]), tmp_path / "l.log", cfg)
    with pytest.raises(LaunchError, match="not a file name"):
        place(root, spec, [grant("ok"), grant(name)])
    assert list(root.iterdir()) == []
    assert not (tmp_path / "x").exists()


def test_a_root_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "root"
    root.symlink_to(elsewhere)
    spec = build_spec(work(["true"]), tmp_path / "l.log", cfg)
    with pytest.raises(LaunchError, match="not a directory of the agent's own"):
        place(root, spec, [grant("hf")])
    assert list(elsewhere.iterdir()) == []


def test_a_variable_from_a_binary_secret_is_refused(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    spec = build_spec(work(["true"]), tmp_path / "l.log", cfg)
    placed = place(tmp_path / "root", spec, [grant("bin", b"\xff\xfe", env="BIN")])
    with pytest.raises(LaunchError, match="not text"):
        secret_env(placed)


def test_leftovers_of_other_runs_are_removed(tmp_path: Path) -> None:
    cfg = settings(tmp_path)
    root = tmp_path / "root"
    keep = place(root, build_spec(work(["true"], job_id=1), tmp_path / "a.log", cfg), [grant("a")])
    old = place(root, build_spec(work(["true"], job_id=2), tmp_path / "b.log", cfg), [grant("b")])
    assert remove_leftovers(root, {keep.slug}) == [old.slug]
    assert Path(keep.secrets_dir).exists() and not Path(old.secrets_dir).exists()


def test_two_nodes_of_one_agent_never_share_a_root(tmp_path: Path) -> None:
    assert secrets_root(tmp_path, "a", tmp_path) != secrets_root(tmp_path, "b", tmp_path)


def test_the_back_ends_see_them_read_only(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="podman")
    spec = build_spec(work(["sh"], image="busybox"), tmp_path / "l.log", cfg)
    placed = place(tmp_path / "root", spec, [grant("hf", env="HF")])
    assert placed.env["XPUPOOL_SECRETS_DIR"] == CONTAINER_DIR
    argv = ContainerBackend(cfg).argv(placed)
    assert f"{placed.secrets_dir}:{CONTAINER_DIR}:ro" in argv
    env_files = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--env-file"]
    assert len(env_files) == 2 and env_files[1].startswith(str(tmp_path / "root"))
    host = build_spec(work(["true"]), tmp_path / "h.log", settings(tmp_path))
    host = place(tmp_path / "root", host, [grant("hf")])
    bw = sandbox_argv(host, settings(tmp_path), "bwrap")
    at = bw.index(host.secrets_dir)
    assert bw[at - 1] == "--ro-bind" and bw[at + 1] == host.secrets_dir
    assert os.path.isdir(host.secrets_dir)


def test_a_pull_secret_is_the_pulls_alone(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="podman")
    root = tmp_path / "root"
    spec = build_spec(work(["sh"], image="busybox"), tmp_path / "l.log", cfg)
    spec = place(root, spec, [grant("hf")])
    auth = b'{"auths": {"registry.example": {"auth": "dTpw"}}}'
    placed = place_pull_auth(root, spec, grant("reg", auth))
    path = Path(placed.pull_auth)
    assert path.read_bytes() == auth and stat.S_IMODE(path.stat().st_mode) == 0o400
    assert path.stat().st_uid == os.geteuid()  # the agent's, never the job's
    assert not path.is_relative_to(Path(placed.secrets_dir))  # not where the job looks
    assert (Path(placed.secrets_dir) / "hf").exists()  # the job's own secrets stay
    data = spec_file.dumps(spec_file.SpecFile("container", cfg, placed, 1.0))
    assert b"dTpw" not in data and spec_file.loads(data).spec.pull_auth == str(path)
    with pytest.raises(LaunchError, match="not a registry auth file"):
        place_pull_auth(root, spec, grant("bad", b"user:password"))
    assert place_pull_auth(root, spec, None) is spec
