"""A drop-in for code written for Faiss: change one import.

    from octex.compat import faiss            # was: import faiss
    index = faiss.IndexOctEx(d, faiss.METRIC_L2)
    index.add(xb)
    D, I = index.search(xq, k)

``IndexOctEx(d, metric)`` follows Faiss's conventions: ``D`` is ``float32``
``(nq, k)`` with squared L2 distances for ``METRIC_L2`` and inner products
(larger is nearer) for ``METRIC_INNER_PRODUCT``; ``I`` is ``int64`` with
``-1`` where fewer than ``k`` results exist. ``IndexHNSWFlat`` maps to it,
so an HNSW script runs unchanged (its graph parameters are accepted and
ignored). Faiss's exact indexes (``IndexFlatL2``...) are not mapped: OctEx
is approximate, and passing it off as exact would mislead.

Not covered: OctEx indexes are built once over all vectors, so ``add`` after
the first search rebuilds the index over everything added so far (Faiss
appends); ``remove_ids``, ``reconstruct``, ``range_search``, id maps,
training of quantizers, GPU index classes and ``write_index``/``read_index``
of Faiss files (use :meth:`octex.Index.save` / :meth:`octex.Index.load`:
``write_index``/``read_index`` here take OctEx files). ``nprobe``/``efSearch``
map to nothing: set ``index.recall`` (a target, tuned once) or
``index.params`` instead.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import octex

METRIC_INNER_PRODUCT = 0
METRIC_L2 = 1

__all__ = [
    "IndexOctEx",
    "IndexHNSWFlat",
    "METRIC_L2",
    "METRIC_INNER_PRODUCT",
    "write_index",
    "read_index",
]


class IndexOctEx:
    """An OctEx index with Faiss's ``add``/``train``/``search`` interface."""

    def __init__(self, d: int, metric: int = METRIC_L2, *_, **__) -> None:
        if metric not in (METRIC_L2, METRIC_INNER_PRODUCT):
            raise ValueError(f"metric {metric}: METRIC_L2 or METRIC_INNER_PRODUCT")
        self.d = int(d)
        self.metric_type = metric
        self.ntotal = 0
        self.is_trained = True
        self.recall: Optional[float] = None
        self.params: Optional[octex.SearchParams] = None
        self.backend = "auto"
        self._parts: list = []
        self._index: Optional[octex.Index] = None

    def train(self, x) -> None:
        """Nothing to train: OctEx learns its projections when it builds."""
        self._check(x)

    def add(self, x) -> None:
        """Add vectors (the index is built, or rebuilt, at the next search)."""
        a = self._check(x)
        self._parts.append(a)
        self.ntotal += a.shape[0]
        self._index = None

    def reset(self) -> None:
        self._parts, self.ntotal, self._index = [], 0, None

    def _check(self, x) -> np.ndarray:
        a = np.ascontiguousarray(x, dtype=np.float32)
        if a.ndim != 2 or a.shape[1] != self.d:
            raise ValueError(f"expected shape (n, {self.d}), got {a.shape}")
        return a

    def _built(self) -> octex.Index:
        if self._index is None:
            if self.ntotal == 0:
                raise ValueError("the index is empty: add vectors first")
            base = self._parts[0] if len(self._parts) == 1 else np.concatenate(self._parts)
            self._parts = [base]
            metric = "l2" if self.metric_type == METRIC_L2 else "ip"
            self._index = octex.build(base, metric=metric, backend=self.backend, progress=False)
        return self._index

    def search(self, x, k: int, *_, params=None, **__):
        """``(D, I)``: distances ``float32`` and ids ``int64`` (``-1`` where
        missing), both ``(nq, k)``, nearest first."""
        q = self._check(x)
        index = self._built()
        kk = min(int(k), self.ntotal)
        ids, dist = index.search(q, kk, recall=self.recall, params=self.params, backend=self.backend)
        labels = ids.astype(np.int64)
        labels[ids == np.iinfo(np.uint32).max] = -1
        if self.metric_type == METRIC_INNER_PRODUCT:
            dist = -dist
        if kk < k:
            pad = k - kk
            labels = np.pad(labels, ((0, 0), (0, pad)), constant_values=-1)
            fill = -np.inf if self.metric_type == METRIC_INNER_PRODUCT else np.inf
            dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=fill)
        return dist.astype(np.float32, copy=False), labels


class IndexHNSWFlat(IndexOctEx):
    """Faiss's HNSW name: ``IndexHNSWFlat(d, M[, metric])``; ``M`` is ignored."""

    def __init__(self, d: int, M: int = 32, metric: int = METRIC_L2) -> None:
        super().__init__(d, metric)
        self.hnsw = _HnswParams()


class _HnswParams:
    """Accepts ``efConstruction``/``efSearch`` assignments (ignored)."""

    efConstruction = 40
    efSearch = 16


def write_index(index: IndexOctEx, path: str) -> None:
    """Save the OctEx index (an OctEx file, not a Faiss one)."""
    index._built().save(path)


def read_index(path: str) -> IndexOctEx:
    """Load an OctEx file written by :func:`write_index`."""
    inner = octex.Index.load(path)
    metric = METRIC_INNER_PRODUCT if inner.metric == "ip" else METRIC_L2
    out = IndexOctEx(inner.dim, metric)
    out._index, out.ntotal = inner, len(inner)
    return out
