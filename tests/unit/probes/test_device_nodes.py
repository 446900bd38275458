"""Which device nodes a replica gets, per vendor: the names each vendor's function gives, what a
sandbox binds from a device tree (a tmp dir standing in for /dev), and the container arguments."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from xpupool.model.vendor import VENDOR_KEYS
from xpupool.probes.container_runtime import ContainerRuntime
from xpupool.probes.device_nodes import (
    DEVICE_NODES,
    container_device_args,
    sandbox_nodes,
    vendor_nodes,
)

DOCKER = ContainerRuntime("docker", "27.3.1", cdi=False)
DOCKER_CDI = ContainerRuntime("docker", "27.3.1", cdi=True)
PODMAN = ContainerRuntime("podman", "5.2.1", cdi=True)


@dataclass(frozen=True)
class Card:
    vendor: str
    index: int
    uuid: str = ""


def cards(vendor: str, *indices: int) -> list[Card]:
    return [Card(vendor, i, f"{vendor}-uuid-{i}") for i in indices]


def tree(root: Path, *names: str) -> Path:
    """A fake /dev: an empty file per node name (a bind needs only a path)."""
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    return root


def test_every_vendor_has_a_function() -> None:
    assert set(DEVICE_NODES) == set(VENDOR_KEYS)


@pytest.mark.parametrize(
    ("vendor", "required"),
    [
        ("nvidia", ("nvidia2", "nvidiactl", "nvidia-uvm")),
        ("amd", ("kfd", "dri/renderD130")),
        ("hygon", ("kfd", "mkfd", "dri/renderD130")),
        ("huawei", ("davinci2", "davinci_manager", "devmm_svm", "hisi_hdc")),
        ("cambricon", ("cambricon_dev2", "cambricon_ctl")),
        ("mthreads", ("mtgpu.2", "dri/renderD130")),
        ("iluvatar", ("iluvatar2",)),
        ("metax", ("mxcd", "dri/renderD130")),
        ("enflame", ("gcu2",)),
        ("kunlunxin", ("xpu2", "xpuctrl")),
        ("intel", ("dri/renderD130",)),
    ],
)
def test_required_nodes_of_one_card(vendor: str, required: tuple[str, ...]) -> None:
    assert vendor_nodes(vendor, cards(vendor, 2)).required == required


def test_sandbox_binds_only_the_granted_cards_present(tmp_path: Path) -> None:
    dev = tree(
        tmp_path,
        *(f"davinci{i}" for i in range(4)),
        "davinci_manager",
        "devmm_svm",
        "hisi_hdc",
        "nvidia0",
    )
    binds = sandbox_nodes(cards("huawei", 1, 3), dev)
    assert [(b.host, str(b.target)) for b in binds] == [
        (dev / "davinci1", "/dev/davinci1"),
        (dev / "davinci3", "/dev/davinci3"),
        (dev / "davinci_manager", "/dev/davinci_manager"),
        (dev / "devmm_svm", "/dev/devmm_svm"),
        (dev / "hisi_hdc", "/dev/hisi_hdc"),
    ]


def test_sandbox_leaves_out_what_the_host_lacks(tmp_path: Path) -> None:
    dev = tree(tmp_path, "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset")
    targets = [str(b.target) for b in sandbox_nodes(cards("nvidia", 1, 2), dev)]
    assert targets == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"]


def test_a_sandbox_gets_the_nvidia_node_of_the_drivers_minor_not_of_the_index(
    tmp_path: Path,
) -> None:
    """NVML's card 1 here is /dev/nvidia5 (the driver's procfs says so: a card hot-plugged or
    bound out of PCI order); the sandbox bound /dev/nvidia1, another card, which a job there
    could then use. A card the driver does not list keeps the index rule."""
    info = tmp_path / "gpus" / "0000:62:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text("GPU UUID: \t nvidia-uuid-1\nDevice Minor: \t 5\n")
    dev = tree(tmp_path, "nvidia1", "nvidia2", "nvidia5", "nvidiactl", "nvidia-uvm")
    targets = [str(b.target) for b in sandbox_nodes(cards("nvidia", 1), dev, tmp_path / "gpus")]
    assert targets == ["/dev/nvidia5", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    both = [str(b.target) for b in sandbox_nodes(cards("nvidia", 1, 2), dev, tmp_path / "gpus")]
    assert both[:2] == ["/dev/nvidia5", "/dev/nvidia2"]


def test_nvidia_container_devices_by_cdi_or_gpus() -> None:
    granted = cards("nvidia", 0, 3)
    assert container_device_args(granted, DOCKER_CDI) == [
        "--device",
        "nvidia.com/gpu=nvidia-uuid-0",
        "--device",
        "nvidia.com/gpu=nvidia-uuid-3",
    ]
    assert container_device_args(granted, PODMAN)[1] == "nvidia.com/gpu=nvidia-uuid-0"
    # docker reads --gpus as CSV: the double quotes keep both UUIDs in one value
    assert container_device_args(granted, DOCKER) == [
        "--gpus",
        '"device=nvidia-uuid-0,nvidia-uuid-3"',
    ]


def test_ascend_container_devices_and_mounts(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    args = container_device_args(cards("huawei", 5), DOCKER, Path("/dev"), host)
    assert args == [
        "--device",
        "/dev/davinci5:/dev/davinci5",
        "--device",
        "/dev/davinci_manager:/dev/davinci_manager",
        "--device",
        "/dev/devmm_svm:/dev/devmm_svm",
        "--device",
        "/dev/hisi_hdc:/dev/hisi_hdc",
        "-v",
        "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro",
    ]


def test_amd_container_devices_share_kfd_once() -> None:
    args = container_device_args(cards("amd", 0, 1), DOCKER, Path("/dev"), Path("/nonexistent"))
    assert args == [
        "--device",
        "/dev/kfd:/dev/kfd",
        "--device",
        "/dev/dri/renderD128:/dev/dri/renderD128",
        "--device",
        "/dev/dri/renderD129:/dev/dri/renderD129",
    ]


def test_cambricon_optional_ipc_node_only_where_present(tmp_path: Path) -> None:
    dev = tree(tmp_path, "cambricon_ipcm1")
    args = container_device_args(cards("cambricon", 1, 2), DOCKER, dev, tmp_path / "nothing")
    assert args == [
        "--device",
        f"{dev}/cambricon_dev1:/dev/cambricon_dev1",
        "--device",
        f"{dev}/cambricon_dev2:/dev/cambricon_dev2",
        "--device",
        f"{dev}/cambricon_ctl:/dev/cambricon_ctl",
        "--device",
        f"{dev}/cambricon_ipcm1:/dev/cambricon_ipcm1",
    ]


def test_no_devices_no_arguments() -> None:
    assert container_device_args([], DOCKER) == []
    assert sandbox_nodes([]) == []
