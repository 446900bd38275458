"""Profiles: which scorers rate nodes, with what weights, and how devices are picked in the node.

A cluster has a default profile; a request may name another (``node_policy``) and override the
device policy. Unknown scorer names fail when the profile is made, not when it is first used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from xpupool.engine.registry import SCORERS
from xpupool.model.errors import RequestError
from xpupool.model.request import DevicePolicy


@dataclass(frozen=True, slots=True)
class Profile:
    """``scorers`` are (name, weight) pairs; the node score is their weighted sum."""

    name: str
    scorers: tuple[tuple[str, float], ...]
    device_policy: DevicePolicy = DevicePolicy.BINPACK


def make_profile(
    name: str, scorers: Mapping[str, float], device_policy: str = "binpack"
) -> Profile:
    """Validate and build a profile; errors name ``profile.scorers.<name>`` or the policy field."""
    for scorer, weight in scorers.items():
        if scorer not in SCORERS:
            raise RequestError(
                f"profile.scorers.{scorer}", scorer, f"unknown scorer; known: {', '.join(SCORERS)}"
            )
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise RequestError(f"profile.scorers.{scorer}", weight, "weight must be a number")
        if not math.isfinite(weight) or weight < 0:
            raise RequestError(
                f"profile.scorers.{scorer}", weight, "weight must be finite and >= 0"
            )
    try:
        policy = DevicePolicy(device_policy)
    except ValueError:
        raise RequestError(
            "profile.device_policy", device_policy, "must be 'binpack' or 'spread'"
        ) from None
    return Profile(name, tuple((k, float(v)) for k, v in scorers.items() if v > 0), policy)


BUILTIN_PROFILES: dict[str, Profile] = {
    "binpack": make_profile("binpack", {"binpack": 1, "topology": 1}, "binpack"),
    "spread": make_profile("spread", {"spread": 1, "topology": 1}, "spread"),
    "topology": make_profile("topology", {"topology": 10, "binpack": 1}, "binpack"),
    "random": make_profile("random", {"random": 1}, "binpack"),
    # The FGD paper's policies (ATC'23 section 6), one scorer each, best-fit devices unless the
    # scorer picks its own (random, fgd).
    "fgd": make_profile("fgd", {"fgd": 1}, "binpack"),
    "bestfit": make_profile("bestfit", {"bestfit": 1}, "binpack"),
    "dotprod": make_profile("dotprod", {"dotprod": 1}, "binpack"),
    "gpupacking": make_profile("gpupacking", {"gpupacking": 1}, "binpack"),
    "gpuclustering": make_profile("gpuclustering", {"gpuclustering": 1}, "binpack"),
    # xpupool's own (docs/placement-policy.md): the engine's default.
    "xpupool": make_profile("xpupool", {"xpupool": 1}, "binpack"),
    # ... at FGD's resolution for one-card replicas, or without the lookahead (for comparison).
    "xpupool-fine": make_profile("xpupool-fine", {"xpupool-fine": 1}, "binpack"),
    "xpupool-greedy": make_profile("xpupool-greedy", {"xpupool-greedy": 1}, "binpack"),
}
DEFAULT_PROFILE = "xpupool"
