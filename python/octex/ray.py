"""A sharded OctEx index on Ray: shards built by Ray tasks, searched by one
Ray actor per shard (on a GPU where the actor is given one), batch search
over Ray Data, and a Ray Serve application for online queries.

    import octex.ray
    index = octex.ray.build(data, metric="l2", shards=4, path="/shared/idx",
                            resources={"num_gpus": 1})
    ids, dist = index.search(queries, k=10)
    index = octex.ray.ShardedIndex.load("/shared/idx", replicas=2)

The directory is the one :class:`octex.ShardedIndex` reads and writes (shard
files and ``manifest.json``), so an index built here loads in one process
too, and the other way round. Ids are global: shard ``s`` holds the rows
``first_id .. first_id + len`` of the data it was cut from. Each shard is
built on its own rows (its own projections and spacings).

Ray is an optional dependency (``pip install octex[ray]``); ``import octex``
does not import it.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import ray

import octex

__all__ = ["build", "ShardedIndex", "batch_search", "serve_app"]

_MISSING = np.iinfo(np.uint64).max


def _shard_file(s: int) -> str:
    return f"shard-{s:05d}.octex"


def _read_rows(source) -> np.ndarray:
    """A shard's rows: an array, a ``.npy`` file or an ``.fvecs`` file."""
    if isinstance(source, np.ndarray):
        return source
    path = str(source)
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r")
    if path.endswith(".fvecs"):
        raw = np.fromfile(path, dtype=np.int32)
        dim = int(raw[0]) if raw.size else 0
        return raw.reshape(-1, dim + 1)[:, 1:].view(np.float32)
    raise ValueError(f"{path}: a shard file is .npy or .fvecs")


@ray.remote
def _build_shard(rows, metric: str, path: str, s: int, seed: Optional[int]) -> Tuple[str, int, int]:
    """Build shard ``s`` over ``rows`` and save it into ``path``."""
    if not isinstance(rows, np.ndarray):
        rows = _read_rows(rows) if isinstance(rows, (str, os.PathLike)) else _dataset_rows(rows)
    index = octex.build(np.ascontiguousarray(rows, dtype=np.float32), metric, seed=seed, progress=False)
    index.save(os.path.join(path, _shard_file(s)))
    return _shard_file(s), len(index), index.dim


def _dataset_rows(ds) -> np.ndarray:
    """The rows of a Ray Dataset's split: its first column, as a matrix."""
    parts = []
    for batch in ds.iter_batches(batch_format="numpy"):
        col = next(iter(batch.values()))
        parts.append(np.stack(col) if col.dtype == object else col)
    return np.concatenate(parts)


