"""The octex Python package against exact results, and its refusals."""

import os
import threading

import numpy as np
import pytest

import octex


def clustered(n, dim, seed, clusters=16):
    """A Gaussian mixture whose centres and spreads decay along the
    coordinates, like real embeddings (as the Rust tests' data)."""
    rng = np.random.default_rng(seed)
    decay = 1.0 / (1.0 + np.arange(dim) / 6.0)
    centres = 3.0 * rng.normal(size=(clusters, dim)) * decay
    picks = rng.integers(0, clusters, n)
    return (centres[picks] + rng.normal(size=(n, dim)) * decay).astype(np.float32)


def exact(base, queries, k, metric="l2"):
    if metric == "ip":
        scores = -(queries @ base.T)
    elif metric == "cosine":
        b = base / np.linalg.norm(base, axis=1, keepdims=True)
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        scores = -(q @ b.T)
    else:
        scores = (queries**2).sum(1)[:, None] - 2 * queries @ base.T + (base**2).sum(1)[None, :]
    return np.argsort(scores, axis=1, kind="stable")[:, :k]


def recall(found, truth):
    k = truth.shape[1]
    return np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth)])


@pytest.fixture(scope="module")
def data():
    return clustered(3000, 24, 1), clustered(100, 24, 2)


@pytest.fixture(scope="module")
def index(data):
    return octex.build(data[0], metric="l2", progress=False)


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_build_and_search_find_the_exact_neighbours(data, metric):
    base, queries = data
    ix = octex.build(base, metric=metric, progress=False)
    ids, dist = ix.search(queries, k=10)
    assert ids.shape == dist.shape == (100, 10)
    assert ids.dtype == np.uint32 and dist.dtype == np.float32
    assert recall(ids, exact(base, queries, 10, metric)) >= 0.9
    assert np.all(np.diff(dist, axis=1) >= -1e-4), "nearest first"
    assert len(ix) == 3000 and ix.dim == 24 and ix.metric == metric


@pytest.mark.parametrize("dim,metric", [(2, "l2"), (3, "cosine"), (5, "ip")])
def test_data_of_fewer_than_eight_dimensions(dim, metric, tmp_path):
    base, queries = clustered(3000, dim, 3), clustered(100, dim, 4)
    ix = octex.build(base, metric=metric, progress=False)
    ids, dist = ix.search(queries, k=10)
    assert recall(ids, exact(base, queries, 10, metric)) >= 0.95
    assert ix.dim == dim and ix.reconstruct([7]).shape == (1, dim)
    ix.save(tmp_path / "low.octex")
    again = octex.Index.load(tmp_path / "low.octex")
    assert np.array_equal(again.search(queries, k=10)[0], ids)


def test_save_and_load_round_trip(index, data, tmp_path):
    path = tmp_path / "x.octex"
    index.save(path)
    again = octex.Index.load(path)
    assert again.nbytes == index.nbytes == os.path.getsize(path)
    a, b = index.search(data[1], 5), again.search(data[1], 5)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_params_and_recall_targets(index, data):
    base, queries = data
    truth = exact(base, queries, 10)
    loose = octex.SearchParams(read_depth=8, start_points=8, waves=1, rerank=10)
    tight = octex.SearchParams(read_depth=16, start_points=96, waves=4, rerank=128)
    r_loose = recall(index.search(queries, 10, params=loose)[0], truth)
    r_tight = recall(index.search(queries, 10, params=tight)[0], truth)
    assert r_tight >= r_loose and r_tight >= 0.97
    # Per-wave rerank: a keyword that takes the defaults for the rest.
    every = octex.SearchParams(rerank=32, wave_rerank=True)
    assert every.wave_rerank and every.start_points == octex.SearchParams().start_points
    assert "wave_rerank=True" in repr(every)
    ids, dists = index.search(queries, 10, params=every)
    assert recall(ids, truth) >= 0.9 and np.all(np.diff(dists, axis=1) >= 0)
    params, sample = index.params_for_recall(0.95, k=10)
    assert sample >= 0.95 and isinstance(params, octex.SearchParams)
    assert recall(index.search(queries, 10, recall=0.95)[0], truth) >= 0.93
    with pytest.raises(ValueError, match="not both"):
        index.search(queries, 10, recall=0.9, params=tight)


def test_a_search_without_params_takes_the_index_defaults(index, data):
    base, queries = data
    own = index.default_params
    assert isinstance(own, octex.SearchParams) and own.start_points >= 1
    plain = index.search(queries, 10)
    given = index.search(queries, 10, params=own)
    assert np.array_equal(plain[0], given[0]) and np.array_equal(plain[1], given[1])
    assert recall(plain[0], exact(base, queries, 10)) >= 0.95


