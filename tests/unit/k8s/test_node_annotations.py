"""xpupool's Node annotations: the device list round-trips through the one device wire form, the
text is deterministic (the agent compares texts), and hostile text is refused with the path of
what is wrong, never a crash."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from xpupool.k8s.codec.node_annotations import (
    DEVICES_KEY,
    MAX_DEVICES,
    MAX_DEVICES_CHARS,
    decode_devices,
    decode_heartbeat,
    encode_devices,
    encode_heartbeat,
)
from xpupool.model.errors import RequestError
from xpupool.server.schemas.agent_protocol import DeviceIn


def card(i: int, **kw: object) -> DeviceIn:
    base: dict[str, object] = {
        "uuid": f"GPU-{i}",
        "vendor": "nvidia",
        "model": "NVIDIA A100-SXM4-80GB",
        "memory_mib": 81920,
        "index": i,
        "runtimes": {"cuda": "12.4"},
    }
    return DeviceIn.model_validate({**base, **kw})


def test_devices_round_trip_and_the_text_does_not_depend_on_order() -> None:
    devices = [card(1, link_group="nv0"), card(0, max_tasks=10, memory_overcommit=1.5)]
    text = encode_devices(devices)
    assert text == encode_devices(list(reversed(devices)))
    assert json.loads(text)["version"] == 1
    back = decode_devices(text)
    assert [d.uuid for d in back] == ["GPU-0", "GPU-1"]
    assert back == sorted(devices, key=lambda d: d.index)
    # and the engine reads them as the REST API would
    assert back[0].to_device().max_tasks == 10


def test_an_empty_node_is_an_empty_list() -> None:
    assert decode_devices(encode_devices([])) == []


def test_unknown_device_fields_from_a_newer_agent_are_ignored() -> None:
    body = json.loads(encode_devices([card(0)]))
    body["devices"][0]["future_field"] = {"x": 1}
    assert decode_devices(json.dumps(body))[0].uuid == "GPU-0"


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        (7, "", "expected a string"),
        ("not json", "", "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "", "longer than"),
        ("[" * 60_000 + "]" * 60_000, "", "nested too deeply"),
        ("1" + "0" * 5000, "", "not JSON"),
        ("[]", "", "expected"),
        ('{"version": 2, "devices": []}', ".version", "only version 1"),
        ('{"version": true, "devices": []}', ".version", "only version 1"),
        ('{"version": 1, "devices": {}}', ".devices", "expected a list"),
        ('{"version": 1, "devices": [], "x": 1}', ".x", "unknown key"),
        ('{"version": 1, "devices": [3]}', ".devices[0]", "expected an object"),
        (
            '{"version": 1, "devices": [{"uuid": "a", "vendor": "nvidia", "model": "m"}]}',
            ".devices[0].memory_mib",
            "Field required",
        ),
        (
            '{"version":1,"devices":[{"uuid":"a","vendor":"nvidia","model":"m","memory_mib":-5}]}',
            ".devices[0].memory_mib",
            "greater than 0",
        ),
        (
            '{"version":1,"devices":[{"uuid":"a","vendor":"nvidia","model":"m",'
            '"memory_mib":5,"runtimes":{"cuda":12}}]}',
            ".devices[0].runtimes.cuda",
            "string",
        ),
    ],
)
def test_hostile_devices_text_is_refused_naming_the_path(
    text: object, field: str, reason: str
) -> None:
    with pytest.raises(RequestError) as err:
        decode_devices(text)
    assert err.value.field == f"metadata.annotations[{DEVICES_KEY}]{field}"
    assert reason in err.value.reason
    assert len(str(err.value)) < 600  # a hostile value is quoted short


def test_duplicate_uuids_and_too_many_devices_are_refused() -> None:
    dup = json.loads(encode_devices([card(0), card(1)]))
    dup["devices"][1]["uuid"] = "GPU-0"
    with pytest.raises(RequestError) as err:
        decode_devices(json.dumps(dup))
    assert err.value.field.endswith(".devices[1].uuid")
    many = {"version": 1, "devices": [{}] * (MAX_DEVICES + 1)}
    with pytest.raises(RequestError) as err:
        decode_devices(json.dumps(many))
    assert err.value.field.endswith(".devices")
    with pytest.raises(RequestError):
        encode_devices([card(i) for i in range(MAX_DEVICES + 1)])


def test_encoding_refuses_a_text_the_apiserver_would_refuse() -> None:
    huge = card(0, runtimes={f"rt{i}": "1" * 90 for i in range(2000)})
    with pytest.raises(RequestError) as err:
        encode_devices([huge])
    assert str(MAX_DEVICES_CHARS) in err.value.reason


def test_heartbeat_is_rfc3339_utc_and_reads_any_offset() -> None:
    at = datetime(2026, 11, 27, 5, 10, 45, 999_000, tzinfo=UTC)
    assert encode_heartbeat(at) == "2026-11-27T05:10:45Z"
    plus2 = at.astimezone(timezone(timedelta(hours=2)))
    assert encode_heartbeat(plus2) == "2026-11-27T05:10:45Z"
    assert decode_heartbeat("2026-11-27T05:10:45Z") == at.replace(microsecond=0)
    assert decode_heartbeat("2026-11-27T07:10:45.123456789+02:00") == at.replace(microsecond=123456)


@pytest.mark.parametrize(
    "text", [None, "", "yesterday", "2026-11-27 05:10:45", "2026-13-45T05:10:45Z", "9" * 1000]
)
def test_bad_heartbeats_are_refused(text: object) -> None:
    with pytest.raises(RequestError) as err:
        decode_heartbeat(text)
    assert err.value.field == "metadata.annotations[xpupool.io/heartbeat]"
