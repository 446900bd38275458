"""Parse errors name the actual mistake (issue 21, part 1): every key of the compact syntax, and
the device part's components, refuse bad text with the field it fills and a reason that fits that
field (a CPU hint for ``cpu``, a share for ``cores``), never a neighbour's wording."""

from __future__ import annotations

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.request_model import request_from_dict
from xpupool.model.spec import KEYS, parse_spec

# (spec, field, words the reason must hold, words it must not hold)
CASES: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    # the device part
    ("nvidai:A100", "devices.vendors", ("'nvidai' is not a vendor", "'nvidia'"), ("twice",)),
    ("A100:nvidai", "devices.vendors", ("'nvidai' is not a vendor", "'nvidia'"), ("twice",)),
    ("ascnd:910B", "devices.vendors", ("'ascnd' is not a vendor", "'ascend'"), ()),
    ("A100:H100", "devices.models", ("two model lists", "'A100,H100'"), ("vendor",)),
    ("A100:-1", "devices.count", ("whole number", "1", "64"), ("twice", "models")),
    ("A100:+2", "devices.count", ("whole number",), ("twice",)),
    ("A100:80XB", "devices.models", ("two model lists", "unit"), ()),
    # key=value pairs: each hint fits its key
    ("cpu=abc", "cpu", ("'2'", "'500m'"), ("Gi",)),
    ("cpu=2Gi", "cpu", ("'500m'",), ("memory",)),
    ("any mem=abc", "devices.memory", ("'24Gi'", "'50%'"), ()),
    ("any cores=abc", "devices.cores", ("'50%'",), ("Gi",)),
    ("any cores=2Gi", "devices.cores", ("'50%'",), ()),
    ("memory=abc", "memory", ("'16Gi'",), ("%",)),
    ("memory=50%", "memory", ("'16Gi'",), ()),
    ("replicas=abc", "replicas", ("whole number", "replicas"), ("Gi",)),
    ("replicas=0", "replicas", ("1", "10000"), ()),
    ("priority=high", "priority", ("whole number", "priority"), ("Gi",)),
    ("any topology=ring", "devices.topology", ("same-link-group",), ()),
    ("any mig=big", "devices.partition", ("'3g.40gb'",), ("Gi",)),
    ("any vnpu=big", "devices.partition", ("'vir05_1c_16g'",), ("Gi",)),
    ("device-policy=pack", "device_policy", ("binpack", "spread"), ()),
    ("any uuid=,", "devices.uuids[0]", ("name",), ()),
    ("queue=", "queue", ("needs a value",), ()),
    ("name=", "name", ("needs a value",), ()),
    ("policy=", "node_policy", ("needs a value",), ()),
    ("site=a,,b", "site[1]", ("name",), ()),
    ("site=sh anghai", "anghai", ("unknown flag",), ()),
    ("prefer-site=!x", "preferred_site", ("site name",), ()),
    ("data=a,b", "data", ("dataset name",), ()),
    ("sites=beijing", "span_sites", ("sites=any", "site="), ()),
    ("label=pool", "node_selector", ("label=NAME=VALUE",), ()),
    ("label=pool=a label=pool=b", "node_selector.pool", ("given twice",), ()),
    ("label==a", "node_selector", ("label=NAME=VALUE",), ()),
    ("tolerate=gpu:NoExecute", "tolerations[0].effect", ("not supported", "never evicts"), ()),
    ("tolerate=gpu:Nope", "tolerations[0].effect", ("NoSchedule", "PreferNoSchedule"), ()),
    ("tolerate=gpu tolerate=gpu", "tolerations[1]", ("given twice",), ()),
    ("tolerate==true", "tolerations[0].key", ("give a key", "'*'"), ()),
    ("tolerate=GPU_", "tolerations[0].key", ("letter or digit",), ()),
    ("tolerate=gpu=a:b", "tolerations[0].effect", ("unknown effect",), ()),
    ("kind=", "kind", ("needs a value",), ()),
    ("speed=A100:0", "speed.A100", ("finite and > 0",), ()),
    ("speed=A100", "speed[0]", ("MODEL:SPEED",), ()),
    ("grace=30", "grace", ("duration such as 30s",), ()),
    ("grace=2h", "grace", ("at most 3600 s",), ()),
    ("grace=10s grace=20s", "grace", ("given twice",), ()),
    ("checkpoint-signal=KILL", "checkpoint_signal", ("USR1", "checkpoint on"), ()),
    ("min-run=0m", "min_run", ("more than 0",), ()),
    ("idle-stop=5%", "idle_stop", ("5%/30m",), ()),
    ("qos=gold", "qos", ("guaranteed", "burstable", "best-effort"), ()),
]


@pytest.mark.parametrize(("spec", "field", "words", "not_words"), CASES)
def test_spec_error_names_the_mistake(
    spec: str, field: str, words: tuple[str, ...], not_words: tuple[str, ...]
) -> None:
    with pytest.raises(RequestError) as caught:
        parse_spec(spec)
    assert caught.value.field == field, caught.value
    for word in words:
        assert word in caught.value.reason, caught.value
    for word in not_words:
        assert word not in caught.value.reason, caught.value


def test_every_key_has_a_case() -> None:
    """A key added to the syntax without a case here fails: its error wording must be chosen."""
    covered = {spec.split("=")[0].split()[-1] for spec, *_ in CASES if "=" in spec}
    assert set(KEYS) <= covered


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"cpu": "abc"}, "cpu", ("'500m'",)),
        ({"memory": "abc"}, "memory", ("'16Gi'",)),
        ({"devices": {"memory": "abc"}}, "devices.memory", ("'50%'",)),
        ({"devices": {"cores": "abc"}}, "devices.cores", ("'50%'",)),
    ],
)
def test_json_form_gives_the_same_hints(
    body: dict[str, object], field: str, words: tuple[str, ...]
) -> None:
    with pytest.raises(RequestError) as caught:
        request_from_dict(body)
    assert caught.value.field == field
    for word in words:
        assert word in caught.value.reason, caught.value


@pytest.mark.parametrize(
    "request_form",
    ["any mem=20GB", "any mem=20Gi", "any mem=20G", "any mem=20GiB"],
)
def test_device_memory_units_have_one_meaning(request_form: str) -> None:
    """``GB`` is the marketed, binary unit in every size of a request, as in ``A100:80GB``."""
    assert parse_spec(request_form).devices.memory_mib == 20480


@pytest.mark.parametrize(
    "request_form",
    ["memory=20G", "memory=20GB", {"memory": "20GB"}, {"memory": "20G"}, {"memory": "20Gi"}],
)
def test_host_memory_units_have_one_meaning(request_form: str | dict[str, object]) -> None:
    req = (
        parse_spec(request_form)
        if isinstance(request_form, str)
        else request_from_dict(request_form)
    )
    assert req.memory_mib == 20480


def test_card_size_and_device_memory_agree() -> None:
    """``A100:80GB mem=80GB`` asks for the whole of an 80 GB card, not 76294 MiB of it."""
    req = parse_spec("A100:80GB mem=80GB")
    assert req.devices.min_card_mib == req.devices.memory_mib == 81920
