"""What each replica of a job learns about the others: the variables distributed training reads.

A job's replicas are placed together (gang or not, a job runs whole), so when the first is handed
to an agent every replica's node is known. Each replica gets what ``torchrun`` and PyTorch's
``env://`` rendezvous expect (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), HCCL's names for Ascend jobs (``RANK_SIZE``, ``RANK_ID``), and
``XPUPOOL_PEERS``: every replica's node address in rank order. The first replica's node is the
master. A node's address is what its agent reported (the ``xpupool/address`` label, from
``xpupool agent --address``), 127.0.0.1 for nodes ``xpupool up`` runs itself, else the node's name.
The port is derived from the job id within the master node's port range (the ``xpupool/ports``
label its agent declares from ``--ports``; the agent's default range when there is none, as for
the nodes of ``xpupool up``), so two jobs mastered on one node do not collide unless their ids are
a range apart; the master's agent claims exactly that port (publishing it under the bridge
network) and refuses the replica, with the reason, if a live replica holds it
(agent/launch/ports.py says why the server picks it). A variable the job sets in its own ``env``
wins.
"""

from __future__ import annotations

from collections.abc import Mapping

from xpupool.model.allocation import Allocation
from xpupool.server.schemas.agent_protocol import (
    ADDRESS_LABEL,
    PORTS_LABEL,
    ElasticMember,
    ElasticWorld,
)

BASE_PORT = 29500  # the agent's default --ports range (agent/launch/ports.py: DEFAULT_PORTS)
PORTS = 1000


def node_address(name: str, labels: Mapping[str, str], source: str) -> str:
    """Where peers reach ``name``: its agent's address, loopback for a cluster-file node (run by
    the in-process agent of ``xpupool up``), else its name."""
    given = labels.get(ADDRESS_LABEL)
    if given:
        return given
    return "127.0.0.1" if source == "cluster" else name


def port_range(labels: Mapping[str, str]) -> tuple[int, int]:
    """The node's declared ``FIRST-LAST`` ports (``xpupool/ports``), else the agent's default;
    a label that does not parse counts as absent."""
    first, _, last = labels.get(PORTS_LABEL, "").partition("-")
    if first.isdigit() and last.isdigit() and 0 < int(first) <= int(last) < 65536:
        return int(first), int(last)
    return BASE_PORT, BASE_PORT + PORTS - 1


def master_port(job_id: int, ports: tuple[int, int] = (BASE_PORT, BASE_PORT + PORTS - 1)) -> int:
    first, last = ports
    return first + job_id % (last - first + 1)


def distributed_env(
    job_id: int,
    allocations: list[Allocation],
    replica: int,
    addresses: Mapping[str, str],
    ports: Mapping[str, tuple[int, int]] | None = None,
) -> dict[str, str]:
    """The variables for ``replica`` of a job placed as ``allocations``; ``addresses`` maps each
    node to its address (:func:`node_address`), ``ports`` each node to its port range
    (:func:`port_range`; the default for a node not in it)."""
    ordered = sorted(allocations, key=lambda a: a.replica)
    mine = next(a for a in ordered if a.replica == replica)
    local = [a.replica for a in ordered if a.node == mine.node]
    peers = [addresses.get(a.node, a.node) for a in ordered]
    world = str(len(ordered))
    rank = str(ordered.index(mine))
    master_range = (ports or {}).get(ordered[0].node)
    return {
        "WORLD_SIZE": world,
        "RANK": rank,
        "LOCAL_RANK": str(local.index(replica)),
        "LOCAL_WORLD_SIZE": str(len(local)),
        "MASTER_ADDR": peers[0],
        "MASTER_PORT": str(master_port(job_id, *([master_range] if master_range else []))),
        "RANK_SIZE": world,
        "RANK_ID": rank,
        "XPUPOOL_PEERS": ",".join(peers),
    }


def elastic_world(
    members: list[Allocation],
    replica: int,
    addresses: Mapping[str, str],
    min_replicas: int,
    max_replicas: int,
) -> ElasticWorld:
    """What ``replica`` of an elastic job whose replicas are now ``members`` is told of its size
    (issue 54): its rank is its place among them in replica order, as ``RANK`` is, so a grown
    replica (the next number) takes the next rank and the others keep theirs."""
    ordered = sorted(members, key=lambda a: a.replica)
    numbers = [a.replica for a in ordered]
    return ElasticWorld(
        replicas=len(ordered),
        rank=numbers.index(replica) if replica in numbers else 0,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        members=[
            ElasticMember(rank=i, replica=a.replica, address=addresses.get(a.node, a.node))
            for i, a in enumerate(ordered)
        ],
    )
