"""The options every process that places work reads at start, whichever front it serves: the
site catalog (``--catalog FILE``), the profile file (``--profile FILE``), the policy named
(``--policy``) and online defragmentation's options (``--defrag-moves-per-hour``,
``--defrag-lost-gpu-hours``, ``--defrag-min-cards``, ``--consolidate``: ``xpupool up`` and
``xpupool simulate``).
``xpupool up``, ``xpupool simulate`` and ``xpupool k8s extender`` all take the first three, so they
live below the command modules (``cli.py`` and ``k8s/cli.py``) that each of those commands sits in,
and a bad file or name reads the same whichever command was given it: one line naming the file
and the field, exit 1, before anything starts. Heavy imports stay inside the functions, so that
``xpupool --help`` does not load the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from xpupool.model.errors import RequestError, XpupoolError

if TYPE_CHECKING:
    from xpupool.catalog.operator_file import OperatorCatalog
    from xpupool.engine.cycle.consolidate import ConsolidationRule
    from xpupool.engine.cycle.faster_cards import FasterRule
    from xpupool.engine.profile import Profile

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_PROFILE = "xpupool"
"""The engine's default profile (engine/profile.py ``DEFAULT_PROFILE``), named here so that the
commands start without importing the engine (a unit test keeps the two equal)."""


def catalog_option(func: F) -> F:
    """Adds ``--catalog FILE`` (the site's image rules, docs/images.md); the command receives
    ``catalog_file`` and loads it with :func:`load_catalog` before starting anything."""
    return click.option(
        "--catalog",
        "catalog_file",
        type=click.Path(dir_okay=False, resolve_path=True),
        default=None,
        metavar="FILE",
        help="YAML of site catalog rules (images: ...), tried before the built-in ones; checked "
        "at start: a mistake stops it, naming the file, line and field (docs/images.md)",
    )(func)


def defrag_budget_options(work: str, min_cards: float) -> Callable[[F], F]:
    """Adds ``--defrag-moves-per-hour`` and ``--defrag-lost-gpu-hours``, the disruption budget
    (``engine/cycle/defrag.py`` ``DisruptionBudget``; its defaults) that ``xpupool up`` and
    ``xpupool simulate`` read alike, and ``--defrag-min-cards`` (default ``min_cards``);
    ``work``: what the help calls what moves and waits (jobs, tasks)."""

    def add(func: F) -> F:
        func = click.option(
            "--defrag-min-cards",
            type=click.FloatRange(min=0.0),
            default=min_cards,
            show_default=True,
            help=f"with --defrag: move work only for {work} asking at least this many cards",
        )(func)
        func = click.option(
            "--defrag-lost-gpu-hours",
            type=click.FloatRange(min=0.0),
            default=8.0,
            show_default=True,
            help="with --defrag: GPU-hours moves may lose in any day, pool-wide",
        )(func)
        return click.option(
            "--defrag-moves-per-hour",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            help=f"with --defrag: moves of one tenant's {work} in any hour, at most",
        )(func)

    return add


def consolidate_options(work: str) -> Callable[[F], F]:
    """Adds ``--consolidate``, ``--consolidate-quiet`` and ``--consolidate-every``
    (``engine/cycle/consolidate.py`` ``ConsolidationRule``; its defaults), which ``xpupool up`` and
    ``xpupool simulate`` read alike (:func:`consolidation_rule`); ``work``: what the help calls
    what waits and moves."""

    def add(func: F) -> F:
        func = click.option(
            "--consolidate-every",
            default="1m",
            show_default=True,
            metavar="DURATION",
            help="with --consolidate: at most one search for moves this often",
        )(func)
        func = click.option(
            "--consolidate-quiet",
            default="10m",
            show_default=True,
            metavar="DURATION",
            help=f"with --consolidate: quiet once no {work} waited for this long",
        )(func)
        return click.option(
            "--consolidate",
            is_flag=True,
            help=f"with --defrag: in quiet periods, move a few {work}s that free whole cards "
            "for the large shapes the learned workload expects, within the --defrag budget "
            "(docs/defragmentation.md)",
        )(func)

    return add


def consolidation_rule(on: bool, defrag: bool, quiet: str, every: str) -> ConsolidationRule | None:
    """``--consolidate``'s rule (None: off). Refused without ``--defrag`` (its budget and
    movable work are the defragmentation's), a bad duration naming its flag, and
    ``--consolidate-quiet`` or ``--consolidate-every`` without ``--consolidate``."""
    from click.core import ParameterSource

    from xpupool.client._times import duration_s
    from xpupool.engine.cycle.consolidate import ConsolidationRule

    if not on:
        ctx = click.get_current_context()
        for name in ("consolidate_quiet", "consolidate_every"):
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT:
                hint = "--" + name.replace("_", "-")
                raise click.BadParameter("needs --consolidate", param_hint=hint)
        return None
    if not defrag:
        raise click.BadParameter("needs --defrag (its budget)", param_hint="--consolidate")
    quiet_s = duration_s(quiet)
    if quiet_s is None:
        hint = "--consolidate-quiet"
        raise click.BadParameter(f"{quiet!r}: use a duration such as 10m", param_hint=hint)
    every_s = duration_s(every)
    if every_s is None:
        hint = "--consolidate-every"
        raise click.BadParameter(f"{every!r}: use a duration such as 1m", param_hint=hint)
    return ConsolidationRule(quiet_s=quiet_s, every_s=every_s)


def move_faster_options(needs: str) -> Callable[[F], F]:
    """Adds ``--move-faster`` and its rule's margins (``engine/cycle/faster_cards.py``
    ``FasterRule``; its defaults), which ``xpupool up`` and ``xpupool simulate`` read alike
    (:func:`faster_rule`); ``needs``: what the help says the flag needs besides."""

    def add(func: F) -> F:
        func = click.option(
            "--move-faster-restart",
            default="0s",
            show_default=True,
            metavar="DURATION",
            help="with --move-faster: what a moved job takes to restart on its new cards",
        )(func)
        func = click.option(
            "--move-faster-gain",
            default="30m",
            show_default=True,
            metavar="DURATION",
            help="with --move-faster: and at least this much longer",
        )(func)
        func = click.option(
            "--move-faster-speedup",
            type=click.FloatRange(min=1.0, min_open=True),
            default=1.5,
            show_default=True,
            help="with --move-faster: the remaining run must be at least this many times longer",
        )(func)
        return click.option(
            "--move-faster",
            is_flag=True,
            help=f"{needs}move a running job to free faster cards when its remaining run "
            "ends enough sooner there, lost work counted (docs/simulator.md, docs/jobs.md)",
        )(func)

    return add


def faster_rule(on: bool, speedup: float, gain: str, restart: str) -> FasterRule | None:
    """``--move-faster``'s rule (None: off). A bad duration is refused naming its flag; a
    margin given without ``--move-faster`` too."""
    from click.core import ParameterSource

    from xpupool.client._times import duration_s
    from xpupool.engine.cycle.faster_cards import FasterRule

    if not on:
        ctx = click.get_current_context()
        for name in ("speedup", "gain", "restart"):
            if ctx.get_parameter_source(f"move_faster_{name}") is not ParameterSource.DEFAULT:
                raise click.BadParameter("needs --move-faster", param_hint=f"--move-faster-{name}")
        return None
    gain_s, restart_s = duration_s(gain), duration_s(restart)
    if gain_s is None:
        hint = "--move-faster-gain"
        raise click.BadParameter(f"{gain!r}: use a duration such as 30m", param_hint=hint)
    if restart_s is None:
        hint = "--move-faster-restart"
        raise click.BadParameter(f"{restart!r}: use a duration such as 1m", param_hint=hint)
    return FasterRule(speedup, gain_s, restart_s)


def load_catalog(path: str | None) -> OperatorCatalog | None:
    """The operator's ``--catalog FILE`` (None without it); a bad file is one line naming the
    file, line and field, exit 1, before anything is started."""
    if path is None:
        return None
    from xpupool.catalog.operator_file import load_operator_catalog

    try:
        return load_operator_catalog(path)
    except XpupoolError as exc:
        raise click.ClickException(f"--catalog: {exc}") from None


def load_profiles(path: str | None) -> dict[str, Profile]:
    """The profiles of ``--profile FILE`` (none without it); a bad file is one line naming the
    file and the field, exit 1."""
    if path is None:
        return {}
    from xpupool.engine.profile_file import load_profile_file

    try:
        return load_profile_file(path)
    except XpupoolError as exc:
        raise click.ClickException(f"{path}: {exc}") from None


def check_policies(policies: list[str], profiles: dict[str, Profile]) -> None:
    """Every name in ``policies`` is a built-in profile or one of ``profiles`` (--policy)."""
    from xpupool.engine import BUILTIN_PROFILES
    from xpupool.engine.profile import known_profile

    known = {**BUILTIN_PROFILES, **profiles}
    for policy in policies:
        try:
            known_profile(known, policy, "--policy")
        except RequestError as exc:
            raise click.BadParameter(
                f"{exc.reason} (got {policy!r})", param_hint=exc.field
            ) from None
