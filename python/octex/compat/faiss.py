"""A drop-in for code written for Faiss: change one import.

    from octex.compat import faiss            # was: import faiss
    index = faiss.IndexIDMap(faiss.IndexHNSWFlat(d, 32))
    index.add_with_ids(xb, ids)
    index.remove_ids(faiss.IDSelectorRange(0, 100))
    D, I = index.search(xq, k, params=faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed)))

Conventions are Faiss's: ``D`` ``float32`` ``(nq, k)``, squared L2 for
``METRIC_L2`` and inner products (larger is nearer) for
``METRIC_INNER_PRODUCT``; ``I`` ``int64`` with ``-1`` where fewer than ``k``
results exist; ``range_search`` returns ``(lims uint64, D, I)``.

What each class is here:

- ``IndexFlat``, ``IndexFlatL2``, ``IndexFlatIP``: exact search by brute
  force (:func:`octex.knn`, f64 products): exact, as in Faiss, not an OctEx
  index. ``remove_ids`` renumbers the vectors after the removed ones, as
  Faiss's flat index does.
- ``IndexHNSWFlat``, ``IndexIVFFlat``, ``IndexOctEx``: an OctEx index (built
  over the vectors added so far at the first search; later adds are inserted
  in place). Their knobs are accepted and ignored: ``M``,
  ``hnsw.efConstruction``, ``hnsw.efSearch``, ``nlist``, ``nprobe``,
  ``SearchParametersHNSW.efSearch``, ``SearchParametersIVF.nprobe``; set
  ``index.recall`` (a recall@k target, tuned once) or ``index.params``
  (``octex.SearchParams``) instead. Ids are the order of addition and stay
  when others are removed (Faiss's IVF rule; Faiss's HNSW cannot remove).
  ``IndexIVFFlat`` must be trained before ``add``, as in Faiss (OctEx itself
  learns nothing there).
- ``IndexIDMap``, ``IndexIDMap2``: 64-bit ids given by ``add_with_ids``;
  ``reconstruct`` by id on ``IndexIDMap2`` only, as in Faiss.
- Selectors ``IDSelectorRange``, ``IDSelectorBatch`` (``IDSelectorArray``),
  ``IDSelectorBitmap``, ``IDSelectorNot``/``And``/``Or``/``XOr``,
  ``IDSelectorAll`` in ``SearchParameters(sel=...)`` (and its HNSW and IVF
  forms) and in ``remove_ids``.
- ``index_factory``: ``Flat``, ``HNSW<M>[,Flat]``, ``IVF<n>,Flat``,
  ``OctEx``, each optionally behind ``IDMap,`` or ``IDMap2,``; other strings
  (PQ, SQ, OPQ, pre-transforms) raise ``ValueError``.
- ``write_index``/``read_index``: OctEx files (with added and removed
  vectors and ids) and, for flat indexes, a ``.npz`` of the vectors; not
  Faiss files.
- ``normalize_L2``, ``knn``, ``omp_set_num_threads`` (no effect: octex uses
  every core), ``omp_get_max_threads``.

Not covered: quantized indexes (PQ, SQ), GPU index classes (OctEx picks the
GPU itself), binary indexes, ``IndexShards``/``IndexReplicas``.
"""

from __future__ import annotations

import os
import re
from typing import Optional

import numpy as np

import octex

METRIC_INNER_PRODUCT = 0
METRIC_L2 = 1

__all__ = [
    "METRIC_L2",
    "METRIC_INNER_PRODUCT",
    "Index",
    "IndexFlat",
    "IndexFlatL2",
    "IndexFlatIP",
    "IndexOctEx",
    "IndexHNSWFlat",
    "IndexIVFFlat",
    "IndexIDMap",
    "IndexIDMap2",
    "IDSelector",
    "IDSelectorAll",
    "IDSelectorRange",
    "IDSelectorBatch",
    "IDSelectorArray",
    "IDSelectorBitmap",
    "IDSelectorNot",
    "IDSelectorAnd",
    "IDSelectorOr",
    "IDSelectorXOr",
    "SearchParameters",
    "SearchParametersHNSW",
    "SearchParametersIVF",
    "index_factory",
    "normalize_L2",
    "knn",
    "write_index",
    "read_index",
    "omp_set_num_threads",
    "omp_get_max_threads",
]