def test_inputs_are_converted_once_or_refused(index, data):
    base, queries = data
    want = index.search(queries, 5)[0]
    # float64, Fortran order, strided slices and lists are converted.
    assert np.array_equal(index.search(queries.astype(np.float64), 5)[0], want)
    assert np.array_equal(index.search(np.asfortranarray(queries), 5)[0], want)
    wide = np.repeat(queries, 2, axis=0)[::2]
    assert not wide.flags.c_contiguous or wide.base is not None
    assert np.array_equal(index.search(wide, 5)[0], want)
    assert np.array_equal(index.search(queries.tolist(), 5)[0], want)
    one = index.search(queries[0], 5)[0]
    assert one.shape == (1, 5) and np.array_equal(one[0], want[0])
    with pytest.raises(ValueError, match="dimension"):
        index.search(queries[:, :20], 5)
    with pytest.raises(ValueError, match="numbers"):
        index.search(np.array([["a"] * 24]), 5)
    nan = queries.copy()
    nan[3, 4] = np.nan
    with pytest.raises(ValueError, match="finite"):
        index.search(nan, 5)
    with pytest.raises(ValueError):
        index.search(queries, 0)
    with pytest.raises(ValueError, match="exceeds"):
        index.search(queries, 3001)
    with pytest.raises(ValueError, match="empty"):
        index.search(np.zeros((0, 24), np.float32), 5)
    with pytest.raises(ValueError, match="backend"):
        index.search(queries, 5, backend="tpu")
    if not octex.gpu_available():
        with pytest.raises(RuntimeError, match="CUDA|gpu"):
            index.search(queries, 5, backend="gpu")
    with pytest.raises(ValueError, match="metric"):
        octex.build(base, metric="hamming")
    with pytest.raises(ValueError, match="no vectors"):
        octex.build(np.zeros((0, 24), np.float32))
    bad = base[:100].copy()
    bad[7, 0] = np.inf
    with pytest.raises(ValueError, match="finite"):
        octex.build(bad)


def test_files_raise_os_errors(tmp_path, index):
    with pytest.raises(OSError, match="No such file|not found|os error"):
        octex.Index.load(tmp_path / "missing.octex")
    path = tmp_path / "x.octex"
    index.save(path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(OSError, match="checksum"):
        octex.Index.load(path)
    with pytest.raises(OSError):
        index.save(tmp_path / "no" / "such" / "dir.octex")


def test_progress_reaches_the_callback(data):
    events = []
    octex.build(data[0][:1500], progress=lambda e, s, v: events.append((e, s, v)))
    stages = {s for e, s, _ in events if e == "start"}
    assert {"ripples"} <= stages, stages
    assert any(e == "advance" for e, _, _ in events) and any(e == "finish" for e, _, _ in events)


def test_searches_run_beside_other_threads(index, data):
    results = [None] * 4

    def work(i):
        results[i] = index.search(data[1], 10)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, results[0]) for r in results)


def test_filtered_search_returns_only_allowed_ids(index, data):
    base, queries = data
    n = len(index)
    rng = np.random.default_rng(5)
    for share in [0.5, 0.1, 0.01]:
        allowed = np.sort(rng.choice(n, size=max(int(n * share), 12), replace=False))
        for f in [allowed, np.isin(np.arange(n), allowed)]:
            ids, dists = index.search(queries, 10, filter=f)
            assert np.isin(ids, allowed).all()
            truth = allowed[exact(base[allowed], queries, 10)]
            assert recall(ids, truth) >= 0.95
            assert np.all(np.diff(dists, axis=1) >= 0)
    few = np.array([3, 7, 11], dtype=np.int64)
    ids, dists = index.search(queries[:4], 10, filter=few)
    assert set(ids[:, :3].ravel()) == {3, 7, 11}
    assert (ids[:, 3:] == 2**32 - 1).all() and np.isinf(dists[:, 3:]).all()
    with pytest.raises(ValueError):
        index.search(queries, 10, filter=np.array([n]))
    with pytest.raises(ValueError):
        index.search(queries, 10, filter=np.ones(n + 1, dtype=bool))
    with pytest.raises(ValueError):
        index.search(queries, 10, filter=np.array([-1]))


