"""A cuVS CAGRA script (build, search, a bitset filter, extend, save and
load, results written into given arrays), run unchanged by cuVS or by
octex's drop-in:

    python examples/python/cuvs_cagra_tutorial.py          # octex.compat.cuvs
    python examples/python/cuvs_cagra_tutorial.py --cuvs   # cuVS (a GPU, CuPy)

Arrays are CuPy arrays where CuPy is installed, numpy arrays elsewhere (the
drop-in takes both). `test_cuvs_tutorial_runs_on_the_drop_in` checks the
steps against exact answers.
"""

import sys
import tempfile

import numpy as np

try:
    import cupy as xp
except ImportError:
    xp = np

if "--cuvs" in sys.argv:
    from cuvs.neighbors import cagra, filters
else:
    from octex.compat.cuvs.neighbors import cagra, filters


def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else xp.asnumpy(a) if xp is not np else np.asarray(a)


def run(cagra, filters, n=20000, nq=200, d=48, k=10, seed=7):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, d)).astype(np.float32)
    data[:, :4] *= 10.0
    queries = data[rng.choice(n, nq, replace=False)] + 0.05
    dataset = xp.asarray(data[: n // 2])
    out = {}

    index = cagra.build(cagra.IndexParams(metric="sqeuclidean", graph_degree=32), dataset)
    params = cagra.SearchParams(itopk_size=64)
    distances, neighbors = cagra.search(params, index, xp.asarray(queries), k)
    out["half"] = (host(distances), host(neighbors))

    index = cagra.extend(cagra.ExtendParams(), index, xp.asarray(data[n // 2 :]))
    out["size"] = len(index)
    nb = xp.zeros((nq, k), dtype=np.uint32)
    db = xp.zeros((nq, k), dtype=np.float32)
    cagra.search(params, index, xp.asarray(queries), k, neighbors=nb, distances=db)
    out["whole"] = (host(db), host(nb))

    allowed = np.zeros(n, dtype=bool)
    allowed[::4] = True
    bitset = np.packbits(allowed, bitorder="little").view(np.uint32)
    distances, neighbors = cagra.search(params, index, xp.asarray(queries), k, filter=filters.from_bitset(xp.asarray(bitset)))
    out["filtered"] = (host(distances), host(neighbors))

    with tempfile.TemporaryDirectory() as tmp:
        cagra.save(f"{tmp}/cagra.bin", index)
        back = cagra.load(f"{tmp}/cagra.bin")
        distances, neighbors = cagra.search(params, back, xp.asarray(queries), k)
        out["reloaded"] = (host(distances), host(neighbors))

    ip = cagra.build(cagra.IndexParams(metric="inner_product"), xp.asarray(data))
    out["ip"] = tuple(host(a) for a in cagra.search(params, ip, xp.asarray(queries), k))
    return data, queries, out


def recall(found, truth):
    return np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)])


if __name__ == "__main__":
    data, queries, out = run(cagra, filters)
    d2 = (queries**2).sum(1)[:, None] - 2 * queries @ data.T + (data**2).sum(1)[None]
    truth = np.argsort(d2, axis=1)[:, :10]
    print("size after extend", out["size"])
    for name in ["whole", "reloaded"]:
        print(f"{name}: recall@10 {recall(out[name][1], truth):.4f}")
    d2f = d2.copy()
    d2f[:, 1::4] = d2f[:, 2::4] = d2f[:, 3::4] = np.inf
    print(f"filtered: recall@10 {recall(out['filtered'][1], np.argsort(d2f, axis=1)[:, :10]):.4f}",
          "all allowed:", bool((out["filtered"][1] % 4 == 0).all()))
