"""``cuvs.neighbors.cagra``'s calls, answered by an OctEx index.

``IndexParams``, ``build``, ``SearchParams``, ``search`` (with ``filter=``
from :mod:`.filters`, and ``neighbors=``/``distances=`` outputs), ``save``,
``load``, ``ExtendParams`` and ``extend`` keep cuVS's signatures and
conventions: ``search`` returns ``(distances, neighbors)``, ``(nq, k)``,
``float32`` and ``uint32``; distances squared L2 for ``"sqeuclidean"``, inner
products (largest first) for ``"inner_product"``, ``1 - cos`` for
``"cosine"``; rows past what a filter allows are id ``2**32 - 1`` at distance
``inf`` (``-inf`` for inner products).

What differs, said plainly:

- The index is OctEx's, not a CAGRA graph: ``intermediate_graph_degree``,
  ``graph_degree``, ``build_algo``, ``nn_descent_niter``, ``compression``,
  the IVF-PQ and ACE parameters, and every ``SearchParams`` knob
  (``itopk_size``, ``search_width``, ``algo``...) are accepted and ignored;
  ``Index.graph`` raises. Set ``SearchParams(recall=...)`` (a recall@k
  target, tuned once on the first queries) or ``SearchParams(params=
  octex.SearchParams(...))`` to choose the speed.
- Arrays may be numpy or CUDA arrays (``__cuda_array_interface__``: CuPy,
  cuVS's ``device_ndarray``); CUDA inputs are copied to the host, and
  results are host arrays with ``copy_to_host()`` (``cupy.asarray`` takes
  them), unless ``neighbors=``/``distances=`` name arrays to write into.
  Unfiltered searches of an index without extensions run on the GPU when
  there is one; filtered and extended ones on the CPU.
- ``resources`` is accepted and ignored; ``save(include_dataset=False)``
  still saves the vectors (OctEx reranks with them).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import octex

from ._arrays import HostArray, to_host, write_out
from .filters import Prefilter

__all__ = ["IndexParams", "SearchParams", "ExtendParams", "Index", "build", "search", "extend", "save", "load"]

_METRICS = {"sqeuclidean": "l2", "inner_product": "ip", "cosine": "cosine"}
_MISSING = np.iinfo(np.uint32).max


class IndexParams:
    """cuVS's build parameters; only ``metric`` is read."""

    def __init__(
        self,
        *,
        metric: str = "sqeuclidean",
        intermediate_graph_degree: int = 128,
        graph_degree: int = 64,
        build_algo: str = "ivf_pq",
        nn_descent_niter: int = 20,
        compression=None,
        ivf_pq_build_params=None,
        ivf_pq_search_params=None,
        ace_params=None,
        refinement_rate: float = 1.0,
    ) -> None:
        if metric not in _METRICS:
            raise ValueError(f"metric {metric!r}: one of {sorted(_METRICS)}")
        self.metric = metric
        self.intermediate_graph_degree = intermediate_graph_degree
        self.graph_degree = graph_degree
        self.build_algo = build_algo
        self.nn_descent_niter = nn_descent_niter
        self.compression = compression
        self.refinement_rate = refinement_rate


class SearchParams:
    """cuVS's search parameters (accepted, ignored), plus octex's own:
    ``recall`` (a recall@k target) or ``params`` (``octex.SearchParams``)."""

    def __init__(
        self,
        *,
        recall: Optional[float] = None,
        params: Optional[octex.SearchParams] = None,
        max_queries: int = 0,
        itopk_size: int = 64,
        max_iterations: int = 0,
        algo: str = "auto",
        team_size: int = 0,
        search_width: int = 1,
        min_iterations: int = 0,
        thread_block_size: int = 0,
        hashmap_mode: str = "auto",
        hashmap_min_bitlen: int = 0,
        hashmap_max_fill_rate: float = 0.5,
        num_random_samplings: int = 1,
        rand_xor_mask: int = 0x128394,
        **ignored,
    ) -> None:
        self.recall, self.params = recall, params
        self.max_queries, self.itopk_size, self.max_iterations = max_queries, itopk_size, max_iterations
        self.algo, self.team_size, self.search_width = algo, team_size, search_width


class ExtendParams:
    """cuVS's extend parameters (``max_chunk_size`` accepted, ignored)."""

    def __init__(self, *, max_chunk_size: Optional[int] = None) -> None:
        self.max_chunk_size = max_chunk_size