def _metric_name(metric: int) -> str:
    if metric == METRIC_L2:
        return "l2"
    if metric == METRIC_INNER_PRODUCT:
        return "ip"
    raise ValueError(f"metric {metric}: METRIC_L2 or METRIC_INNER_PRODUCT")


def normalize_L2(x: np.ndarray) -> None:
    """Scale every row of ``x`` (``float32``, in place) to unit L2 norm; zero
    rows stay zero."""
    if not (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 2):
        raise TypeError("normalize_L2 takes a float32 2-d numpy array (it works in place)")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)


def knn(xq, xb, k: int, metric: int = METRIC_L2):
    """Exact ``(D, I)`` of the ``k`` nearest rows of ``xb`` (brute force)."""
    ids, dist = octex.knn(xq, xb, int(k), _metric_name(metric))
    return _faiss_results(ids, dist, metric)


def omp_set_num_threads(n: int) -> None:
    """Accepted for compatibility; octex uses every core (RAYON_NUM_THREADS
    before the first call sets how many)."""


def omp_get_max_threads() -> int:
    return os.cpu_count() or 1


def _faiss_results(ids: np.ndarray, dist: np.ndarray, metric: int):
    """octex's ``(ids, distances)`` as Faiss's ``(D, I)``."""
    missing = ids == np.iinfo(ids.dtype).max
    labels = ids.astype(np.int64)
    labels[missing] = -1
    d = np.asarray(dist, dtype=np.float32)
    if metric == METRIC_INNER_PRODUCT:
        d = -d
        d[missing] = -np.inf
    return d, labels


# ---- selectors ------------------------------------------------------------