def test_add_remove_and_user_ids(tmp_path):
    base = clustered(6000, 24, 11)
    queries = base[::97] + 0.01
    index = octex.build(base[:3000], "l2", copies=8, progress=False)
    assert not index._inner.is_live
    # Default ids continue from the built vectors; given ids are kept.
    ids = index.add(base[3000:4500])
    assert ids.dtype == np.uint64 and (ids == np.arange(3000, 4500)).all()
    given = np.arange(10**12, 10**12 + 1500)
    assert (index.add(base[4500:], ids=given) == given).all()
    assert len(index) == 6000
    with pytest.raises(ValueError, match="already"):
        index.add(base[:2], ids=[0, 99])
    with pytest.raises(ValueError):
        index.add(base[:2, :5])
    assert len(index) == 6000, "a refused add adds nothing"
    user = np.concatenate([np.arange(4500), given]).astype(np.uint64)
    found, dists = index.search(queries, 10)
    assert found.dtype == np.uint64
    assert recall(found, user[exact(base, queries, 10)]) >= 0.95
    # Removed ids never come back; the rest is still found.
    gone = user[::10]
    assert index.remove(gone) == len(gone) and index.remove(gone) == 0
    assert len(index) == 6000 - len(gone)
    found, _ = index.search(queries, 10)
    assert not np.isin(found, gone).any()
    keep = np.setdiff1d(np.arange(6000), np.arange(0, 6000, 10))
    assert recall(found, user[keep[exact(base[keep], queries, 10)]]) >= 0.95
    # Filters speak user ids.
    allowed = given[::3]
    found, _ = index.search(queries, 5, filter=allowed)
    assert np.isin(found[found != 2**64 - 1], allowed).all()
    # Saved with its ids and removals, loaded to the same answers.
    path = tmp_path / "live.octex"
    more = index.add(base[:40] + 0.5)
    index.save(path)
    back = octex.Index.load(path)
    assert len(back) == len(index) and back._inner.is_live
    for f in [None, allowed]:
        a, da = index.search(queries, 10, filter=f)
        b, db = back.search(queries, 10, filter=f)
        assert (a == b).all() and (da == db).all()
    assert (back.add(base[:1] + 0.7) == index.add(base[:1] + 0.7)).all()
    assert more[0] == 10**12 + 1500, "auto ids continue after the largest id"
    # Adds alone (ids = positions) save as a plain index file.
    plain = octex.build(base[:3000], "l2", copies=8, progress=False)
    plain.add(base[3000:])
    plain.save(path)
    again = octex.Index.load(path)
    assert len(again) == 6000
    found, _ = again.search(queries, 10, backend="cpu")
    assert recall(found, exact(base, queries, 10)) >= 0.95


def test_kill_during_add_or_save_loses_nothing_saved(tmp_path):
    import subprocess
    import sys
    import time

    base = clustered(4000, 16, 13)
    path = tmp_path / "crash.octex"
    octex.build(base[:2000], "l2", copies=8, progress=False).save(path)
    more = tmp_path / "more.npy"
    np.save(more, base[2000:])
    # The child adds 50 vectors, removes one, saves, and reports each save
    # once it has returned; it is killed (SIGKILL) at a moment of its loop.
    child = f"""
import sys, numpy as np, octex
first = int(sys.argv[1])
index = octex.Index.load({str(path)!r})
more = np.load({str(more)!r})
i = 0
while True:
    at = (i * 50) % 2000
    index.add(more[at:at + 50], ids=np.arange(first + i * 50, first + (i + 1) * 50))
    index.remove([i])
    index.save({str(path)!r})
    print(i, len(index), flush=True)
    i += 1
"""
    rng = np.random.default_rng(0)
    for round in range(3):
        first = 10**9 * (round + 1)
        proc = subprocess.Popen(
            [sys.executable, "-c", child, str(first)], stdout=subprocess.PIPE, text=True
        )
        reports = [proc.stdout.readline().split() for _ in range(3 + round)]
        time.sleep(rng.uniform(0.0, 0.1))
        proc.kill()
        proc.wait()
        last, size = (int(v) for v in reports[-1])
        back = octex.Index.load(path)
        assert len(back) >= size, "a save reported done was lost"
        # The last reported save's vectors are there under their ids (the
        # same vectors may be there under the ids of earlier rounds, and
        # of earlier turns of the loop).
        at = (last * 50) % 2000
        found, _ = back.search(base[2000 + at:2000 + at + 50], 8, backend="cpu")
        want = np.arange(first + last * 50, first + (last + 1) * 50, dtype=np.uint64)
        assert all(w in row for w, row in zip(want, found))


def test_sharded_index_and_merge(tmp_path):
    base = clustered(6000, 16, 21)
    queries = clustered(80, 16, 22)
    sharded = octex.ShardedIndex.build(base, "l2", shards=3)
    assert len(sharded) == 6000 and len(sharded.manifest["shards"]) == 3
    ids, dists = sharded.search(queries, 10)
    assert ids.dtype == np.uint64
    assert recall(ids, exact(base, queries, 10)) >= 0.95
    sharded.save(tmp_path / "shards")
    back = octex.ShardedIndex.load(tmp_path / "shards")
    ids2, dists2 = back.search(queries, 10)
    assert (ids2 == ids).all() and (dists2 == dists).all()
    cpu_ids, _ = back.search(queries, 10, backend="cpu")
    assert recall(cpu_ids, ids) >= 0.99
    if not octex.gpu_available():
        with pytest.raises(RuntimeError, match="CUDA|gpu"):
            back.search(queries, 10, backend="gpu")
    # merge_topk of exact per-shard answers is the exact answer.
    parts = []
    for a, b in [(0, 2500), (2500, 6000)]:
        i, d = octex.knn(queries, base[a:b], 10)
        parts.append((i.astype(np.int64) + a, d))
    merged, md = octex.merge_topk([p[0] for p in parts], [p[1] for p in parts], 10)
    want, wd = octex.knn(queries, base, 10)
    assert (merged == want).all() and np.allclose(md, wd)
    # Faiss-style similarities, largest first, -1 padding.
    m, d = octex.merge_topk([np.array([[3, -1]]), np.array([[7, 1]])], [np.array([[0.5, 0.0]]), np.array([[0.9, 0.5]])], 4, descending=True)
    assert m[0].tolist() == [7, 1, 3, 2**64 - 1] and d[0, 0] == np.float32(0.9)
