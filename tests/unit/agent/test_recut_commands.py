"""The vendor-tool command lines of a re-cut, exactly (issue 53): ``nvidia-smi mig`` destroys by
GPU instance ID found in its own ``-lgi`` listing (recorded in the MIG user guide's shape), then
creates with placements; ``npu-smi`` destroys vNPUs by id, highest first, then creates by
template. The agent's step (``Recuts``) runs them through an injected runner, and refuses to
destroy an instance one of its replicas was given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from xpupool.agent.recut import Recuts, recut_card
from xpupool.agent.recut_commands import (
    RecutImpossible,
    mig_commands,
    parse_gpu_instances,
    vnpu_commands,
)
from xpupool.catalog.partition_change import layout_change
from xpupool.probes.base import DeviceInfo
from xpupool.probes.npu_smi_vnpu import VnpuRow
from xpupool.server.schemas.agent_protocol import CardRecut

# `nvidia-smi mig -lgi` as the MIG user guide prints it (two 3g.20gb on an A100-40GB)
LGI = """\
+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 3g.40gb       9        1          4:4     |
+----------------------------------------------------+
|   0  MIG 2g.20gb      14        5          0:2     |
+----------------------------------------------------+
|   0  MIG 1g.10gb      19        9          2:1     |
+----------------------------------------------------+
"""


def test_the_gpu_instance_listing_is_parsed() -> None:
    rows = parse_gpu_instances(LGI)
    assert [(r.gpu, r.profile, r.profile_id, r.gi_id, r.start, r.size) for r in rows] == [
        (0, "3g.40gb", 9, 1, 4, 4),
        (0, "2g.20gb", 14, 5, 0, 2),
        (0, "1g.10gb", 19, 9, 2, 1),
    ]
    assert parse_gpu_instances("No GPU instances found: Not Found\n") == []


def test_mig_commands_destroy_by_instance_id_then_create_with_placements() -> None:
    change = layout_change(
        (("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2)),
        (("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3)),
    )
    assert change.destroy == (("2g.20gb", 0),)  # 1g.10gb@2 stays where it is
    assert mig_commands(0, parse_gpu_instances(LGI), change.destroy, change.create) == [
        ["nvidia-smi", "mig", "-i", "0", "-gi", "5", "-dci"],
        ["nvidia-smi", "mig", "-i", "0", "-gi", "5", "-dgi"],
        ["nvidia-smi", "mig", "-i", "0", "-cgi", "1g.10gb:0,1g.10gb:1,1g.10gb:3", "-C"],
    ]
    listed = parse_gpu_instances(LGI)
    both = mig_commands(0, listed, (("2g.20gb", 0), ("1g.10gb", 2)), ())
    assert both[0] == ["nvidia-smi", "mig", "-i", "0", "-gi", "5,9", "-dci"]
    assert mig_commands(3, [], (), (("7g.80gb", 0),)) == [
        ["nvidia-smi", "mig", "-i", "3", "-cgi", "7g.80gb:0", "-C"]
    ]
    with pytest.raises(RecutImpossible):
        mig_commands(0, parse_gpu_instances(LGI), (("3g.40gb", 0),), ())


def test_vnpu_commands_destroy_by_id_highest_first_then_create() -> None:
    listed = [
        VnpuRow(100, "vir05_1c_16g"),
        VnpuRow(101, "vir10_3c_32g"),
        VnpuRow(102, "vir05_1c_16g"),
    ]
    change = layout_change(
        (("vir05_1c_16g", None), ("vir10_3c_32g", None), ("vir05_1c_16g", None)),
        (("vir10_3c_32g", None), ("vir10_3c_32g", None)),
    )
    assert vnpu_commands(0, 1, listed, change.destroy, change.create) == [
        ["npu-smi", "set", "-t", "destroy-vnpu", "-i", "0", "-c", "1", "-v", "102"],
        ["npu-smi", "set", "-t", "destroy-vnpu", "-i", "0", "-c", "1", "-v", "100"],
        ["npu-smi", "set", "-t", "create-vnpu", "-i", "0", "-c", "1", "-f", "vir10_3c_32g"],
    ]


CARD = DeviceInfo(
    vendor="nvidia",
    model="NVIDIA A100-SXM4-80GB",
    canonical_model="A100-SXM4-80GB",
    uuid="GPU-a",
    index=2,
    memory_total_mib=81920,
)


def _instances(*layout: tuple[str, int]) -> list[DeviceInfo]:
    return [
        replace(CARD, uuid=f"MIG-a-{s}", partition=n, partition_of="GPU-a", partition_start=s)
        for n, s in layout
    ]


class Tool:
    """Answers the listing with ``listing``; records every command line."""

    def __init__(self, listing: str = "") -> None:
        self.listing = listing
        self.ran: list[list[str]] = []

    def __call__(self, vendor: str, argv: Sequence[str]) -> str:
        self.ran.append(list(argv))
        return self.listing if "-lgi" in argv else ""


def test_the_agent_runs_the_commands_once_and_never_over_its_own_replicas() -> None:
    listing = "|   2  MIG 3g.40gb   9   2   0:4   |\n|   2  MIG 3g.40gb   9   1   4:4   |\n"
    devices = _instances(("3g.40gb", 0), ("3g.40gb", 4))
    order = CardRecut(card="GPU-a", layout=["3g.40gb@0", "2g.20gb@4", "2g.20gb@6"])
    tool = Tool(listing)
    assert recut_card(order, devices, {"MIG-a-4"}, lambda _: None, tool) is not None
    assert tool.ran == []  # a replica of this node holds MIG-a-4: nothing runs
    recuts = Recuts(lambda _: None, tool)
    recuts.act([order], devices, set())
    recuts.act([order], devices, set())  # the same order again: not run twice
    assert tool.ran == [
        ["nvidia-smi", "mig", "-i", "2", "-lgi"],
        ["nvidia-smi", "mig", "-i", "2", "-gi", "1", "-dci"],
        ["nvidia-smi", "mig", "-i", "2", "-gi", "1", "-dgi"],
        ["nvidia-smi", "mig", "-i", "2", "-cgi", "2g.20gb:4,2g.20gb:6", "-C"],
    ]
    assert recuts.failures == []


def test_the_agent_recuts_a_vnpu_chip_where_its_probe_says_it_is() -> None:
    chip = replace(CARD, vendor="huawei", model="910B3", canonical_model="910B3", uuid="NPU-c")
    devices = [
        replace(chip, uuid=f"NPU-c-vnpu{v}", index=v, partition=t, partition_of="NPU-c")
        for v, t in ((164, "vir05_1c_16g"), (165, "vir05_1c_16g"))
    ]
    tool = Tool()
    tool.listing = "| Vnpu ID | Template Name |\n| 164 | vir05_1c_16g |\n| 165 | vir05_1c_16g |\n"

    def run(vendor: str, argv: Sequence[str]) -> str:
        tool.ran.append(list(argv))
        return tool.listing if "info-vnpu" in argv else ""

    order = CardRecut(card="NPU-c", layout=["vir10_3c_32g"])
    assert (
        recut_card(order, devices, set(), lambda u: (4, 1) if u == "NPU-c" else None, run) is None
    )
    assert tool.ran == [
        ["npu-smi", "info", "-t", "info-vnpu", "-i", "4", "-c", "1"],
        ["npu-smi", "set", "-t", "destroy-vnpu", "-i", "4", "-c", "1", "-v", "165"],
        ["npu-smi", "set", "-t", "destroy-vnpu", "-i", "4", "-c", "1", "-v", "164"],
        ["npu-smi", "set", "-t", "create-vnpu", "-i", "4", "-c", "1", "-f", "vir10_3c_32g"],
    ]
    assert recut_card(order, devices, set(), lambda _: None, run) is not None  # nowhere to run
