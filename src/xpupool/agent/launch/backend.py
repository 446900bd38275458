"""What a launch back end is: it carries out a :class:`LaunchSpec` and controls what it started.

Back ends: ``host`` (a plain process group, :mod:`.host`), ``bwrap`` (the same process inside a
bubblewrap sandbox) and ``container`` (docker or podman). The first two share the whole start path
(:func:`xpupool.agent.launch.process.start_process`); they differ only in the argv they exec.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from xpupool.agent.launch.logpipe import LogPump
from xpupool.agent.launch.spec import (
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    Step,
    StopAsked,
    never,
    no_step,
)


@dataclass
class Launched:
    """A started replica. ``proc`` leads its own process group (``pgid`` = its pid); ``pump``
    drains its output into the log; ``limits`` is the event text of the enforcement that really
    applied; ``handle`` names what the back end must clean up besides (a container)."""

    spec: LaunchSpec
    proc: subprocess.Popen[bytes]
    pump: LogPump | None
    limits: str
    handle: str = ""
    cleaned: bool = False
    workdir_removed: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        return self.proc.pid


class Backend(Protocol):
    """Starts replicas from specs and controls them. ``start`` raises :class:`LaunchError`."""

    name: str

    def argv(self, spec: LaunchSpec) -> list[str]:
        """The full argv the process group's leader runs (after the launcher)."""
        ...

    def start(
        self, spec: LaunchSpec, stop_asked: StopAsked = never, step: Step = no_step
    ) -> Launched:
        """Start the replica; a back end with a long step before the process runs (an image's
        pull) gives it up with :class:`LaunchStoppedError` once ``stop_asked()`` says so."""
        ...

    def signal(self, launched: Launched, sig: int) -> None:
        """Deliver ``sig`` to everything of the replica."""
        ...

    def alive(self, launched: Launched) -> bool:
        """True while any process of the replica is left."""
        ...

    def oom_killed(self, launched: Launched) -> bool:
        """True when the kernel killed a process of it for going over its memory limit."""
        ...

    def cleanup(self, launched: Launched) -> None:
        """Release what the replica held (cgroup, container); called once nothing of it is
        alive, and again later while ``launched.cleaned`` is False."""
        ...


BackendFactory = Callable[[LaunchSettings], Backend]


def _registry() -> dict[str, BackendFactory]:
    # imported here: the back ends import this module
    from xpupool.agent.launch.bwrap import BwrapBackend
    from xpupool.agent.launch.container import ContainerBackend
    from xpupool.agent.launch.host import HostBackend

    return {"host": HostBackend, "bwrap": BwrapBackend, "container": ContainerBackend}


def backend_names() -> tuple[str, ...]:
    return tuple(sorted(_registry()))


def backend_for(name: str, settings: LaunchSettings | None = None) -> Backend:
    """The back end called ``name``, configured by ``settings``; raises LaunchError if unknown."""
    factory = _registry().get(name)
    if factory is None:
        raise LaunchError(f"unknown launch back end {name!r}; known: {', '.join(backend_names())}")
    return factory(settings or LaunchSettings())
