#!/usr/bin/env python3
"""cuVS peers for `cargo xtask bench --backend gpu --peers`, timed like octex's GPU sweep.

Builds cuVS CAGRA (graph degree 32 and 64), IVF-Flat (sqrt(n) and 4 sqrt(n)
lists), IVF-PQ (sqrt(n) lists, without and with exact refinement) and brute
force over the base vectors on GPU 0, sweeps each one's
search parameters (CAGRA's itopk in steps of 32 to 256 and search width 1-8,
the IVF probes in steps of about 1.5x, so that the best point at a target is
not an accident of a coarse grid) with the queries already in device memory (one batch of
--batch queries), and prints one JSON object per line:
  {"system", "params", "recall", "qps", "seconds", "build_seconds"}
and one {"build": ...} record per index. QPS is the batch over the median of
--repeats timed searches after one warm-up, each ended by a stream sync; one
cuVS Resources handle serves every call and device memory comes from an RMM
pool (as RAPIDS' own benchmarks run), so no call pays for set-up. Needs the cuVS Python packages (see
../shared/tools/cuvs/README.md for an install that fits the GPU machine).
"""
import argparse, json, sys, time

import numpy as np


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    if raw.size == 0:
        raise SystemExit(f"{path}: empty")
    d = int(raw[0])
    rows = raw.reshape(-1, d + 1)
    if not (rows[:, 0] == d).all():
        raise SystemExit(f"{path}: dimension changes mid-file")
    return np.ascontiguousarray(rows[:, 1:]).view(dtype)


def recall(ids, gt, k):
    hits = 0
    for r, g in zip(ids, gt):
        hits += len(set(r[:k].tolist()) & set(g[:k].tolist()))
    return hits / (len(gt) * k)


