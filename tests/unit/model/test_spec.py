"""The compact CLI spec: every documented example, error paths, canonical text, round trips.

The examples in ``docs/request-syntax.md`` are generated from :data:`EXAMPLES` and
:data:`ERROR_EXAMPLES` by this module (``python tests/unit/model/test_spec.py`` rewrites the
section between the markers) and :func:`test_docs_examples_are_generated` fails when they drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xpupool.model.errors import RequestError
from xpupool.model.request import (
    DevicePolicy,
    DeviceRequest,
    Request,
    SoftwareNeed,
    Topology,
    parse_software_need,
)
from xpupool.model.request_model import request_from_dict, request_to_dict
from xpupool.model.spec import FLAGS, format_spec, parse_spec
from xpupool.model.vendor import VENDORS

import request_strategies

DOC = Path(__file__).resolve().parents[3] / "docs" / "request-syntax.md"
BEGIN, END = "<!-- examples:begin -->", "<!-- examples:end -->"


def needs(*texts: str) -> tuple[SoftwareNeed, ...]:
    return tuple(parse_software_need(t) for t in texts)


def devices(**kwargs: object) -> Request:
    return Request(devices=DeviceRequest(**kwargs))  # type: ignore[arg-type]


# ------------------------------------------------------------------------ the brief's examples
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "A100:80GB:2",
            devices(count=2, models=("A100",), min_card_mib=81920, max_card_mib=81920),
        ),
        ("24GB..40GB:2", devices(count=2, min_card_mib=24576, max_card_mib=40960)),
        ("A10G,A100", devices(count=1, models=("A10G", "A100"))),
        (
            "nvidia:A100,H100:2 mem=40Gi cores=50%",
            devices(
                count=2,
                vendors=("nvidia",),
                models=("A100", "H100"),
                memory_mib=40960,
                core_permille=500,
            ),
        ),
        (
            "ascend:910B mem=50%",
            devices(count=1, vendors=("huawei",), models=("910B",), memory_permille=500),
        ),
        ("any:48GB..:1", devices(count=1, min_card_mib=49152)),
        (
            "nvidia:!T4 cuda>=12.4",
            devices(
                count=1, vendors=("nvidia",), exclude_models=("T4",), software=needs("cuda>=12.4")
            ),
        ),
        (
            "H100:8 nvlink replicas=4 gang",
            Request(
                devices=DeviceRequest(count=8, models=("H100",), topology=Topology.SAME_LINK_GROUP),
                replicas=4,
                gang=True,
            ),
        ),
        ("2", devices(count=2)),
        ("any", devices(count=1)),
        ("cpu=4 memory=8Gi", Request(cpu_milli=4000, memory_mib=8192)),
        ("", Request()),
        ("   ", Request()),
        ("A100,!A100-40GB", devices(count=1, models=("A100",), exclude_models=("A100-40GB",))),
        ("..40GB", devices(count=1, max_card_mib=40960)),
        ("80G:A100:2", devices(count=2, models=("A100",), min_card_mib=81920, max_card_mib=81920)),
        ("2:nvidia", devices(count=2, vendors=("nvidia",))),
        ("NVIDIA:A100", devices(count=1, vendors=("nvidia",), models=("A100",))),
        ("ascend,amd:2", devices(count=2, vendors=("huawei", "amd"))),
        (
            "npu:910B:64GB",
            devices(
                count=1,
                vendors=("huawei",),
                models=("910B",),
                min_card_mib=65536,
                max_card_mib=65536,
            ),
        ),
        ("any uuid=GPU-a,GPU-b", devices(count=1, uuids=("GPU-a", "GPU-b"))),
        ("any uuid=!GPU-c", devices(count=1, exclude_uuids=("GPU-c",))),
        ("any:2 topology=same-link-group", devices(count=2, topology=Topology.SAME_LINK_GROUP)),
        ("any:2 same-link-group", devices(count=2, topology=Topology.SAME_LINK_GROUP)),
        (
            "any cann>=8.0.RC1 rocm>=6.0 torch=2.4 pytorch~=2.4",
            devices(
                count=1, software=needs("cann>=8.0.RC1", "rocm>=6.0", "torch==2.4", "torch~=2.4")
            ),
        ),
        (
            "rocm:MI300X rocm>=6.0",
            devices(count=1, vendors=("amd",), models=("MI300X",), software=needs("rocm>=6.0")),
        ),
        (
            "cpu=500m memory=16Gi priority=-3 queue=batch name=etl policy=spread "
            "device-policy=binpack",
            Request(
                name="etl",
                cpu_milli=500,
                memory_mib=16384,
                priority=-3,
                queue="batch",
                node_policy="spread",
                device_policy=DevicePolicy.BINPACK,
            ),
        ),
        ("name==odd", Request(name="=odd")),
        ("gang replicas=2 cpu=1", Request(cpu_milli=1000, replicas=2, gang=True)),
        (
            "T4 replicas=7 gang span-sites",
            Request(
                devices=DeviceRequest(count=1, models=("T4",)),
                replicas=7,
                gang=True,
                span_sites=True,
            ),
        ),
        ("gang:1", devices(count=1, models=("gang",))),
    ],
)
def test_parse_spec(text: str, expected: Request) -> None:
    assert parse_spec(text) == expected


# ---------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("A100:1..2", "devices.count", "1..2"),
        ("A100:..2", "devices.count", "..2"),
        ("A100:0", "devices.count", "0"),
        ("A100:65", "devices.count", "65"),
        ("A100:2:4", "devices.count", "4"),
        ("A100:80", "devices.count", "80"),
        ("A100:1.5", "devices.card_memory", "1.5"),
        ("A100:80Gx", "devices.card_memory", "80Gx"),
        ("A100:80K", "devices.card_memory", "80K"),
        ("A100:..", "devices.card_memory", ".."),
        ("A100:40GB..24GB", "devices.card_memory", "40GB..24GB"),
        ("A100:24..40GB", "devices.card_memory.min", "24"),
        ("A100:80GB:48GB..", "devices.card_memory", "48GB.."),
        ("A100:H100", "devices.models", "H100"),
        ("nvidia:amd", "devices.vendors", "amd"),
        ("A100::2", "devices", "A100::2"),
        ("A100:", "devices", "A100:"),
        ("nvidia,!T4", "devices.models[0]", "nvidia"),
        ("A100,any", "devices.models[1]", "any"),
        ("A100,,H100", "devices.models[1]", ""),
        ("A100,!", "devices.models[1]", "!"),
        ("A100,!!T4", "devices.models[1]", "!!T4"),
        ("any mem=24Gx", "devices.memory", "24Gx"),
        ("any mem=0", "devices.memory", "0"),
        ("any mem=", "devices.memory", "mem="),
        ("any cores=0%", "devices.cores", "0%"),
        ("any cores=50", "devices.cores", "50"),
        ("mem=40Gi", "devices.memory", "40Gi"),
        ("cpu=4 cores=50%", "devices.cores", "50%"),
        ("nvlink", "devices.topology", "nvlink"),
        ("uuid=GPU-a", "devices.uuids", "GPU-a"),
        ("cuda>=12.4", "devices.software[0]", "cuda>=12.4"),
        ("cpu=1 torch=2.4", "devices.software[0]", "torch=2.4"),
        ("any mem=1Gi mem=2Gi", "devices.memory", "2Gi"),
        ("any cuda>=12.4 rocm>=x", "devices.software[1]", "rocm>=x"),
        ("any tensorflow>=2", "devices.software[0]", "tensorflow>=2"),
        ("any cuda>==12.4", "devices.software[0]", "cuda>==12.4"),
        ("any foo=1", "foo", "foo=1"),
        ("any bogus", "bogus", "bogus"),
        ("any A100", "A100", "A100"),
        ("any gang gang", "gang", "gang"),
        ("any span-sites span-sites", "span_sites", "span-sites"),
        ("any nvlink topology=none", "devices.topology", "none"),
        ("any replicas=x", "replicas", "x"),
        ("any replicas=0", "replicas", 0),
        ("any priority=1e3", "priority", "1e3"),
        ("any cpu=2M", "cpu", "2M"),
        ("any memory=24Gx", "memory", "24Gx"),
        ("any topology=ring", "devices.topology", "ring"),
        ("any device-policy=pack", "device_policy", "pack"),
        ("any policy=", "node_policy", "policy="),
        ("any uuid=a,,b", "devices.uuids[1]", ""),
        ("any uuid=!", "devices.uuids[0]", "!"),
    ],
)
def test_errors_name_the_json_path(text: str, field: str, value: object) -> None:
    with pytest.raises(RequestError) as info:
        parse_spec(text)
    assert (info.value.field, info.value.value) == (field, value)


def test_count_range_reason_is_clear() -> None:
    with pytest.raises(RequestError) as info:
        parse_spec("A100:1..2")
    assert str(info.value) == (
        "devices.count: count ranges are not supported: the engine places an exact number of "
        "devices; give one count such as '2' (got '1..2')"
    )


def test_bad_mem_message_exact() -> None:
    with pytest.raises(RequestError) as info:
        parse_spec("A100 mem=24Gx")
    assert str(info.value) == (
        "devices.memory: unknown memory unit 'Gx'; use Mi, Gi or Ti (M, MB, G, GB, T and TB mean "
        "the same); expected an amount such as '24Gi' or a share of the card such as '50%' (got '24Gx')"
    )


def test_unknown_key_lists_known_keys() -> None:
    with pytest.raises(RequestError) as info:
        parse_spec("any gpus=2")
    assert info.value.field == "gpus"
    assert info.value.reason == (
        "unknown key; known: mem, cores, uuid, topology, mig, vnpu, cpu, memory, replicas, "
        "priority, queue, name, policy, device-policy, site, prefer-site, data, sites, label, "
        "tolerate, kind, speed, grace, checkpoint-signal, min-run, idle-stop, qos"
    )


def test_card_size_needs_a_unit() -> None:
    with pytest.raises(RequestError) as info:
        parse_spec("A100:1.5")
    assert "needs a unit" in info.value.reason


def test_rejects_non_string() -> None:
    with pytest.raises(RequestError) as info:
        parse_spec(None)  # type: ignore[arg-type]
    assert info.value.field == "spec"


# --------------------------------------------------------------------------------------- writing
@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("A100:80GB:2", "A100:80GB:2"),
        ("2:80Gi:A100", "A100:80GB:2"),
        ("any:48GB..:1", "48GB.."),
        ("ascend:910B", "huawei:910B"),
        ("H100:8 nvlink replicas=4 gang", "H100:8 same-link-group replicas=4 gang"),
        ("T4 span-sites replicas=7 gang", "T4 replicas=7 gang span-sites"),
        ("any", "any"),
        ("any:1", "any"),
        ("nvidia:3", "nvidia:3"),
        ("3", "3"),
        ("cpu=4000m memory=8192", "cpu=4 memory=8Gi"),
        ("any mem=1.5Gi torch=2.4", "any mem=1536Mi torch==2.4"),
        ("gang:1", "gang:1"),
        ("", ""),
    ],
)
def test_format_spec_canonical(text: str, canonical: str) -> None:
    assert format_spec(parse_spec(text)) == canonical


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (devices(count=1, models=("3090",)), "devices.models[0]"),
        (devices(count=1, models=("A100", "80GB")), "devices.models[1]"),
        (devices(count=1, models=("npu",)), "devices.models[0]"),
        (devices(count=1, models=("any",)), "devices.models[0]"),
        (devices(count=1, models=("RTX 4090",)), "devices.models[0]"),
        (devices(count=1, models=("a:b",)), "devices.models[0]"),
        (devices(count=1, exclude_models=("x,y",)), "devices.exclude_models[0]"),
        (devices(count=1, models=("A..B",)), "devices.models[0]"),
        (devices(count=1, models=("cuda>=1",)), "devices.models[0]"),
        (devices(count=1, uuids=("a,b",)), "devices.uuids[0]"),
        (devices(count=1, exclude_uuids=("!x",)), "devices.exclude_uuids[0]"),
        (devices(count=1, uuids=("GPU 1",)), "devices.uuids[0]"),
        (Request(name="my job"), "name"),
        (Request(queue="a b"), "queue"),
        (Request(node_policy=" "), "node_policy"),
    ],
)
def test_format_spec_refuses_what_it_cannot_express(req: Request, field: str) -> None:
    with pytest.raises(RequestError) as info:
        format_spec(req)
    assert info.value.field == field
    assert "use JSON" in info.value.reason


# ------------------------------------------------------------------------------- round trip
_aliases = {a.lower() for v in VENDORS for a in (v.key, *v.aliases)} | {"any"} | set(FLAGS)
_models = st.one_of(
    st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,10}", fullmatch=True),
    st.sampled_from(["910B", "310P3", "A100-SXM4-80GB", "MI300X", "gang"]),
).filter(lambda s: s.lower() not in _aliases - {"gang"} and ".." not in s)
_tokens = st.from_regex(r"[A-Za-z0-9_=!.:,/-]{1,12}", fullmatch=True)
_uuids = st.from_regex(r"(GPU|NPU)-[0-9a-f]{1,8}", fullmatch=True)
spec_requests = request_strategies.requests(_tokens, _models, _uuids, exact_card_sizes=True)


@given(spec_requests)
@pytest.mark.slow
def test_spec_round_trip(req: Request) -> None:
    text = format_spec(req)
    assert parse_spec(text) == req
    assert format_spec(parse_spec(text)) == text


@given(spec_requests)
@pytest.mark.slow
def test_spec_and_json_agree(req: Request) -> None:
    assert request_from_dict(request_to_dict(parse_spec(format_spec(req)))) == req


_pieces = st.sampled_from(
    [
        "A100",
        "!T4",
        "nvidia",
        "any",
        "2",
        "0",
        "80GB",
        "..",
        "24GB..",
        "1..2",
        ":",
        ",",
        "=",
        "mem=",
        "50%",
        "40Gi",
        "cores=",
        "cuda>=12.4",
        "gang",
        "nvlink",
        "uuid=",
        "!",
        "x",
        "cpu=",
        "memory=",
        "replicas=",
        "priority=",
        "-1",
        "name=",
        "policy=",
        "torch=",
        "~",
        "device-policy=",
        "spread",
        "topology=",
        "same-link-group",
        " ",
        " ",
        "1.5",
        "Gx",
    ]
)


@given(st.lists(_pieces, max_size=12).map("".join) | st.text(max_size=30))
def test_any_text_parses_or_fails_with_request_error(text: str) -> None:
    try:
        req = parse_spec(text)
    except RequestError:
        return
    try:
        canonical = format_spec(req)
    except RequestError:
        return
    assert parse_spec(canonical) == req


# ----------------------------------------------------------------------------------------- docs
EXAMPLES: list[tuple[str, str]] = [
    ("Two A100s of exactly 80 GB (dstack style)", "A100:80GB:2"),
    ("Two cards of 24 to 40 GB, any model", "24GB..40GB:2"),
    ("One A10G or one A100", "A10G,A100"),
    (
        "40 GiB and half the compute of each of two NVIDIA cards",
        "nvidia:A100,H100:2 mem=40Gi cores=50%",
    ),
    ("Half of one Ascend 910B (the alias resolves to the vendor key)", "ascend:910B mem=50%"),
    ("Any card of at least 48 GB", "any:48GB..:1"),
    ("Any NVIDIA card but a T4, with CUDA 12.4 or newer", "nvidia:!T4 cuda>=12.4"),
    ("Four all-or-nothing replicas of eight linked H100s", "H100:8 nvlink replicas=4 gang"),
    ("Two whole cards of anything", "2"),
    ("One whole card of anything", "any"),
    ("CPU only", "cpu=4 memory=8Gi"),
    ("Components in any order", "2:80Gi:A100"),
    ("An A100 but not the 40 GB one, never GPU-c", "A100,!A100-40GB uuid=!GPU-c"),
    ("At most 40 GB cards, a quarter slice", "..40GB cores=25% cpu=500m"),
    (
        "A full Ascend training job",
        "npu:910B:8 same-link-group cann>=8.0.RC1 torch=2.4 cpu=64 memory=512Gi replicas=2 gang "
        "priority=10 queue=train name=llm-ft policy=topology",
    ),
    ("Named cards, spread inside the node", "any:2 uuid=GPU-a,GPU-b device-policy=spread"),
    ("'rocm' as a vendor and as software", "rocm:MI300X:192GB rocm>=6.0"),
    ("Two cards in Beijing, on nodes labelled for team A", "A100:2 site=beijing label=pool=team-a"),
    ("Anywhere but Shanghai, Beijing first", "any site=!shanghai prefer-site=beijing"),
    (
        "Seven T4s all or none, across sites if no one site holds them",
        "T4 replicas=7 gang span-sites",
    ),
    (
        "CPU only, also on nodes tainted for the ETL team or as spot",
        "cpu=2 tolerate=team=etl:NoSchedule tolerate=spot",
    ),
    ("One MIG instance of profile 3g.40gb (a hardware partition)", "A100 mig=3g.40gb"),
    ("Two Ascend 910B3 vNPUs of template vir05_1c_16g", "910B3:2 vnpu=vir05_1c_16g"),
    ("The smallest partition of an A100 holding 20 GiB", "A100 mem=20Gi isolated"),
    (
        "A ResNet run that is 10x faster on a V100 than on a K80, placed for it",
        "any kind=resnet50 speed=V100:10,P100:5,K80:1 policy=throughput",
    ),
]
ERROR_EXAMPLES: list[str] = [
    "A100 mig=3g.40gb mem=20Gi",
    "A100 isolated",
    "A100:1..2",
    "A100:80",
    "A100:1.5",
    "A100:H100",
    "nvidai:A100",
    "A100:-1",
    "nvidia,!T4",
    "any mem=24Gx",
    "mem=40Gi",
    "any cuda>=12.4 cann>=latest",
    "any gpus=2",
    "any label=pool",
    "cpu=1 tolerate=gpu:NoExecute",
    "cpu=abc",
    "any A100",
]


def render_examples() -> str:
    """The generated part of ``docs/request-syntax.md``."""
    out: list[str] = [BEGIN, ""]
    for number, (title, text) in enumerate(EXAMPLES, 1):
        req = parse_spec(text)
        out += [
            f"### {number}. {title}",
            "",
            "```spec",
            text,
            "```",
            "",
            "```json",
            json.dumps(request_to_dict(req), indent=2),
            "```",
            "",
            f"Canonical spec: `{format_spec(req)}`",
            "",
        ]
    out += ["### Errors", "", "Each line is a spec, `=>`, and `str()` of the error it raises.", ""]
    out += ["```errors"]
    for text in ERROR_EXAMPLES:
        try:
            parse_spec(text)
        except RequestError as exc:
            out.append(f"{text}  =>  {exc}")
        else:
            raise AssertionError(f"{text!r} should be refused")
    out += ["```", "", END]
    return "\n".join(out)


def test_docs_examples_are_generated() -> None:
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    assert doc[start:end] == render_examples(), (
        "docs/request-syntax.md is stale: run python tests/unit/model/test_spec.py"
    )
    assert len(EXAMPLES) >= 12


def test_docs_examples_round_trip() -> None:
    for _, text in EXAMPLES:
        req = parse_spec(text)
        assert parse_spec(format_spec(req)) == req
        assert request_from_dict(request_to_dict(req)) == req


if __name__ == "__main__":  # regenerate the examples section of the docs
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    DOC.write_text(doc[:start] + render_examples() + doc[end:], encoding="utf-8")
    sys.stdout.write(f"wrote {DOC}\n")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("A100 mig=3g.40gb mem=20Gi", "devices.partition"),
        ("A100 mig=3g.40gb cores=50%", "devices.partition"),
        ("A100 isolated", "devices.isolated"),
        ("A100 mem=50% isolated", "devices.isolated"),
        ("A100 mig=big", "devices.partition"),
        ("A100 mig=1g.5gb vnpu=vir02", "devices.partition"),
        ("mig=1g.5gb", "devices.partition"),
    ],
)
def test_partition_requests_refuse_shares_and_bad_profiles(spec: str, field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_spec(spec)
    assert info.value.field == field


@pytest.mark.parametrize(
    "spec", ["A100 mig=3g.40gb", "910B3:2 vnpu=vir05_1c_16g", "A100 mem=20Gi isolated"]
)
def test_partition_requests_round_trip_in_both_forms(spec: str) -> None:
    req = parse_spec(spec)
    assert format_spec(req) == spec
    assert request_from_dict(request_to_dict(req)) == req
    assert req.devices.whole
