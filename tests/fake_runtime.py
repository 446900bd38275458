"""A stand-in for ``docker``/``podman`` on a machine with no container engine (this one has only
the docker client), put first on PATH by the tests that run image jobs.

It answers ``info`` as the real ones do (exit 0; docker's SystemInfo JSON with a server version and
``CDISpecDirs``, or podman's ``{"version": {"Version": ...}}``), records every argv it is given as
one JSON line in ``argv.log`` next to itself (the engine's own options before the verb, as the
agent's runtime configuration puts them there, are skipped), and for ``run`` runs the command after the image
locally, with the environment of ``--env-file``/``-e`` and in ``--workdir``, by exec (so its pid is
the container's, and ``kill --signal`` by name reaches it through a pid file). ``rm -f`` kills
what is left. It does not switch users, apply limits or pass devices: the tests read those from
the recorded argv. ``run`` of an image without a command prints one line and exits 0, as an image
whose entry point only says hello would.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, signal, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = Path(__file__).name
STATE = HERE / "state"
CDI = CDI_VALUE
VALUED = {"--name", "--user", "-u", "--env-file", "-e", "--env", "-v", "--volume", "--workdir",
          "-w", "--cpus", "--memory", "-m", "--device", "--gpus", "--label", "-l",
          "--security-opt", "--network", "--entrypoint", "--signal", "-s", "--format", "-f",
          "--pids-limit", "--ulimit", "--filter", "--runtime", "--cgroup-manager", "-p",
          "--publish", "--shm-size", "--add-host", "--ipc", "--cidfile"}

args = sys.argv[1:]
with open(HERE / "argv.log", "a") as f:
    f.write(json.dumps([NAME, *args]) + "\n")
STATE.mkdir(exist_ok=True)


def options(rest):
    opts, i = [], 0
    while i < len(rest) and rest[i].startswith("-"):
        key = rest[i]
        if key == "--":  # the end of the options: the image follows
            i += 1
            break
        if "=" in key:
            key, value = key.split("=", 1)
            opts.append((key, value))
            i += 1
        elif key in VALUED:
            opts.append((key, rest[i + 1]))
            i += 2
        else:
            opts.append((key, ""))
            i += 1
    return opts, rest[i:]


_, args = options(args)  # the engine's own options before the verb (--runtime, --cgroup-manager)
if not args:
    sys.exit(0)
verb, rest = args[0], args[1:]
if verb == "info":
    if NAME == "podman":
        print(json.dumps({"host": {"arch": "amd64"}, "version": {"Version": "5.2.1"}}))
    else:
        dirs = ["/etc/cdi", "/var/run/cdi"] if CDI else None
        print(json.dumps({"ServerVersion": "27.3.1", "CDISpecDirs": dirs, "NCPU": 2}))
    sys.exit(0)
if verb == "run":
    opts, tail = options(rest)
    image, command = tail[0], tail[1:]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    name, workdir = None, None
    for key, value in opts:
        if key == "--env-file":
            for line in Path(value).read_text().splitlines():
                if line and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    env[k] = v
        elif key in ("-e", "--env"):
            k, sep, v = value.partition("=")
            env[k] = v if sep else os.environ.get(k, "")
        elif key == "--name":
            name = value
        elif key == "--cidfile":  # the container's id, as docker and podman write it
            Path(value).write_text(os.urandom(32).hex())
        elif key in ("--workdir", "-w"):
            workdir = value
    if name:
        (STATE / f"{name}.pid").write_text(str(os.getpid()))
    if workdir:
        os.chdir(workdir)
    if not command:
        print(f"{image}: hello from the image's entry point", flush=True)
        sys.exit(0)
    os.execvpe(command[0], command, env)
if verb in ("kill", "rm"):
    opts, names = options(rest)
    sig = signal.SIGKILL
    for key, value in opts:
        if key in ("--signal", "-s"):
            sig = getattr(signal, "SIG" + value.upper().removeprefix("SIG"))
    code = 0
    for name in names:
        pidfile = STATE / f"{name}.pid"
        try:
            pid = int(pidfile.read_text())
            os.kill(pid, sig)
        except (FileNotFoundError, ProcessLookupError):
            if verb == "kill":
                sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
                code = 1
        if verb == "rm":
            if not pidfile.exists():
                sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
                code = 1
            pidfile.unlink(missing_ok=True)
    sys.exit(code)
sys.exit(0)
"""


ENGINE_OPTIONS = ("--runtime", "--cgroup-manager")


def install(bin_dir: Path, name: str = "docker", *, cdi: bool = False) -> Path:
    """Write the fake as ``bin_dir/name`` (executable, run by this Python) and return its argv log
    path. Put ``bin_dir`` first on PATH for the process that should find it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    source = SCRIPT.replace("CDI_VALUE", "True" if cdi else "False")
    path.write_text(f"#!{sys.executable}\n{source}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir / "argv.log"


def recorded(log: Path, verb: str | None = None) -> list[list[str]]:
    """Every argv the fake was given (``[name, verb, ...]``), or only those of ``verb``."""
    if not log.exists():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines() if line]
    return [c for c in calls if verb is None or _verb(c) == verb]


def _verb(call: list[str]) -> str | None:
    """The verb of a recorded call, after the engine's own options (``--runtime runc``)."""
    i = 1
    while i < len(call) and call[i] in ENGINE_OPTIONS:
        i += 2
    return call[i] if i < len(call) else None


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
