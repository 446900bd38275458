"""NVIDIA MPS per card: one control daemon per (card, tenant uid, caps), started and stopped with
the replicas that use it (``xpupool agent --mps``).

MPS lets several processes share one card with a cap on each client: its pinned device memory
and the share of the card's SMs its kernels run on. The caps are set by the agent through the
control daemon, never left to the job: right after ``nvidia-cuda-mps-control -d`` it sends
``set_default_device_pinned_mem_limit 0 <MiB>M`` and ``set_default_active_thread_percentage
<pct>``, which every server that daemon spawns afterwards applies to each of its clients
(NVIDIA's ``nvidia-cuda-mps-control(1)`` and MPS documentation, "Legacy MPS v2 Interface":
the defaults affect the next server spawned; a server is spawned when the first client
connects, after these calls). A client's own ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` can only lower them (NVIDIA's MPS documentation,
"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": if the control daemon has a lower setting, the client
obeys the daemon's), so a job that sets them higher in its own environment is still held to its
grant. The agent sets them in the client's environment too, to the same values, so the job can
read its caps. The limits are per server, and a server serves one uid; replicas of one tenant
on one card with different grants therefore get a daemon each (the caps are part of the key
and of the directory's name). Setting the privileged defaults needs the control daemon's
``control_privileged`` socket, which only root (the agent) can use: a job cannot change them.

Why one daemon per (card, uid), never one per card for every tenant: an MPS server runs the
work of every client in one GPU context of one uid, so a fatal fault in one client's kernel
ends every other client of that server; one daemon serves one uid's server at a time (another
uid's clients wait for it to empty); and whoever can write the pipe directory can command the
daemon (``quit``). So each key gets its own directory under a root-owned root (0711):
``<root>/<uuid>-<uid>-m<MiB>-t<pct>/`` (0711, root; 0 for no cap), holding ``pipe/`` (0700,
owned by the tenant's uid: only its jobs and root reach the daemon) and ``log/`` (0700, root:
the daemon's own log). The daemon is started by the agent (``nvidia-cuda-mps-control -d`` with
``CUDA_VISIBLE_DEVICES=<uuid>``, so it sees that card only, as its device 0) when the first
replica on the key starts, and stopped (``echo quit | nvidia-cuda-mps-control``) when the last
one ends.

The daemon runs as the agent (root) and writes its sockets into a directory the tenant's uid
owns, as NVIDIA's own setups do with a world-writable ``/tmp/nvidia-mps``; the directory is that
tenant's alone, so what a job plants there reaches only its own daemon. A daemon that answers
there although this agent neither started nor adopted it (a tenant can run one of its own, with
no caps, in a directory it owns) is never used: the replica is refused, saying so.

After an agent restart, a daemon that answers for a key's pipe directory (``get_server_list``)
is adopted, never killed: the replicas that re-attach keep using it, and it is stopped when the
last of them ends. One that no re-attached replica uses is left running and logged (its
clients, if any, are not the agent's to end): the operator decides.

Only a replica with a share of one NVIDIA card, running a command (not an image), uses MPS: a
process has one pipe directory, so shares of two cards cannot be served by two daemons, and a
container would need the host's IPC namespace. The limits event says when MPS was not applied.
"""

from __future__ import annotations

import logging
import os
import re
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

Key = tuple[str, int, int, int]  # (card uuid, tenant uid, memory cap MiB, SM cap %; 0: none)
_DIR = re.compile(r"^(?P<uuid>.+)-(?P<uid>\d+)-m(?P<mib>\d+)-t(?P<pct>\d+)$")
_OLDER_DIR = re.compile(r"^(?P<uuid>.+)-(?P<uid>\d+)$")  # an older agent's: (card, uid) alone
UNKNOWN_CAP = -1
"""The caps of a daemon an older agent started under ``<uuid>-<uid>/`` (they came from its
clients then): such a daemon is adopted with the replicas that use it and quits with the last,
but no new replica is given it."""


@dataclass(slots=True)
class Daemon:
    """One control daemon, the caps it gives its clients (0: none), and the runs (slugs) that
    use it."""

    uuid: str
    uid: int
    memory_mib: int
    thread_pct: int
    pipe: Path
    log_dir: Path
    users: set[str] = field(default_factory=set)
    adopted: bool = False


def mps_root(job_root: Path) -> Path:
    """Where the daemons' directories go: beside the job root (``<job root>-mps``), not in it
    (its entries are replicas' working directories) nor in the agent's private work dir (a
    tenant's uid must reach its pipe directory)."""
    return job_root.with_name(job_root.name + "-mps")


