from pathlib import Path

import pytest
from agent_work import device, work

from xpupool.agent.env import VISIBLE_DEVICES, as_seen_alone, device_env, hami_limits
from xpupool.agent.launch import LaunchSettings
from xpupool.agent.launch.spec import job_env
from xpupool.model.vendor import VENDOR_KEYS


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [
        ("nvidia", {"CUDA_VISIBLE_DEVICES": "1,3", "NVIDIA_VISIBLE_DEVICES": "nvidia-1,nvidia-3"}),
        ("amd", {"HIP_VISIBLE_DEVICES": "1,3", "ROCR_VISIBLE_DEVICES": "1,3"}),
        ("hygon", {"HIP_VISIBLE_DEVICES": "1,3"}),
        ("huawei", {"ASCEND_RT_VISIBLE_DEVICES": "1,3", "ASCEND_VISIBLE_DEVICES": "1,3"}),
        ("cambricon", {"MLU_VISIBLE_DEVICES": "1,3"}),
        ("mthreads", {"MTHREADS_VISIBLE_DEVICES": "1,3", "MUSA_VISIBLE_DEVICES": "1,3"}),
        ("iluvatar", {"CUDA_VISIBLE_DEVICES": "1,3"}),
        ("metax", {"MACA_VISIBLE_DEVICES": "1,3", "CUDA_VISIBLE_DEVICES": "1,3"}),
        ("enflame", {"TOPS_VISIBLE_DEVICES": "1,3"}),
        ("kunlunxin", {"XPU_VISIBLE_DEVICES": "1,3"}),
        ("intel", {"ZE_AFFINITY_MASK": "1,3"}),
    ],
)
def test_visible_devices_per_vendor(vendor: str, expected: dict[str, str]) -> None:
    env = device_env(7, 0, "n1", [device(1, vendor), device(3, vendor)]).variables
    for name, value in expected.items():
        assert env[name] == value
    assert env["XPUPOOL_DEVICE_UUIDS"] == f"{vendor}-1,{vendor}-3"
    assert env["XPUPOOL_DEVICE_INDICES"] == "1,3"


def test_every_vendor_has_a_variable() -> None:
    assert set(VISIBLE_DEVICES) == set(VENDOR_KEYS)


def test_whole_cards_get_no_limits() -> None:
    env = device_env(7, 0, "n1", [device(0)]).variables
    assert not [
        k for k in env if k.startswith("CUDA_DEVICE_MEMORY_LIMIT") or k.endswith("SM_LIMIT")
    ]
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_fractional_limits_follow_hami_core() -> None:
    devices = [
        device(2, memory_mib=20480, core_permille=300),
        device(5, memory_mib=81920, core_permille=500),
    ]
    env = device_env(9, 1, "n1", devices).variables
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"  # visible index, not the card's index
    assert "CUDA_DEVICE_MEMORY_LIMIT_1" not in env  # whole card memory: no limit
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"  # the smallest grant, in percent
    assert env["XPUPOOL_DEVICE_MEMORY_MIB"] == "20480,81920"
    assert env["XPUPOOL_DEVICE_CORES_PERMILLE"] == "300,500"
    assert env["XPUPOOL_JOB_ID"] == "9"
    assert env["XPUPOOL_REPLICA"] == "1"
    assert env["XPUPOOL_NODE"] == "n1"


def test_tiny_core_share_is_still_a_limit() -> None:
    assert hami_limits([device(0, core_permille=5)])["CUDA_DEVICE_SM_LIMIT"] == "1"


def test_memory_only_share_gets_no_compute_cap() -> None:
    """``mem=20Gi`` alone reserves no compute (best-effort, as in HAMi): capping it at 1 % would
    starve the job, so only the memory limit is set."""
    limits = hami_limits([device(0, memory_mib=20480, core_permille=0)])
    assert limits == {"CUDA_DEVICE_MEMORY_LIMIT_0": "20480m"}


def test_limits_only_for_hami_vendors() -> None:
    env = device_env(1, 0, "n", [device(0, "huawei", memory_mib=1000, core_permille=250)])
    assert "CUDA_DEVICE_SM_LIMIT" not in env.variables
    assert env.variables["XPUPOOL_DEVICE_CORES_PERMILLE"] == "250"


def test_cpu_job_on_gpu_host_sees_no_gpu() -> None:
    env = device_env(1, 0, "n", [], node_vendors=["nvidia", "intel"])
    assert env.variables["CUDA_VISIBLE_DEVICES"] == ""
    assert env.variables["NVIDIA_VISIBLE_DEVICES"] == ""
    assert "ZE_AFFINITY_MASK" not in env.variables  # empty would mean "all" for Level Zero
    assert set(env.hidden) == {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}


def test_granted_vendor_wins_a_shared_name() -> None:
    env = device_env(1, 0, "n", [device(4, "nvidia")], node_vendors=["nvidia", "metax"])
    assert env.variables["CUDA_VISIBLE_DEVICES"] == "4"
    assert env.variables["MACA_VISIBLE_DEVICES"] == ""


def test_allocation_wins_over_job_env_and_nothing_of_the_agent_is_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPUPOOL_TOKEN", "secret")
    w = work(["true"], devices=[device(3)], env={"CUDA_VISIBLE_DEVICES": "0,1", "MY": "x"})
    env = job_env(w, tmp_path / "run", LaunchSettings(job_root=tmp_path, base_path="/bin"))
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["MY"] == "x"
    assert env["PATH"] == "/bin"
    assert "XPUPOOL_TOKEN" not in env


def test_a_mig_instance_is_visible_by_its_uuid_alone() -> None:
    mig = device(2).model_copy(update={"uuid": "MIG-4f1c", "partition": "3g.40gb"})
    env = device_env(7, 0, "n1", [mig]).variables
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-4f1c"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "MIG-4f1c"
    assert env["XPUPOOL_DEVICE_INDICES"] == "2"
    assert not [k for k in env if k.startswith("CUDA_DEVICE_MEMORY_LIMIT")]  # taken whole
    assert as_seen_alone(env, [mig])["CUDA_VISIBLE_DEVICES"] == "MIG-4f1c"
