"""The Faiss drop-in (octex.compat.faiss) against exact answers and Faiss's
conventions; a Faiss tutorial script runs on it unchanged."""

import importlib.util
import pathlib

import numpy as np
import pytest

import octex
from octex.compat import faiss
from test_octex import clustered, exact, recall

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "faiss_tutorial.py"


@pytest.fixture(scope="module")
def data():
    return clustered(3000, 24, 1), clustered(100, 24, 2)


@pytest.mark.parametrize("metric", [faiss.METRIC_L2, faiss.METRIC_INNER_PRODUCT])
def test_faiss_drop_in_matches_faiss_conventions(data, metric):
    base, queries = data
    index = faiss.IndexHNSWFlat(24, 32, metric)
    index.hnsw.efSearch = 64
    index.train(base)
    index.add(base[:2000])
    index.add(base[2000:])
    assert index.ntotal == 3000 and index.is_trained
    D, I = index.search(queries, 10)
    assert D.shape == I.shape == (100, 10) and D.dtype == np.float32 and I.dtype == np.int64
    name = "ip" if metric == faiss.METRIC_INNER_PRODUCT else "l2"
    truth = exact(base, queries, 10, name)
    assert recall(I, truth) >= 0.9
    if metric == faiss.METRIC_INNER_PRODUCT:
        want = np.take_along_axis(queries @ base.T, I, axis=1)
        assert np.all(np.diff(D, axis=1) <= 1e-3), "inner products, largest first"
    else:
        want = ((queries[:, None, :] - base[I]) ** 2).sum(-1)
        assert np.all(np.diff(D, axis=1) >= -1e-3), "squared L2, smallest first"
    np.testing.assert_allclose(D, want, rtol=2e-2, atol=2e-2)
    # k above ntotal: Faiss pads with -1.
    small = faiss.IndexHNSWFlat(24, 16, metric)
    small.add(base[:5])
    D, I = small.search(queries[:2], 8)
    assert (I[:, 5:] == -1).all() and I.shape == (2, 8)
    with pytest.raises(ValueError, match="shape"):
        index.add(base[:, :10])



