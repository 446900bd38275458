"""The distributed-training variables each replica of a job gets."""

from __future__ import annotations

from xpupool.model import Allocation
from xpupool.server.services.replica_env import distributed_env, node_address


def alloc(replica: int, node: str) -> Allocation:
    return Allocation(10 + replica, "job", replica, node, 0, 0, 0, ())


def test_ranks_local_ranks_master_and_peers_in_rank_order() -> None:
    placed = [alloc(2, "b"), alloc(0, "a"), alloc(1, "b")]
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2"}
    env = {r: distributed_env(7, placed, r, addresses) for r in range(3)}
    assert [env[r]["RANK"] for r in range(3)] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in env.values()} == {"3"}
    assert [env[r]["LOCAL_RANK"] for r in range(3)] == ["0", "0", "1"]
    assert [env[r]["LOCAL_WORLD_SIZE"] for r in range(3)] == ["1", "2", "2"]
    assert {e["MASTER_ADDR"] for e in env.values()} == {"10.0.0.1"}
    assert {e["MASTER_PORT"] for e in env.values()} == {"29507"}
    assert env[2]["XPUPOOL_PEERS"] == "10.0.0.1,10.0.0.2,10.0.0.2"
    assert (env[2]["RANK_ID"], env[2]["RANK_SIZE"]) == ("2", "3")  # HCCL's names


def test_a_nodes_address_is_its_agents_then_loopback_for_cluster_nodes_then_its_name() -> None:
    assert node_address("gpu1", {"xpupool/address": "10.1.2.3"}, "agent") == "10.1.2.3"
    assert node_address("sim-a100", {}, "cluster") == "127.0.0.1"
    assert node_address("gpu1", {}, "agent") == "gpu1"


def test_the_master_port_is_from_the_master_nodes_declared_range() -> None:
    from xpupool.server.services.replica_env import port_range

    placed = [alloc(0, "a"), alloc(1, "b")]
    ranges = {"a": port_range({"xpupool/ports": "31000-31009"}), "b": port_range({})}
    env = distributed_env(27, placed, 1, {"a": "10.0.0.1", "b": "10.0.0.2"}, ranges)
    assert env["MASTER_PORT"] == "31007"  # 31000 + 27 % 10
    assert port_range({"xpupool/ports": "junk"}) == (29500, 30499)  # the agent's default
