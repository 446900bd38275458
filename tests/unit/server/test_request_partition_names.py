"""A partition profile the named models lack is refused at submission, naming their profiles."""

from __future__ import annotations

import pytest

from xpupool.model.errors import RequestError
from xpupool.model.spec import parse_spec
from xpupool.server.request_names import check_names

from factories import engine_for, gpu_node


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("A100-SXM4-40GB mig=3g.40gb", "A100-SXM4-40GB: 1g.5gb, 1g.5gb+me, 1g.10gb"),
        ("910B3 vnpu=vir02", "910B3: vir05_1c_16g, vir10_3c_32g"),
        ("T4 mig=1g.5gb", "T4: no partitions"),
        ("any mig=9g.1gb", "no partitionable model has it"),
    ],
)
def test_a_profile_no_named_model_has_is_refused(spec: str, named: str) -> None:
    with pytest.raises(RequestError) as info:
        check_names(engine_for(gpu_node("a")), parse_spec(spec))
    assert info.value.field == "devices.partition"
    assert named in info.value.reason


@pytest.mark.parametrize(
    "spec", ["A100 mig=3g.40gb", "any vnpu=vir05_1c_16g", "910B vnpu=vir05_1c_16g"]
)
def test_a_profile_some_named_model_has_passes(spec: str) -> None:
    check_names(engine_for(gpu_node("a")), parse_spec(spec))
