"""OctEx approximate nearest-neighbour search, from Python.

    import octex
    index = octex.build(base, metric="cosine")            # or octex.Index.load(path)
    ids, dist = index.search(queries, k=10, recall=0.99)  # or params=octex.SearchParams(...)
    index.save("glove.octex"); octex.gpu_available()

Arrays: ``float32`` C-contiguous arrays are read in place; any other array
(``float64``, Fortran order, a slice with strides, a list) is converted to
``float32`` C order once, here, before the call. Results are ``(nq, k)``
arrays that own the buffers Rust filled (no copy): ids ``uint32`` (a missing
result is ``2**32 - 1``), distances ``float32`` (squared L2 for ``l2``,
``1 - cos`` for ``cosine``, ``-<q, x>`` for ``ip``; ``inf`` when missing).

Errors: ``ValueError`` for bad input or parameters, ``OSError`` for files
(missing, damaged, another format version), ``RuntimeError`` for the GPU.
The GIL is released while the index builds or searches.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, Tuple

import numpy as np

from . import _octex
from ._octex import SearchParams, gpu_available

__all__ = [
    "Index",
    "SearchParams",
    "ShardedIndex",
    "build",
    "knn",
    "merge_topk",
    "gpu_available",
    "__version__",
]
__version__ = _octex.__version__


def _as_matrix(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (n, dim), got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold numbers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _allowed_ids(filter, n: int) -> np.ndarray:
    """A filter (allowed ids, or a boolean mask of ``n``) as ``uint32`` ids."""
    f = np.asarray(filter)
    if f.dtype == np.bool_:
        if f.shape != (n,):
            raise ValueError(f"a boolean filter must have one entry per vector ({n}), got shape {f.shape}")
        return np.flatnonzero(f).astype(np.uint32)
    if f.ndim != 1 or (f.size and not np.issubdtype(f.dtype, np.integer)):
        raise ValueError("filter must be a 1-d array of ids or a boolean mask")
    if f.size and (f.min() < 0 or f.max() >= n):
        raise ValueError(f"filter ids must be in [0, {n}), got {f.min()}..{f.max()}")
    return np.ascontiguousarray(f, dtype=np.uint32)


def _user_ids(ids, what: str) -> np.ndarray:
    """Ids given by a user as ``uint64`` (integers >= 0, 1-d)."""
    a = np.asarray(ids)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-d array of integer ids")
    if a.size and a.min() < 0:
        raise ValueError(f"{what} must be >= 0, got {a.min()}")
    return np.ascontiguousarray(a, dtype=np.uint64)


class _Bars:
    """Build progress on stderr: tqdm bars when tqdm is installed, else a line
    per stage at every 10%."""

    def __init__(self) -> None:
        try:
            from tqdm import tqdm  # type: ignore

            self._tqdm = tqdm
        except ImportError:
            self._tqdm = None
        self._bars: dict = {}
        self._done: dict = {}

    def __call__(self, event: str, stage: str, value: int) -> None:
        if event == "start":
            self._close(stage)
            if self._tqdm is not None:
                self._bars[stage] = self._tqdm(total=value, desc=stage, unit="step", file=sys.stderr)
            else:
                self._bars[stage] = [0, value, 0]
        elif event == "advance" and stage in self._bars:
            bar = self._bars[stage]
            if self._tqdm is not None:
                bar.update(value)
            else:
                bar[0] += value
                tenth = bar[0] * 10 // max(bar[1], 1)
                if tenth > bar[2]:
                    bar[2] = tenth
                    print(f"octex: {stage} {bar[0]}/{bar[1]}", file=sys.stderr, flush=True)
        elif event == "finish":
            self._close(stage)

    def _close(self, stage: str) -> None:
        bar = self._bars.pop(stage, None)
        if bar is not None and self._tqdm is not None:
            bar.close()


class Index:
    """An OctEx index: build it with :func:`build` or load it with
    :meth:`Index.load`; search it on the CPU or the GPU; save it."""

    def __init__(self, inner: "_octex.Index") -> None:
        self._inner = inner

    @staticmethod
    def load(path) -> "Index":
        """Load (memory-map) and validate an index file, as saved (with its
        adds, removes and user ids)."""
        return Index(_octex.Index.load(str(path)))

    def save(self, path) -> None:
        """Write the index atomically (temporary file, fsync, rename): a
        crash during the save leaves the previous file whole. After adds and
        removes the file keeps the user ids and removals, and :meth:`load`
        gives back the same answers."""
        self._inner.save(str(path))

    def __len__(self) -> int:
        """Live vectors: built or added, not removed."""
        return len(self._inner)

    def add(self, vectors, ids=None) -> np.ndarray:
        """Add ``vectors`` (``(n, dim)``) with ``ids`` (integers >= 0, or the
        next free ids); returns the ids (``uint64``). They are found by the
        next search; they enter the index itself in batches (no rebuild). A
        duplicate id, a wrong dimension or a vector the metric cannot take
        refuses the whole call (``ValueError``) and adds nothing. From the
        first add or remove on, searches run on the CPU and return ids as
        ``uint64``."""
        v = _as_matrix(vectors, "vectors")
        if ids is not None:
            ids = _user_ids(ids, "ids")
            if ids.shape[0] != v.shape[0]:
                raise ValueError(f"{ids.shape[0]} ids for {v.shape[0]} vectors")
        return self._inner.add(v, ids)

    def remove(self, ids) -> int:
        """Remove ``ids``; returns how many were in the index. None of them
        is returned by a search from now on."""
        return self._inner.remove(_user_ids(ids, "ids"))

    def ids(self) -> np.ndarray:
        """The ids of the live vectors (``uint64``): user ids after an add or
        remove (or a build with ``ids=``), else ``0..len``."""
        return self._inner.ids()

    def reconstruct(self, ids) -> np.ndarray:
        """The vectors of ``ids`` as the index holds them, ``(n, dim)``
        ``float32``: rounded to f16 where the index stores f16, normalised
        for ``cosine``. Ids are user ids after an add or remove (or a build
        with ``ids=``), else positions; an id the index does not hold raises
        ``KeyError``."""
        return self._inner.reconstruct(_user_ids(np.atleast_1d(ids), "ids"))

    def flush(self) -> None:
        """Insert the added vectors still waiting into the index itself
        (searches find them either way)."""
        self._inner.flush()

    @property
    def dim(self) -> int:
        """Dimension of the vectors it takes."""
        return self._inner.dim

    @property
    def metric(self) -> str:
        """``"l2"``, ``"cosine"`` or ``"ip"``."""
        return self._inner.metric

    @property
    def nbytes(self) -> int:
        """Size of the index in bytes (as saved)."""
        return self._inner.nbytes

    @property
    def default_params(self) -> SearchParams:
        """The parameters a search given none takes: fixed deep defaults,
        deepened by the build where the index's own sample falls short of
        recall@10 0.98 with them."""
        return self._inner.default_params

    def params_for_recall(
        self, recall: float, k: int = 10, queries=None
    ) -> Tuple[SearchParams, float]:
        """The cheapest search parameters whose recall@k reaches ``recall`` on
        a sample of ``queries`` (without them: of the index's own vectors moved
        off themselves, as new queries are); and that measured recall. Warns
        with what to rebuild with when no point reaches it."""
        if queries is not None:
            queries = _as_matrix(queries, "queries")
        return self._inner.params_for_recall(float(recall), int(k), queries)

    def search(
        self,
        queries,
        k: int = 10,
        *,
        recall: Optional[float] = None,
        params: Optional[SearchParams] = None,
        backend: str = "auto",
        filter=None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest of each query: ``(ids, distances)``, ``(nq, k)``.

        ``recall``: tune the parameters for this recall@k once, on a sample
        of these queries (cached per target and ``k``; warns when the index
        cannot reach it); ``params``: explicit parameters; neither: the
        defaults. ``backend``: ``"auto"`` (the GPU when usable), ``"cpu"``
        or ``"gpu"`` (a ``RuntimeError`` where there is none).
        ``filter``: only these ids may come back: an array of allowed ids,
        or a boolean mask of ``len(index)``; fewer than ``k`` allowed pad the
        rest with ids ``2**32 - 1`` and distances ``inf``. Filtered search
        runs on the CPU (``backend="gpu"`` raises). After an add or remove,
        ids are ``uint64`` user ids (missing ``2**64 - 1``), a boolean
        ``filter`` is indexed by user id, and the search runs on the CPU."""
        q = _as_matrix(queries, "queries")
        if isinstance(k, bool) or int(k) != k:
            raise ValueError(f"k must be an integer, got {k!r}")
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if self._inner.is_live:
            if backend == "gpu":
                raise RuntimeError("an index with adds or removes searches on the CPU")
            allowed = None
            if filter is not None:
                f = np.asarray(filter)
                allowed = np.flatnonzero(f).astype(np.uint64) if f.dtype == np.bool_ else _user_ids(f, "filter")
            return self._inner.search_live(q, int(k), params=params, recall=recall, allowed=allowed)
        allowed = None if filter is None else _allowed_ids(filter, len(self))
        return self._inner.search(
            q, int(k), params=params, recall=recall, backend=backend, allowed=allowed
        )

    def __repr__(self) -> str:
        return repr(self._inner)


