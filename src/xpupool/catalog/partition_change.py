"""What a re-cut of one card destroys and creates: the difference between the layout it holds and
the one wanted, as multisets of instances (a MIG instance is its profile and first memory slice,
so one left where it is, with its profile, is kept; vNPU instances of one template are alike, so
as many of them as both layouts hold are kept). The plane refuses a re-cut that would destroy an
instance holding a job, and the agent turns the same two lists into vendor-tool commands
(``agent/recut_commands.py``): one answer to "what changes", for both."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from xpupool.catalog.partition_geometry import Instance, Layout


@dataclass(frozen=True, slots=True)
class LayoutChange:
    """``destroy``: instances of the current layout that go; ``create``: instances of the wanted
    layout that are not there yet; both in the order their layouts list them."""

    destroy: Layout
    create: Layout

    @property
    def empty(self) -> bool:
        return not self.destroy and not self.create


def _minus(left: Layout, right: Layout) -> Layout:
    """``left`` less as many of each instance as ``right`` holds, in ``left``'s order."""
    spare: Counter[Instance] = Counter(right)
    out = []
    for instance in left:
        if spare[instance]:
            spare[instance] -= 1
        else:
            out.append(instance)
    return tuple(out)


def layout_change(current: Layout, wanted: Layout) -> LayoutChange:
    """What turns ``current`` into ``wanted`` (both valid for the card's scheme)."""
    return LayoutChange(destroy=_minus(current, wanted), create=_minus(wanted, current))
