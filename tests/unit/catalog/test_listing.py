"""The accelerator list: catalog models in file order with pool counts, then what the pool
prints that the catalog lacks, marked so."""

from __future__ import annotations

from xpupool.catalog import list_accelerators, load_accelerators


def test_catalog_only_lists_every_model_without_counts() -> None:
    catalog = load_accelerators()
    rows = list_accelerators(catalog)
    assert [r.model for r in rows] == [m.name for m in catalog.models]
    assert all(r.in_catalog and r.in_pool is None for r in rows)


def test_the_pool_is_counted_and_unknown_models_are_listed_after() -> None:
    catalog = load_accelerators()
    pool = [("nvidia", "NVIDIA A100-SXM4-80GB")] * 3 + [("nvidia", "G2"), ("nvidia", "G2")]
    rows = list_accelerators(catalog, pool)
    by_model = {r.model: r for r in rows}
    assert by_model["A100-SXM4-80GB"].in_pool == 3
    assert by_model["H100-SXM5-80GB"].in_pool == 0
    assert rows[-1] == by_model["G2"]
    assert (by_model["G2"].in_catalog, by_model["G2"].in_pool, by_model["G2"].family) == (
        False,
        2,
        None,
    )