def build(
    base,
    metric: str = "l2",
    *,
    backend: str = "auto",
    copies: Optional[int] = None,
    list_len: Optional[int] = None,
    row_len: Optional[int] = None,
    sketch_width: Optional[int] = None,
    vectors: str = "auto",
    seed: Optional[int] = None,
    progress: Optional[Callable[[str, str, int], None]] | bool = None,
    ids=None,
) -> Index:
    """Build an index over ``base`` (``(n, dim)``).

    ``metric``: ``"l2"``, ``"cosine"`` or ``"ip"``. ``backend``: where the
    heavy phases run. ``copies`` (C), ``list_len`` (l), ``row_len`` (Lt),
    ``sketch_width``: index sizes (defaults scale with n and dim).
    ``vectors``: rerank precision, ``"f16"``, ``"f32"`` or ``"auto"`` (f16
    unless rounding would lose neighbours of a sample). ``progress``:
    ``True`` for bars on stderr (tqdm when installed), a callable
    ``f(event, stage, value)``, or ``None``/``False`` for silence (the
    default unless stderr is a terminal). ``ids``: a user id (integer >= 0)
    per row, returned by searches instead of positions (``uint64``; the
    index then searches on the CPU, as after an add)."""
    b = _as_matrix(base, "base")
    if ids is not None:
        ids = _user_ids(ids, "ids")
        if ids.shape[0] != b.shape[0]:
            raise ValueError(f"{ids.shape[0]} ids for {b.shape[0]} vectors")
    if progress is None:
        progress = sys.stderr.isatty()
    callback = _Bars() if progress is True else (progress or None)
    inner = _octex.build(
        b,
        metric=metric,
        backend=backend,
        copies=copies,
        list_len=list_len,
        row_len=row_len,
        sketch_width=sketch_width,
        vectors=vectors,
        seed=seed,
        progress=callback,
        ids=ids,
    )
    return Index(inner)


