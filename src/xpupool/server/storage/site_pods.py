"""Jobs the plane made for pods it did not create: a kubectl user's gated pod on a Kubernetes site
(``k8s/site/gated.py``) is admitted as a job, and this row is how the plane knows, after a
restart too, which pod a job stands for. Kept apart from ``jobs`` so that nothing a tenant can
write through the API (a job's name, its env) can make the plane treat an API job as a pod's.

No foreign key on the job: retention may delete old jobs, and a row left behind names a pod
that is gone, which the site ignores."""

from __future__ import annotations

from sqlalchemy import Column, Integer, String, Table

from xpupool.server.storage.meta import metadata

site_pods = Table(
    "site_pods",
    metadata,
    Column("job_id", Integer, primary_key=True, autoincrement=False),
    Column("site", String(63), nullable=False, index=True),
    Column("namespace", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("uid", String(64), nullable=False),
)

site_gang_pods = Table(
    "site_gang_pods",
    metadata,
    # The further members of a gang job (replicas 1..n-1) that stands for one owner's pods of a
    # PodGroup; its replica 0 is the job's row in ``site_pods``.
    Column("job_id", Integer, primary_key=True, autoincrement=False),
    Column("replica", Integer, primary_key=True, autoincrement=False),
    Column("site", String(63), nullable=False, index=True),
    Column("namespace", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("uid", String(64), nullable=False),
)
