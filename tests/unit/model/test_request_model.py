"""The request model: the JSON and the string form, exact field paths, canonical writing, round trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from xpupool.model.errors import RequestError
from xpupool.model.request import (
    DevicePolicy,
    DeviceRequest,
    Request,
    Topology,
    parse_software_need,
)
from xpupool.model.request_model import (
    SPEC_READS_KEPT,
    DevicesModel,
    RequestModel,
    _read_spec,
    read_spec,
    request_from_dict,
    request_to_dict,
)
from xpupool.model.spec import parse_spec
from xpupool.model.validation import error_path, error_value

import request_strategies


def needs(*texts: str) -> tuple[object, ...]:
    return tuple(parse_software_need(t) for t in texts)


# -------------------------------------------------------------------------------------- reading
def test_minimal_and_null_mean_defaults() -> None:
    assert request_from_dict({}) == Request()
    nulls = dict.fromkeys(("name", "cpu", "memory", "devices", "replicas", "gang"))
    assert request_from_dict(nulls) == Request()


def test_devices_without_count_ask_for_one() -> None:
    assert request_from_dict({"devices": {}}) == Request(devices=DeviceRequest(count=1))
    assert request_from_dict({"devices": {"count": 0}}) == Request()


@pytest.mark.parametrize(("cpu", "milli"), [("4", 4000), ("500m", 500), (2, 2000), (1.5, 1500)])
def test_cpu_forms(cpu: object, milli: int) -> None:
    assert request_from_dict({"cpu": cpu}).cpu_milli == milli


def test_full_request() -> None:
    data = {
        "name": "train",
        "cpu": "8",
        "memory": "64Gi",
        "devices": {
            "count": 2,
            "vendors": ["ascend"],
            "models": ["910B", "!910A"],
            "exclude_models": ["310P"],
            "card_memory": {"min": "32GB", "max": "64GB"},
            "memory": "50%",
            "cores": "25%",
            "uuids": ["NPU-1", "!NPU-9"],
            "exclude_uuids": ["NPU-8"],
            "topology": "nvlink",
            "software": ["cann>=8.0.RC1", "torch=2.4"],
        },
        "replicas": 4,
        "gang": True,
        "priority": -5,
        "queue": "research",
        "node_policy": "spread",
        "device_policy": "binpack",
    }
    assert request_from_dict(data) == Request(
        name="train",
        cpu_milli=8000,
        memory_mib=65536,
        devices=DeviceRequest(
            count=2,
            memory_permille=500,
            core_permille=250,
            vendors=("huawei",),
            models=("910B",),
            exclude_models=("910A", "310P"),
            uuids=("NPU-1",),
            exclude_uuids=("NPU-9", "NPU-8"),
            min_card_mib=32768,
            max_card_mib=65536,
            software=needs("cann>=8.0.RC1", "torch==2.4"),  # type: ignore[arg-type]
            topology=Topology.SAME_LINK_GROUP,
        ),
        replicas=4,
        gang=True,
        priority=-5,
        queue="research",
        node_policy="spread",
        device_policy=DevicePolicy.BINPACK,
    )


@pytest.mark.parametrize(
    ("card_memory", "bounds"),
    [
        ("80GB", (81920, 81920)),
        ("24GB..40GB", (24576, 40960)),
        ("48GB..", (49152, None)),
        ({"min": "48G"}, (49152, None)),
        ({"max": "40GiB"}, (None, 40960)),
        ({"min": "80Gi", "max": "80GB"}, (81920, 81920)),
    ],
)
def test_card_memory_forms(card_memory: object, bounds: tuple[int | None, int | None]) -> None:
    d = request_from_dict({"devices": {"card_memory": card_memory}}).devices
    assert (d.min_card_mib, d.max_card_mib) == bounds


# --------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"memroy": "8Gi"}, "memroy"),
        ({"devices": {"memroy": "40Gi"}}, "devices.memroy"),
        ({"devices": {"card_memory": {"mni": "1GB"}}}, "devices.card_memory.mni"),
        ({"cpu": "2M"}, "cpu"),
        ({"cpu": True}, "cpu"),
        ({"memory": "24Gx"}, "memory"),
        ({"devices": {"memory": "24Gx"}}, "devices.memory"),
        ({"devices": {"memory": "0%"}}, "devices.memory"),
        ({"devices": {"cores": "0%"}}, "devices.cores"),
        ({"devices": {"cores": "50"}}, "devices.cores"),
        ({"devices": {"count": "2"}}, "devices.count"),
        ({"devices": {"count": 65}}, "devices.count"),
        ({"devices": {"count": 0, "memory": "50%"}}, "devices.count"),
        ({"devices": {"count": 0, "models": ["A100"]}}, "devices.count"),
        ({"devices": {"vendors": "nvidia"}}, "devices.vendors"),
        ({"devices": {"vendors": ["nvidia", "acme"]}}, "devices.vendors[1]"),
        ({"devices": {"vendors": [1]}}, "devices.vendors[0]"),
        ({"devices": {"models": [5]}}, "devices.models[0]"),
        ({"devices": {"models": ["A100", "!"]}}, "devices.models[1]"),
        ({"devices": {"models": ["A100", ""]}}, "devices.models[1]"),
        ({"devices": {"models": [" A100"]}}, "devices.models[0]"),
        ({"devices": {"exclude_models": ["!T4"]}}, "devices.exclude_models[0]"),
        ({"devices": {"uuids": ["GPU-1", "!!GPU-2"]}}, "devices.uuids[1]"),
        ({"devices": {"exclude_uuids": [""]}}, "devices.exclude_uuids[0]"),
        ({"devices": {"software": ["cuda>=12.4", "cuda>=x"]}}, "devices.software[1]"),
        ({"devices": {"software": ["cuda>=12.4", 12]}}, "devices.software[1]"),
        ({"devices": {"software": "cuda>=12.4"}}, "devices.software"),
        ({"devices": {"card_memory": {}}}, "devices.card_memory"),
        ({"devices": {"card_memory": {"min": 80}}}, "devices.card_memory.min"),
        ({"devices": {"card_memory": {"max": "40"}}}, "devices.card_memory.max"),
        ({"devices": {"card_memory": "40GB..24GB"}}, "devices.card_memory"),
        ({"devices": {"card_memory": {"min": "40GB", "max": "24GB"}}}, "devices.card_memory.max"),
        ({"devices": {"card_memory": 80}}, "devices.card_memory"),
        ({"devices": {"topology": "ring"}}, "devices.topology"),
        ({"devices": ["A100"]}, "devices"),
        ({"replicas": "4"}, "replicas"),
        ({"replicas": 0}, "replicas"),
        ({"gang": "yes"}, "gang"),
        ({"priority": 1.5}, "priority"),
        ({"queue": ""}, "queue"),
        ({"name": 3}, "name"),
        ({"node_policy": 5}, "node_policy"),
        ({"device_policy": "pack"}, "device_policy"),
    ],
)
def test_errors_name_the_full_path(data: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict(data)
    assert info.value.field == field


def test_unknown_key_suggests_and_lists_known() -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict({"devices": {"count": 1, "memroy": "40Gi"}})
    exc = info.value
    assert (exc.field, exc.value) == ("devices.memroy", "40Gi")
    assert exc.reason.startswith("unknown key; did you mean 'memory'? known: count, vendors")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"devices": {"vendors": ["acme"]}},
            "devices.vendors[0]: unknown vendor; known: nvidia, amd, huawei, cambricon, hygon, "
            "mthreads, iluvatar, metax, enflame, kunlunxin, intel (got 'acme')",
        ),
        (
            {"devices": {"software": ["cuda>=x"]}},
            "devices.software[0]: expected NAME OP VERSION such as 'cuda>=12.1' (got 'cuda>=x')",
        ),
    ],
)
def test_messages_are_the_reason_alone(data: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict(data)
    assert str(info.value) == message


def test_bad_device_memory_message_exact() -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict({"devices": {"count": 1, "memory": "24Gx"}})
    assert str(info.value) == (
        "devices.memory: unknown memory unit 'Gx'; use Mi, Gi or Ti (M, MB, G, GB, T and TB mean "
        "the same); expected an amount such as '24Gi' or a share of the card such as '50%' (got '24Gx')"
    )


def test_root_must_be_an_object() -> None:
    with pytest.raises(RequestError) as info:
        request_from_dict(["A100"])  # type: ignore[arg-type]
    assert info.value.field == "request"


# -------------------------------------------------------------------------------------- writing
def test_canonical_form_leaves_defaults_out() -> None:
    assert request_to_dict(Request()) == {}
    req = Request(
        name="infer",
        cpu_milli=1500,
        memory_mib=1500,
        devices=DeviceRequest(
            count=1,
            memory_mib=40960,
            vendors=("nvidia",),
            exclude_models=("T4",),
            min_card_mib=24576,
            software=needs("cuda>=12.4"),  # type: ignore[arg-type]
        ),
    )
    assert request_to_dict(req) == {
        "name": "infer",
        "cpu": "1500m",
        "memory": "1500Mi",
        "devices": {
            "count": 1,
            "vendors": ["nvidia"],
            "exclude_models": ["T4"],
            "card_memory": {"min": "24GB"},
            "memory": "40Gi",
            "software": ["cuda>=12.4"],
        },
    }


# ------------------------------------------------------------------------------- round trip
_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12
).filter(lambda s: s == s.strip() and bool(s) and not s.startswith("!"))
requests = request_strategies.requests(_names, _names, _names)


@given(requests)
@pytest.mark.slow
def test_json_round_trip(req: Request) -> None:
    data = request_to_dict(req)
    assert request_from_dict(data) == req
    # and through real JSON text
    assert request_from_dict(json.loads(json.dumps(data))) == req


@given(requests)
@pytest.mark.slow
def test_canonical_form_is_a_fixed_point(req: Request) -> None:
    data = request_to_dict(req)
    assert request_to_dict(request_from_dict(data)) == data


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
_device_values = st.fixed_dictionaries(
    {},
    optional={
        key: _json | st.sampled_from(["1", "50%", "40Gi", "A100", "80GB"])
        for key in DevicesModel.model_fields
    },
)
_top_values = st.fixed_dictionaries(
    {}, optional=dict.fromkeys(RequestModel.model_fields, _json | _device_values)
)


@given(_top_values)
@pytest.mark.slow
def test_any_input_reads_or_fails_with_request_error(data: dict[str, object]) -> None:
    try:
        req = request_from_dict(data)
    except RequestError:
        return
    assert request_from_dict(request_to_dict(req)) == req


# ---------------------------------------------------------------------------- the string form
@pytest.mark.parametrize(
    "text",
    [
        "",
        "A100:80GB:2 cuda>=12.4",
        "nvidia:!T4 mem=40Gi cores=50% cpu=500m memory=2Gi replicas=3 gang priority=-2",
        "ascend:910B:24GB..64GB uuid=NPU-1,!NPU-2 nvlink queue=q name=n policy=spread "
        "device-policy=binpack",
    ],
)
def test_the_compact_string_reads_to_the_request_spec_py_parses(text: str) -> None:
    model = RequestModel.model_validate(text)
    assert model.to_request() == parse_spec(text)
    assert request_from_dict(model.dump()) == parse_spec(text)


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("A100 mem=24Gx", "devices.memory", "24Gx"),
        ("A100:1..2", "devices.count", "1..2"),
        ("any cuda>=12.4 cann>=latest", "devices.software[1]", "cann>=latest"),
        ("any gpus=2", "gpus", "gpus=2"),
    ],
)
def test_string_errors_name_the_path_and_quote_the_token(text: str, field: str, value: str) -> None:
    with pytest.raises(ValidationError) as info:
        RequestModel.model_validate(text)
    error = info.value.errors()[0]
    assert (error_path(error), error_value(error)) == (field, value)
    with pytest.raises(RequestError) as again:
        request_from_dict(text)
    assert (again.value.field, again.value.value) == (field, value)


def test_the_model_converts_once() -> None:
    model = RequestModel.model_validate({"devices": {"count": 2}})
    assert model.to_request() is model.to_request()


@pytest.mark.parametrize(
    "text", ["A100:2", "any:1 mem=4Gi cores=5%", "nvidia:1 mem=8Gi cores=10% replicas=2 gang"]
)
def test_a_compact_string_read_again_reads_as_the_first_time(text: str) -> None:
    first, again = read_spec(text), read_spec(text)
    assert first == again == RequestModel.model_validate(text)
    assert first.dump() == again.dump() == RequestModel.model_validate(text).dump()
    assert first.to_request() == RequestModel.model_validate(text).to_request()
    first.priority = 7  # each caller has its own copy
    assert read_spec(text).priority is None


def test_a_compact_string_that_fails_fails_each_time_with_the_same_error() -> None:
    errors = []
    for _ in range(2):
        with pytest.raises(ValidationError) as exc:
            read_spec("A100:2 mem=lots")
        errors.append(exc.value.errors())
    assert errors[0] == errors[1]
    with pytest.raises(ValidationError) as direct:
        RequestModel.model_validate("A100:2 mem=lots")
    assert direct.value.errors() == errors[0]


@pytest.mark.slow
def test_the_strings_read_are_kept_within_a_bound() -> None:
    for k in range(SPEC_READS_KEPT + 10):
        read_spec(f"A100:1 mem={k + 1}Mi")
    assert _read_spec.cache_info().currsize <= SPEC_READS_KEPT


@given(requests, st.text(max_size=8))
@pytest.mark.slow
def test_the_kept_written_form_is_the_models_own_key_for_key(req: Request, name: str) -> None:
    """``request_to_dict`` keeps what it wrote for a request but its name; the result is the
    model's dump, in the same key order, whatever the name, and each call's own dict."""
    for named in (req, replace(req, name=name)):
        data = request_to_dict(named)
        direct = RequestModel.from_request(named).dump()
        assert list(data.items()) == list(direct.items())
        assert json.dumps(data) == json.dumps(direct)
    again = request_to_dict(req)
    if "devices" in again:
        again["devices"]["count"] = -1  # type: ignore[index]
        assert request_to_dict(req)["devices"] != again["devices"]


def test_equal_requests_written_differently_keep_their_own_forms() -> None:
    first, second = (request_from_dict(f"A100:1 cuda>={v}") for v in ("0", "00.0"))
    assert first == second  # the same need ...
    for req in (first, second, first):  # ... each written as it was given
        assert request_to_dict(req) == RequestModel.from_request(req).dump()
