"""Catalog data and its loaders: accelerator models, driver/runtime compatibility, and the
software needs that container images imply.

``load_accelerators()``, ``load_compat()`` and ``default_image_catalog()`` read the packaged YAML
once and cache it; pass a path to load another file (tests, site overrides; an operator's
``--catalog`` file is read by ``catalog/operator_file.py``). Malformed files raise
:class:`CatalogFileError` (a :class:`~xpupool.model.errors.CatalogError`) naming the file, the
line, the entry and the field.
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
from xpupool.catalog.images import (
    ImageCatalog,
    ImageNeeds,
    ProductLine,
    default_image_catalog,
    needs_for_image,
)
from xpupool.catalog.listing import ListedAccelerator, list_accelerators
from xpupool.catalog.partitions import (
    PartitionCatalog,
    PartitionProfile,
    PartitionScheme,
    load_partitions,
)

__all__ = [
    "LINKS",
    "RUNTIMES",
    "AcceleratorCatalog",
    "AcceleratorModel",
    "CatalogFileError",
    "CompatTable",
    "DriverRange",
    "ImageCatalog",
    "ImageNeeds",
    "ListedAccelerator",
    "PartitionCatalog",
    "PartitionProfile",
    "PartitionScheme",
    "ProductLine",
    "RuntimeTable",
    "TorchBuild",
    "Verdict",
    "best_verdict",
    "default_image_catalog",
    "list_accelerators",
    "load_accelerators",
    "load_compat",
    "load_partitions",
    "needs_for_image",
    "normalise_model_name",
    "satisfies",
]
