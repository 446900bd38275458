"""Distinct rows of a narrow 2-D array and which distinct row each row is: what
``np.unique(a, axis=0, return_inverse=True)`` answers, in the same order, without its cost.

``np.unique`` along an axis sorts the rows as records, field by field; on a large pool the shape
table's node kinds and the pressure's device classes (a row per card) took a visible share of
the server's time while it placed (issue 25; docs/benchmarks.md and its history), every time the
online workload was learned again. A row that packs into 8 bytes is sorted as one big-endian
integer instead: the integers sort as the rows do (element by element, False before True, 0
before 255), so the distinct rows come in the same order and every row gets the same index.
Wider rows take ``np.unique`` as before.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Rows = TypeVar("Rows", npt.NDArray[np.bool_], npt.NDArray[np.uint8])


def unique_rows(rows: Rows) -> tuple[Rows, IntArray]:
    """``(distinct rows sorted, index of each row's among them)`` of ``rows`` ``[R, K]`` (bool or
    uint8), as ``np.unique(rows, axis=0, return_inverse=True)``; the index is ``[R]`` int64."""
    rows = np.ascontiguousarray(rows)
    packed = np.packbits(rows, axis=1) if rows.dtype == np.bool_ else rows
    if rows.ndim != 2 or packed.shape[1] > 8 or rows.shape[0] == 0 or packed.dtype != np.uint8:
        kinds, inverse = np.unique(rows, axis=0, return_inverse=True)
        return kinds, np.asarray(inverse, np.int64).reshape(-1)
    wide = np.zeros((rows.shape[0], 8), np.uint8)
    wide[:, : packed.shape[1]] = packed
    keys = wide.view(">u8").reshape(-1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return rows[first], np.asarray(inverse, np.int64).reshape(-1)
