"""The base of every plugin's arguments, in a module of its own so that plugins outside
``engine/scorers/`` (the shared workload model in ``engine/fragmentation/``) can declare theirs
without importing the scorers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PluginArgs:
    """Base of a plugin's arguments (a profile's ``pluginConfig``): a frozen dataclass whose fields
    are bool, int or float, each with a default, so that a profile file sets only what it changes
    and an unknown or mistyped argument is refused when the profile loads."""
