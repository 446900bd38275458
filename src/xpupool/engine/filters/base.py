"""The two filter shapes: node filters see ``[N]`` rows, device filters see the ``[N, W]`` grid.

A filter returns a mask (``None`` when the request does not constrain what it checks, so the
pipeline skips it). Device filters are *static* when their answer depends only on inventory and the
request's selectors (cached by the engine per ``selector_key`` and state epoch) and *dynamic* when
it depends on free capacity. :meth:`DeviceFilter.stages` is the slow, explaining form used only when
a request fits nowhere: it may split into several stages (one per software need) and give a reason
per device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from xpupool.engine.context import Context
from xpupool.engine.reasons import Reason
from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.model.request import Request


@dataclass(frozen=True, slots=True)
class Stage:
    """One explaining step: devices passing ``mask``; failures blamed on ``reason`` or, when
    ``codes`` is given, on the per-device reason in ``codes`` (the node takes its most hopeful one).
    ``details`` with ``detail_codes`` (per device, an index into ``details``) word each device's
    reason by what it is (its driver: "525.85.12 too old for cuda>=12.4: needs >= 550.54.14");
    texts are made once per distinct value (a software profile), never per node."""

    mask: BoolArray
    reason: Reason
    detail: str = ""
    codes: IntArray | None = None
    details: tuple[str, ...] = ()
    detail_codes: IntArray | None = None


class NodeFilter(Protocol):
    name: ClassVar[str]
    reason: ClassVar[Reason]

    def node_mask(self, req: Request, state: ClusterState) -> BoolArray | None: ...

    def why(self, req: Request) -> tuple[Reason, str]:
        """The reason and its detail that explanations blame a failing node on."""
        ...


@runtime_checkable
class NodeDetails(Protocol):
    """A node filter whose failing nodes fail for different things (which taint a node carries):
    ``details`` gives per node ``[N]`` an index into texts (-1 where it passes), each text the
    detail of the filter's reason. Explanations then count each text apart, as kube's FitError
    counts "untolerated taint {gpu: true}" apart from "untolerated taint {infra: }"."""

    def details(self, req: Request, state: ClusterState) -> tuple[IntArray, tuple[str, ...]]: ...


class FixedReason:
    """Mixin: a node filter whose failures always read as its one reason, without detail."""

    reason: ClassVar[Reason]

    def why(self, req: Request) -> tuple[Reason, str]:
        return self.reason, ""


class DeviceFilter(Protocol):
    name: ClassVar[str]
    reason: ClassVar[Reason]
    dynamic: ClassVar[bool]

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None: ...

    def stages(self, req: Request, state: ClusterState, ctx: Context) -> list[Stage]: ...


class SimpleStages:
    """Mixin: a device filter whose explanation is its mask and its one reason."""

    reason: ClassVar[Reason]

    def device_mask(self, req: Request, state: ClusterState, ctx: Context) -> BoolArray | None:
        raise NotImplementedError

    def stages(self, req: Request, state: ClusterState, ctx: Context) -> list[Stage]:
        mask = self.device_mask(req, state, ctx)
        return [] if mask is None else [Stage(mask, self.reason)]
