"""Which jobs a Kubernetes site may clean up after (issue 49, ``k8s/site/finished.py``), on a real
plane: a job is finished when the store has it in a final state or not at all, never while the
plane holds it or while it waits; a job label the plane did not write names no job."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import BOTH_STORES, Server, heartbeat, job, node, report, submit, tenant

from xpupool.k8s.site.finished import CHUNK, finished_jobs, job_label

STORES = BOTH_STORES


def test_a_job_is_finished_once_final_or_unknown_never_while_held_or_waiting(
    server: Server,
) -> None:
    token = tenant(server, "ml")
    node(server, "n1")
    ran = submit(server, token, "A100:1")["id"]
    server.schedule()
    assert job(server, ran)["state"] in ("scheduled", "running")
    waiting = submit(server, token, "A100:8")["id"]  # the pool less one card: it waits
    server.schedule()
    assert job(server, waiting)["state"] == "pending"
    assert finished_jobs(server.plane, [ran, waiting]) == set()
    heartbeat(server, "n1", [report(ran, 0, "succeeded", exit_code=0)])
    assert job(server, ran)["state"] == "succeeded"
    r = server.client.post(f"/v1/jobs/{waiting}/cancel", headers=server.as_(token))
    assert r.status_code == 200, r.text
    unknown = 987654
    assert finished_jobs(server.plane, [ran, waiting, unknown]) == {ran, waiting, unknown}
    assert finished_jobs(server.plane, []) == set()
    many = [ran, *range(unknown, unknown + 2 * CHUNK + 1)]  # more ids than one query takes
    assert finished_jobs(server.plane, many) == set(many)
    again = submit(server, token, "A100:1")["id"]
    assert finished_jobs(server.plane, [*many, again]) == set(many)  # pending: not finished


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"xpupool.io/job": "12"}, 12),
        ({"xpupool.io/job": "0"}, None),
        ({"xpupool.io/job": "-3"}, None),
        ({"xpupool.io/job": "1e3"}, None),
        ({"xpupool.io/job": "99999999999999999999"}, None),
        ({"xpupool.io/job": 12}, None),
        ({"xpupool.io/queue": "ml"}, None),
        ("not-a-mapping", None),
    ],
)
def test_a_job_label_names_a_job_only_as_the_plane_writes_it(
    labels: Any, expected: int | None
) -> None:
    assert job_label({"metadata": {"labels": labels}}) == expected
    assert job_label({"metadata": "broken"}) is None
