"""What a re-cut destroys and creates: a MIG instance left where it is with its profile is kept,
one moved is destroyed and created again; vNPU instances of a template are interchangeable."""

from __future__ import annotations

from xpupool.catalog.partition_change import layout_change


def test_a_mig_instance_kept_in_place_is_not_touched() -> None:
    change = layout_change(
        (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)), (("3g.40gb", 0), ("3g.40gb", 4))
    )
    assert change.destroy == (("2g.20gb", 4), ("1g.10gb", 6))
    assert change.create == (("3g.40gb", 4),)


def test_a_moved_instance_is_destroyed_and_created() -> None:
    change = layout_change((("1g.10gb", 0),), (("1g.10gb", 1),))
    assert (change.destroy, change.create) == ((("1g.10gb", 0),), (("1g.10gb", 1),))


def test_vnpus_count_as_a_multiset_and_no_change_is_empty() -> None:
    v5, v10 = ("vir05_1c_16g", None), ("vir10_3c_32g", None)
    change = layout_change((v5, v5, v10), (v10, v5))
    assert (change.destroy, change.create) == ((v5,), ())
    assert layout_change((v5, v10), (v10, v5)).empty
