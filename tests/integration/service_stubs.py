"""Replicas for the service proxy's tests: the Go stub server (``tests/fixtures/services/stub``)
as host processes on free ports, and a static :class:`Endpoints` the test fills by hand (the
service controller, which finds replicas for real, is another part of issue 47)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from server_proc import free_port, until

from container_images import stub_binary
from xpupool.server.service_endpoints import Endpoint


@dataclass
class StaticEndpoints:
    """Ready endpoints the test sets by hand: (tenant, service) -> endpoints."""

    ready_by: dict[tuple[str, str], list[Endpoint]] = field(default_factory=dict)

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        return self.ready_by.get((tenant, service), [])


@dataclass
class Stub:
    name: str
    port: int
    proc: subprocess.Popen[bytes]

    def endpoint(self, replica: int) -> Endpoint:
        return Endpoint(job_id=1, replica=replica, host="127.0.0.1", port=self.port)


def start_stub(name: str) -> Stub:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "STUB_NAME": name}
    proc = subprocess.Popen(
        [str(stub_binary())], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def up() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    until(up, f"stub {name} listening")
    return Stub(name, port, proc)
