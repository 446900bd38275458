"""What each replica of a job learns about the others: the variables distributed training reads.

A job's replicas are placed together (gang or not, a job runs whole), so when the first is handed
to an agent every replica's node is known. Each replica gets what ``torchrun`` and PyTorch's
``env://`` rendezvous expect (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), HCCL's names for Ascend jobs (``RANK_SIZE``, ``RANK_ID``), and
``XPUPOOL_PEERS``: every replica's node address in rank order. The first replica's node is the
master. A node's address is what its agent reported (the ``xpupool/address`` label, from
``xpupool agent --address``), 127.0.0.1 for nodes ``xpupool up`` runs itself, else the node's name.
The port is derived from the job id, so two jobs mastered on one node do not collide unless their
ids are 1,000 apart. A variable the job sets in its own ``env`` wins.
"""

from __future__ import annotations

from collections.abc import Mapping

from xpupool.model.allocation import Allocation
from xpupool.server.schemas.agent_protocol import ADDRESS_LABEL

BASE_PORT = 29500
PORTS = 1000


def node_address(name: str, labels: Mapping[str, str], source: str) -> str:
    """Where peers reach ``name``: its agent's address, loopback for a cluster-file node (run by
    the in-process agent of ``xpupool up``), else its name."""
    given = labels.get(ADDRESS_LABEL)
    if given:
        return given
    return "127.0.0.1" if source == "cluster" else name


def distributed_env(
    job_id: int, allocations: list[Allocation], replica: int, addresses: Mapping[str, str]
) -> dict[str, str]:
    """The variables for ``replica`` of a job placed as ``allocations``; ``addresses`` maps each
    node to its address (:func:`node_address`)."""
    ordered = sorted(allocations, key=lambda a: a.replica)
    mine = next(a for a in ordered if a.replica == replica)
    local = [a.replica for a in ordered if a.node == mine.node]
    peers = [addresses.get(a.node, a.node) for a in ordered]
    world = str(len(ordered))
    rank = str(ordered.index(mine))
    return {
        "WORLD_SIZE": world,
        "RANK": rank,
        "LOCAL_RANK": str(local.index(replica)),
        "LOCAL_WORLD_SIZE": str(len(local)),
        "MASTER_ADDR": peers[0],
        "MASTER_PORT": str(BASE_PORT + job_id % PORTS),
        "RANK_SIZE": world,
        "RANK_ID": rank,
        "XPUPOOL_PEERS": ",".join(peers),
    }
