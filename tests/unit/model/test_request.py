"""The request records: software needs, DeviceRequest and Request validation, error paths."""

from __future__ import annotations

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.request import (
    WHOLE,
    DevicePolicy,
    DeviceRequest,
    Request,
    SoftwareNeed,
    Topology,
    parse_software_need,
)
from xpupool.model.version import parse_version


@pytest.mark.parametrize(
    ("text", "name", "op", "version"),
    [
        ("cuda>=12.4", "cuda", ">=", "12.4"),
        ("cann>=8.0.RC1", "cann", ">=", "8.0.RC1"),
        ("rocm>=6.0", "rocm", ">=", "6.0"),
        ("torch==2.4", "torch", "==", "2.4"),
        ("torch=2.4", "torch", "==", "2.4"),  # '=' reads as '=='
        ("pytorch~=2.4", "torch", "~=", "2.4"),
        ("CUDA<13", "cuda", "<", "13"),
        (" cuda >= 12.4 ", "cuda", ">=", "12.4"),
        ("cuda!=12.1", "cuda", "!=", "12.1"),
    ],
)
def test_parse_software_need_good(text: str, name: str, op: str, version: str) -> None:
    need = parse_software_need(text)
    assert need == SoftwareNeed(name, op, parse_version(version))
    assert str(need) == f"{name}{op}{version}"


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("cuda", "expected NAME OP VERSION"),
        ("cuda>=", "expected NAME OP VERSION"),
        ("cuda>==12.4", "expected NAME OP VERSION"),  # a typo, not version '=12.4'
        ("cuda>=12.4,", "expected NAME OP VERSION"),
        ("cuda>=v12", "expected NAME OP VERSION"),
        ("tensorflow>=2.0", "unknown software 'tensorflow'"),
        ("cuda>=12.4x", "unexpected word 'x'"),
        (12, "expected a string"),
    ],
)
def test_parse_software_need_bad(text: object, reason_part: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_software_need(text, "devices.software[1]")  # type: ignore[arg-type]
    assert info.value.field == "devices.software[1]"
    assert reason_part in info.value.reason


def test_software_error_message_exact() -> None:
    with pytest.raises(RequestError) as info:
        parse_software_need("tensorflow>=2.0", "devices.software[1]")
    assert str(info.value) == (
        "devices.software[1]: unknown software 'tensorflow'; known: cuda, cann, rocm, torch "
        "(got 'tensorflow>=2.0')"
    )


def test_request_error_keeps_data_and_nests() -> None:
    exc = RequestError("devices.memory", "24Gx", "unknown memory unit 'Gx'")
    assert (exc.field, exc.value, exc.reason) == (
        "devices.memory",
        "24Gx",
        "unknown memory unit 'Gx'",
    )
    assert str(exc) == "devices.memory: unknown memory unit 'Gx' (got '24Gx')"
    assert isinstance(exc, ValueError)
    assert exc.under("replicas[0]").field == "replicas[0].devices.memory"
    assert RequestError("[2]", 1, "x").under("devices.software").field == "devices.software[2]"
    assert exc.under("") is exc


# ------------------------------------------------------------------------------ DeviceRequest
def test_device_request_defaults_are_cpu_only() -> None:
    d = DeviceRequest()
    assert d.count == 0
    assert not d.whole
    assert not d.shares_specified


def test_whole_cards() -> None:
    d = DeviceRequest(count=2)
    assert d.whole
    assert d.need_memory_permille == WHOLE
    assert d.need_core_permille == WHOLE


def test_memory_amount_shares_compute_best_effort() -> None:
    d = DeviceRequest(count=1, memory_mib=40960)
    assert not d.whole
    assert d.need_memory_permille is None
    assert d.need_core_permille == 0


def test_cores_alone_is_a_slice_of_both() -> None:
    d = DeviceRequest(count=1, core_permille=250)
    assert d.need_memory_permille == 250
    assert d.need_core_permille == 250


def test_memory_share_with_cores() -> None:
    d = DeviceRequest(count=1, memory_permille=500, core_permille=300)
    assert (d.need_memory_permille, d.need_core_permille) == (500, 300)


def test_vendor_aliases_become_keys_and_lists_become_tuples() -> None:
    d = DeviceRequest(count=1, vendors=["ascend", "CUDA"], models=["910B"])  # type: ignore[arg-type]
    assert d.vendors == ("huawei", "nvidia")
    assert d.models == ("910B",)
    assert d == DeviceRequest(count=1, vendors=("huawei", "nvidia"), models=("910B",))


def test_topology_string_becomes_enum() -> None:
    d = DeviceRequest(count=2, topology="same-link-group")  # type: ignore[arg-type]
    assert d.topology is Topology.SAME_LINK_GROUP


def test_selector_key_ignores_amounts() -> None:
    a = DeviceRequest(count=1, models=("A100",), memory_mib=1024)
    b = DeviceRequest(count=4, models=("A100",), core_permille=500)
    assert a.selector_key() == b.selector_key()
    assert a.selector_key() != DeviceRequest(count=1, models=("H100",)).selector_key()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"count": -1}, "devices.count"),
        ({"count": 65}, "devices.count"),
        ({"count": True}, "devices.count"),
        ({"count": 1, "memory_mib": 1024, "memory_permille": 500}, "devices.memory"),
        ({"count": 1, "memory_mib": 0}, "devices.memory"),
        ({"count": 1, "memory_permille": 1001}, "devices.memory"),
        ({"count": 1, "memory_permille": 0}, "devices.memory"),
        ({"count": 1, "core_permille": 0}, "devices.cores"),
        ({"count": 1, "core_permille": 1001}, "devices.cores"),
        ({"count": 0, "memory_mib": 1024}, "devices.count"),
        ({"count": 0, "core_permille": 500}, "devices.count"),
        ({"count": 0, "vendors": ("nvidia",)}, "devices.count"),
        ({"count": 0, "models": ("A100",)}, "devices.count"),
        ({"count": 0, "exclude_uuids": ("GPU-1",)}, "devices.count"),
        ({"count": 0, "min_card_mib": 1024}, "devices.count"),
        ({"count": 0, "software": (parse_software_need("cuda>=12"),)}, "devices.count"),
        ({"count": 0, "topology": Topology.SAME_LINK_GROUP}, "devices.count"),
        ({"count": 1, "min_card_mib": 0}, "devices.card_memory.min"),
        ({"count": 1, "max_card_mib": -1}, "devices.card_memory.max"),
        ({"count": 1, "min_card_mib": 2048, "max_card_mib": 1024}, "devices.card_memory.max"),
        ({"count": 1, "topology": "ring"}, "devices.topology"),
        ({"count": 1, "vendors": ("nvidia", "acme")}, "devices.vendors[1]"),
    ],
)
def test_device_request_validation(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as info:
        DeviceRequest(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_device_request_messages_exact() -> None:
    with pytest.raises(RequestError) as info:
        DeviceRequest(count=0, vendors=("nvidia",))
    assert str(info.value) == "devices.count: devices.vendors needs a count of at least 1 (got 0)"
    with pytest.raises(RequestError) as info:
        DeviceRequest(count=65)
    assert str(info.value) == "devices.count: must be between 0 and 64 (got 65)"
    with pytest.raises(RequestError) as info:
        DeviceRequest(count=1, min_card_mib=2048, max_card_mib=1024)
    assert str(info.value) == (
        "devices.card_memory.max: smaller than devices.card_memory.min (2048 MiB) (got 1024)"
    )


# ------------------------------------------------------------------------------------ Request
def test_request_defaults() -> None:
    r = Request()
    assert (r.name, r.cpu_milli, r.memory_mib, r.replicas, r.gang) == ("", 0, 0, 1, False)
    assert (r.priority, r.queue, r.node_policy, r.device_policy) == (0, "default", None, None)
    assert r.devices == DeviceRequest()


def test_device_policy_string_becomes_enum() -> None:
    r = Request(device_policy="spread")  # type: ignore[arg-type]
    assert r.device_policy is DevicePolicy.SPREAD


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cpu_milli": -1}, "cpu"),
        ({"cpu_milli": 1.5}, "cpu"),
        ({"memory_mib": -1}, "memory"),
        ({"replicas": 0}, "replicas"),
        ({"replicas": 10_001}, "replicas"),
        ({"priority": 1 << 31}, "priority"),
        ({"priority": -(1 << 31) - 1}, "priority"),
        ({"device_policy": "pack"}, "device_policy"),
        ({"queue": ""}, "queue"),
        ({"node_policy": ""}, "node_policy"),
    ],
)
def test_request_validation(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as info:
        Request(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_request_messages_exact() -> None:
    with pytest.raises(RequestError) as info:
        Request(replicas=0)
    assert str(info.value) == "replicas: must be between 1 and 10000 (got 0)"
    with pytest.raises(RequestError) as info:
        Request(device_policy="pack")  # type: ignore[arg-type]
    assert str(info.value) == "device_policy: must be 'binpack' or 'spread' (got 'pack')"


def test_requests_are_frozen_and_hashable_by_value() -> None:
    a = Request("job", 1000, devices=DeviceRequest(count=1, models=("A100",)))
    b = Request("job", 1000, devices=DeviceRequest(count=1, models=("A100",)))
    assert a == b
    assert hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.replicas = 2  # type: ignore[misc]
