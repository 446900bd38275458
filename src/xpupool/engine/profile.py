"""Profiles: which filters run, which scorers rate nodes with what weights and arguments, and how
devices are picked in the node.

A cluster has a default profile; a request may name another (``node_policy``) and override the
device policy. Everything is checked when the profile is made, not when it is first used: unknown
scorer or filter names, bad weights, arguments a plugin does not take, and turning off a capacity
filter (``registry.CAPACITY_FILTERS``) all raise :class:`RequestError` naming the field. Profiles
written by people come from a file (``profile_file.py``) through the same checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from xpupool.engine.registry import CAPACITY_FILTERS, FILTERS, SCORER_ARGS, SCORERS
from xpupool.engine.scorers.base import PluginArgs
from xpupool.model.errors import RequestError
from xpupool.model.request import DevicePolicy


@dataclass(frozen=True, slots=True)
class Profile:
    """``scorers`` are (name, weight) pairs; the node score is their weighted sum.
    ``disabled_filters`` names the registry filters that do not run; ``args`` gives, per scorer
    that takes arguments, those it runs with (absent: the plugin's defaults)."""

    name: str
    scorers: tuple[tuple[str, float], ...]
    device_policy: DevicePolicy = DevicePolicy.BINPACK
    disabled_filters: frozenset[str] = frozenset()
    args: tuple[tuple[str, PluginArgs], ...] = ()

    def args_of(self, scorer: str) -> PluginArgs | None:
        """The arguments ``scorer`` runs with in this profile (None: its defaults)."""
        for name, args in self.args:
            if name == scorer:
                return args
        return None


def check_scorer(name: object, field: str) -> str:
    if not isinstance(name, str) or name not in SCORERS:
        raise RequestError(field, name, f"unknown scorer; known: {', '.join(SCORERS)}")
    return name


def check_weight(weight: object, field: str, *, zero_ok: bool = False) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise RequestError(field, weight, "weight must be a number")
    if not math.isfinite(weight) or weight < 0 or (weight == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0 (leave a scorer out to turn it off)"
        raise RequestError(field, weight, f"weight must be finite and {bound}")
    return float(weight)


def check_filter_off(name: object, field: str) -> str:
    """A filter a profile may turn off: a registry filter that does not guard capacity."""
    if not isinstance(name, str) or name not in FILTERS:
        raise RequestError(field, name, f"unknown filter; known: {', '.join(FILTERS)}")
    if name in CAPACITY_FILTERS:
        raise RequestError(
            field,
            name,
            "a capacity filter cannot be disabled: without it nodes and cards would be"
            f" over-committed or broken hardware used ({', '.join(sorted(CAPACITY_FILTERS))})",
        )
    return name


def check_device_policy(policy: object, field: str) -> DevicePolicy:
    try:
        return DevicePolicy(str(policy))
    except ValueError:
        raise RequestError(field, policy, "must be 'binpack' or 'spread'") from None


def check_args(scorer: str, args: PluginArgs, field: str) -> PluginArgs:
    default = SCORER_ARGS.get(scorer)
    if default is None:
        raise RequestError(field, scorer, "this plugin takes no arguments")
    if type(args) is not type(default):
        raise RequestError(field, args, f"expected {type(default).__name__}")
    return args


def make_profile(
    name: str,
    scorers: Mapping[str, float],
    device_policy: str = "binpack",
    *,
    disabled_filters: Iterable[str] = (),
    args: Mapping[str, PluginArgs] | None = None,
) -> Profile:
    """Validate and build a profile; errors name ``profile.scorers.<name>``,
    ``profile.disabled_filters``, ``profile.args.<name>`` or the policy field."""
    for scorer, weight in scorers.items():
        check_scorer(scorer, f"profile.scorers.{scorer}")
        check_weight(weight, f"profile.scorers.{scorer}", zero_ok=True)
    policy = check_device_policy(device_policy, "profile.device_policy")
    off = frozenset(check_filter_off(f, "profile.disabled_filters") for f in disabled_filters)
    kept = tuple((k, float(v)) for k, v in scorers.items() if v > 0)
    plugin_args = tuple(
        (scorer, check_args(scorer, a, f"profile.args.{scorer}"))
        for scorer, a in (args or {}).items()
    )
    return Profile(name, kept, policy, off, plugin_args)


# A request's stated preference (``prefer-site``) outranks the policy in the built-in profiles:
# 100 x 100 points exceed what all their other scorers together (weights summing to at most 11,
# each score in 0..100) can tell two nodes apart by. It counts only for requests that state one
# (``scorers/base.py`` Preference), so it changes nothing for the others.
PREFERENCE_WEIGHT = 100.0


def _builtin(name: str, scorers: Mapping[str, float], device_policy: str) -> Profile:
    return make_profile(name, {**scorers, "site": PREFERENCE_WEIGHT}, device_policy)


BUILTIN_PROFILES: dict[str, Profile] = {
    "binpack": _builtin("binpack", {"binpack": 1, "topology": 1}, "binpack"),
    "spread": _builtin("spread", {"spread": 1, "topology": 1}, "spread"),
    "topology": _builtin("topology", {"topology": 10, "binpack": 1}, "binpack"),
    "random": _builtin("random", {"random": 1}, "binpack"),
    # The FGD paper's policies (ATC'23 section 6), one scorer each, best-fit devices unless the
    # scorer picks its own (random, fgd).
    "fgd": _builtin("fgd", {"fgd": 1}, "binpack"),
    "bestfit": _builtin("bestfit", {"bestfit": 1}, "binpack"),
    "dotprod": _builtin("dotprod", {"dotprod": 1}, "binpack"),
    "gpupacking": _builtin("gpupacking", {"gpupacking": 1}, "binpack"),
    "gpuclustering": _builtin("gpuclustering", {"gpuclustering": 1}, "binpack"),
    # xpupool's own (docs/placement-policy.md): the engine's default.
    "xpupool": _builtin("xpupool", {"xpupool": 1}, "binpack"),
    # ... at FGD's resolution for one-card replicas, or without the lookahead (for comparison).
    "xpupool-fine": _builtin("xpupool-fine", {"xpupool-fine": 1}, "binpack"),
    "xpupool-greedy": _builtin("xpupool-greedy", {"xpupool-greedy": 1}, "binpack"),
}
DEFAULT_PROFILE = "xpupool"
