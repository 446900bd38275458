"""The host ports an image replica listens on: chosen by the agent from the operator's range.

Under either network policy (``--network bridge``, the default, or ``host``) a replica's port is
a port of the host: under ``bridge`` it is published as ``-p PORT:PORT`` (the same number inside
and out, so what the job is told is what its peers dial), under ``host`` the job binds it itself.
So no two live replicas of this agent ever hold one port: a port held by a live replica is never
handed out again, and a range with none left refuses the replica with the reason (never a
silent reuse).

A gang's master port is the one exception to "chosen here": every replica's environment is built
by the server when the job is placed, before replica 0 has started anywhere, so the server picks
``MASTER_PORT`` from the master node's range (the ``xpupool/ports`` label this agent declares:
:func:`xpupool.server.services.replica_env.master_port`) and replica 0's agent claims exactly that
port (refused, with the reason, if a live replica holds it). Choosing it here would need a round
trip (replica 1 waiting for replica 0's report) for no gain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from xpupool.agent.elastic_size import SIZE_FILE_ENV

DEFAULT_PORTS = "29500-30499"
NETWORKS = ("bridge", "host")


@dataclass(frozen=True, slots=True)
class PortRange:
    """``first``-``last``, both included."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """``LO-HI`` (1024 < LO <= HI < 65536); raises ValueError saying what is wrong."""
        lo, sep, hi = text.strip().partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"{text!r}: expected FIRST-LAST, e.g. {DEFAULT_PORTS}") from None
        if not 1024 <= first <= last <= 65535:
            raise ValueError(f"{text!r}: need 1024 <= FIRST <= LAST <= 65535")
        return cls(first, last)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def replica_ports(env: Mapping[str, str], ports: PortRange, held: Iterable[int]) -> tuple[int, ...]:
    """The port for a replica whose environment is ``env``, none of ``held`` (the ports of this
    agent's live replicas): a gang's replica 0 claims ``MASTER_PORT``, any other the lowest free
    port of ``ports``. An elastic job's replica 0 (its environment names a size file) claims it
    too while it runs alone: the replicas it grows join the rendezvous it hosts there (torchrun's
    elastic mode, docs/jobs.md). Raises ValueError with the reason when it cannot have one (the
    spec makes it the replica's LaunchError)."""
    taken = set(held)
    master = env.get("MASTER_PORT", "")
    peers = env.get("WORLD_SIZE", "1") != "1" or SIZE_FILE_ENV in env
    if env.get("RANK") == "0" and peers and master.isdigit():
        port = int(master)
        if port in taken:
            raise ValueError(
                f"MASTER_PORT {port} is held by another live replica on this node; not reused"
            )
        return (port,)
    for port in range(ports.first, ports.last + 1):
        if port not in taken:
            return (port,)
    raise ValueError(
        f"no free port in this node's range {ports} ({ports.size} held by live replicas);"
        " widen --ports"
    )
