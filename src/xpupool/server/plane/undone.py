"""A step of the plane that writes memory and the store together, undone when it fails part-way:
the store rolls its transaction back and memory is read back from it (``ControlPlane.reload``),
as a scheduling batch is (``scheduling_pass.batch``). A failure of the store itself reloaded
memory already (``plane.write``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from xpupool.model.errors import Unavailable

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

T = TypeVar("T")


def undone_on_failure(plane: ControlPlane, step: Callable[[ControlPlane], T]) -> T:
    """``step(plane)``'s result; when it raises, memory is read back from the store first."""
    try:
        return step(plane)
    except Unavailable:
        raise  # memory reloaded by ``plane.write``
    except Exception:
        with plane.locked():
            plane.reload()
        raise
