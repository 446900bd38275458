"""Numba compilation for the engine's loops, with the machine code cached for the next process.

One decorator for every compiled function of the engine (the fragmentation kernels, the capacity
predicate's scalar form), so that they all cache the same way and degrade the same way on a
read-only install.
"""

from __future__ import annotations

import logging
from typing import Any

from numba import njit

log = logging.getLogger("xpupool.engine")
_uncached: list[str] = []  # loops compiled without a cache (no writable folder for it)


def jit(func: Any) -> Any:
    """``func`` compiled by Numba, its machine code cached for the next process where a folder can
    take it (beside this module, ``NUMBA_CACHE_DIR``, or the user's cache folder); on a read-only
    install with none of them writable, Numba refuses to cache, and each process compiles afresh
    (seconds of CPU for all the loops, paid in ``kernels.warm``: docs/benchmarks.md, start-up)."""
    try:
        return njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        if not _uncached:
            log.warning(
                "no writable folder for Numba's cache: the engine's loops are compiled in every "
                "process (set NUMBA_CACHE_DIR to a writable folder to keep them)"
            )
        _uncached.append(func.__name__)
        return njit(nogil=True)(func)
