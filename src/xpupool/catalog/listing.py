"""The accelerator list users read to write a request: every catalog model, and how many of each
the pool has, plus the models the pool's devices print that the catalog lacks.

One function builds the list for both its readers: the server's ``GET /v1/accelerators`` (with
the pool's devices) and ``xpupool accelerators --catalog-only`` (without a pool), so both show
the same rows in the same order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from xpupool.catalog.accelerators import AcceleratorCatalog


@dataclass(frozen=True, slots=True)
class ListedAccelerator:
    """One row: a catalog model (``in_catalog``) or a name only the pool's devices print.

    ``memory_gib`` is the catalog's marketed size (None for a model the catalog lacks);
    ``in_pool`` counts the registered devices of this model (cordoned and lost nodes included:
    they belong to the pool), None when the list was made without a pool.
    """

    vendor: str
    model: str
    family: str | None
    memory_gib: float | None
    aliases: tuple[str, ...]
    in_catalog: bool
    in_pool: int | None


def list_accelerators(
    catalog: AcceleratorCatalog, pool: Iterable[tuple[str, str]] | None = None
) -> list[ListedAccelerator]:
    """Rows for every catalog model in file order, then the pool's uncatalogued models sorted by
    vendor and name. ``pool`` yields (vendor, printed model) once per device; None: no pool."""
    counts: Counter[str] = Counter()
    unknown: Counter[tuple[str, str]] = Counter()
    for vendor, printed in pool or ():
        found = catalog.lookup(printed, vendor)
        if found is None:
            unknown[(vendor, printed)] += 1
        else:
            counts[found.name] += 1
    in_pool = pool is not None
    rows = [
        ListedAccelerator(
            vendor=m.vendor,
            model=m.name,
            family=m.family,
            memory_gib=m.memory_gib,
            aliases=m.aliases,
            in_catalog=True,
            in_pool=counts[m.name] if in_pool else None,
        )
        for m in catalog.models
    ]
    rows += [
        ListedAccelerator(vendor, printed, None, None, (), False, count)
        for (vendor, printed), count in sorted(unknown.items())
    ]
    return rows
