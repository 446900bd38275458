"""The ``xpupool`` command: one entry point, one sub-command per job."""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING

import click

from xpupool.model.errors import XpupoolError
from xpupool.start_options import (
    DEFAULT_PROFILE,
    check_policies,
    consolidate_options,
    consolidation_rule,
    defrag_budget_options,
    faster_rule,
    load_profiles,
    move_faster_options,
)

if TYPE_CHECKING:
    from xpupool.engine.cycle.defrag import DisruptionBudget
    from xpupool.engine.cycle.faster_cards import FasterRule

# Commands defined in other modules, by name: "module:attribute". A command's module is imported
# when it runs (or when --help lists every command with its help), so `xpupool nodes` imports the
# client and nothing of the server, the agent or Kubernetes (tests/unit/cli/test_imports.py).
# Moving a command to another module changes its string here and nothing else.
LAZY_COMMANDS = {
    "up": "xpupool.cli_up:up",
    "agent": "xpupool.agent.command:agent_command",
    "submit": "xpupool.client.cli_jobs:submit",
    "jobs": "xpupool.client.cli_jobs:jobs",
    "job": "xpupool.client.cli_jobs:job",
    "logs": "xpupool.client.cli_jobs:logs",
    "cancel": "xpupool.client.cli_jobs:cancel",
    "nodes": "xpupool.client.cli_fleet:nodes",
    "devices": "xpupool.client.cli_fleet:devices",
    "sites": "xpupool.client.cli_fleet:sites",
    "site": "xpupool.client.cli_fleet:site",
    "queues": "xpupool.client.cli_fleet:queues",
    "top": "xpupool.client.cli_fleet:top",
    "node": "xpupool.client.cli_fleet:node",
    "device": "xpupool.client.cli_fleet:device",
    "accelerators": "xpupool.client.cli_catalog:accelerators",
    "plan": "xpupool.client.cli_models:plan_command",
    "models": "xpupool.client.cli_models:models_command",
    "tenant": "xpupool.client.cli_admin:tenant",
    "token": "xpupool.client.cli_admin:token",
    "queue": "xpupool.client.cli_admin:queue",
    "audit": "xpupool.client.cli_admin:audit",
    "usage": "xpupool.client.cli_usage:usage",
    "secret": "xpupool.client.cli_secrets:secret",
    "volume": "xpupool.client.cli_volumes:volume",
    "reservation": "xpupool.client.cli_reservations:reservation",
    "defrag": "xpupool.client.cli_defrag:defrag",
    "serve": "xpupool.client.cli_services:serve",
    "services": "xpupool.client.cli_services:services",
    "service": "xpupool.client.cli_services:service",
    "k8s": "xpupool.k8s.cli:k8s",
}


