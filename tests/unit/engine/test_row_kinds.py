"""``unique_rows`` answers as ``np.unique(axis=0)`` does: the same distinct rows in the same order
and the same index per row, for bool and byte rows, narrow (the integer path) and wide."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine.fragmentation.row_kinds import unique_rows


@pytest.mark.parametrize("width", [1, 3, 8, 9, 17, 64, 65])
@pytest.mark.parametrize("seed", range(5))
def test_as_numpy_unique_on_bool_rows(width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.random((12, width)) < 0.5
    rows = base[rng.integers(0, 12, 500)]
    kinds, inverse = unique_rows(rows)
    want_kinds, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(kinds, want_kinds)
    assert np.array_equal(inverse, want_inverse.reshape(-1))


@pytest.mark.parametrize("width", [1, 2, 8, 9])
def test_as_numpy_unique_on_byte_rows(width: int) -> None:
    rng = np.random.default_rng(width)
    base = rng.integers(0, 256, (20, width)).astype(np.uint8)
    rows = base[rng.integers(0, 20, 400)]
    kinds, inverse = unique_rows(rows)
    want_kinds, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(kinds, want_kinds)
    assert np.array_equal(inverse, want_inverse.reshape(-1))
    assert np.array_equal(kinds[inverse], rows)
