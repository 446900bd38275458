"""What a pod holds on each card while it runs: its init containers charged as Kubernetes runs them.

Kubernetes runs a pod's init containers one at a time, each to completion, before its app
containers start; a sidecar (an init container with ``restartPolicy: Always``) starts in its turn
and then runs beside everything after it, to the pod's end. So a pod needs, of each resource, the
larger of its app containers' and sidecars' sum and, over its init containers, each one's own need
plus the sidecars started before it (component-helpers ``resource.PodRequests``, what
kube-scheduler counts). HAMi v2.10.0 charges card shares the same way, per card
(``pkg/device/initContainer.go`` ``CollapseInitContainerUsage``, commit 4707fb02c91c): memory and
cores each the larger of the init containers' peak and the app containers' sum, task slots the
larger of one and the app containers' count; and once every init container has terminated with
exit code 0 (``util.AllInitContainersSucceeded``), the app containers' sum alone
(``AppContainersOnlyDeviceUsage``). HAMi counts a sidecar as an init container (its TODO names
PR #2584); here it runs beside the rest, as Kubernetes runs it, so a sidecar's share is never
charged less than it holds.

:func:`charge` turns a pod's per-container shares into *parts*, one per task the pod holds on its
cards: each running container's shares (an app container's or a sidecar's), the init containers'
excess over them folded into the first running share on the same card, and one part more for the
cards where the init containers need a task of their own. Every front charges through it: the
extender's placement and its cluster view (``pod_placement.py``, ``cluster_view.py``, so a pod's
reservation and its bound form hold the same) and the double-allocation audit
(``allocation_audit.py``). Amounts are the caller's units (MiB and thousandths for the engine,
HAMi's MiB and percent for the audit): the rule only adds and compares them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Part", "Role", "Share", "charge", "container_role", "container_roles", "init_finished"]

Share = tuple[str, int, int]
"""(card UUID, memory, cores) of one container on one card, in the caller's units."""


class Role(StrEnum):
    """How long a container runs in its pod."""

    INIT = "init"
    """An init container: alone (beside the sidecars started before it), then done."""
    SIDECAR = "sidecar"
    """An init container with ``restartPolicy: Always``: from its turn to the pod's end."""
    APP = "app"
    """A container of ``spec.containers``: for the pod's life, all together."""


@dataclass(frozen=True, slots=True)
class Part:
    """One task a pod holds on each card of ``shares``: a running container's (``container``, its
    index in :func:`charge`'s input) or, while init containers may still run, theirs on the cards
    where they need a task beside the running ones (``container`` None)."""

    container: int | None
    shares: tuple[Share, ...]


def charge(
    containers: Sequence[Sequence[Share]], roles: Sequence[Role], init_done: bool
) -> tuple[Part, ...]:
    """The parts a pod holds (see the module docstring), running containers' first, in order.

    ``containers`` are the pod's containers in HAMi's order (init containers first), each the
    shares it was given; ``roles`` says what each one is (a container past its end is an app
    container, as HAMi takes every index past the init containers for one). With ``init_done`` the
    init containers hold nothing. Per card the parts add up to: memory and cores each the larger
    of the running containers' sum and the largest init container plus the sidecars before it;
    tasks the larger of the running containers' count and the init containers' (one, plus those
    sidecars). Deterministic, pure.
    """
    role = [roles[i] if i < len(roles) else Role.APP for i in range(len(containers))]
    running = [i for i, r in enumerate(role) if r is not Role.INIT and containers[i]]
    long: dict[str, list[int]] = {}  # card -> [memory, cores, tasks] of the running containers
    first: dict[str, tuple[int, int]] = {}  # card -> its first running share, to fold into
    for i in running:
        for j, (uuid, mem, cores) in enumerate(containers[i]):
            total = long.setdefault(uuid, [0, 0, 0])
            total[0], total[1], total[2] = total[0] + mem, total[1] + cores, total[2] + 1
            first.setdefault(uuid, (i, j))
    more: dict[tuple[int, int], tuple[int, int]] = {}  # folded into a running share
    own: list[Share] = []
    if not init_done:
        for uuid, (mem, cores, tasks) in _init_peaks(containers, role).items():
            run_mem, run_cores, run_tasks = long.get(uuid, (0, 0, 0))
            extra = (max(0, mem - run_mem), max(0, cores - run_cores))
            if tasks > run_tasks:
                own.append((uuid, *extra))
            elif extra != (0, 0):
                more[first[uuid]] = extra
    parts = [
        Part(i, tuple(_plus(s, more.get((i, j))) for j, s in enumerate(containers[i])))
        for i in running
    ]
    if own:
        parts.append(Part(None, tuple(own)))
    return tuple(parts)