class IDSelector:
    """Which ids a search may return or a removal takes."""

    def is_member_array(self, ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def is_member(self, i: int) -> bool:
        return bool(self.is_member_array(np.array([i], dtype=np.int64))[0])


class IDSelectorAll(IDSelector):
    def is_member_array(self, ids):
        return np.ones(len(ids), dtype=bool)


class IDSelectorRange(IDSelector):
    """Ids ``imin <= id < imax``."""

    def __init__(self, imin: int, imax: int, assume_sorted: bool = False) -> None:
        self.imin, self.imax, self.assume_sorted = int(imin), int(imax), assume_sorted

    def is_member_array(self, ids):
        return (ids >= self.imin) & (ids < self.imax)


class IDSelectorBatch(IDSelector):
    """The ids of an array: ``IDSelectorBatch(ids)`` or Faiss's ``(n, ids)``."""

    def __init__(self, *args) -> None:
        ids = args[-1]
        self.ids = np.unique(np.asarray(ids, dtype=np.int64).ravel())
        if len(args) == 2:
            self.ids = np.unique(np.asarray(ids, dtype=np.int64).ravel()[: int(args[0])])

    def is_member_array(self, ids):
        return np.isin(ids, self.ids)


IDSelectorArray = IDSelectorBatch


class IDSelectorBitmap(IDSelector):
    """Id ``i`` when bit ``i % 8`` of byte ``i // 8`` is set:
    ``IDSelectorBitmap(bitmap)`` or Faiss's ``(n_bytes, bitmap)``."""

    def __init__(self, *args) -> None:
        bitmap = np.asarray(args[-1], dtype=np.uint8).ravel()
        if len(args) == 2:
            bitmap = bitmap[: int(args[0])]
        self.bitmap = bitmap

    def is_member_array(self, ids):
        byte = ids >> 3
        inside = (ids >= 0) & (byte < len(self.bitmap))
        out = np.zeros(len(ids), dtype=bool)
        b = self.bitmap[byte[inside]]
        out[inside] = (b >> (ids[inside] & 7).astype(np.uint8)) & 1 == 1
        return out


class IDSelectorNot(IDSelector):
    def __init__(self, sel: IDSelector) -> None:
        self.sel = sel

    def is_member_array(self, ids):
        return ~self.sel.is_member_array(ids)


class IDSelectorAnd(IDSelector):
    def __init__(self, lhs: IDSelector, rhs: IDSelector) -> None:
        self.lhs, self.rhs = lhs, rhs

    def is_member_array(self, ids):
        return self.lhs.is_member_array(ids) & self.rhs.is_member_array(ids)


class IDSelectorOr(IDSelectorAnd):
    def is_member_array(self, ids):
        return self.lhs.is_member_array(ids) | self.rhs.is_member_array(ids)


class IDSelectorXOr(IDSelectorAnd):
    def is_member_array(self, ids):
        return self.lhs.is_member_array(ids) ^ self.rhs.is_member_array(ids)


def _selector(x) -> IDSelector:
    return x if isinstance(x, IDSelector) else IDSelectorBatch(x)


class SearchParameters:
    """``sel``: an :class:`IDSelector` the results must pass."""

    def __init__(self, sel: Optional[IDSelector] = None, **_ignored) -> None:
        self.sel = sel


class SearchParametersHNSW(SearchParameters):
    """``efSearch`` and the other HNSW knobs are accepted and ignored."""

    def __init__(self, sel=None, efSearch: int = 16, **ignored) -> None:
        super().__init__(sel, **ignored)
        self.efSearch = efSearch


class SearchParametersIVF(SearchParameters):
    """``nprobe`` and ``max_codes`` are accepted and ignored."""

    def __init__(self, sel=None, nprobe: int = 1, max_codes: int = 0, **ignored) -> None:
        super().__init__(sel, **ignored)
        self.nprobe, self.max_codes = nprobe, max_codes


# ---- indexes --------------------------------------------------------------


class Index:
    """What every index here shares: ``d``, ``ntotal``, ``metric_type``,
    ``is_trained``, the checks and the result conventions."""

    def __init__(self, d: int, metric: int = METRIC_L2) -> None:
        _metric_name(metric)
        self.d, self.metric_type = int(d), metric
        self.is_trained = True
        self.verbose = False

    @property
    def ntotal(self) -> int:
        return len(self._ids())

    def _check(self, x) -> np.ndarray:
        a = np.ascontiguousarray(x, dtype=np.float32)
        if a.ndim != 2 or a.shape[1] != self.d:
            raise ValueError(f"expected shape (n, {self.d}), got {a.shape}")
        return a

    def train(self, x) -> None:
        self._check(x)
        self.is_trained = True

    def add_with_ids(self, x, ids) -> None:
        if not hasattr(self, "_add_with_ids"):
            raise RuntimeError(f"add_with_ids is not implemented for {type(self).__name__}: wrap it in IndexIDMap")
        a = self._check(x)
        ids = np.ascontiguousarray(ids, dtype=np.int64).ravel()
        if ids.shape[0] != a.shape[0]:
            raise ValueError(f"{ids.shape[0]} ids for {a.shape[0]} vectors")
        if ids.size and ids.min() < 0:
            raise ValueError("ids must be >= 0")
        self._add_with_ids(a, ids)

    def search(self, x, k: int, *, params: Optional[SearchParameters] = None, D=None, I=None):
        q = self._check(x)
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        sel = params.sel if params is not None else None
        allowed = None if sel is None else self._ids()[sel.is_member_array(self._ids())]
        held = self.ntotal if allowed is None else len(allowed)
        if held == 0:
            dist = np.full((q.shape[0], k), -np.inf if self.metric_type == METRIC_INNER_PRODUCT else np.inf, np.float32)
            labels = np.full((q.shape[0], k), -1, dtype=np.int64)
        else:
            dist, labels = self._search(q, min(k, held), allowed)
        if dist.shape[1] < k:
            pad = ((0, 0), (0, k - dist.shape[1]))
            fill = -np.inf if self.metric_type == METRIC_INNER_PRODUCT else np.inf
            dist, labels = np.pad(dist, pad, constant_values=fill), np.pad(labels, pad, constant_values=-1)
        if D is not None:
            D[...] = dist
        if I is not None:
            I[...] = labels
        return dist, labels

    def range_search(self, x, thresh: float, *, params: Optional[SearchParameters] = None):
        """``(lims, D, I)``: query ``i``'s results are ``lims[i]:lims[i+1]``,
        those with squared L2 below ``thresh`` (inner product above it),
        nearest first."""
        q = self._check(x)
        n = self.ntotal
        rows_d, rows_i = [], []
        for qi in range(q.shape[0]):
            k = min(64, max(n, 1))
            while True:
                dist, labels = self.search(q[qi : qi + 1], k, params=params)
                dist, labels = dist[0], labels[0]
                inside = dist < thresh if self.metric_type == METRIC_L2 else dist > thresh
                inside &= labels >= 0
                if not inside.all() or k >= n:
                    break
                k = min(2 * k, n)
            rows_d.append(dist[inside])
            rows_i.append(labels[inside])
        lims = np.zeros(q.shape[0] + 1, dtype=np.uint64)
        lims[1:] = np.cumsum([len(r) for r in rows_i])
        D = np.concatenate(rows_d).astype(np.float32) if rows_d else np.zeros(0, np.float32)
        I = np.concatenate(rows_i).astype(np.int64) if rows_i else np.zeros(0, np.int64)
        return lims, D, I

    def remove_ids(self, x) -> int:
        sel = _selector(x)
        ids = self._ids()
        return self._remove(ids[sel.is_member_array(ids)])

    def reconstruct(self, key: int) -> np.ndarray:
        return self.reconstruct_batch(np.array([key]))[0]

    def reconstruct_n(self, i0: int, ni: int) -> np.ndarray:
        return self.reconstruct_batch(np.arange(i0, i0 + ni))

    def reconstruct_batch(self, keys) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64).ravel()
        if keys.size and (keys.min() < 0 or not np.isin(keys, self._ids()).all()):
            raise RuntimeError(f"reconstruct: an id of {keys.tolist()[:8]} is not in the index")
        return self._vectors(keys)


