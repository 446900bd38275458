"""The ``host`` back end: the job's command as a plain process group on the host.

Everything that isolates it (its own uid, the clean environment, the private working directory,
the cgroup limits, the capped log) is the shared start path's (:mod:`.process`); this back end
only says what to exec.
"""

from __future__ import annotations

from xpupool.agent.launch.process import ProcessBackend
from xpupool.agent.launch.spec import LaunchError, LaunchSettings, LaunchSpec


class HostBackend(ProcessBackend):
    name = "host"

    def __init__(self, settings: LaunchSettings) -> None:
        super().__init__(settings)

    def argv(self, spec: LaunchSpec) -> list[str]:
        if spec.image:
            raise LaunchError("container images need a container runtime; none configured")
        if not spec.argv:
            raise LaunchError("no command to run (and no image)")
        return list(spec.argv)
