"""``xpupool nodes | devices | sites | queues | top``, node/device cordoning, node deletion and
site draining."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import click

from xpupool.client._cli_common import (
    CONNECTION_HELP,
    connection_options,
    console,
    emit,
    make_client,
    output_option,
    to_json,
)
from xpupool.client._render import devices_table, nodes_table, queues_table, sites_table

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from xpupool.server.schemas.nodes import NodeTaintsIn


@click.command(epilog=CONNECTION_HELP)
@click.option("--site", help="only this site")
@connection_options
@output_option
def nodes(site: str | None, url: str | None, token: str | None, output: str) -> None:
    """List nodes: status, schedulable, free devices, CPU and memory allocated."""
    with make_client(url, token) as client:
        found = client.nodes(site=site)
    emit(output, found, lambda: nodes_table(found))


@click.command(epilog=CONNECTION_HELP)
@click.option("--node", help="only this node")
@connection_options
@output_option
def devices(node: str | None, url: str | None, token: str | None, output: str) -> None:
    """List devices: allocation, live metrics, health, the jobs on each."""
    with make_client(url, token) as client:
        found = client.devices(node=node)
    emit(output, found, lambda: devices_table(found))


@click.command(epilog=CONNECTION_HELP)
@connection_options
@output_option
def sites(url: str | None, token: str | None, output: str) -> None:
    """List sites: ready nodes, free devices, devices by model."""
    with make_client(url, token) as client:
        found = client.sites()
    emit(output, found, lambda: sites_table(found))


@click.command(epilog=CONNECTION_HELP)
@connection_options
@output_option
def queues(url: str | None, token: str | None, output: str) -> None:
    """List queues you may see: quotas with their use, pending and running jobs."""
    with make_client(url, token) as client:
        found = client.queues()
    emit(output, found, lambda: queues_table(found))


@click.command(epilog=CONNECTION_HELP)
@click.option("--site", help="only this site's nodes and devices")
@click.option("--interval", default=2.0, show_default=True, help="refresh period, s")
@click.option("--once", is_flag=True, help="print one frame and exit")
@connection_options
@output_option
def top(
    site: str | None,
    interval: float,
    once: bool,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Live fleet view: device use per site and node, pending and running per queue (Ctrl-C ends)."""
    from xpupool.client._top import frame, take_snapshot

    if interval <= 0:
        raise click.BadParameter("must be positive", param_hint="--interval")
    with make_client(url, token) as client:
        if once or output == "json":
            snap = take_snapshot(client, site)
            if output == "json":
                click.echo(
                    to_json(
                        {
                            "taken_at": snap.taken_at,
                            "nodes": [n.raw for n in snap.nodes],
                            "devices": [d.raw for d in snap.devices],
                            "queues": [q.raw for q in snap.queues],
                        }
                    )
                )
            else:
                console().print(frame(snap))
            return
        import time

        from rich.live import Live

        out = console()
        if not out.is_terminal:
            _print_frames(out, lambda: frame(take_snapshot(client, site)), interval)
            return
        with Live(frame(take_snapshot(client, site)), console=console(), screen=False) as live:
            try:
                while True:
                    time.sleep(interval)
                    live.update(frame(take_snapshot(client, site)))
            except KeyboardInterrupt:
                return


def _print_frames(out: Console, take: Callable[[], RenderableType], interval_s: float) -> None:
    """``top`` piped or redirected: each frame printed whole and flushed as it is taken, the
    first at once. rich's live display draws only on a terminal and would hold every frame
    until it stops, and Python keeps a pipe's output in its buffer, so ``top | tee`` showed
    nothing for as long as it ran (issue 42). Ctrl-C, or the reader going away (``| head``),
    ends it quietly."""
    import time

    try:
        while True:
            out.print(take())
            out.print()
            out.file.flush()
            time.sleep(interval_s)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@click.group()
def node() -> None:
    """Admin: take a node out of scheduling, put it back, taint it, re-cut its cards, or delete
    it."""


@click.group()
def device() -> None:
    """Admin: take a device out of scheduling or put it back."""


@click.group()
def site() -> None:
    """Admin: drain a site for maintenance, or put it back."""


def _site_drain(name: str, drain: bool, url: str | None, token: str | None, output: str) -> None:
    with make_client(url, token) as client:
        found = client.drain_site(name, drain)
    emit(output, found, lambda: sites_table([found]))