def test_faiss_tutorial_runs_on_the_drop_in():
    spec = importlib.util.spec_from_file_location("faiss_tutorial", TUTORIAL)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    xb, xq, out = tutorial.run(faiss, nb=4000, nq=50)
    nb = len(xb)
    ids = np.arange(nb, dtype=np.int64) * 7 + 1_000_000
    # Flat is exact.
    D, I = out["flat"]
    truth = exact(xb, xq, 10)
    assert (I == truth).mean() > 0.999
    np.testing.assert_allclose(D, ((xq[:, None, :] - xb[I]) ** 2).sum(-1), rtol=1e-4, atol=1e-4)
    for name in ["ivf", "hnsw", "reloaded"]:
        assert recall(out[name][1], truth) >= 0.95, name
    assert recall(out["idmap"][1], ids[truth]) >= 0.95
    # Removals: none comes back, the rest is found.
    removed, ntotal = out["removed"]
    assert (removed, ntotal) == (1000, nb - 1000) and out["removed_batch"] == 10
    after = out["after_remove"][1]
    assert not np.isin(after, ids[:1000]).any()
    assert recall(after, ids[1000:][exact(xb[1000:], xq, 10)]) >= 0.95
    # Selectors: only allowed ids, near the exact filtered answer.
    allowed = ids[::3]
    sel = out["selected"][1]
    assert np.isin(sel[sel >= 0], allowed).all()
    assert recall(sel, allowed[exact(xb[::3], xq, 10)]) >= 0.95
    bm = out["bitmap"][1]
    assert (bm < nb // 16 * 8).all() and (bm >= 0).all()
    # Range search: the exact answer from the flat index, the same sets
    # (almost) from the approximate one.
    lims, RD, RI = out["range_flat"]
    radius = float(np.median(D[:5, 4]))
    d2 = ((xq[:5, None, :] - xb[None]) ** 2).sum(-1)
    for q in range(5):
        want = set(np.flatnonzero(d2[q] < radius))
        got = set(RI[lims[q] : lims[q + 1]].tolist())
        assert got == want or len(got ^ want) <= 1, q
    lh, _, IH = out["range_hnsw"]
    assert lims.dtype == np.uint64 and IH.dtype == np.int64
    # Approximate (and f16-rounded where stored so): sets within a few ids.
    differ = sum(
        len(set(RI[lims[q] : lims[q + 1]].tolist()) ^ set(IH[lh[q] : lh[q + 1]].tolist())) for q in range(5)
    )
    assert differ <= 1 + 0.05 * int(lims[-1]), differ
    np.testing.assert_array_equal(out["reconstruct"], xb[7])
    np.testing.assert_array_equal(out["reconstruct_id"], xb[5])
    # Inner product: Faiss's sign, largest first.
    Dip, Iip = out["ip"]
    assert recall(Iip, out["ip_exact"][1]) >= 0.95
    assert (np.diff(Dip, axis=1) <= 1e-5).all() and (Dip > 0).all()
    assert np.isin(out["factory_idmap"][1], ids[:50]).all()


def test_faiss_refusals_match_faiss():
    d = 8
    x = np.random.default_rng(0).random((300, d), dtype=np.float32)
    with pytest.raises(RuntimeError, match="add_with_ids"):
        faiss.IndexIDMap(faiss.IndexFlatL2(d)).add(x)
    with pytest.raises(RuntimeError, match="train"):
        faiss.IndexIVFFlat(faiss.IndexFlatL2(d), d, 10).add(x)
    m = faiss.IndexIDMap(faiss.IndexFlatL2(d))
    m.add_with_ids(x, np.arange(300) + 50)
    with pytest.raises(RuntimeError, match="IndexIDMap2"):
        m.reconstruct(60)
    with pytest.raises(RuntimeError, match="twice"):
        faiss.IndexIDMap(faiss.IndexHNSWFlat(d, 16)).add_with_ids(x[:2], [4, 4])
    with pytest.raises(ValueError, match="PQ"):
        faiss.index_factory(d, "IVF100,PQ8")
    # Flat removal renumbers, as Faiss's flat index does.
    flat = faiss.IndexFlatL2(d)
    flat.add(x)
    assert flat.remove_ids(np.array([0, 1])) == 2 and flat.ntotal == 298
    _, I = flat.search(x[2:3], 1)
    assert I[0, 0] == 0
    # A selector that allows nothing pads.
    D, I = flat.search(x[:2], 3, params=faiss.SearchParameters(sel=faiss.IDSelectorRange(10**6, 10**6 + 1)))
    assert (I == -1).all() and np.isinf(D).all()


def test_cuvs_tutorial_runs_on_the_drop_in():
    from octex.compat.cuvs.neighbors import cagra, filters

    path = TUTORIAL.parent / "cuvs_cagra_tutorial.py"
    spec = importlib.util.spec_from_file_location("cuvs_tutorial", path)
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    data, queries, out = tutorial.run(cagra, filters, n=4000, nq=50)
    n = len(data)
    assert out["size"] == n
    D, I = out["half"]
    assert I.dtype == np.uint32 and D.dtype == np.float32 and I.shape == (50, 10)
    assert recall(I, exact(data[: n // 2], queries, 10)) >= 0.95
    truth = exact(data, queries, 10)
    D, I = out["whole"]
    assert recall(I, truth) >= 0.95
    np.testing.assert_allclose(D, ((queries[:, None, :] - data[I]) ** 2).sum(-1), rtol=2e-2, atol=1e-2)
    Dr, Ir = out["reloaded"]
    assert (Ir == I).all() and (Dr == D).all()
    _, If = out["filtered"]
    assert (If % 4 == 0).all()
    assert recall(If, 4 * exact(data[::4], queries, 10)) >= 0.95
    Dip, Iip = out["ip"]
    assert recall(Iip, exact(data, queries, 10, "ip")) >= 0.95
    assert (np.diff(Dip, axis=1) <= 1e-3).all(), "inner products, largest first"
    # A per-query bitmap: query i may return rows i, i + 1 and i + 2 only.
    index = cagra.build(cagra.IndexParams(), data[:500])
    bits = np.zeros((3, 500), dtype=bool)
    for i in range(3):
        bits[i, i : i + 3] = True
    words = np.packbits(bits.ravel(), bitorder="little").view(np.uint32)
    _, I = cagra.search(cagra.SearchParams(), index, data[:3], 4, filter=filters.from_bitmap(words))
    I = I.copy_to_host()
    for i in range(3):
        assert sorted(I[i, :3]) == [i, i + 1, i + 2] and I[i, 3] == 2**32 - 1
    with pytest.raises(ValueError, match="metric"):
        cagra.IndexParams(metric="hamming")
    with pytest.raises(TypeError, match="uint32"):
        filters.from_bitset(np.zeros(4, dtype=np.int64))