def timed(fn, res, repeats):
    out = fn()  # warm-up
    res.sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        res.sync()
        times.append(time.perf_counter() - t)
    return out, float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--gt", required=True)
    ap.add_argument("--metric", default="l2", choices=["l2", "cosine", "ip"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="cagra,ivf-flat,ivf-pq,brute-force")
    a = ap.parse_args()
    try:
        from cuvs.common import Resources
        from cuvs.neighbors import brute_force, cagra, ivf_flat, ivf_pq, refine
        from pylibraft.common import device_ndarray
    except ImportError as e:
        raise SystemExit(f"cuVS is not importable ({e}); see ../shared/tools/cuvs/README.md")
    try:
        import rmm
        rmm.reinitialize(pool_allocator=True, initial_pool_size=1 << 32)
    except Exception as e:  # still correct without the pool, only slower
        print(f"no RMM pool ({e})", file=sys.stderr)
    res = Resources()
    base = read_vecs(a.base, np.float32)
    q = read_vecs(a.queries, np.float32)[: a.batch]
    gt = read_vecs(a.gt, np.int32)[: a.batch]
    if a.metric == "cosine":
        base = base / np.linalg.norm(base, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    if a.metric == "l2":
        # One scale for base and queries leaves every L2 ranking as it is and
        # keeps CAGRA's build out of fp16 overflow on raw pixel data (its
        # kNN graph fails on Fashion-MNIST's 0..255 values otherwise).
        scale = float(np.abs(base).max())
        if scale > 16.0:
            base, q = base / scale, q / scale
    base = np.ascontiguousarray(base, dtype=np.float32)
    q = np.ascontiguousarray(q, dtype=np.float32)
    metric = "inner_product" if a.metric == "ip" else "sqeuclidean"
    n, d = base.shape
    nq, k = q.shape[0], a.k
    systems = a.systems.split(",")
    base_dev = device_ndarray(base)
    q_dev = device_ndarray(q)

    def emit(system, params, neighbors, secs, build):
        ids = neighbors.copy_to_host()
        print(json.dumps({"system": system, "params": params, "recall": recall(ids, gt, k),
                          "qps": nq / secs, "seconds": secs, "build_seconds": build}), flush=True)

    def built(name, params, secs):
        print(json.dumps({"build": name, "params": params, "build_seconds": secs}), flush=True)

    def attempt(name, run):
        try:
            run()
        except Exception as e:  # one peer failing leaves the others
            print(f"{name} failed: {e}", file=sys.stderr)
            print(json.dumps({"build": name, "params": "failed", "error": str(e)}), flush=True)

    def run_cagra():
        for degree in [32, 64]:
            t = time.perf_counter()
            index = cagra.build(cagra.IndexParams(metric=metric, graph_degree=degree,
                                                  intermediate_graph_degree=2 * degree), base_dev,
                                resources=res)
            res.sync()
            build = time.perf_counter() - t
            built("cuVS CAGRA", f"graph_degree={degree}", build)
            # itopk in steps of 32 up to 256 (cuVS rounds it up to a multiple
            # of 32): with doublings only, CAGRA's best point at 0.99 on the
            # text set swung between 0.35M and 0.66M QPS from lease to lease,
            # as its itopk-128 point landed just below or above 0.99.
            for itopk in [16, 32, 64, 96, 128, 160, 192, 224, 256, 384, 512]:
                for width in [1, 2, 4, 8]:
                    sp = cagra.SearchParams(itopk_size=itopk, search_width=width)
                    try:
                        (_, nb), secs = timed(lambda: cagra.search(sp, index, q_dev, k, resources=res), res, a.repeats)
                    except Exception as e:  # a combination cuVS refuses
                        print(f"cagra degree {degree} itopk {itopk} width {width}: {e}", file=sys.stderr)
                        continue
                    emit("cuVS CAGRA", f"degree={degree} itopk={itopk} width={width}", nb, secs, build)
            del index
    # Lists: sqrt(n) (few long lists, what a GPU scans best on small sets) and
    # 4 sqrt(n) (Faiss's usual rule), each swept over the probes.
    root = int(round(np.sqrt(n)))
    list_counts = sorted({max(16, root), max(16, min(4 * root, n // 16))})
    n_lists = list_counts[0]

    def run_ivf_flat():
        for lists in list_counts:
            t = time.perf_counter()
            index = ivf_flat.build(ivf_flat.IndexParams(n_lists=lists, metric=metric), base_dev,
                                   resources=res)
            res.sync()
            build = time.perf_counter() - t
            built("cuVS IVF-Flat", f"n_lists={lists}", build)
            for probes in [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]:
                if probes > lists:
                    break
                sp = ivf_flat.SearchParams(n_probes=probes)
                (_, nb), secs = timed(lambda: ivf_flat.search(sp, index, q_dev, k, resources=res), res, a.repeats)
                emit("cuVS IVF-Flat", f"n_lists={lists} n_probes={probes}", nb, secs, build)
            del index

    def run_ivf_pq():
        t = time.perf_counter()
        index = ivf_pq.build(ivf_pq.IndexParams(n_lists=n_lists, metric=metric), base_dev,
                             resources=res)
        res.sync()
        build = time.perf_counter() - t
        built("cuVS IVF-PQ", f"n_lists={n_lists} (pq_dim auto)", build)
        for ratio in [1, 2, 4]:
            for probes in [8, 16, 32, 48, 64, 96, 128, 192, 256]:
                if probes > n_lists:
                    break
                sp = ivf_pq.SearchParams(n_probes=probes)

                def search():
                    out = ivf_pq.search(sp, index, q_dev, ratio * k, resources=res)
                    if ratio == 1:  # the PQ distances alone, no exact refinement
                        return out
                    return refine(base_dev, q_dev, out[1], k=k, metric=metric, resources=res)

                (_, nb), secs = timed(search, res, a.repeats)
                emit("cuVS IVF-PQ", f"n_lists={n_lists} n_probes={probes} refine={ratio}x", nb, secs, build)
        del index

    def run_brute_force():
        t = time.perf_counter()
        index = brute_force.build(base_dev, metric=metric, resources=res)
        res.sync()
        build = time.perf_counter() - t
        (_, nb), secs = timed(lambda: brute_force.search(index, q_dev, k, resources=res), res, a.repeats)
        emit("cuVS brute force", "exact", nb, secs, build)

    for name, run in [("cagra", run_cagra), ("ivf-flat", run_ivf_flat), ("ivf-pq", run_ivf_pq),
                      ("brute-force", run_brute_force)]:
        if name in systems:
            attempt(f"cuVS {name}", run)


if __name__ == "__main__":
    main()