class Index:
    """An OctEx index behind cuVS's ``Index``."""

    def __init__(self, inner: octex.Index, metric: str, graph_degree: int = 64) -> None:
        self._inner, self.metric, self._graph_degree = inner, metric, graph_degree

    @property
    def trained(self) -> bool:
        return True

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def graph_degree(self) -> int:
        return self._graph_degree

    @property
    def dtype(self) -> np.dtype:
        return np.dtype("float32")

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def dataset(self) -> HostArray:
        """The vectors as the index holds them (f16-rounded where stored so,
        normalised for cosine)."""
        return self._inner.reconstruct(self._inner.ids()).view(HostArray)

    @property
    def graph(self):
        raise AttributeError("an OctEx index has no CAGRA graph")

    def __repr__(self) -> str:
        return f"Index(type=OctEx, metric={self.metric}, size={len(self)}, dim={self.dim})"


def _matrix(x, what: str) -> np.ndarray:
    a = to_host(x)
    if a.ndim != 2:
        raise ValueError(f"{what} must be 2-d (n, dim), got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def build(index_params: IndexParams, dataset, resources=None) -> Index:
    """Build an OctEx index over ``dataset`` (``(n, dim)``, host or CUDA)."""
    base = _matrix(dataset, "dataset")
    inner = octex.build(base, metric=_METRICS[index_params.metric], progress=False)
    return Index(inner, index_params.metric, index_params.graph_degree)


def extend(params: ExtendParams, index: Index, additional_dataset, resources=None) -> Index:
    """Add ``additional_dataset`` to ``index`` in place (ids continue from
    ``len(index)``); returns ``index``."""
    more = _matrix(additional_dataset, "additional_dataset")
    start = int(index._inner.ids().max()) + 1 if len(index) else 0
    if start + len(more) > _MISSING:
        raise ValueError("cuVS's ids are uint32: the index would pass 2**32 - 1 vectors")
    index._inner.add(more, ids=np.arange(start, start + len(more), dtype=np.uint64))
    return index


def search(
    search_params: SearchParams,
    index: Index,
    queries,
    k: int,
    neighbors=None,
    distances=None,
    resources=None,
    filter: Optional[Prefilter] = None,
):
    """``(distances, neighbors)`` of the ``k`` nearest rows of each query."""
    q = _matrix(queries, "queries")
    if q.shape[1] != index.dim:
        raise ValueError(f"queries have dimension {q.shape[1]}, the index {index.dim}")
    k = int(k)
    live = index._inner._inner.is_live
    sp = search_params or SearchParams()
    opts = dict(recall=sp.recall, params=sp.params)
    n_rows = int(index._inner.ids().max()) + 1 if live else len(index)
    if filter is None or (filter.allowed is None and filter.per_query is None):
        ids, dist = index._inner.search(q, k, backend="cpu" if live else "auto", **opts)
    elif filter.allowed is not None:
        mask = np.zeros(n_rows, dtype=bool)
        m = filter.allowed[:n_rows]
        mask[: len(m)] = m
        ids, dist = index._inner.search(q, k, backend="cpu", filter=mask, **opts)
    else:
        need = q.shape[0] * n_rows
        if len(filter.per_query) < need:
            raise ValueError(f"the bitmap holds {len(filter.per_query)} bits, {need} needed")
        rows = filter.per_query[:need].reshape(q.shape[0], n_rows)
        found = [index._inner.search(q[i : i + 1], k, backend="cpu", filter=rows[i], **opts) for i in range(len(q))]
        ids = np.concatenate([f[0] for f in found])
        dist = np.concatenate([f[1] for f in found])
    missing = ids == np.iinfo(ids.dtype).max
    out_ids = ids.astype(np.uint32)
    out_ids[missing] = _MISSING
    d = np.asarray(dist, dtype=np.float32)
    if index.metric == "inner_product":
        d = -d
        d[missing] = -np.inf
    return write_out(d, distances), write_out(out_ids, neighbors)


def save(filename, index: Index, include_dataset: bool = True, resources=None) -> None:
    """Write ``index`` atomically (an OctEx file, with its extensions)."""
    index._inner.save(filename)


def load(filename, resources=None) -> Index:
    """Load an index written by :func:`save`."""
    inner = octex.Index.load(filename)
    metric = {v: k for k, v in _METRICS.items()}[inner.metric]
    return Index(inner, metric)
