"""``cuvs.neighbors.filters``: which dataset rows a search may return."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ._arrays import to_host


class Prefilter:
    """Rows a search may return: ``allowed`` (a boolean mask over rows) for
    every query, or ``per_query`` (one mask per query row)."""

    def __init__(self, allowed: Optional[np.ndarray] = None, per_query: Optional[np.ndarray] = None) -> None:
        self.allowed, self.per_query = allowed, per_query


def no_filter() -> Prefilter:
    return Prefilter()


def _bits(words: np.ndarray) -> np.ndarray:
    """Bit ``i`` of ``uint32`` word ``i // 32`` for every ``i`` (cuVS's
    bitset order), as booleans."""
    w = np.ascontiguousarray(words, dtype=np.uint32)
    return np.unpackbits(w.view(np.uint8), bitorder="little").astype(bool)


def from_bitset(bitset) -> Prefilter:
    """Row ``i`` may be returned when bit ``i`` is set (``uint32`` words,
    host or CUDA array)."""
    b = to_host(bitset)
    if b.dtype != np.uint32 or b.ndim != 1:
        raise TypeError(f"a bitset is a 1-d uint32 array, got {b.dtype} of shape {b.shape}")
    return Prefilter(allowed=_bits(b))


def from_bitmap(bitmap) -> Prefilter:
    """Row ``j`` may be returned for query ``i`` when bit ``i * n_rows + j``
    is set (``uint32`` words); the row count is taken at search."""
    b = to_host(bitmap)
    if b.dtype != np.uint32:
        raise TypeError(f"a bitmap is a uint32 array, got {b.dtype}")
    return Prefilter(per_query=_bits(b.ravel()))