@site.command("drain", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
@output_option
def site_drain(name: str, url: str | None, token: str | None, output: str) -> None:
    """No new work goes to the site; its running jobs finish there, or are moved when they say
    on_site_lost: requeue."""
    _site_drain(name, True, url, token, output)


@site.command("undrain", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
@output_option
def site_undrain(name: str, url: str | None, token: str | None, output: str) -> None:
    """Every node of the site takes work again."""
    _site_drain(name, False, url, token, output)


def _node_cordon(name: str, cordon: bool, url: str | None, token: str | None, output: str) -> None:
    with make_client(url, token) as client:
        found = client.cordon_node(name, cordon)
    emit(output, found, lambda: nodes_table([found]))


def _device_cordon(
    uuid: str, cordon: bool, url: str | None, token: str | None, output: str
) -> None:
    with make_client(url, token) as client:
        found = client.cordon_device(uuid, cordon)
    emit(output, found, lambda: devices_table([found]))


@node.command("cordon", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
@output_option
def node_cordon(name: str, url: str | None, token: str | None, output: str) -> None:
    """No new work lands on the node; what runs there stays."""
    _node_cordon(name, True, url, token, output)


@node.command("uncordon", epilog=CONNECTION_HELP)
@click.argument("name")
@connection_options
@output_option
def node_uncordon(name: str, url: str | None, token: str | None, output: str) -> None:
    """Let the scheduler use the node again."""
    _node_cordon(name, False, url, token, output)


@node.command("taint", epilog=CONNECTION_HELP)
@click.argument("name")
@click.argument("changes", nargs=-1, required=True, metavar="KEY[=VALUE]:EFFECT | KEY[:EFFECT]-")
@click.option(
    "--overwrite",
    is_flag=True,
    help="let a taint replace the value of one the node has with its key and effect",
)
@connection_options
@output_option
def node_taint(
    name: str,
    changes: tuple[str, ...],
    overwrite: bool,
    url: str | None,
    token: str | None,
    output: str,
) -> None:
    """Put taints on a node, or take them off, as kubectl taint does: `gpu=true:NoSchedule`
    keeps off work that does not tolerate it (`tolerate=gpu` in a request), `spot:PreferNoSchedule`
    makes other nodes preferred; `gpu:NoSchedule-` takes one off, `gpu-` every taint of the key.
    All or nothing; work already on the node stays."""
    change = taint_change(changes, overwrite)
    with make_client(url, token) as client:
        found = client.taint_node(name, change)
    emit(output, found, lambda: nodes_table([found]))


def taint_change(changes: Sequence[str], overwrite: bool) -> NodeTaintsIn:
    """``kubectl taint``'s arguments as the API's change; a bad one is a usage error naming it."""
    from xpupool.model.errors import RequestError
    from xpupool.model.taint import check_key, parse_effect, read_taint
    from xpupool.server.schemas.nodes import NodeTaintsIn, TaintIn, TaintKeyIn

    add: list[TaintIn] = []
    remove: list[TaintKeyIn] = []
    for text in changes:
        try:
            if text.endswith("-"):
                pair, sep, effect = text[:-1].partition(":")
                key = check_key("key", pair.partition("=")[0])
                remove.append(
                    TaintKeyIn(key=key, effect=parse_effect("effect", effect) if sep else None)
                )
            else:
                add.append(TaintIn.from_taint(read_taint("taint", text)))
        except RequestError as exc:
            raise click.BadParameter(
                f"{text!r}: {exc.field}: {exc.reason}", param_hint="CHANGES"
            ) from None
    return NodeTaintsIn(add=add, remove=remove, overwrite=overwrite)


@node.command("recut", epilog=CONNECTION_HELP)
@click.argument("name")
@click.argument("card")
@click.argument("layout", metavar="PROFILE@START,...")
@click.option("--why", default="", help="why, kept with the re-cut's event and audit row")
@connection_options
@output_option
def node_recut(
    name: str, card: str, layout: str, why: str, url: str | None, token: str | None, output: str
) -> None:
    """Re-cut a partitioned card of an agent node: `3g.40gb@0,3g.40gb@4` (MIG profile@first
    memory slice) or `vir05_1c_16g,vir05_1c_16g` (vNPU templates). Refused while a job holds an
    instance the re-cut destroys, or one held work less than `up --recut-min-idle` ago; the
    node's agent cuts the card with the vendor tool and its new instances are scheduled."""
    from xpupool.server.schemas.card_layouts import CardLayoutIn

    body = CardLayoutIn(layout=[w.strip() for w in layout.split(",") if w.strip()], why=why)
    with make_client(url, token) as client:
        found = client.recut_card(name, card, body)
    wanted = ",".join(found.wanted) if found.wanted is not None else "(as it is cut now)"
    emit(
        output,
        found,
        lambda: (
            f"card {found.card} of node {found.node}: now {','.join(found.current) or '-'}"
            f" (busy {','.join(found.busy) or '-'}); wanted {wanted}"
        ),
    )


@node.command("delete", epilog=CONNECTION_HELP)
@click.argument("name")
@click.option(
    "--drain",
    is_flag=True,
    help="with jobs on it: cordon it now and delete it when they end (else refused)",
)
@connection_options
@output_option
def node_delete(name: str, drain: bool, url: str | None, token: str | None, output: str) -> None:
    """Remove a node from the pool and revoke the agent tokens bound to it. Refused while jobs
    hold it, unless --drain. A cluster-file node comes back at the next `xpupool up --cluster`."""
    with make_client(url, token) as client:
        found = client.delete_node(name, drain=drain)
    what = "deleted" if found.deleted else "draining"
    revoked = ", ".join(map(str, found.tokens_revoked)) or "none"
    emit(
        output,
        found,
        lambda: f"node {found.name} {what}; tokens revoked: {revoked}\n{found.note}",
    )


@device.command("cordon", epilog=CONNECTION_HELP)
@click.argument("uuid")
@connection_options
@output_option
def device_cordon(uuid: str, url: str | None, token: str | None, output: str) -> None:
    """No new work lands on the device; what runs there stays."""
    _device_cordon(uuid, True, url, token, output)


@device.command("uncordon", epilog=CONNECTION_HELP)
@click.argument("uuid")
@connection_options
@output_option
def device_uncordon(uuid: str, url: str | None, token: str | None, output: str) -> None:
    """Let the scheduler use the device again."""
    _device_cordon(uuid, False, url, token, output)
