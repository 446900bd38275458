"""The names a request uses, checked once at submission against what the server knows.

The request model has already checked the shape of every field and canonicalised vendor names;
what it cannot know is the pool: which device models the catalog or the registered nodes have,
which device UUIDs exist, which scheduling profiles the engine was started with. A name that none
of them knows can never be satisfied, so the job is refused with the field and the reason instead
of waiting forever; so is a site no node is in. Called by the job service under the plane's lock,
before anything is stored.
"""

from __future__ import annotations

import difflib

from xpupool.catalog.partitions import check_profile, load_partitions
from xpupool.engine.engine import Engine
from xpupool.engine.profile import known_profile
from xpupool.model.errors import RequestError
from xpupool.model.request import Request


def check_names(engine: Engine, req: Request) -> None:
    """Raise :class:`RequestError` at the first unknown name; fields are paths inside the request
    (``devices.models[0]``, ``node_policy``): the caller nests them under ``request`` or ``spec``.

    A model is known when the catalog knows it (the node may join later) or a device of the pool
    prints it (``G2`` in a trace cluster); an excluded model is checked too, as a typo there
    would exclude nothing. A partition profile must be one a named model (any model, when none
    is named) has: the refusal lists each named model's profiles.
    A UUID to run on must be a device of the pool; an excluded one need not.
    """
    if req.node_policy:
        known_profile(engine.profiles, req.node_policy, "node_policy")
    d = req.devices
    for key, names in (("models", d.models), ("exclude_models", d.exclude_models)):
        for i, name in enumerate(names):
            if engine.knows_model(name):
                continue
            close = difflib.get_close_matches(name, engine.model_names(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            reason = (
                f"no accelerator model of that name in the catalog or in the pool{hint}; "
                "see `xpupool accelerators`"
            )
            raise RequestError(f"devices.{key}[{i}]", name, reason)
    if d.partition is not None:
        check_profile(load_partitions(), engine.catalog, d.models, d.partition)
    _check_sites(engine, req)
    if "DeviceUuid" in engine.filters_off(req):
        return  # its profile places without looking at UUIDs
    for i, uuid in enumerate(d.uuids):
        if engine.device(uuid) is None:
            raise RequestError(f"devices.uuids[{i}]", uuid, "no device in the pool has this UUID")


def _check_sites(engine: Engine, req: Request) -> None:
    """A site to run in, avoid or prefer must be a site of the pool's nodes: a misspelt one would
    leave the job waiting forever, exclude nothing or prefer nothing. A pool without nodes yet
    says nothing (its first nodes may be on their way)."""
    sites = engine.sites()
    if not sites:
        return
    named = [("site", x) for x in (*req.sites, *req.exclude_sites)]
    if req.preferred_site is not None:
        named.append(("preferred_site", req.preferred_site))
    for field, site in named:
        if site in sites:
            continue
        close = difflib.get_close_matches(site, sites, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise RequestError(
            field, site, f"no node of the pool is in this site; {hint}sites: {', '.join(sites)}"
        )
