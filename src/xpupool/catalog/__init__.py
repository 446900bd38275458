"""Catalog data and its loaders: accelerator models and driver/runtime compatibility.

``load_accelerators()`` and ``load_compat()`` read the packaged YAML once and cache it; pass a
path to load another file (tests, site overrides). Malformed files raise :class:`CatalogFileError`
(a :class:`~xpupool.model.errors.CatalogError`) naming the file, the entry and the field.
"""

from xpupool.catalog._data_file import CatalogFileError
from xpupool.catalog.accelerators import (
    LINKS,
    AcceleratorCatalog,
    AcceleratorModel,
    load_accelerators,
    normalise_model_name,
)
from xpupool.catalog.compat import (
    RUNTIMES,
    CompatTable,
    DriverRange,
    RuntimeTable,
    TorchBuild,
    Verdict,
    best_verdict,
    load_compat,
    satisfies,
)
from xpupool.catalog.listing import ListedAccelerator, list_accelerators

__all__ = [
    "LINKS",
    "RUNTIMES",
    "AcceleratorCatalog",
    "AcceleratorModel",
    "CatalogFileError",
    "CompatTable",
    "DriverRange",
    "ListedAccelerator",
    "RuntimeTable",
    "TorchBuild",
    "Verdict",
    "best_verdict",
    "list_accelerators",
    "load_accelerators",
    "load_compat",
    "normalise_model_name",
    "satisfies",
]
