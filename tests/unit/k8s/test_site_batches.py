"""How a Kubernetes site's worker takes the plane's starts as batches (``creations.py``): the
starts queued one after another, up to the limit, stopping at the first other task (done next,
so nothing runs out of its order) and at a second start of a job the batch starts already (a
run's pods are never made by two threads at once)."""

from __future__ import annotations

import queue

from xpupool.k8s.site.creations import Start, take_batch
from xpupool.k8s.site.site import KubernetesSite, _Stop, _Task
from xpupool.k8s.site.sites_file import KubernetesSiteConfig


def batches(*tasks: _Task | None, limit: int = 64) -> list[list[_Task | None]]:
    """The worker's order of the queued ``tasks``: each batch of starts, or each task alone."""
    site = KubernetesSite(KubernetesSiteConfig(name="gpu-a", in_cluster=True), resync_s=0)
    q: queue.Queue[_Task | None] = queue.Queue()
    for task in tasks:
        q.put(task)
    out: list[list[_Task | None]] = []
    carried: list[_Task | None] = []
    while carried or not q.empty():
        task = carried.pop() if carried else q.get_nowait()
        if isinstance(task, Start):
            batch, more = take_batch(task, q, site._joins, limit)
            carried.extend(more)
            out.append(list(batch))
        else:
            out.append([task])
    return out


def test_starts_in_a_row_are_one_batch_up_to_the_first_other_task() -> None:
    a, b, c, d = Start(1, 1), Start(2, 1), Start(3, 1), Start(4, 1)
    assert batches(a, b, _Stop(2), c, d) == [[a, b], [_Stop(2)], [c, d]]
    assert batches(a, b, c, d, limit=3) == [[a, b, c], [d]]
    assert batches(_Stop(9), a, None) == [[_Stop(9)], [a], [None]]


def test_a_second_start_of_a_job_waits_for_the_batch_before_it() -> None:
    first, again, other = Start(1, 1), Start(1, 2), Start(2, 1)
    assert batches(first, other, again) == [[first, other], [again]]
