"""The profile file: profiles written by people, shaped like kube-scheduler's
KubeSchedulerConfiguration so that Kubernetes users recognise it (``docs/profiles.md``).

Parsing is strict and stops at the first mistake with the path to it
(``profiles[0].plugins.score.enabled[1].name: unknown scorer``): unknown keys, unknown plugins,
unknown or mistyped plugin arguments, bad weights, duplicate names, and a capacity filter turned
off are all refused when the file loads, so a typo never turns into a silently different policy.
The engine sees only the :class:`Profile` records this builds, through ``profile.py``'s checks.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path

import yaml

from xpupool.engine.fragmentation.workload_model import NAME as WORKLOAD
from xpupool.engine.profile import (
    BUILTIN_PROFILES,
    Profile,
    check_device_policy,
    check_filter_off,
    check_post,
    check_scorer,
    check_weight,
    known_profile,
)
from xpupool.engine.registry import FILTERS, PLUGIN_ARGS, WORKLOAD_PLUGINS
from xpupool.engine.scorers.base import PluginArgs
from xpupool.model.errors import RequestError
from xpupool.model.request import DevicePolicy

API_VERSION = "xpupool/v1"
KIND = "SchedulerConfiguration"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_TOP = frozenset({"apiVersion", "kind", "profiles"})
_PROFILE = frozenset({"name", "base", "devicePolicy", "plugins", "pluginConfig"})
_PLUGINS = frozenset({"filter", "score", "postScore"})
_SET = frozenset({"enabled", "disabled"})


def load_profile_file(path: str | Path) -> dict[str, Profile]:
    """The profiles in the YAML file at ``path``, in file order; raises :class:`RequestError`
    (field ``profile file`` for I/O and YAML errors, else the path inside the document)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RequestError("profile file", str(path), f"cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RequestError("profile file", str(path), f"not valid YAML: {exc}") from None
    return parse_profiles(data)


def parse_profiles(
    data: object, builtins: Mapping[str, Profile] = BUILTIN_PROFILES
) -> dict[str, Profile]:
    """The profiles of a parsed profile document (see the module docstring for the checks)."""
    top = _mapping(data, "", _TOP)
    if "apiVersion" in top and top["apiVersion"] != API_VERSION:
        raise RequestError("apiVersion", top["apiVersion"], f"must be {API_VERSION!r}")
    if "kind" in top and top["kind"] != KIND:
        raise RequestError("kind", top["kind"], f"must be {KIND!r}")
    items = _list(top.get("profiles"), "profiles")
    if not items:
        raise RequestError("profiles", items, "give at least one profile")
    out: dict[str, Profile] = {}
    for i, item in enumerate(items):
        profile = _profile(item, f"profiles[{i}]", {**builtins, **out})
        if profile.name in builtins:
            raise RequestError(
                f"profiles[{i}].name",
                profile.name,
                "a built-in profile has this name; use base: NAME to start from it",
            )
        if profile.name in out:
            raise RequestError(f"profiles[{i}].name", profile.name, "duplicate profile name")
        out[profile.name] = profile
    return out


def _profile(data: object, at: str, known: Mapping[str, Profile]) -> Profile:
    raw = _mapping(data, at, _PROFILE)
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise RequestError(
            f"{at}.name", name, "give a name of lowercase letters, digits, '.', '_' or '-'"
        )
    base: Profile | None = None
    if "base" in raw:
        base = known_profile(known, str(raw["base"]), f"{at}.base")
    policy = base.device_policy if base else DevicePolicy.BINPACK
    if "devicePolicy" in raw:
        policy = check_device_policy(raw["devicePolicy"], f"{at}.devicePolicy")
    plugins = _mapping(raw.get("plugins", {}), f"{at}.plugins", _PLUGINS)
    disabled = _filters(plugins.get("filter"), f"{at}.plugins.filter", base)
    scorers = _scorers(plugins.get("score"), f"{at}.plugins.score", base)
    post = _post(plugins.get("postScore"), f"{at}.plugins.postScore", base)
    names = {*scorers, *post}
    if not names.isdisjoint(WORKLOAD_PLUGINS):
        names.add(WORKLOAD)  # the shared model its plugins build on takes arguments too
    args = _plugin_config(raw.get("pluginConfig"), f"{at}.pluginConfig", names, base)
    return Profile(name, tuple(scorers.items()), policy, disabled, args, post)


def _filters(data: object, at: str, base: Profile | None) -> frozenset[str]:
    """The filters turned off: the base's, plus ``disabled``, minus ``enabled``."""
    if data is None:
        return base.disabled_filters if base else frozenset()
    raw = _mapping(data, at, _SET)
    off = set(base.disabled_filters if base else ())
    for i, name in _names(raw.get("disabled"), f"{at}.disabled"):
        off.add(check_filter_off(name, f"{at}.disabled[{i}].name"))
    for i, name in _names(raw.get("enabled"), f"{at}.enabled"):
        if name not in FILTERS:
            raise RequestError(
                f"{at}.enabled[{i}].name", name, f"unknown filter; known: {', '.join(FILTERS)}"
            )
        off.discard(name)
    return frozenset(off)


def _scorers(data: object, at: str, base: Profile | None) -> dict[str, float]:
    """Scorer -> weight: the base's, minus ``disabled`` (``*`` for all), plus ``enabled``
    (a scorer already there takes the new weight)."""
    scorers = dict(base.scorers) if base else {}
    if data is None:
        return scorers
    raw = _mapping(data, at, _SET)
    for i, name in _names(raw.get("disabled"), f"{at}.disabled", star=True):
        if name == "*":
            scorers.clear()
        else:
            scorers.pop(check_scorer(name, f"{at}.disabled[{i}].name"), None)
    seen: set[str] = set()
    for i, item in enumerate(_list(raw.get("enabled", []), f"{at}.enabled")):
        entry = _mapping(item, f"{at}.enabled[{i}]", frozenset({"name", "weight"}))
        name = check_scorer(entry.get("name"), f"{at}.enabled[{i}].name")
        if name in seen:
            raise RequestError(f"{at}.enabled[{i}].name", name, "scorer enabled twice")
        seen.add(name)
        scorers[name] = check_weight(entry.get("weight", 1), f"{at}.enabled[{i}].weight")
    return scorers


def _post(data: object, at: str, base: Profile | None) -> tuple[str, ...]:
    """Post-score plugins, in order: the base's, minus ``disabled`` (``*`` for all), plus
    ``enabled`` (appended)."""
    post = list(base.post) if base else []
    if data is None:
        return tuple(post)
    raw = _mapping(data, at, _SET)
    for i, name in _names(raw.get("disabled"), f"{at}.disabled", star=True):
        if name == "*":
            post.clear()
        elif check_post(name, f"{at}.disabled[{i}].name") in post:
            post.remove(name)
    for i, name in _names(raw.get("enabled"), f"{at}.enabled"):
        if check_post(name, f"{at}.enabled[{i}].name") in post:
            raise RequestError(f"{at}.enabled[{i}].name", name, "post-score plugin enabled twice")
        post.append(name)
    return tuple(post)


def _plugin_config(
    data: object, at: str, plugins: set[str], base: Profile | None
) -> tuple[tuple[str, PluginArgs], ...]:
    """Each enabled plugin's arguments: the base's (or the plugin's defaults), with the fields
    ``pluginConfig`` sets replaced; only plugins of this profile that take arguments (its
    scorers, its post-score plugins, and the workload model when one of them builds on it)."""
    args = {k: v for k, v in (base.args if base else ()) if k in plugins}
    seen: set[str] = set()
    for i, item in enumerate(_list(data if data is not None else [], at)):
        entry = _mapping(item, f"{at}[{i}]", frozenset({"name", "args"}))
        name = entry.get("name")
        if name not in plugins:
            known = ", ".join(sorted(plugins)) or "none"
            raise RequestError(
                f"{at}[{i}].name", name, f"not a plugin of this profile; its plugins: {known}"
            )
        assert isinstance(name, str)
        if name in seen:
            raise RequestError(f"{at}[{i}].name", name, "configured twice")
        seen.add(name)
        default = PLUGIN_ARGS.get(name)
        if default is None:
            raise RequestError(f"{at}[{i}].name", name, "this plugin takes no arguments")
        args[name] = parse_args(args.get(name, default), entry.get("args", {}), f"{at}[{i}].args")
    return tuple(args.items())


def parse_args(default: PluginArgs, data: object, at: str) -> PluginArgs:
    """``default`` with the fields ``data`` sets replaced; each value must have the field's type
    (bool, int, or float, which also takes an int) and be finite. Fields of other types (the
    energy scorer's power figures) are set in code, not in a file."""
    hints = typing.get_type_hints(type(default))
    known = {f.name for f in fields(default) if hints[f.name] in (bool, int, float)}
    raw = _mapping(data, at, frozenset(known))
    changes: dict[str, bool | int | float] = {}
    for key, value in raw.items():
        field, expected = f"{at}.{key}", hints[str(key)]
        ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise RequestError(
                field,
                value,
                f"expected {'a finite ' if expected is float else 'a '}{expected.__name__}",
            )
        assert isinstance(value, bool | int | float)
        changes[str(key)] = value
    try:
        return replace(default, **changes)
    except (TypeError, ValueError) as exc:
        raise RequestError(at, dict(raw), str(exc)) from None


def _mapping(data: object, at: str, allowed: frozenset[str]) -> Mapping[object, object]:
    if not isinstance(data, Mapping):
        raise RequestError(at or "profile file", data, "expected a mapping of key: value")
    for key in data:
        if key not in allowed:
            field = f"{at}.{key}" if at else str(key)
            raise RequestError(field, key, f"unknown key; known: {', '.join(sorted(allowed))}")
    return data


def _list(data: object, at: str) -> list[object]:
    if not isinstance(data, list):
        raise RequestError(at, data, "expected a list")
    return data


def _names(data: object, at: str, star: bool = False) -> list[tuple[int, str]]:
    """``[{name: X}, ...]`` as (index, X); ``*`` only where ``star`` allows it."""
    out: list[tuple[int, str]] = []
    for i, item in enumerate(_list(data if data is not None else [], at)):
        entry = _mapping(item, f"{at}[{i}]", frozenset({"name"}))
        name = entry.get("name")
        if not isinstance(name, str) or (name == "*" and not star):
            raise RequestError(f"{at}[{i}].name", name, "expected a plugin name")
        out.append((i, name))
    return out
