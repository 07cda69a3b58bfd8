"""A Faiss tutorial script (the steps of Faiss's wiki: flat, IVF and HNSW
indexes, id maps, removals, selectors, range search, reconstruction, save and
load), run unchanged by Faiss or by octex's drop-in:

    python examples/python/faiss_tutorial.py          # octex.compat.faiss
    python examples/python/faiss_tutorial.py --faiss  # the real Faiss

It prints what each step returned; `test_faiss_tutorial_runs_on_the_drop_in`
checks the same steps against exact answers.
"""

import sys
import tempfile

import numpy as np

if "--faiss" in sys.argv:
    import faiss
else:
    from octex.compat import faiss


def run(faiss, d=32, nb=20000, nq=200, k=10, seed=1234):
    rng = np.random.default_rng(seed)
    xb = rng.random((nb, d), dtype=np.float32)
    xb[:, 0] += np.arange(nb) / 1000.0
    xq = rng.random((nq, d), dtype=np.float32)
    xq[:, 0] += np.arange(nq) / 1000.0
    out = {}

    # 1. Exact search.
    flat = faiss.IndexFlatL2(d)
    flat.add(xb)
    D, I = flat.search(xq, k)
    out["flat"] = (D, I)

    # 2. IVF: train, add, search with nprobe.
    quantizer = faiss.IndexFlatL2(d)
    ivf = faiss.IndexIVFFlat(quantizer, d, 100)
    assert not ivf.is_trained
    ivf.train(xb)
    ivf.add(xb)
    ivf.nprobe = 10
    out["ivf"] = ivf.search(xq, k)

    # 3. HNSW.
    hnsw = faiss.IndexHNSWFlat(d, 32)
    hnsw.hnsw.efConstruction = 80
    hnsw.add(xb)
    hnsw.hnsw.efSearch = 128
    out["hnsw"] = hnsw.search(xq, k)

    # 4. Id maps, removals, selectors.
    ids = np.arange(nb, dtype=np.int64) * 7 + 1_000_000
    idmap = faiss.IndexIDMap(faiss.IndexHNSWFlat(d, 32))
    idmap.add_with_ids(xb, ids)
    out["idmap"] = idmap.search(xq, k)
    allowed = ids[::3]
    params = faiss.SearchParametersHNSW(sel=faiss.IDSelectorBatch(allowed), efSearch=128)
    out["selected"] = idmap.search(xq, k, params=params)
    ivf_ids = faiss.IndexIVFFlat(faiss.IndexFlatL2(d), d, 100)
    ivf_ids.train(xb)
    ivf_ids.add_with_ids(xb, ids)
    ivf_ids.nprobe = 20
    removed = ivf_ids.remove_ids(faiss.IDSelectorRange(1_000_000, 1_000_000 + 7 * 1000))
    out["removed"] = (removed, ivf_ids.ntotal)
    out["after_remove"] = ivf_ids.search(xq, k)
    out["removed_batch"] = ivf_ids.remove_ids(ids[1000:1010])
    bitmap = np.zeros((nb + 7) // 8, dtype=np.uint8)
    bitmap[: nb // 16] = 0xFF
    out["bitmap"] = flat.search(xq, k, params=faiss.SearchParameters(sel=faiss.IDSelectorBitmap(bitmap)))

    # 5. Range search and reconstruction.
    radius = float(np.median(D[:5, 4]))
    out["range_flat"] = flat.range_search(xq[:5], radius)
    out["range_hnsw"] = hnsw.range_search(xq[:5], radius)
    out["reconstruct"] = flat.reconstruct(7)
    idmap2 = faiss.IndexIDMap2(faiss.IndexFlatL2(d))
    idmap2.add_with_ids(xb[:100], ids[:100])
    out["reconstruct_id"] = idmap2.reconstruct(int(ids[5]))

    # 6. Factory strings, inner product with normalised vectors.
    xn = xb.copy()
    faiss.normalize_L2(xn)
    qn = xq.copy()
    faiss.normalize_L2(qn)
    ip = faiss.index_factory(d, "HNSW32", faiss.METRIC_INNER_PRODUCT)
    ip.add(xn)
    out["ip"] = ip.search(qn, k)
    out["ip_exact"] = faiss.knn(qn, xn, k, metric=faiss.METRIC_INNER_PRODUCT)
    f2 = faiss.index_factory(d, "IDMap,Flat")
    f2.add_with_ids(xb[:50], ids[:50])
    out["factory_idmap"] = f2.search(xq[:3], 3)

    rest = faiss.IndexIDMap(faiss.IndexFlatL2(d))
    rest.add_with_ids(xb[1000:], ids[1000:])
    out["flat_rest"] = rest.search(xq, k)

    # 7. Save and load.
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/hnsw.index"
        faiss.write_index(hnsw, path)
        back = faiss.read_index(path)
        out["reloaded"] = back.search(xq, k)
    return xb, xq, out


def recall(found, truth):
    return np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)])


if __name__ == "__main__":
    xb, xq, out = run(faiss)
    truth = out["flat"][1]
    for name in ["ivf", "hnsw", "reloaded"]:
        print(f"{name}: recall@10 {recall(out[name][1], truth):.4f}")
    print("removed", out["removed"], out["removed_batch"],
          "after removal recall@10 over the rest", f"{recall(out['after_remove'][1], out['flat_rest'][1]):.4f}")
    print("range (flat) results per query", np.diff(out["range_flat"][0]).tolist(),
          "(hnsw)", np.diff(out["range_hnsw"][0]).tolist())
    print("selected ids all allowed:", bool(np.isin(out["selected"][1], np.arange(20000) * 7 * 3 + 1_000_000).all()))
    print("ip recall", f"{recall(out['ip'][1], out['ip_exact'][1]):.4f}")
