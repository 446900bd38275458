"""Where ``xpupool simulate`` finds the Alibaba GPU trace when it is given no ``--nodes``.

The trace (``alibaba-gpu-v2023``: 1,213 nodes and the FGD paper's pod lists, hundreds of MB) is not
in the package: it sits in ``shared/traces`` beside the repository. A path relative to the working
directory worked only from the repository's root, so the places are worked out from this file:
``$XPUPOOL_TRACES`` when set (and then only there), else ``shared/traces/alibaba-gpu-v2023`` beside
the checkout the package runs from, else the same relative to the working directory. When none holds
the file, the error says where it looked and how to give the trace instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from xpupool.model.errors import XpupoolError

TRACES_ENV = "XPUPOOL_TRACES"
TRACE_FOLDER = Path("shared") / "traces" / "alibaba-gpu-v2023"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"
_CHECKOUT = Path(__file__).resolve().parents[3]  # src/xpupool/sim/trace_files.py -> the checkout


class TraceNotFound(XpupoolError):  # noqa: N818 - a family of XpupoolError, as NotFound
    """The default trace is in none of ``folders``; the message says how to give one."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        super().__init__(
            f"no --nodes given and no {DEFAULT_NODES} in {' or '.join(map(str, folders))}; "
            f"give --nodes NODES.csv --pods PODS.csv, or set {TRACES_ENV} to the folder of the "
            "Alibaba GPU trace (alibaba-gpu-v2023)"
        )


def trace_folders(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[Path]:
    """The folders searched, in order, without repeats."""
    env = os.environ if environ is None else environ
    if env.get(TRACES_ENV):
        return [Path(env[TRACES_ENV]).expanduser()]
    here = (cwd or Path.cwd()).resolve()
    found: list[Path] = []
    for folder in (_CHECKOUT.parent / TRACE_FOLDER, here.parent / TRACE_FOLDER):
        if folder not in found:
            found.append(folder)
    return found


def default_nodes(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The default node list; raises ``TraceNotFound`` naming every folder tried."""
    folders = trace_folders(environ, cwd)
    for folder in folders:
        if (folder / DEFAULT_NODES).is_file():
            return folder / DEFAULT_NODES
    raise TraceNotFound(folders)
