"""octex.ray on a local Ray cluster (2 CPUs, GPUs as logical resources):
sharded exact search equals exact search of the whole, sharded ANN recall
holds, save/load, Ray Data batch search, a Serve round trip, a killed
actor."""

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import octex  # noqa: E402
import octex.ray as oray  # noqa: E402
from test_octex import clustered, exact, recall  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data():
    return clustered(8000, 16, 31), clustered(100, 16, 32)


@pytest.fixture(scope="module")
def sharded(cluster, data, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ray") / "index")
    # Build tasks ask for half an (emulated) GPU each.
    index = oray.build(data[0], metric="l2", shards=4, path=path, resources={"num_gpus": 0.5})
    yield index, path
    index.close()


def test_exact_and_ann_search_over_shards(sharded, data):
    index, path = sharded
    base, queries = data
    assert len(index) == 8000 and len(index.manifest["shards"]) == 4
    # Exact over the vectors as the shards store them (f16 where chosen):
    # the exact answer of all of them together.
    ids, dists = index.search(queries, 10, exact=True)
    shards = [octex.Index.load(f"{path}/{e['file']}") for e in index.manifest["shards"]]
    stored = np.concatenate([s.reconstruct(np.arange(len(s), dtype=np.uint64)) for s in shards])
    want, wd = octex.knn(queries, stored, 10)
    assert (ids == want).all() and (dists == wd).all()
    ids, _ = index.search(queries, 10)
    one = octex.build(base, "l2", progress=False)
    single = recall(one.search(queries, 10)[0], exact(base, queries, 10))
    assert recall(ids, exact(base, queries, 10)) >= single - 0.01
    # The directory loads in one process too, with the same answers.
    local = octex.ShardedIndex.load(path)
    assert (local.search(queries, 10)[0] == ids).all()


def test_batch_search_over_ray_data(sharded, data):
    _, path = sharded
    _, queries = data
    ds = ray.data.from_items([{"vector": q} for q in queries[:40]])
    rows = oray.batch_search(ds, path, k=5, batch_size=16).take_all()
    got = np.stack([r["ids"] for r in rows])
    want = octex.ShardedIndex.load(path).search(queries[:40], 5)[0]
    order = [int(np.flatnonzero((queries[:40] == r["vector"]).all(1))[0]) for r in rows]
    assert (got == want[order]).all()


def test_a_dead_actor_is_reported_or_replaced(cluster, sharded, data):
    _, path = sharded
    _, queries = data
    two = oray.ShardedIndex.load(path, replicas=2)
    before = two.search(queries[:5], 10)[0]
    ray.kill(two._actors[1][0])
    assert (two.search(queries[:5], 10)[0] == before).all(), "a replica answers"
    ray.kill(two._actors[1][0])
    with pytest.raises(RuntimeError, match="shard 1"):
        two.search(queries[:5], 10)
    two.close()


def test_serve_round_trip(sharded, data):
    from ray import serve

    _, path = sharded
    _, queries = data
    handle = serve.run(oray.serve_app(path), name="octex", route_prefix=None)
    try:
        answer = handle.search.remote(queries[:3].tolist(), 5).result()
        want = octex.ShardedIndex.load(path).search(queries[:3], 5)[0]
        assert np.array_equal(np.array(answer["ids"], dtype=np.uint64), want)
    finally:
        serve.shutdown()


def test_build_from_files_and_from_a_ray_dataset(cluster, data, tmp_path):
    base, queries = data
    small = base[:3000]
    want = exact(small, queries, 10)
    # Files: one shard each, in the order given (.npy and .fvecs).
    np.save(tmp_path / "a.npy", small[:1200])
    rows = small[1200:]
    header = np.full((len(rows), 1), rows.shape[1], dtype=np.int32)
    np.hstack([header, rows.view(np.int32)]).tofile(tmp_path / "b.fvecs")
    from_files = oray.build([tmp_path / "a.npy", tmp_path / "b.fvecs"], path=str(tmp_path / "files"))
    assert [e["len"] for e in from_files.manifest["shards"]] == [1200, 1800]
    ids, _ = from_files.search(queries, 10, exact=True)
    assert recall(ids, want) >= 0.99
    from_files.close()
    # A Ray Dataset with one vector column, split into shards.
    ds = ray.data.from_items([{"vector": v} for v in small])
    from_ds = oray.build(ds, shards=3, path=str(tmp_path / "ds"))
    assert len(from_ds) == 3000 and len(from_ds.manifest["shards"]) == 3
    ids, _ = from_ds.search(queries, 10, exact=True)
    # A split's row order is Ray's: compare the vectors found, not the ids.
    stored = np.concatenate(
        [
            octex.Index.load(str(tmp_path / "ds" / e["file"])).reconstruct(np.arange(e["len"], dtype=np.uint64))
            for e in from_ds.manifest["shards"]
        ]
    )
    found = stored[ids.astype(np.int64)]
    truth = small[want]
    close = np.isclose(found[:, :, None, :], truth[:, None, :, :], atol=1e-2).all(-1).any(-1)
    assert close.mean() >= 0.99
    from_ds.close()
    with pytest.raises(ValueError, match="are .npy or .fvecs"):
        oray.build([tmp_path / "a.txt"], path=str(tmp_path / "bad"))
