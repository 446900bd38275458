"""A stored allocation that names one node and holds a card of another is set aside on reload.

The plane re-addressed stored allocations to the engine's slots without checking that a card was
its node's (the Kubernetes view checked, the plane did not: issue 44, item 1). An allocation row
naming node n2 but holding n1's card (a store from a buggy past release, or a hostile edit) was
applied to n1's card and charged to n2: the card and n2 both held by a job that runs on neither.
The one re-address (``ClusterState.readdress``) refuses it; the plane's rule for what no longer fits
then requeues the job with an event and cordons the node it names.
"""

from __future__ import annotations

from server_kit import BOTH_STORES, Server, job, node, submit, tenant
from sqlalchemy import select, update

from xpupool.server.storage.jobs import allocations as t_allocs

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def test_an_allocation_on_another_nodes_card_is_requeued_not_applied(server: Server) -> None:
    node(server, "n1", count=1)
    node(server, "n2", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    assert job(server, j["id"])["state"] == "scheduled"
    with server.plane.db.begin() as conn:
        row_id, data = conn.execute(select(t_allocs.c.id, t_allocs.c.data)).one()
        placed_on = data["node"]
        other = "n2" if placed_on == "n1" else "n1"
        moved = {**data, "node": other}  # names the other node, keeps this node's card
        conn.execute(update(t_allocs).where(t_allocs.c.id == row_id).values(data=moved))
    with server.plane.locked():
        server.plane.reload()
    got = job(server, j["id"])
    assert got["state"] == "pending", got["state"]
    assert f"which is node {placed_on}'s" in got["events"][-1]["reason"]
    assert server.plane.node_records[other].cordoned
    assert not any(server.plane.cluster_state.node_allocations[i] for i in range(2))
