"""The ``host`` back end: the job's command as a plain process group on the host.

Everything that isolates it (its own uid, the clean environment, the private working directory,
the cgroup limits, the capped log, and for a root agent a mount namespace with a private /tmp and
a /proc showing only its own processes: :mod:`.view`) is the shared start path's
(:mod:`.process`); this back end only says what to exec and asks for the whole view.
"""

from __future__ import annotations

from xpupool.agent.launch.backend import Launched
from xpupool.agent.launch.process import ProcessBackend, start_process
from xpupool.agent.launch.secret_files import with_secret_env
from xpupool.agent.launch.spec import (
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    Step,
    StopAsked,
    never,
    no_step,
)
from xpupool.agent.launch.view import view_for


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

    def start(
        self, spec: LaunchSpec, stop_asked: StopAsked = never, step: Step = no_step
    ) -> Launched:
        view = view_for(spec, self.settings, sandboxed=False)
        return start_process(with_secret_env(spec), self.argv(spec), view=view)