class _Group(click.Group):
    """Reports xpupool's own errors (bad input: field, value, reason) as one clean line, exit 1;
    imports the module of a command of ``LAZY_COMMANDS`` only when that command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = self.commands.get(cmd_name)
        if found is not None or cmd_name not in LAZY_COMMANDS:
            return found
        module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{LAZY_COMMANDS[cmd_name]} is not a click command")
        if command.name != cmd_name:  # a function named plan_command is `xpupool plan`
            raise TypeError(
                f"{LAZY_COMMANDS[cmd_name]} is named {command.name!r}, not {cmd_name!r}"
            )
        return command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except XpupoolError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Group)
@click.version_option(package_name="xpupool")
def main() -> None:
    """xpupool: one pool and one scheduler for a mixed accelerator fleet."""


@main.command()
@click.option(
    "--policy",
    default=DEFAULT_PROFILE,
    show_default=True,
    help="xpupool, binpack, spread, topology, fgd, ...",
)
@click.option(
    "--cluster",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML cluster file [default: the packaged two-site mixed pool]",
)
def demo(policy: str, cluster: str | None) -> None:
    """Place a stream of typical requests on a two-site mixed fleet and show the decisions."""
    from rich.console import Console

    from xpupool.demo import run_demo

    run_demo(Console(), policy, cluster)


@main.command()
@click.argument("text")
def spec(text: str) -> None:
    """Show the JSON request that a compact device spec stands for, e.g. 'A100:80GB:2'."""
    from xpupool.model.request_model import request_from_dict, request_to_dict

    click.echo(json.dumps(request_to_dict(request_from_dict(text)), indent=2))


def parse_seeds(text: str) -> list[int]:
    """'42-51' or '42,45,47' -> seeds."""
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            return list(range(low, high + 1))
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use a range such as 42-51 or a list such as 42,43"
        ) from None


@main.command()
@click.option(
    "--nodes",
    "nodes_path",
    type=click.Path(exists=True, dir_okay=False),
    help="node list CSV [default: openb_node_list_gpu_node.csv of the Alibaba GPU trace: "
    "$XPUPOOL_TRACES, else shared/traces/alibaba-gpu-v2023 beside the repository]",
)
@click.option(
    "--pods",
    "pods_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="pod list CSV (repeat for several traces) [default: openb_pod_list_default.csv "
    "beside the node list]",
)
@click.option(
    "--policy",
    default="random,dotprod,gpuclustering,gpupacking,bestfit,fgd,xpupool",
    show_default=True,
    help="comma-separated engine profiles: built-ins or the --profile file's (with --profile "
    "and no --policy: every profile of the file)",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(dir_okay=False),
    help="YAML profile file (docs/profiles.md)",
)
@click.option("--seeds", default="42-51", show_default=True, help="range 42-51 or list 42,43")
@click.option("--tune", default=1.3, show_default=True, help="target GPU demand / capacity")
@click.option("--jobs", default=1, show_default=True, help="parallel processes")
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False),
    help="authors' results folder [default: fgd_expected_results beside the pod list]",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    help="write an HTML page and PNG plots here",
)
@click.option(
    "--bound",
    is_flag=True,
    help="also compute the packing lower bound on unallocated % (no policy does better)",
)
@click.option("--json", "as_json", is_flag=True, help="print the full results as JSON")
@click.option(
    "--mode",
    type=click.Choice(["fgd", "timed"]),
    default="fgd",
    show_default=True,
    help="fgd: the paper's protocol; timed: arrivals and departures at trace times",
)
@click.option(
    "--queue",
    type=click.Choice(["fifo", "priority"]),
    default="fifo",
    show_default=True,
    help="timed mode: order in which waiting tasks are retried (priority = QoS class)",
)
@click.option(
    "--queue-config",
    type=click.Path(dir_okay=False, exists=True),
    help="timed mode: queues, quotas and tenants in the server's format, and which queue and "
    "priority each task gets (replaces --queue; see docs/simulator.md)",
)
@click.option(
    "--compress",
    default=1.0,
    show_default=True,
    help="timed mode: divide arrival times by this (load what-if); durations unchanged",
)
@click.option(
    "--throughputs",
    type=click.Path(dir_okay=False, exists=True),
    help="timed mode: the --pods are Gavel traces and this is Gavel's throughput matrix "
    "(simulation_throughputs.json): run times follow the card each job gets",
)
@click.option(
    "--gavel-cluster",
    default="300:300:300",
    show_default=True,
    help="with --throughputs: #v100:#p100:#k80, in servers of 8 cards",
)
@click.option(
    "--sites",
    "sites_file",
    type=click.Path(dir_okay=False, exists=True),
    help="timed mode: split the nodes into sites with links and datasets, and compare the site "
    "choice of xpupool with least-loaded and random (docs/simulator.md)",
)
@click.option(
    "--peak",
    type=float,
    default=None,
    help="timed mode: compress arrivals so that peak demand is this many times capacity "
    "(replaces --compress; e.g. 1.3)",
)
@click.option(
    "--checkpoints",
    is_flag=True,
    help="timed mode: tasks checkpoint as a seeded model draws; a victim resumes from its last "
    "checkpoint and GPU-hours lost are counted (docs/simulator.md)",
)
@click.option(
    "--checkpoint-aware",
    is_flag=True,
    help="timed mode: the preemption planner prefers victims that lose least",
)
@click.option(
    "--elastic-share",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    help="timed mode: make this share of the tasks asking 2+ whole cards elastic (replicas of one "
    "card, half to all of them; docs/simulator.md)",
)
@click.option(
    "--fair-share",
    type=click.Choice(["drf", "history"]),
    default="drf",
    show_default=True,
    help="timed mode: the order between tenants, as the server's --fair-share: 'drf' by the "
    "dominant share each holds now, 'history' by the share each held over a window decaying "
    "with --fair-share-half-life",
)
@click.option(
    "--fair-share-half-life",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help="with --fair-share history: what a tenant held this long ago (trace time) counts half",
)
@click.option(
    "--reservations",
    type=click.IntRange(min=0),
    default=0,
    help="timed mode: hold this many windows of 8 whole cards, each with a task booked into "
    "it, lent until each begins (docs/reservations.md)",
)
@click.option(
    "--defrag",
    is_flag=True,
    help="timed mode, with --checkpoints: move the fewest tasks that checkpoint so a task that "
    "fits nowhere fits (checkpoint, stop, requeue), within the budget below (docs/simulator.md)",
)
@move_faster_options("with --throughputs: ")
@defrag_budget_options("tasks", 4.0)
@consolidate_options("task")
def simulate(
    nodes_path: str | None,
    pods_paths: tuple[str, ...],
    policy: str,
    profile_file: str | None,
    seeds: str,
    tune: float,
    jobs: int,
    expected_dir: str | None,
    report_dir: str | None,
    as_json: bool,
    bound: bool,
    mode: str,
    queue: str,
    queue_config: str | None,
    compress: float,
    throughputs: str | None,
    gavel_cluster: str,
    sites_file: str | None,
    peak: float | None,
    checkpoints: bool,
    checkpoint_aware: bool,
    elastic_share: float,
    fair_share: str,
    fair_share_half_life: str,
    reservations: int,
    defrag: bool,
    defrag_moves_per_hour: int,
    defrag_lost_gpu_hours: float,
    defrag_min_cards: float,
    consolidate: bool,
    consolidate_quiet: str,
    consolidate_every: str,
    move_faster: bool,
    move_faster_speedup: float,
    move_faster_gain: str,
    move_faster_restart: str,
) -> None:
    """Replay a cluster trace under each policy and seed (the FGD paper's protocol, or in time)."""
    from pathlib import Path

    from rich.console import Console

    from xpupool.client.sim_tables import print_summary
    from xpupool.sim.report import run_traces, write_report
    from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

    if throughputs is not None and mode != "timed":
        raise click.BadParameter("needs --mode timed", param_hint="--throughputs")
    if throughputs is not None and not pods_paths:
        raise click.BadParameter("give the Gavel traces with --pods", param_hint="--pods")
    if elastic_share and (mode != "timed" or throughputs is not None):
        why = "needs --mode timed, without --throughputs (elastic tasks run by the trace's times)"
        raise click.BadParameter(why, param_hint="--elastic-share")
    if defrag and (mode != "timed" or throughputs is not None or not checkpoints):
        why = "needs --mode timed and --checkpoints (tasks that checkpoint move), no --throughputs"
        raise click.BadParameter(why, param_hint="--defrag")
    faster = _faster_rule(
        move_faster, throughputs, move_faster_speedup, move_faster_gain, move_faster_restart
    )
    history_half_life_s = _fair_share_half_life(mode, fair_share, fair_share_half_life)
    if history_half_life_s is not None and throughputs is not None:
        raise click.BadParameter("not with --throughputs", param_hint="--fair-share")
    if nodes_path is None:
        nodes_path = "" if throughputs is not None else str(default_nodes())
    profiles = load_profiles(profile_file)
    names = [p.strip() for p in policy.split(",") if p.strip()]
    source = click.get_current_context().get_parameter_source("policy")
    if profiles and source is click.core.ParameterSource.DEFAULT:
        names = list(profiles)
    check_policies(names, profiles)
    policies = [profiles.get(name, name) for name in names]
    if not pods_paths:
        default = Path(nodes_path).parent / DEFAULT_PODS
        if not default.exists():
            raise click.BadParameter("give --pods", param_hint="--pods")
        pods_paths = (str(default),)
    console = Console(stderr=as_json)
    if mode == "timed":
        from xpupool.client.queue_file import load_queue_config
        from xpupool.client.sim_tables import print_timed
        from xpupool.model.errors import RequestError
        from xpupool.sim.report import run_timed_traces
        from xpupool.sim.runner import TimedOptions

        if compress <= 0:
            raise click.BadParameter("must be positive", param_hint="--compress")
        from xpupool.sim.site_dispatch import load_sim_sites

        if peak is not None and peak <= 0:
            raise click.BadParameter("must be positive", param_hint="--peak")
        try:
            queues = load_queue_config(queue_config) if queue_config else None
        except RequestError as exc:
            raise click.BadParameter(str(exc), param_hint="--queue-config") from None
        if throughputs is not None:
            from xpupool.sim.gavel_trace import run_timed

            try:
                timed = [
                    run_timed(
                        pods,
                        throughputs,
                        p,
                        s,
                        gavel_cluster,
                        compress=compress,
                        faster=faster,
                        checkpoints=checkpoints,
                    )
                    for pods in pods_paths
                    for p in policies
                    for s in parse_seeds(seeds)
                ]
            except RequestError as exc:
                raise click.BadParameter(str(exc), param_hint="--pods") from None
            if as_json:
                click.echo(json.dumps({"mode": "timed", "compress": compress, "runs": timed}))
            else:
                print_timed(console, timed)
            return
        try:
            sites = load_sim_sites(sites_file) if sites_file else None
        except RequestError as exc:
            raise click.BadParameter(str(exc), param_hint="--sites") from None
        try:
            timed = run_timed_traces(
                nodes_path,
                list(pods_paths),
                policies,
                parse_seeds(seeds),
                queue,
                compress,
                queues,
                console,
                sites,
                TimedOptions(
                    peak,
                    checkpoints,
                    checkpoint_aware,
                    elastic_share,
                    history_half_life_s,
                    reservations,
                    _defrag_budget(defrag, defrag_moves_per_hour, defrag_lost_gpu_hours),
                    defrag_min_cards,
                    consolidation_rule(consolidate, defrag, consolidate_quiet, consolidate_every),
                ),
            )
        except ValueError as exc:  # a peak the trace cannot reach (sim/load.py)
            if peak is None:
                raise
            raise click.BadParameter(str(exc), param_hint="--peak") from None
        if as_json:
            click.echo(
                json.dumps({"mode": "timed", "queue": queue, "compress": compress, "runs": timed})
            )
        else:
            print_timed(console, timed)
        return
    results = run_traces(
        nodes_path,
        list(pods_paths),
        policies,
        parse_seeds(seeds),
        tune,
        jobs,
        expected_dir,
        console,
        bound,
    )
    if as_json:
        payload = results[0] if len(results) == 1 else {"traces": results}
        click.echo(json.dumps(payload))
    else:
        for result in results:
            print_summary(console, result)
    if report_dir:
        page = write_report(Path(report_dir), results)
        console.print(f"report: {page}")


def _fair_share_half_life(mode: str, fair_share: str, text: str) -> float | None:
    """``simulate --fair-share``'s half-life in seconds (None: DRF on what is held now)."""
    from xpupool.client._times import duration_s

    if fair_share == "drf":
        return None
    if mode != "timed":
        raise click.BadParameter("needs --mode timed", param_hint="--fair-share")
    half_life_s = duration_s(text)
    if not half_life_s:
        raise click.BadParameter(
            f"{text!r}: use a duration above 0 such as 30m or 1h",
            param_hint="--fair-share-half-life",
        )
    return half_life_s


def _faster_rule(
    on: bool, throughputs: str | None, speedup: float, gain: str, restart: str
) -> FasterRule | None:
    """``simulate --move-faster``'s rule (None: no moves to faster cards)."""
    if on and throughputs is None:
        why = "needs --mode timed and --throughputs (run times by card)"
        raise click.BadParameter(why, param_hint="--move-faster")
    return faster_rule(on, speedup, gain, restart)


def _defrag_budget(on: bool, moves_per_hour: int, lost_gpu_hours: float) -> DisruptionBudget | None:
    """``simulate --defrag``'s disruption budget (None: no defragmentation)."""
    from xpupool.engine.cycle.defrag import DisruptionBudget

    return DisruptionBudget(moves_per_hour, lost_gpu_hours) if on else None


@main.command()
@click.option(
    "--fake",
    "fake_path",
    type=click.Path(dir_okay=False),
    help="also report devices described in this YAML file (the fake probe)",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def probe(fake_path: str | None, output: str) -> None:
    """Discover this host's accelerators with every vendor probe, and say why a probe found none."""
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    from xpupool.model.quantity import format_mib
    from xpupool.probes import FakeProbe, Probe, discover_host, host_probes

    probes: list[Probe] = host_probes()
    if fake_path:
        probes.append(FakeProbe(fake_path))
    found = discover_host(probes)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "devices": [asdict(d) for d in found.devices],
                    "failures": [
                        {
                            "vendor": f.vendor,
                            "command": f.command,
                            "kind": f.kind.value,
                            "detail": f.detail,
                        }
                        for f in found.failures
                    ],
                    "absent": found.skipped,
                },
                default=str,
            )
        )
        return
    console = Console()
    table = Table(title=f"{len(found.devices)} devices on this host")
    for column in ("index", "vendor", "model", "memory", "used", "driver", "link", "health"):
        table.add_column(column)
    for d in found.devices:
        used = "-" if d.memory_used_mib is None else format_mib(d.memory_used_mib)
        table.add_row(
            str(d.index),
            d.vendor,
            d.canonical_model or d.model,
            format_mib(d.memory_total_mib),
            used,
            d.driver_version or "-",
            d.link_group or "-",
            d.health.value,
        )
    console.print(table)
    for failure in found.failures:
        console.print(f"[yellow]{failure}[/]")
    if found.skipped:
        console.print(f"no library or tool for: {', '.join(found.skipped)}")
