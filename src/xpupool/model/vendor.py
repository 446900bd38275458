"""Vendor keys and the names people and tools use for them.

The engine keeps one short key per vendor; users may write the company, the product line or the
device kind (``ascend`` and ``npu`` both mean Huawei). Each vendor also names the environment
variable its runtime reads to restrict visible devices (used by the agent).
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.model.errors import RequestError


@dataclass(frozen=True, slots=True)
class Vendor:
    key: str
    display: str
    aliases: tuple[str, ...]
    visible_devices_env: str


VENDORS: tuple[Vendor, ...] = (
    Vendor("nvidia", "NVIDIA", ("nvidia", "nv", "cuda"), "CUDA_VISIBLE_DEVICES"),
    Vendor("amd", "AMD", ("amd", "rocm", "instinct"), "HIP_VISIBLE_DEVICES"),
    Vendor("huawei", "Huawei Ascend", ("huawei", "ascend", "npu"), "ASCEND_RT_VISIBLE_DEVICES"),
    Vendor("cambricon", "Cambricon", ("cambricon", "mlu"), "MLU_VISIBLE_DEVICES"),
    Vendor("hygon", "Hygon", ("hygon", "dcu"), "HIP_VISIBLE_DEVICES"),
    Vendor(
        "mthreads",
        "Moore Threads",
        ("mthreads", "moore-threads", "moorethreads", "musa"),
        "MUSA_VISIBLE_DEVICES",
    ),
    Vendor("iluvatar", "Iluvatar CoreX", ("iluvatar", "corex"), "CUDA_VISIBLE_DEVICES"),
    Vendor("metax", "MetaX", ("metax", "maca"), "CUDA_VISIBLE_DEVICES"),
    Vendor("enflame", "Enflame", ("enflame", "gcu"), "TOPS_VISIBLE_DEVICES"),
    Vendor("kunlunxin", "Kunlunxin", ("kunlunxin", "kunlun", "xpu"), "XPU_VISIBLE_DEVICES"),
    Vendor("intel", "Intel", ("intel", "gaudi", "habana", "xe"), "ZE_AFFINITY_MASK"),
)
_BY_ALIAS: dict[str, Vendor] = {alias: v for v in VENDORS for alias in (v.key, *v.aliases)}
VENDOR_KEYS: tuple[str, ...] = tuple(v.key for v in VENDORS)
# Every name a vendor answers to (keys and aliases): what a misspelling is compared with.
VENDOR_NAMES: tuple[str, ...] = tuple(_BY_ALIAS)


def find_vendor(name: str) -> Vendor | None:
    """The vendor a name refers to, case-insensitively, or None."""
    return _BY_ALIAS.get(name.strip().lower())


def vendor_key(name: str, field: str = "vendor") -> str:
    """Canonical key of a vendor name; raises RequestError naming ``field`` if unknown."""
    vendor = find_vendor(name) if isinstance(name, str) else None
    if vendor is None:
        raise RequestError(field, name, f"unknown vendor; known: {', '.join(VENDOR_KEYS)}")
    return vendor.key