def caps(device: DeviceAssignment) -> tuple[int, int]:
    """(pinned device memory MiB, active thread %) a share is capped at; 0 for a dimension
    granted whole (no cap)."""
    memory = device.memory_mib if 0 < device.memory_mib < device.card_memory_mib else 0
    threads = max(1, device.core_permille // 10) if 0 < device.core_permille < 1000 else 0
    return memory, threads


def mps_env(device: DeviceAssignment, pipe: Path) -> dict[str, str]:
    """A client's variables: its pipe directory and its caps on the card, which it sees as
    index 0 (the daemon sees that card only); a whole dimension gets no cap. The caps that
    hold are the daemon's (:meth:`MpsDaemons.attach`): these only let the job read them."""
    env = {PIPE: str(pipe), "CUDA_VISIBLE_DEVICES": device.uuid}
    memory, threads = caps(device)
    if memory:
        env[MEMORY_LIMIT] = f"0={memory}M"
    if threads:
        env[THREADS] = str(threads)
    return env


def cap_commands(memory_mib: int, thread_pct: int) -> list[str]:
    """The control daemon's commands that set a server's caps on its clients (module
    docstring); none for a dimension without a cap."""
    out = []
    if memory_mib:
        out.append(f"set_default_device_pinned_mem_limit 0 {memory_mib}M")
    if thread_pct:
        out.append(f"set_default_active_thread_percentage {thread_pct}")
    return out


class MpsDaemons:
    """The daemons of one agent: ``root`` holds their directories; ``control`` is the
    program (found on ``path``)."""

    def __init__(self, root: Path, path: str = DEFAULT_PATH, control: str = CONTROL) -> None:
        self.root = root
        self.path = path
        self.control = control
        self.daemons: dict[Key, Daemon] = {}

    # ------------------------------------------------------------------ directories
    def _dirs(self, key: Key) -> tuple[Path, Path]:
        """The key's pipe and log directories, made (or made right) with their owners and
        modes; raises LaunchError when they cannot be."""
        uuid, uid, memory, threads = key
        top = self.root / f"{uuid}-{uid}-m{memory}-t{threads}"
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
        d = self._daemon((device.uuid, uid, *caps(device)))
        if not d.users and not d.adopted:
            self._start(d)
        d.users.add(spec.slug)
        env = {**spec.env, **mps_env(device, d.pipe)}
        return replace(spec, env=env, limits=spec.limits + f"; device share: mps {d.pipe}")

    def _start(self, d: Daemon) -> None:
        """Start ``d``'s daemon and set its caps before any client can reach it; raises
        LaunchError, leaving no daemon running, when either fails or when some daemon this
        agent did not start already answers there (it would hold the job to no cap)."""
        if self.answers(d):
            raise LaunchError(
                f"an MPS control daemon this agent did not start answers on {d.pipe}; stop it"
                f" with 'echo quit | CUDA_MPS_PIPE_DIRECTORY={d.pipe} {self.control}'"
            )
        done = self._call(d, ["-d"], None)
        if done.returncode != 0:
            raise LaunchError(
                f"the MPS control daemon for card {d.uuid} did not start: {_last_line(done)}"
            )
        for command in cap_commands(d.memory_mib, d.thread_pct):
            done = self._call(d, [], command + "\n")
            if done.returncode != 0:
                self._call(d, [], "quit\n")
                raise LaunchError(
                    f"the MPS control daemon for card {d.uuid} refused '{command}':"
                    f" {_last_line(done)}"
                )
        log.info(
            "MPS daemon started for card %s, uid %d, caps %d MiB %d%% (%s)",
            d.uuid,
            d.uid,
            d.memory_mib,
            d.thread_pct,
            d.pipe,
        )

    def detach(self, slug: str) -> None:
        """``slug`` ended: a daemon it was the last user of is told to quit."""
        for key, d in list(self.daemons.items()):
            if slug not in d.users:
                continue
            d.users.discard(slug)
            if not d.users:
                done = self._call(d, [], "quit\n")
                del self.daemons[key]
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
            for key, d in self._keys_on_disk():
                if str(d.pipe) == pipe:
                    held = self.daemons.setdefault(key, d)
                    held.users.add(spec.slug)
                    held.adopted = True
        for key, d in self._keys_on_disk():
            if key in self.daemons or not self.answers(d):
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

    def _daemon(self, key: Key) -> Daemon:
        d = self.daemons.get(key)
        if d is None:
            pipe, logs = self._dirs(key)
            d = self.daemons[key] = Daemon(*key, pipe, logs)
        return d

    def _keys_on_disk(self) -> list[tuple[Key, Daemon]]:
        out: list[tuple[Key, Daemon]] = []
        if not self.root.is_dir():
            return out
        for top in sorted(self.root.iterdir()):
            if not (top / "pipe").is_dir():
                continue
            m = _DIR.match(top.name)
            if m is not None:
                key = (m["uuid"], int(m["uid"]), int(m["mib"]), int(m["pct"]))
            elif (old := _OLDER_DIR.match(top.name)) is not None:
                key = (old["uuid"], int(old["uid"]), UNKNOWN_CAP, UNKNOWN_CAP)
            else:
                continue
            out.append((key, Daemon(*key, top / "pipe", top / "log")))
        return out


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    said = (done.stderr or done.stdout).strip().splitlines()
    return said[-1] if said else f"exit {done.returncode}"


def _own(path: Path, mode: int, uid: int) -> None:
    """``path`` with ``mode`` and owned by ``uid`` (and its group, as a job's gid is its uid);
    an agent that is not root keeps its own uid (every job runs as it then)."""
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
