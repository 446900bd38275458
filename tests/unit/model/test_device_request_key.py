"""A device request's equality and hash come from one tuple of its fields made at construction;
they must mean what a dataclass's would: every field counts, and a copy (replace, pickle) is equal."""

from __future__ import annotations

import dataclasses
import pickle

from xpupool.model import DeviceRequest
from xpupool.model.request import Topology, parse_software_need

BASE = DeviceRequest(count=2, memory_mib=1024, core_permille=100)
# one different value per field, each valid next to BASE's others
CHANGES: dict[str, object] = {
    "count": 3,
    "memory_mib": 2048,
    "memory_permille": None,
    "core_permille": 200,
    "vendors": ("nvidia",),
    "models": ("A100",),
    "exclude_models": ("L20",),
    "uuids": ("GPU-1",),
    "exclude_uuids": ("GPU-2",),
    "min_card_mib": 1024,
    "max_card_mib": 1 << 20,
    "software": (parse_software_need("cuda>=12.4"),),
    "topology": Topology.SAME_LINK_GROUP,
    "type_contains": ("Tesla",),
    "exclude_type_contains": ("SXM4",),
    "share_modes": ("mps",),
    "partition": "3g.40gb",
    "isolated_mib": 20480,
}
# fields that take a device whole: changed with BASE's shares left out
WHOLE_ONLY = frozenset({"partition", "isolated_mib"})


def test_every_field_counts() -> None:
    names = {f.name for f in dataclasses.fields(DeviceRequest) if f.init}
    assert names == set(CHANGES)
    for name, value in CHANGES.items():
        if getattr(BASE, name) == value:
            continue
        shares: dict[str, object] = {}
        if name in WHOLE_ONLY:
            shares = {"memory_mib": None, "core_permille": None}
            assert dataclasses.replace(BASE, **shares) != dataclasses.replace(
                BASE, **shares, **{name: value}
            ), name
        other = dataclasses.replace(BASE, **{name: value, **shares})
        assert other != BASE, name
        assert dataclasses.replace(other) == other and hash(dataclasses.replace(other)) == hash(
            other
        )


def test_equal_requests_built_apart_are_equal_and_hash_alike() -> None:
    a = DeviceRequest(count=1, models=("A100", "H100"), vendors=("cuda",))
    b = DeviceRequest(count=1, models=["A100", "H100"], vendors=["nvidia"])  # type: ignore[arg-type]
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    copy = pickle.loads(pickle.dumps(a))
    assert copy == a and hash(copy) == hash(a)
    assert a != "A100" and a != DeviceRequest(count=1)
