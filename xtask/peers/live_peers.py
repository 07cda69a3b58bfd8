#!/usr/bin/env python3
"""hnswlib grown by adds and shrunk by removals, for `cargo xtask bench-live`:
the first half of the base added, then the second in 10 steps (timed), recall@10
at ef=128 and ef=256, then every tenth vector marked deleted."""
import argparse, time

import numpy as np

from peers import load_inputs, read_vecs


def recall(ids, gt, keep=None):
    hits = total = 0
    for r, g in zip(ids, gt):
        want = [p for p in g if keep is None or keep(p)][:10]
        total += len(want)
        hits += len(set(r[:10].tolist()) & set(want))
    return hits / total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--gt", required=True)
    ap.add_argument("--metric", default="l2", choices=["l2", "cosine", "ip"])
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    base, q = load_inputs(a.base, a.queries, a.metric)
    q = q[: a.nq]
    gt = read_vecs(a.gt, np.int32)[: a.nq]
    n, d = base.shape
    half = n // 2
    import hnswlib
    idx = hnswlib.Index(space="ip" if a.metric == "ip" else "l2", dim=d)
    idx.init_index(max_elements=n, M=16, ef_construction=200, random_seed=1, allow_replace_deleted=False)
    t = time.perf_counter()
    idx.add_items(base[:half], np.arange(half), num_threads=a.threads)
    first = time.perf_counter() - t
    step = -(-(n - half) // 10)
    t = time.perf_counter()
    for s in range(half, n, step):
        e = min(s + step, n)
        idx.add_items(base[s:e], np.arange(s, e), num_threads=a.threads)
    adds = time.perf_counter() - t
    out = []
    for ef in (128, 256):
        idx.set_ef(ef)
        t = time.perf_counter()
        ids, _ = idx.knn_query(q, k=10, num_threads=a.threads)
        qps = len(q) / (time.perf_counter() - t)
        out.append(f"ef={ef} recall@10 {recall(ids, gt):.4f} at {qps:.0f} QPS")
    print(f"hnswlib M=16 efC=200: first {half} added in {first:.1f} s; {n - half} added in 10 steps "
          f"in {adds:.1f} s ({(n - half) / adds:.0f} vectors/s); " + ", ".join(out))
    t = time.perf_counter()
    for i in range(0, n, 10):
        idx.mark_deleted(i)
    dele = time.perf_counter() - t
    idx.set_ef(128)
    ids, _ = idx.knn_query(q, k=10, num_threads=a.threads)
    assert not (ids % 10 == 0).any(), "a deleted id came back"
    print(f"hnswlib: every tenth marked deleted in {dele:.3f} s; recall@10 over the rest at ef=128 "
          f"{recall(ids, gt, lambda p: p % 10 != 0):.4f}")


if __name__ == "__main__":
    main()
