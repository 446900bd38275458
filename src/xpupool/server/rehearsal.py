"""Every compiled loop a placement calls, loaded (or compiled, on a first start) before the first
real placement needs it.

Numba compiles a loop on its first call, and holds its compiler's lock meanwhile: seconds of CPU
per loop on a first start, tens on a loaded machine. Inside a real placement that wait would hold
the plane's lock, and, on the server's event loop, every request (issue 42: ``GET /v1/jobs/1``
timed out for about 20 s). So a thread loads them first: the fragmentation loops
(``kernels.warm``), then a rehearsal that places a few requests of each kind (whole cards, a share
of a card, a gang, CPU only) on a throwaway engine over the packaged demo pool, which calls the
other compiled functions (the card choice, the device fit's refresh, the best node, the packing
scores) with the argument types real placements give them. The scheduling loop waits for it off
the event loop (``scheduler_loop.run_passes``).

Each profile the plane runs is rehearsed, not only the default one: a profile's scorers are loops
of their own (``binpack``'s, a ``--profile`` file's), and a plane started with another
``--policy``, or with queues that name a profile, would compile those inside its first pass. A
standby rehearses what its command line names while it waits (``server/up.py``); the queues'
profiles, read from the store, are rehearsed before the pass that would place their jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import kernels
from xpupool.engine.profile import DEFAULT_PROFILE, Profile
from xpupool.model.request_model import request_from_dict
from xpupool.probes.cluster_file import load_cluster

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane

log = logging.getLogger("xpupool.server")

REHEARSED = (
    "A100",
    "H100:2",
    "A100 mem=1Gi cores=10%",
    "L20 cores=25% replicas=2 gang",
    "any:48GB..:1",
    "cpu=1",
)
"""The requests the rehearsal places, one of each kind of placement (compact syntax)."""

_loaded = threading.Event()  # the fragmentation loops (kernels.warm), once per process
_rehearsed: frozenset[str] = frozenset()  # the profiles rehearsed in this process
_lock = threading.Lock()


def ready(names: Iterable[str] = (DEFAULT_PROFILE,)) -> bool:
    """Whether :func:`warm` has loaded the loops and rehearsed every profile of ``names`` in this
    process: until then, a caller that must not wait on numba's compiler lock (an event loop)
    calls :func:`warm` on a thread and waits there."""
    return _loaded.is_set() and _rehearsed.issuperset(names)


def plane_profiles(plane: ControlPlane) -> tuple[str, ...]:
    """The profiles ``plane`` places with: its default, then those its queues name."""
    return tuple(dict.fromkeys([plane.profile, *sorted(plane.queue_profiles.values())]))


def warm(
    names: Iterable[str] = (DEFAULT_PROFILE,), profiles: Mapping[str, Profile] | None = None
) -> None:
    """Load the loops, once per process, and rehearse each profile of ``names`` not rehearsed
    yet (``profiles``: the profiles by name, the built-in ones when None); a second caller waits
    for the first."""
    global _rehearsed
    with _lock:
        if not _loaded.is_set():
            kernels.warm(solver=False)
            _loaded.set()
        for name in dict.fromkeys(names):
            if name in _rehearsed:
                continue
            try:
                _rehearse(name, profiles)
            except Exception:  # a placement that fails here fails the same way on a real request
                log.exception("the placement rehearsal of profile %s failed", name)
            _rehearsed = _rehearsed | {name}


def warm_in_background(
    names: Iterable[str] = (DEFAULT_PROFILE,), profiles: Mapping[str, Profile] | None = None
) -> threading.Thread:
    """:func:`warm` on a thread of its own, so that the server answers meanwhile."""
    thread = threading.Thread(
        target=warm, args=(tuple(names), profiles), name="xpupool-loops-warm", daemon=True
    )
    thread.start()
    return thread


def _rehearse(profile: str, profiles: Mapping[str, Profile] | None) -> None:
    pool = Path(str(resources.files("xpupool") / "data" / "cluster-mixed.yaml"))
    state = ClusterState(load_cluster(pool), seed=0)
    engine = Engine(state, profile, profiles=None if profiles is None else dict(profiles))
    for text in REHEARSED:
        # a what-if, rolled back: nothing is learnt from it, so the share prices' LP solver
        # (SciPy, 0.2 CPU s to import) is not imported for it (``xpupool up`` does at a quiet
        # moment, server/up.py)
        with engine.transaction() as txn:
            engine.place(request_from_dict(text), txn=txn)