class IndexFlat(Index):
    """Exact search by brute force over the vectors as added."""

    def __init__(self, d: int, metric: int = METRIC_L2) -> None:
        super().__init__(d, metric)
        self._xb = np.zeros((0, self.d), dtype=np.float32)
        self._labels: Optional[np.ndarray] = None

    def _ids(self) -> np.ndarray:
        n = self._xb.shape[0]
        return np.arange(n, dtype=np.int64) if self._labels is None else self._labels

    def add(self, x) -> None:
        if self._labels is not None:
            raise RuntimeError("this index holds ids of its own: use add_with_ids")
        self._xb = np.concatenate([self._xb, self._check(x)])

    def _add_with_ids(self, x, ids: np.ndarray) -> None:
        if self._labels is None and self._xb.shape[0]:
            raise RuntimeError("vectors were added without ids: ids are positions here")
        self._xb = np.concatenate([self._xb, self._check(x)])
        self._labels = np.concatenate([self._ids()[: self._xb.shape[0] - len(ids)], ids])

    def reset(self) -> None:
        self._xb = np.zeros((0, self.d), dtype=np.float32)
        self._labels = None

    def _search(self, q, k, allowed):
        rows = np.arange(self._xb.shape[0]) if allowed is None else np.flatnonzero(np.isin(self._ids(), allowed))
        base = self._xb if allowed is None else self._xb[rows]
        found, dist = octex.knn(q, base, k, _metric_name(self.metric_type))
        ok = found != np.iinfo(np.uint32).max
        labels = np.full(found.shape, -1, dtype=np.int64)
        labels[ok] = self._ids()[rows[found[ok]]]
        D, _ = _faiss_results(found, dist, self.metric_type)
        return D, labels

    def _remove(self, ids: np.ndarray) -> int:
        keep = ~np.isin(self._ids(), ids)
        self._xb = self._xb[keep]
        if self._labels is not None:
            self._labels = self._labels[keep]
        return int((~keep).sum())

    def _vectors(self, keys):
        if self._labels is None:
            return self._xb[keys].copy()
        order = {int(v): i for i, v in enumerate(self._labels)}
        return self._xb[[order[int(k)] for k in keys]].copy()


class IndexFlatL2(IndexFlat):
    def __init__(self, d: int) -> None:
        super().__init__(d, METRIC_L2)


class IndexFlatIP(IndexFlat):
    def __init__(self, d: int) -> None:
        super().__init__(d, METRIC_INNER_PRODUCT)