def _plus(share: Share, extra: tuple[int, int] | None) -> Share:
    uuid, mem, cores = share
    return (uuid, mem, cores) if extra is None else (uuid, mem + extra[0], cores + extra[1])


def _init_peaks(
    containers: Sequence[Sequence[Share]], role: Sequence[Role]
) -> dict[str, list[int]]:
    """Card -> [memory, cores, tasks] the init containers need at most at once: each one's share
    plus the sidecars started before it on the card (memory and cores peak separately, as HAMi's)."""
    beside: dict[str, list[int]] = {}  # the sidecars started so far, per card
    peak: dict[str, list[int]] = {}
    for i, shares in enumerate(containers):
        if role[i] is Role.SIDECAR:
            for uuid, mem, cores in shares:
                now = beside.setdefault(uuid, [0, 0, 0])
                now[0], now[1], now[2] = now[0] + mem, now[1] + cores, now[2] + 1
        elif role[i] is Role.INIT:
            for uuid, mem, cores in shares:
                side = beside.get(uuid, (0, 0, 0))
                top = peak.setdefault(uuid, [0, 0, 0])
                top[0] = max(top[0], mem + side[0])
                top[1] = max(top[1], cores + side[1])
                top[2] = max(top[2], 1 + side[2])
    return peak


def container_role(container: object, init: bool) -> Role:
    """The role of one container of ``spec.initContainers`` (``init``) or ``spec.containers``."""
    if not init:
        return Role.APP
    policy = container.get("restartPolicy") if isinstance(container, Mapping) else None
    return Role.SIDECAR if policy == "Always" else Role.INIT


def container_roles(spec: object) -> tuple[Role, ...]:
    """The roles of a Pod spec's containers in HAMi's order (init containers first), read
    leniently: a list that is not a list counts as empty (the pod's annotations say which cards
    each index holds; the spec only says how long it runs)."""
    if not isinstance(spec, Mapping):
        return ()
    out: list[Role] = []
    for key, init in (("initContainers", True), ("containers", False)):
        items = spec.get(key)
        if isinstance(items, list):
            out.extend(container_role(c, init) for c in items)
    return tuple(out)


def init_finished(pod: Mapping[str, object]) -> bool:
    """Has every init container of the pod (sidecars aside: they run on) terminated with exit
    code 0, by its status? HAMi's ``AllInitContainersSucceeded``, matched by container name; a pod
    with no init container is finished; anything unreadable is not."""
    spec, status = pod.get("spec"), pod.get("status")
    inits = spec.get("initContainers") if isinstance(spec, Mapping) else None
    names = [
        c.get("name")
        for c in (inits if isinstance(inits, list) else [])
        if container_role(c, True) is Role.INIT and isinstance(c, Mapping)
    ]
    if not names:
        return True
    states = status.get("initContainerStatuses") if isinstance(status, Mapping) else None
    if not isinstance(states, list):
        return False
    exited: set[object] = set()
    for item in states:
        state = item.get("state") if isinstance(item, Mapping) else None
        ended = state.get("terminated") if isinstance(state, Mapping) else None
        code = ended.get("exitCode") if isinstance(ended, Mapping) else None
        if isinstance(code, int) and not isinstance(code, bool) and code == 0:
            exited.add(item.get("name") if isinstance(item, Mapping) else None)
    return all(name in exited for name in names)
