"""``xpupool up``: the whole control plane in one process on one host.

Data lives under ``--data`` (default ``./.xpupool``): ``state.db`` (SQLite, WAL), ``admin-token``
(mode 0600, written on first start), ``logs/``. ``--db`` takes any SQLAlchemy URL instead
(PostgreSQL: ``postgresql+psycopg://...``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xpupool.engine.profile import DEFAULT_PROFILE
from xpupool.server.plane import ControlPlane


@dataclass(frozen=True, slots=True)
class UpConfig:
    data: Path
    host: str = "127.0.0.1"
    port: int = 8080
    cluster: Path | None = None
    db: str | None = None
    profile: str = DEFAULT_PROFILE
    heartbeat_s: float = 5.0
    lost_after_s: float = 30.0
    agent: bool = True


def admin_token_path(data: Path) -> Path:
    return data / "admin-token"


def open_plane(cfg: UpConfig) -> ControlPlane:
    """The plane with its admin token and cluster-file nodes in place; prints nothing."""
    from xpupool.probes.cluster_file import load_cluster
    from xpupool.server.services import fleet, tenants

    cfg.data.mkdir(parents=True, exist_ok=True)
    url = cfg.db or f"sqlite:///{(cfg.data / 'state.db').resolve()}"
    plane = ControlPlane(
        url,
        cfg.data,
        profile=cfg.profile,
        heartbeat_s=cfg.heartbeat_s,
        lost_after_s=cfg.lost_after_s,
    )
    token = tenants.ensure_admin_token(plane)
    if token is not None:
        path = admin_token_path(cfg.data)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
    if cfg.cluster is not None:
        fleet.register_many(plane, load_cluster(cfg.cluster), source="cluster")
    return plane


def serve(cfg: UpConfig, echo: Callable[[str], None]) -> None:
    import uvicorn

    from xpupool.server.app import create_app

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    plane = open_plane(cfg)
    echo(f"admin token: {admin_token_path(cfg.data)} (mode 0600)")
    echo(f"state: {plane.db.url.render_as_string(hide_password=True)}")
    echo(f"nodes: {len(plane.nodes)}, devices: {plane.engine.state.n_devices}")
    echo(f"API: http://{cfg.host}:{cfg.port}/v1  docs: http://{cfg.host}:{cfg.port}/docs")
    on_start: Callable[[], None] | None = None
    on_stop: Callable[[], None] | None = None
    if cfg.agent:
        from xpupool.agent.inprocess import AgentThread, local_agent

        agent = AgentThread(local_agent(plane, cfg.data / "agent"))
        on_start, on_stop = agent.start, agent.stop
        echo(f"agent: in-process, hosting {', '.join(n.name for n in agent.agent.nodes)}")
    # The scheduler thread must run soon after a submission wakes it; CPython hands the GIL over
    # every 5 ms by default, which alone would put ~5-10 ms on every submit -> scheduled latency.
    sys.setswitchinterval(0.001)
    app = create_app(plane, on_start=on_start, on_stop=on_stop)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
