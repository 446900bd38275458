"""The ``xpupool`` command: one entry point, one sub-command per job."""

from __future__ import annotations

import json

import click
from rich.console import Console

from xpupool.model.errors import XpupoolError


@click.group()
@click.version_option(package_name="xpupool")
def main() -> None:
    """xpupool: one pool and one scheduler for a mixed accelerator fleet."""


@main.command()
@click.option("--policy", default="binpack", show_default=True, help="binpack, spread or topology")
def demo(policy: str) -> None:
    """Place a stream of typical requests on a two-site mixed fleet and show the decisions."""
    from xpupool.demo import run_demo

    run_demo(Console(), policy)


@main.command()
@click.argument("text")
def spec(text: str) -> None:
    """Show the JSON request that a compact device spec stands for, e.g. 'A100:80GB:2'."""
    from xpupool.model.request_json import request_to_dict
    from xpupool.model.spec import parse_spec

    try:
        request = parse_spec(text)
    except XpupoolError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(request_to_dict(request), indent=2))
