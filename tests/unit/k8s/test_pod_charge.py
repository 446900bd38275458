"""pod_charge.py: what a pod holds on each card, init containers charged as Kubernetes runs them and
HAMi v2.10.0 charges them (``pkg/device/initContainer.go``, commit 4707fb02c91c): per card the
larger of the init containers' peak and the app containers' sum, task slots the larger of one and
the app containers' count; the app containers' sum alone once every init container succeeded.
Sidecars (``restartPolicy: Always``) run beside everything after them, as Kubernetes counts them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest
from hami_objects import DONE, FAILED, RUNNING, container, hami_pod

from xpupool.k8s.codec.pod_charge import Part, Role, charge, container_roles, init_finished

INIT, SIDECAR, APP = Role.INIT, Role.SIDECAR, Role.APP
Share = tuple[str, int, int]


def totals(parts: Sequence[Part]) -> dict[str, tuple[int, int, int]]:
    """Card -> (memory, cores, tasks) the parts hold together."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for part in parts:
        for uuid, mem, cores in part.shares:
            out[uuid][0] += mem
            out[uuid][1] += cores
            out[uuid][2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def test_a_pod_without_init_containers_holds_what_its_containers_hold() -> None:
    containers: list[list[Share]] = [[("A", 10, 20), ("B", 10, 20)], [], [("A", 5, 5)]]
    parts = charge(containers, (APP, APP, APP), init_done=False)
    assert parts == (
        Part(0, (("A", 10, 20), ("B", 10, 20))),
        Part(2, (("A", 5, 5),)),
    )


def test_init_and_app_on_one_card_hold_the_larger_not_the_sum() -> None:
    """The issue's pod: HAMi binds init 60 % + app 60 % of one card; charged 60 %, one task."""
    parts = charge([[("A", 600, 60)], [("A", 400, 60)]], (INIT, APP), init_done=False)
    assert totals(parts) == {"A": (600, 60, 1)}
    assert parts == (Part(1, (("A", 600, 60),)),)  # the app's task carries the excess
    assert totals(charge([[("A", 600, 60)], [("A", 400, 60)]], (INIT, APP), True)) == {
        "A": (400, 60, 1)
    }


def test_memory_and_cores_peak_separately_over_init_containers() -> None:
    containers = [[("A", 300, 80)], [("A", 700, 10)], [("B", 200, 20)]]
    parts = charge(containers, (INIT, INIT, APP), init_done=False)
    assert totals(parts) == {"A": (700, 80, 1), "B": (200, 20, 1)}
    assert parts[-1] == Part(None, (("A", 700, 80),))  # the init containers' own card
    assert totals(charge(containers, (INIT, INIT, APP), init_done=True)) == {"B": (200, 20, 1)}


def test_app_containers_sum_and_count_their_tasks() -> None:
    app_more = charge([[("A", 500, 0)], [("A", 300, 0)], [("A", 300, 0)]], (INIT, APP, APP), False)
    assert totals(app_more) == {"A": (600, 0, 2)}
    init_more = charge([[("A", 700, 0)], [("A", 200, 0)], [("A", 200, 0)]], (INIT, APP, APP), False)
    assert totals(init_more) == {"A": (700, 0, 2)}


def test_a_sidecar_runs_beside_the_init_containers_after_it_and_the_app() -> None:
    # sidecar 20, then init 50, then app 30, all on A: 20 + 50 while initialising, 20 + 30 after
    roles = (SIDECAR, INIT, APP)
    containers = [[("A", 20, 0)], [("A", 50, 0)], [("A", 30, 0)]]
    assert totals(charge(containers, roles, init_done=False)) == {"A": (70, 0, 2)}
    assert totals(charge(containers, roles, init_done=True)) == {"A": (50, 0, 2)}
    # init 50 before sidecar 20 runs alone: 50 while initialising, 20 + 30 after
    containers = [[("A", 50, 0)], [("A", 20, 0)], [("A", 30, 0)]]
    assert totals(charge(containers, (INIT, SIDECAR, APP), init_done=False)) == {"A": (50, 0, 2)}


def test_an_init_container_beside_a_sidecar_takes_its_own_task() -> None:
    parts = charge([[("A", 20, 0)], [("A", 10, 0)], [("B", 5, 0)]], (SIDECAR, INIT, APP), False)
    assert totals(parts) == {"A": (30, 0, 2), "B": (5, 0, 1)}


def test_roles_follow_hamis_order_and_restart_policy() -> None:
    pod = hami_pod(
        "p",
        None,
        init=[container("i0", gpu="1"), container("side", sidecar=True), container("i1")],
        app=[container("a0"), container("a1", gpu="1")],
    )
    assert container_roles(pod["spec"]) == (INIT, SIDECAR, INIT, APP, APP)
    assert container_roles({"containers": "garbage", "initContainers": [7]}) == (INIT,)
    assert container_roles("garbage") == ()


@pytest.mark.parametrize(
    ("states", "done"),
    [
        (None, False),  # no status yet
        ([DONE, DONE], True),
        ([DONE, RUNNING], False),
        ([DONE, FAILED], False),  # failed: it runs again
        ([DONE, {"terminated": {"exitCode": "0"}}], False),
        ([DONE, "garbage"], False),
    ],
)
def test_init_finished_when_every_init_container_exited_zero(
    states: list[object] | None, done: bool
) -> None:
    pod = hami_pod("p", "n", init=[container("i0", gpu="1"), container("i1", gpu="1")])
    if states is not None:
        pod["status"]["initContainerStatuses"] = [
            {"name": n, "state": s} for n, s in zip(("i0", "i1"), states, strict=True)
        ]
    assert init_finished(pod) is done


def test_a_running_sidecar_does_not_keep_the_init_containers_charged() -> None:
    init = [container("side", sidecar=True, gpu="1"), container("i0", gpu="1")]
    pod = hami_pod("p", "n", init=init, init_states=[RUNNING, DONE])
    assert init_finished(pod)
    pod = hami_pod("p", "n", init=init, init_states=[RUNNING, RUNNING])
    assert not init_finished(pod)
    pod["status"]["initContainerStatuses"] = "garbage"
    assert not init_finished(pod)