class IndexOctEx(Index):
    """An OctEx index behind Faiss's calls: built at the first search over
    the vectors added so far; later adds are inserted in place."""

    def __init__(self, d: int, metric: int = METRIC_L2, *_, **__) -> None:
        super().__init__(d, metric)
        self.recall: Optional[float] = None
        self.params: Optional[octex.SearchParams] = None
        self.backend = "auto"
        self.reset()

    def reset(self) -> None:
        self._index: Optional[octex.Index] = None
        self._waiting: list = []
        self._present = np.zeros(0, dtype=np.int64)
        self._own_ids = False

    def _ids(self) -> np.ndarray:
        return self._present

    def add(self, x) -> None:
        if self._own_ids:
            raise RuntimeError("this index holds ids of its own: use add_with_ids")
        start = int(self._present.max()) + 1 if self._present.size else 0
        a = self._check(x)
        self._add(a, np.arange(start, start + a.shape[0], dtype=np.int64))

    def _add_with_ids(self, x, ids: np.ndarray) -> None:
        if self._present.size and not self._own_ids:
            raise RuntimeError("vectors were added without ids: ids are positions here")
        self._own_ids = True
        self._add(self._check(x), ids)

    def _add(self, a: np.ndarray, ids: np.ndarray) -> None:
        if np.isin(ids, self._present).any() or len(np.unique(ids)) != len(ids):
            raise RuntimeError("an id is given twice")
        if self._index is None:
            self._waiting.append((a, ids))
        else:
            self._index.add(a, ids=ids.astype(np.uint64))
        self._present = np.concatenate([self._present, ids])

    def _built(self) -> octex.Index:
        if self._index is None:
            if not self._present.size:
                raise RuntimeError("the index is empty: add vectors first")
            base = np.concatenate([a for a, _ in self._waiting])
            ids = np.concatenate([i for _, i in self._waiting])
            positions = np.array_equal(ids, np.arange(len(ids)))
            self._index = octex.build(
                base,
                metric=_metric_name(self.metric_type),
                backend=self.backend,
                progress=False,
                ids=None if positions else ids.astype(np.uint64),
            )
            self._waiting = []
        return self._index

    def _search(self, q, k, allowed):
        index = self._built()
        live = index._inner.is_live
        flt = None
        if allowed is not None:
            flt = allowed.astype(np.uint64 if live else np.uint32)
        backend = "cpu" if live or flt is not None else self.backend
        ids, dist = index.search(q, k, recall=self.recall, params=self.params, backend=backend, filter=flt)
        return _faiss_results(ids, dist, self.metric_type)

    def _remove(self, ids: np.ndarray) -> int:
        if not ids.size:
            return 0
        if self._index is None:
            self._waiting = [(a[~np.isin(i, ids)], i[~np.isin(i, ids)]) for a, i in self._waiting]
        else:
            self._index.remove(ids.astype(np.uint64))
        before = self._present.size
        self._present = self._present[~np.isin(self._present, ids)]
        return before - self._present.size

    def _vectors(self, keys):
        if self._index is None:
            base = np.concatenate([a for a, _ in self._waiting])
            ids = np.concatenate([i for _, i in self._waiting])
            order = {int(v): j for j, v in enumerate(ids)}
            return base[[order[int(k)] for k in keys]].copy()
        return self._index.reconstruct(keys.astype(np.uint64))


class _HnswParams:
    """``efConstruction``/``efSearch`` assignments are accepted and ignored."""

    def __init__(self) -> None:
        self.efConstruction = 40
        self.efSearch = 16


class IndexHNSWFlat(IndexOctEx):
    """Faiss's ``IndexHNSWFlat(d, M[, metric])`` as an OctEx index (``M``
    ignored)."""

    def __init__(self, d: int, M: int = 32, metric: int = METRIC_L2) -> None:
        super().__init__(d, metric)
        self.hnsw = _HnswParams()


class IndexIVFFlat(IndexOctEx):
    """Faiss's ``IndexIVFFlat(quantizer, d, nlist[, metric])`` as an OctEx
    index (``nlist``, ``nprobe`` ignored); train it before adding, as in
    Faiss."""

    def __init__(self, quantizer: Index, d: int, nlist: int, metric: int = METRIC_L2) -> None:
        super().__init__(d, metric)
        self.quantizer, self.nlist, self.nprobe = quantizer, int(nlist), 1
        self.is_trained = False

    def _add(self, a, ids) -> None:
        if not self.is_trained:
            raise RuntimeError("IndexIVFFlat: train the index before adding (Faiss's rule)")
        super()._add(a, ids)