def knn(queries, base, k: int, metric: str = "l2") -> Tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest rows of ``base`` of every query, by brute
    force (products in f64, all cores): ``(ids, distances)``, ``(nq, k)``,
    ids ``uint32`` (``2**32 - 1`` past the base's rows), distances squared
    L2 (``"l2"``) or ``-<q, x>`` (``"ip"``)."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return _octex.knn(_as_matrix(queries, "queries"), _as_matrix(base, "base"), int(k), metric)


class ShardedIndex:
    """An index cut into shards (contiguous id ranges of the base), one
    OctEx index each, saved as a directory with a manifest; searches merge
    the shards' answers and return global ids (``uint64``)."""

    def __init__(self, inner: "_octex.ShardedIndex") -> None:
        self._inner = inner

    @staticmethod
    def build(base, metric: str = "l2", *, shards: int = 2, seed: Optional[int] = None) -> "ShardedIndex":
        """Build ``shards`` indexes over the rows of ``base``, cut in order."""
        return ShardedIndex(_octex.ShardedIndex.build(_as_matrix(base, "base"), metric, int(shards), seed))

    @staticmethod
    def load(path) -> "ShardedIndex":
        """Load a shard directory written by :meth:`save`, validated."""
        return ShardedIndex(_octex.ShardedIndex.load(str(path)))

    def save(self, path) -> None:
        """Write the shard files, then the manifest, into the directory ``path``."""
        self._inner.save(str(path))

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def manifest(self) -> dict:
        """Metric, dimension, each shard's file, first id and size, and the
        build parameters."""
        import json

        return json.loads(self._inner.manifest)

    def search(self, queries, k: int = 10, *, params: Optional[SearchParams] = None, backend: str = "auto"):
        """``(ids, distances)``, ``(nq, k)``, over all shards. ``backend``:
        ``"auto"`` (the GPU when usable), ``"cpu"`` or ``"gpu"``."""
        return self._inner.search(_as_matrix(queries, "queries"), int(k), params, backend)


def merge_topk(ids, distances, k: int, *, descending: bool = False):
    """The ``k`` best of each query over several answers (lists of ``(nq,
    k_i)`` arrays: ids as integers, missing ``-1`` or ``2**64 - 1``):
    ``(ids uint64, distances float32)``, nearest first (smallest distance,
    or largest with ``descending``), ties by id, an id once, padded with
    ``2**64 - 1`` and ``inf`` (``-inf``)."""
    def as_ids(a):
        a = np.asarray(a)
        if a.dtype.kind == "i":
            a = np.where(a < 0, np.iinfo(np.uint64).max, a.astype(np.uint64))
        return np.ascontiguousarray(a, dtype=np.uint64)

    return _octex.merge_topk(
        [as_ids(a) for a in ids],
        [np.ascontiguousarray(d, dtype=np.float32) for d in distances],
        int(k),
        bool(descending),
    )
