"""The operator's model cache (``xpupool up --model-cache VOLUME``): one declared volume that
every model job mounts at its runtime's cache path, so that a second replica on a node (or the
next job of the same model) finds the weights the first downloaded instead of fetching them again.

The cache is an ordinary volume (``/v1/volumes``): where it lives on each node (one directory
per node with ``{node}``, or shared storage), who may mount it and whether it is read-only (a
store the operator fills beforehand) are the volume's, and the job's view lists the mount as it
lists any other. It is added only when the job could have mounted it itself: a volume that is not
declared (yet), or that the job's tenant or queue may not mount, adds nothing, as a refusal would
blame the user for the operator's setting. A job that mounts something at (or over, or under) the
cache path keeps its own mount, and a variable the job sets keeps its value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpupool.catalog.models import ServingRuntime
from xpupool.server.plane import volume_rows
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.schemas.volumes import MAX_JOB_VOLUMES, VolumeMount
from xpupool.server.services.volumes import may_mount

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane


def with_model_cache(
    plane: ControlPlane, body: JobIn, tenant: str, runtime: ServingRuntime
) -> JobIn:
    """``body`` (a model job, expanded) with the model cache mounted at ``runtime``'s cache path
    and its variable set; ``body`` as it is when there is nothing to add."""
    volume = plane.model_cache
    path = runtime.cache_path
    if volume is None or not path or len(body.volumes) >= MAX_JOB_VOLUMES:
        return body
    for m in body.volumes:
        if m.path == path or m.path.startswith(path + "/") or path.startswith(m.path + "/"):
            return body
    with plane.db.connect() as conn:
        rows = volume_rows.listed(conn, [volume])
    queue = body.queue or tenant  # a model job's request names no queue of its own
    if not rows or not may_mount(rows[0], tenant, queue):
        return body
    mount = VolumeMount(name=volume, path=path, read_only=bool(rows[0]["read_only"]))
    env = {runtime.cache_env: path, **body.env}
    return body.model_copy(update={"volumes": [*body.volumes, mount], "env": env})


def model_cache_line(plane: ControlPlane, volume: str) -> str:
    """What ``xpupool up`` prints of its model cache; a volume not declared yet is said so (the
    admin declares volumes through the API once the server runs, so it cannot be refused here)."""
    with plane.db.connect() as conn:
        declared = bool(volume_rows.listed(conn, [volume]))
    where = "mounted at each serving runtime's cache path"
    if declared:
        return f"model cache: volume {volume} ({where})"
    return (
        f"model cache: volume {volume} is not declared: model jobs mount nothing until the admin "
        f"declares it (xpupool volume create {volume} --path DIR); then it is {where}"
    )