def build(
    data,
    *,
    metric: str = "l2",
    shards: int = 2,
    path: str,
    resources: Optional[dict] = None,
    seed: Optional[int] = None,
) -> "ShardedIndex":
    """Build a sharded index with one Ray task per shard and save it to the
    directory ``path`` (which every worker must reach).

    ``data``: a numpy array (cut into ``shards`` contiguous ranges), a list
    of ``.npy``/``.fvecs`` files (one shard each; ``shards`` ignored), or a
    Ray Dataset with one vector column (split into ``shards``).
    ``resources``: Ray resources of each build task (``{"num_gpus": 1}``
    builds on a GPU where the worker has one). Returns the index loaded
    with one actor per shard."""
    os.makedirs(path, exist_ok=True)
    opts = dict(resources or {})
    if isinstance(data, np.ndarray):
        if data.ndim != 2 or shards < 1 or shards > len(data):
            raise ValueError(f"data of shape {data.shape} cannot be cut into {shards} shards")
        n = len(data)
        cuts = [(n * s // shards, n * (s + 1) // shards) for s in range(shards)]
        parts = [ray.put(np.ascontiguousarray(data[a:b], dtype=np.float32)) for a, b in cuts]
    elif isinstance(data, (list, tuple)):
        parts = [str(f) for f in data]
        odd = [f for f in parts if not f.endswith((".npy", ".fvecs"))]
        if odd or not parts:
            raise ValueError(f"shard files are .npy or .fvecs, one or more: {odd or parts}")
    else:
        parts = list(data.split(shards))
    tasks = [
        _build_shard.options(**opts).remote(p, metric, path, s, seed) for s, p in enumerate(parts)
    ]
    built = ray.get(tasks)
    dims = {d for _, _, d in built}
    if len(dims) != 1:
        raise ValueError(f"shards of different dimensions: {sorted(dims)}")
    first, files, lens = 0, [], []
    firsts = []
    for file, length, _ in built:
        files.append(file)
        firsts.append(first)
        lens.append(length)
        first += length
    octex._octex.write_shard_manifest(path, metric, dims.pop(), files, firsts, lens)
    return ShardedIndex.load(path, resources=resources)


@ray.remote
class _ShardActor:
    """One shard, loaded once: its searches answer with global ids."""

    def __init__(self, file: str, first_id: int) -> None:
        self.index = octex.Index.load(file)
        self.first_id = first_id
        self._vectors = None

    def search(self, queries: np.ndarray, k: int, recall, params, exact: bool):
        k = min(k, len(self.index))
        if exact:
            if self._vectors is None:
                self._vectors = self.index.reconstruct(np.arange(len(self.index), dtype=np.uint64))
            metric = "ip" if self.index.metric == "ip" else "l2"
            ids, dist = octex.knn(queries, self._vectors, k, metric)
        else:
            ids, dist = self.index.search(queries, k, recall=recall, params=params)
        out = ids.astype(np.uint64) + np.uint64(self.first_id)
        out[ids == np.iinfo(ids.dtype).max] = _MISSING
        return out, dist

    def ping(self) -> bool:
        return True


class ShardedIndex:
    """Actors over a shard directory; searches fan out and merge."""

    def __init__(self, manifest: dict, actors: List[List["ray.actor.ActorHandle"]]) -> None:
        self.manifest = manifest
        self._actors = actors

    @staticmethod
    def load(path: str, *, resources: Optional[dict] = None, replicas: int = 1) -> "ShardedIndex":
        """Start ``replicas`` actors per shard of the directory ``path``
        (validated as :meth:`octex.ShardedIndex.load` does), each loading its
        shard once; ``resources``: each actor's Ray resources (without
        ``num_cpus``, an actor reserves none: it waits between queries, and a
        search runs on every core of its node)."""
        manifest = octex.ShardedIndex.load(path).manifest
        opts = {"num_cpus": 0, **(resources or {})}
        actors = [
            [
                _ShardActor.options(**opts).remote(os.path.join(path, e["file"]), e["first_id"])
                for _ in range(max(1, replicas))
            ]
            for e in manifest["shards"]
        ]
        ray.get([a.ping.remote() for group in actors for a in group])
        return ShardedIndex(manifest, actors)

    def __len__(self) -> int:
        return sum(e["len"] for e in self.manifest["shards"])

    def search(
        self,
        queries,
        k: int = 10,
        *,
        recall: Optional[float] = None,
        params: Optional[octex.SearchParams] = None,
        exact: bool = False,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """``(ids uint64, distances)``, ``(nq, k)``: each shard's actor
        searches (``exact``: by brute force over its vectors), the answers
        merge (``exact`` is exact over the vectors as the shards store
        them: f16 where the build chose f16). A shard whose actors are all
        dead raises ``RuntimeError``;
        with replicas the query goes to a live one."""
        q = np.ascontiguousarray(np.atleast_2d(np.asarray(queries, dtype=np.float32)))
        ref = ray.put(q)
        args = (ref, int(k), recall, params, exact)
        # Every shard's first live actor at once; a dead one's shard is
        # asked again of its next replica.
        pending = [self._ask(s, args) for s in range(len(self._actors))]
        answers = []
        for s, call in enumerate(pending):
            while True:
                try:
                    answers.append(ray.get(call))
                    break
                except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
                    self._actors[s].pop(0)
                    call = self._ask(s, args)
        return octex.merge_topk([a[0] for a in answers], [a[1] for a in answers], int(k))

    def _ask(self, s, args):
        if not self._actors[s]:
            raise RuntimeError(f"shard {s} ({self.manifest['shards'][s]['file']}) has no live actor")
        return self._actors[s][0].search.remote(*args)

    def close(self) -> None:
        """Stop the actors."""
        for group in self._actors:
            for a in group:
                ray.kill(a)
        self._actors = []


class _BatchSearcher:
    """Ray Data's callable: every shard of ``path`` loaded in this worker."""

    def __init__(self, path: str, k: int, column: str) -> None:
        self.index, self.k, self.column = octex.ShardedIndex.load(path), k, column

    def __call__(self, batch: dict) -> dict:
        q = np.ascontiguousarray(np.stack(batch[self.column]), dtype=np.float32)
        ids, dist = self.index.search(q, self.k)
        out = dict(batch)
        out["ids"], out["distances"] = list(ids), list(dist)
        return out


def batch_search(dataset, path: str, k: int = 10, *, column: str = "vector", concurrency: int = 1, batch_size: int = 1024):
    """A Ray Dataset of queries (vectors in ``column``) with two columns
    added: ``ids`` and ``distances`` of each query's ``k`` nearest over the
    shards of ``path`` (each worker loads them once)."""
    return dataset.map_batches(
        _BatchSearcher,
        fn_constructor_args=(path, int(k), column),
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=concurrency,
    )


def serve_app(path: str, *, replicas_per_shard: int = 1, resources: Optional[dict] = None):
    """A Ray Serve application: one deployment per shard
    (``replicas_per_shard`` replicas each) and a router that takes
    ``{"queries": [[...], ...], "k": 10}`` (HTTP JSON or a handle call) and
    answers ``{"ids": [[...]], "distances": [[...]]}``. Run it with
    ``ray.serve.run(octex.ray.serve_app(path))``."""
    from ray import serve

    manifest = octex.ShardedIndex.load(path).manifest
    opts = {"num_cpus": 0, **(resources or {})}

    @serve.deployment(num_replicas=replicas_per_shard, ray_actor_options=opts)
    class Shard:
        def __init__(self, file: str, first_id: int) -> None:
            self.index, self.first_id = octex.Index.load(file), first_id

        def search(self, queries: np.ndarray, k: int):
            ids, dist = self.index.search(queries, min(k, len(self.index)))
            out = ids.astype(np.uint64) + np.uint64(self.first_id)
            out[ids == np.iinfo(ids.dtype).max] = _MISSING
            return out, dist

    @serve.deployment
    class Router:
        def __init__(self, *shards) -> None:
            self.shards = shards

        async def search(self, queries, k: int = 10) -> dict:
            q = np.ascontiguousarray(np.atleast_2d(np.asarray(queries, dtype=np.float32)))
            answers = [await h.search.remote(q, k) for h in self.shards]
            ids, dist = octex.merge_topk([a[0] for a in answers], [a[1] for a in answers], k)
            return {"ids": ids.tolist(), "distances": dist.tolist()}

        async def __call__(self, request) -> dict:
            body = await request.json()
            return await self.search(body["queries"], int(body.get("k", 10)))

    shards = [Shard.options(name=f"shard-{s}").bind(os.path.join(path, e["file"]), e["first_id"]) for s, e in enumerate(manifest["shards"])]
    return Router.bind(*shards)
