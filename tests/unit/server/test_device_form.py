"""One wire form of a device (``DeviceIn``, ``schemas/agent_protocol.py``): the probe's record, the
agent's report, the registration and the stored row all convert through it to the same engine
``Device``."""

from __future__ import annotations

import json

from xpupool.agent.inventory import device_in
from xpupool.model.device import Device
from xpupool.probes.base import DeviceInfo, Health
from xpupool.server.plane import device_from_dict, device_to_dict
from xpupool.server.schemas.agent_protocol import DeviceIn

INFO = DeviceInfo(
    vendor="huawei",
    model="910B3",
    uuid="NPU-7",
    index=7,
    memory_total_mib=65536,
    compute_units=20,
    memory_used_mib=1024,  # live metrics stay with the agent
    driver_version="24.1.rc2",
    runtimes={"cann": "8.0.RC2"},
    numa_node=1,
    link_group="hccs-0",
    health=Health.UNKNOWN,
)


def test_probe_record_report_registration_and_row_are_one_device() -> None:
    device = INFO.to_device()
    report = device_in(INFO)
    assert report is not None
    sent = json.loads(report.model_dump_json())  # what the agent puts on the wire
    assert DeviceIn.model_validate(sent).to_device() == device  # what the server registers
    assert device_from_dict(json.loads(json.dumps(device_to_dict(device)))) == device  # stored
    assert device_to_dict(device) == sent


def test_vendor_aliases_become_the_key_in_every_form() -> None:
    device = DeviceIn(uuid="u", vendor="ascend", model="910B3", memory_mib=1).to_device()
    assert device == Device("u", "huawei", "910B3", 1)
    assert device_to_dict(device)["vendor"] == "huawei"


def test_a_record_that_cannot_be_a_device_is_left_out_of_the_report() -> None:
    assert device_in(DeviceInfo("nvidia", "H100", "GPU-0", 0, 0)) is None  # no memory
    assert device_in(DeviceInfo("acme", "X1", "X-0", 0, 1024)) is None  # no such vendor
    assert device_in(DeviceInfo("nvidia", "H100", "GPU-0", 0, 1 << 31)) is None  # over the bound


def test_a_cards_registered_type_and_share_mode_survive_the_store() -> None:
    """A Kubernetes site's card keeps HAMi's type string and mode through the stored row: a
    restarted plane that read them back as None saw every site Node as changed and registered
    each again, draining (bench/k8s_plane.py's restart: all 200 nodes "changed")."""
    device = Device(
        "GPU-a-0",
        "nvidia",
        "T4",
        15360,
        max_tasks=10,
        type_name="NVIDIA Tesla T4",
        share_mode="hami-core",
    )
    assert device_from_dict(json.loads(json.dumps(device_to_dict(device)))) == device
