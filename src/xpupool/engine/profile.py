"""Profiles: which filters run, which scorers rate nodes with what weights and arguments, which
post-score steps may choose among the best, and how devices are picked in the node.

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
from typing import Any

from xpupool.engine.registry import (
    CAPACITY_FILTERS,
    FILTERS,
    PLUGIN_ARGS,
    POST_SCORERS,
    SCORERS,
    WORKLOAD_PLUGINS,
)
from xpupool.engine.scorers.base import PluginArgs
from xpupool.engine.scorers.xpupool import FragmentationArgs
from xpupool.model.errors import RequestError
from xpupool.model.request import DevicePolicy


@dataclass(frozen=True, slots=True)
class Profile:
    """``scorers`` are (name, weight) pairs; the node score is their weighted sum.
    ``disabled_filters`` names the registry filters that do not run; ``args`` gives, per plugin
    that takes arguments, those it runs with (absent: the plugin's defaults); ``post`` names the
    post-score plugins (``registry.POST_SCORERS``), in the order they run."""

    name: str
    scorers: tuple[tuple[str, float], ...]
    device_policy: DevicePolicy = DevicePolicy.BINPACK
    disabled_filters: frozenset[str] = frozenset()
    args: tuple[tuple[str, PluginArgs], ...] = ()
    post: tuple[str, ...] = ()

    def args_of(self, plugin: str) -> PluginArgs | None:
        """The arguments ``plugin`` runs with in this profile (None: its defaults)."""
        for name, args in self.args:
            if name == plugin:
                return args
        return None

    @property
    def uses_workload_model(self) -> bool:
        """Does a plugin of this profile build on the engine's shared workload model?"""
        names = {name for name, _ in self.scorers} | set(self.post)
        return not names.isdisjoint(WORKLOAD_PLUGINS)


def check_scorer(name: object, field: str) -> str:
    if isinstance(name, str) and name not in SCORERS and name in BUILTIN_PROFILES:
        scorers = ", ".join(s for s, _ in BUILTIN_PROFILES[name].scorers)
        raise RequestError(
            field,
            name,
            f"a built-in profile, not a scorer (its scorers: {scorers}); use base: {name}",
        )
    if not isinstance(name, str) or name not in SCORERS:
        raise RequestError(field, name, f"unknown scorer; known: {', '.join(SCORERS)}")
    return name


def check_post(name: object, field: str) -> str:
    if not isinstance(name, str) or name not in POST_SCORERS:
        raise RequestError(
            field, name, f"unknown post-score plugin; known: {', '.join(POST_SCORERS)}"
        )
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


def check_args(plugin: str, args: PluginArgs, field: str) -> PluginArgs:
    default = PLUGIN_ARGS.get(plugin)
    if default is None:
        raise RequestError(field, plugin, "this plugin takes no arguments")
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
    post: Iterable[str] = (),
) -> Profile:
    """Validate and build a profile; errors name ``profile.scorers.<name>``,
    ``profile.disabled_filters``, ``profile.args.<name>``, ``profile.post`` or the policy field."""
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
    steps = tuple(check_post(p, "profile.post") for p in post)
    return Profile(name, kept, policy, off, plugin_args, steps)


# Every built-in profile ranks what a node is told apart by in this order: a request's stated
# preference (``prefer-site``), then the operator's PreferNoSchedule taints, then keeping CPU-only
# work off nodes with devices, then the policy. Each weight x 100 points exceeds what everything
# below it together can tell two nodes apart by: the policy at most 11 x 100 for the plain
# profiles (xpupool's weighted sum spans about 840); 20 x 100 for cpu-only; 40 x 100 > 2,000 +
# 1,100; 100 x 100 > 4,000 + 2,000 + 1,100. Each counts only where it has something to say (the
# site for requests that state one, ``scorers/base.py`` Preference; the other two when the nodes
# that fit differ in it, else they are skipped), so it changes nothing for the others.
PREFERENCE_WEIGHT = 100.0
TAINT_WEIGHT = 40.0
CPU_ONLY_WEIGHT = 20.0


def _builtin(name: str, scorers: Mapping[str, float], device_policy: str, **more: Any) -> Profile:
    ranked = {
        **scorers,
        "site": PREFERENCE_WEIGHT,
        "taint-toleration": TAINT_WEIGHT,
        "cpu-only": CPU_ONLY_WEIGHT,
    }
    return make_profile(name, ranked, device_policy, **more)


# xpupool's scorers and the weights that undo their bounded scores' scales, so that the sum keeps
# the policy's points: a card of packing loss 100, the fullest-card term at most 0.01, a thousandth
# of displaced demand 0.025 (6.4 = 0.025 * 256), the spare-CPU term at most 0.5. In this order:
# the sum is formed in it.
XPUPOOL_SCORERS: dict[str, float] = {
    "fragmentation": 1.0,
    "packing": 1.0,
    "fullest-card": 0.0001,
    "contention": 6.4,
    "spare-cpu": 0.005,
}

# The energy profile's weight of its power term (scores 0..100) over the default policy's terms:
# chosen on bench/energy_wait.py's sweep (docs/benchmarks.md, "Energy").
ENERGY_WEIGHT = 0.3

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
    # xpupool's own (docs/placement-policy.md, engine/scorers/xpupool/): the engine's default.
    "xpupool": _builtin("xpupool", XPUPOOL_SCORERS, "binpack", post=("lookahead",)),
    # ... at FGD's resolution for one-card replicas, or without the lookahead (for comparison).
    "xpupool-fine": _builtin(
        "xpupool-fine",
        {k: v for k, v in XPUPOOL_SCORERS.items() if k not in ("packing", "fullest-card")},
        "binpack",
        args={"fragmentation": FragmentationArgs(steps=100)},
        post=("lookahead",),
    ),
    "xpupool-greedy": _builtin("xpupool-greedy", XPUPOOL_SCORERS, "binpack"),
    # Each job on the cards where it runs best for what they are worth to others
    # (scorers/throughput.py); among those, packed. 10 x 100 exceeds binpack and topology together.
    "throughput": _builtin(
        "throughput", {"throughput": 10, "binpack": 1, "topology": 1}, "binpack"
    ),
    # Each job where it adds least power at its best speed: on cards and nodes already awake,
    # low-power models first (scorers/energy.py), among the placements the default policy rates
    # about equal: ENERGY_WEIGHT x 100 points is the most the power term can outweigh (a T4
    # against a V100-class card for a whole card: 77 points x the weight). At weight 10 it
    # outweighed every term of the default and stranded GPUs on CPU-poor low-power nodes
    # (docs/benchmarks.md, "Energy").
    "energy": _builtin(
        "energy", {**XPUPOOL_SCORERS, "energy": ENERGY_WEIGHT}, "binpack", post=("lookahead",)
    ),
}
DEFAULT_PROFILE = "xpupool"


def known_profile(profiles: Mapping[str, Profile], name: str, field: str) -> Profile:
    """The profile ``name`` names among ``profiles``, or :class:`RequestError` on ``field``.

    Every front that takes a policy name (a request's ``node_policy``, a queue's ``profile``,
    ``--policy``, a profile file's ``base``) refuses an unknown one here, so the wording and the
    list of known names are the same wherever the name came from; only the field differs."""
    found = profiles.get(name)
    if found is None:
        known = ", ".join(sorted(profiles))
        raise RequestError(field, name, f"unknown policy; known: {known}")
    return found