class IndexIDMap(Index):
    """64-bit ids given by ``add_with_ids`` over ``index``."""

    def __init__(self, index: Index) -> None:
        if not hasattr(index, "_add_with_ids"):
            raise TypeError(f"IndexIDMap over {type(index).__name__} is not supported")
        super().__init__(index.d, index.metric_type)
        self.index = index

    def _ids(self) -> np.ndarray:
        return self.index._ids()

    @property
    def is_trained(self) -> bool:
        return self.index.is_trained

    @is_trained.setter
    def is_trained(self, _value) -> None:
        pass

    def train(self, x) -> None:
        self.index.train(x)

    def add(self, x) -> None:
        raise RuntimeError("add does not work on IndexIDMap: use add_with_ids")

    def _add_with_ids(self, x, ids) -> None:
        self.index._add_with_ids(x, ids)

    def reset(self) -> None:
        self.index.reset()

    def _search(self, q, k, allowed):
        return self.index._search(q, k, allowed)

    def _remove(self, ids) -> int:
        return self.index._remove(ids)

    def reconstruct_batch(self, keys):
        raise RuntimeError("reconstruct is not implemented for IndexIDMap: use IndexIDMap2")


class IndexIDMap2(IndexIDMap):
    """:class:`IndexIDMap` that reconstructs vectors by id."""

    def reconstruct_batch(self, keys):
        return Index.reconstruct_batch(self, keys)

    def _vectors(self, keys):
        return self.index._vectors(keys)


def index_factory(d: int, description: str, metric: int = METRIC_L2) -> Index:
    """The indexes of Faiss's factory strings this module maps (see the
    module's doc); others raise ``ValueError``."""
    parts = [p.strip() for p in description.split(",")]
    wrap = None
    if parts and parts[0] in ("IDMap", "IDMap2"):
        wrap = IndexIDMap2 if parts.pop(0) == "IDMap2" else IndexIDMap
    body = ",".join(parts)
    if body == "Flat":
        index: Index = IndexFlat(d, metric)
    elif m := re.fullmatch(r"HNSW(\d+)(,Flat)?", body):
        index = IndexHNSWFlat(d, int(m.group(1)), metric)
    elif m := re.fullmatch(r"IVF(\d+),Flat", body):
        index = IndexIVFFlat(IndexFlat(d, metric), d, int(m.group(1)), metric)
    elif body == "OctEx":
        index = IndexOctEx(d, metric)
    else:
        raise ValueError(
            f"index_factory({description!r}): octex maps Flat, HNSW<M>[,Flat], IVF<n>,Flat and OctEx "
            "(optionally behind IDMap, or IDMap2,); quantized and pre-transformed indexes are not mapped"
        )
    return wrap(index) if wrap else index


def write_index(index: Index, path: str) -> None:
    """Save ``index``: an OctEx file (with its adds, removals and ids) for
    OctEx-backed indexes, a ``.npz`` of the vectors for flat ones. Not a
    Faiss file."""
    inner = index.index if isinstance(index, IndexIDMap) else index
    if isinstance(inner, IndexFlat):
        with open(path, "wb") as f:
            np.savez(f, xb=inner._xb, labels=inner._ids(), metric=inner.metric_type, own=inner._labels is not None)
        return
    inner._built().save(path)


def read_index(path: str) -> Index:
    """Load a file written by :func:`write_index`."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"PK":
        z = np.load(path)
        flat = IndexFlat(z["xb"].shape[1], int(z["metric"]))
        flat._xb = z["xb"]
        if bool(z["own"]):
            flat._labels = z["labels"]
            return IndexIDMap2(flat)
        return flat
    inner = octex.Index.load(path)
    out = IndexOctEx(inner.dim, METRIC_INNER_PRODUCT if inner.metric == "ip" else METRIC_L2)
    out._index = inner
    out._present = inner.ids().astype(np.int64)
    out._own_ids = inner._inner.is_live
    return out
