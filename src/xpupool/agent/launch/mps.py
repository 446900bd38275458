"""NVIDIA MPS per card: one control daemon per (card, tenant uid), started and stopped with the
replicas that use it (``xpupool agent --mps``).

MPS lets several processes share one card with a cap on each: a client's
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``<index>=<MiB>M``) bounds its device memory and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` the share of the card's SMs its kernels run on. A client
reaches its daemon through ``CUDA_MPS_PIPE_DIRECTORY``.

Why one daemon per (card, uid), never one per card for every tenant: an MPS server runs the
work of every client in one GPU context of one uid, so a fatal fault in one client's kernel
ends every other client of that server; one daemon serves one uid's server at a time (another
uid's clients wait for it to empty); and whoever can write the pipe directory can command the
daemon (``quit``, other limits). So each pair gets its own directory under a root-owned root
(0711): ``<root>/<uuid>-<uid>/`` (0711, root), holding ``pipe/`` (0700, owned by the tenant's
uid: only its jobs and root reach the daemon) and ``log/`` (0700, root: the daemon's own log).
The daemon is started by the agent (``nvidia-cuda-mps-control -d`` with
``CUDA_VISIBLE_DEVICES=<uuid>``, so it sees that card only) when the first replica on the pair
starts, and stopped (``echo quit | nvidia-cuda-mps-control``) when the last one ends.

The daemon runs as the agent (root) and writes its sockets into a directory the tenant's uid
owns, as NVIDIA's own setups do with a world-writable ``/tmp/nvidia-mps``; the directory is that
tenant's alone, so what a job plants there reaches only its own daemon.

The limits come from the job's environment, which a job may change: MPS shares a card fairly
between cooperating jobs; the share watch (:mod:`xpupool.agent.share_watch`) still stops one
that takes more than its grant.

After an agent restart, a daemon that answers for a pair's pipe directory
(``get_server_list``) is adopted, never killed: the replicas that re-attach keep using it, and it
is stopped when the last of them ends. One that no re-attached replica uses is left running and
logged (its clients, if any, are not the agent's to end): the operator decides.

Only a replica with a share of one NVIDIA card, running a command (not an image), uses MPS: a
process has one pipe directory, so shares of two cards cannot be served by two daemons, and a
container would need the host's IPC namespace. The limits event says when MPS was not applied.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from xpupool.agent.launch.hami_core import holds_share
from xpupool.agent.launch.spec import DEFAULT_PATH, LaunchError, LaunchSpec
from xpupool.server.schemas.agent_protocol import DeviceAssignment

log = logging.getLogger("xpupool.agent")

CONTROL = "nvidia-cuda-mps-control"
PIPE = "CUDA_MPS_PIPE_DIRECTORY"
LOG = "CUDA_MPS_LOG_DIRECTORY"
MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CALL_TIMEOUT_S = 10.0

Pair = tuple[str, int]  # (card uuid, tenant uid)


@dataclass(slots=True)
class Daemon:
    """One control daemon and the runs (slugs) that use it."""

    uuid: str
    uid: int
    pipe: Path
    log_dir: Path
    users: set[str] = field(default_factory=set)
    adopted: bool = False


def mps_root(job_root: Path) -> Path:
    """Where the daemons' directories go: beside the job root (``<job root>-mps``), not in it
    (its entries are replicas' working directories) nor in the agent's private work dir (a
    tenant's uid must reach its pipe directory)."""
    return job_root.with_name(job_root.name + "-mps")


def mps_env(device: DeviceAssignment, pipe: Path) -> dict[str, str]:
    """A client's variables: its pipe directory and its caps on the card, which it sees as
    index 0 (the daemon sees that card only); a whole dimension gets no cap."""
    env = {PIPE: str(pipe), "CUDA_VISIBLE_DEVICES": device.uuid}
    if 0 < device.memory_mib < device.card_memory_mib:
        env[MEMORY_LIMIT] = f"0={device.memory_mib}M"
    if 0 < device.core_permille < 1000:
        env[THREADS] = str(max(1, device.core_permille // 10))
    return env


class MpsDaemons:
    """The daemons of one agent: ``root`` holds their directories; ``control`` is the
    program (found on ``path``)."""

    def __init__(self, root: Path, path: str = DEFAULT_PATH, control: str = CONTROL) -> None:
        self.root = root
        self.path = path
        self.control = control
        self.daemons: dict[Pair, Daemon] = {}

    # ------------------------------------------------------------------ directories
    def _dirs(self, uuid: str, uid: int) -> tuple[Path, Path]:
        """The pair's pipe and log directories, made (or made right) with their owners and
        modes; raises LaunchError when they cannot be."""
        top = self.root / f"{uuid}-{uid}"
        pipe, logs = top / "pipe", top / "log"
        try:
            for d, mode, owner in ((self.root, 0o711, 0), (top, 0o711, 0)):
                d.mkdir(mode=mode, exist_ok=True)
                _own(d, mode, owner)
            pipe.mkdir(mode=0o700, exist_ok=True)
            _own(pipe, 0o700, uid)
            logs.mkdir(mode=0o700, exist_ok=True)
            _own(logs, 0o700, 0)
        except OSError as exc:
            raise LaunchError(f"MPS directories for card {uuid} cannot be made: {exc}") from None
        return pipe, logs

    def _env(self, d: Daemon) -> dict[str, str]:
        return {
            "PATH": self.path,
            "CUDA_VISIBLE_DEVICES": d.uuid,
            PIPE: str(d.pipe),
            LOG: str(d.log_dir),
        }

    def _call(
        self, d: Daemon, args: list[str], stdin: str | None
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.control, *args],
                input=stdin,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=self._env(d),
                timeout=CALL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return subprocess.CompletedProcess([self.control, *args], 127, "", str(exc))

    def answers(self, d: Daemon) -> bool:
        """Whether a daemon answers on ``d``'s pipe directory."""
        return self._call(d, [], "get_server_list\n").returncode == 0

    # ------------------------------------------------------------------ replicas
    def attach(self, spec: LaunchSpec) -> LaunchSpec:
        """``spec`` with its MPS variables and its daemon running, when it holds a share of one
        NVIDIA card and runs a command; else unchanged, the limits event saying why where MPS
        could have applied. Raises LaunchError when the daemon does not start."""
        shared = [d for d in spec.devices if d.vendor == "nvidia" and holds_share([d])]
        if not shared:
            return spec
        if spec.image is not None or len(shared) > 1:
            why = "an image replica" if spec.image is not None else f"shares of {len(shared)} cards"
            return replace(spec, limits=spec.limits + f"; mps: not applied ({why})")
        device = shared[0]
        uid = os.geteuid() if spec.uid is None else spec.uid
        d = self._daemon(device.uuid, uid)
        if not d.users and not d.adopted and not self.answers(d):
            done = self._call(d, ["-d"], None)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip().splitlines()
                last = said[-1] if said else f"exit {done.returncode}"
                raise LaunchError(
                    f"the MPS control daemon for card {device.uuid} did not start: {last}"
                )
            log.info("MPS daemon started for card %s, uid %d (%s)", device.uuid, uid, d.pipe)
        d.users.add(spec.slug)
        env = {**spec.env, **mps_env(device, d.pipe)}
        return replace(spec, env=env, limits=spec.limits + f"; device share: mps {d.pipe}")

    def detach(self, slug: str) -> None:
        """``slug`` ended: a daemon it was the last user of is told to quit."""
        for pair, d in list(self.daemons.items()):
            if slug not in d.users:
                continue
            d.users.discard(slug)
            if not d.users:
                done = self._call(d, [], "quit\n")
                del self.daemons[pair]
                log.info(
                    "MPS daemon for card %s, uid %d: quit (exit %d)", d.uuid, d.uid, done.returncode
                )

    def adopt(self, specs: Iterable[LaunchSpec]) -> None:
        """After a restart: the daemons the re-attached runs (``specs``) use are taken back with
        them; any other daemon answering under the root is logged and left running."""
        for spec in specs:
            pipe = spec.env.get(PIPE)
            if not pipe:
                continue
            for pair, d in self._pairs_on_disk():
                if str(d.pipe) == pipe:
                    held = self.daemons.setdefault(pair, d)
                    held.users.add(spec.slug)
                    held.adopted = True
        for pair, d in self._pairs_on_disk():
            if pair in self.daemons or not self.answers(d):
                continue
            log.warning(
                "MPS daemon for card %s, uid %d (%s) runs with no replica of this agent: left"
                " running; stop it with 'echo quit | CUDA_MPS_PIPE_DIRECTORY=%s %s'",
                d.uuid,
                d.uid,
                d.pipe,
                d.pipe,
                self.control,
            )

    def _daemon(self, uuid: str, uid: int) -> Daemon:
        d = self.daemons.get((uuid, uid))
        if d is None:
            pipe, logs = self._dirs(uuid, uid)
            d = self.daemons[(uuid, uid)] = Daemon(uuid, uid, pipe, logs)
        return d

    def _pairs_on_disk(self) -> list[tuple[Pair, Daemon]]:
        out: list[tuple[Pair, Daemon]] = []
        if not self.root.is_dir():
            return out
        for top in sorted(self.root.iterdir()):
            uuid, _, uid = top.name.rpartition("-")
            if uuid and uid.isdigit() and (top / "pipe").is_dir():
                out.append(((uuid, int(uid)), Daemon(uuid, int(uid), top / "pipe", top / "log")))
        return out


def _own(path: Path, mode: int, uid: int) -> None:
    """``path`` with ``mode`` and owned by ``uid`` (and its group, as a job's gid is its uid);
    an agent that is not root keeps its own uid (every job runs as it then)."""
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
