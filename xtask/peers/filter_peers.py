#!/usr/bin/env python3
"""Filtered search of the peers for `cargo xtask bench-filter`, timed as octex is.

For each allowed-id mask (one byte per base vector) and its exact filtered
ground truth, sweeps hnswlib (M=16 efC=200, `filter=` a Python callable, as
its users pass it) and Faiss HNSW32 (`SearchParametersHNSW(sel=IDSelectorBitmap)`)
over ef, and prints one JSON object per line:
{"system", "per_mille", "params", "recall", "qps", "seconds"}.
"""
import argparse, json, time

import numpy as np

from peers import load_inputs, read_vecs, recall, timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--metric", default="l2", choices=["l2", "cosine", "ip"])
    ap.add_argument("--masks", required=True, help="per_mille:mask.u8:gt.ivecs,...")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    base, q = load_inputs(a.base, a.queries, a.metric)
    n, d = base.shape
    nq = q.shape[0]
    k = a.k
    cases = []
    for spec in a.masks.split(","):
        pm, mask_path, gt_path = spec.split(":")
        mask = np.fromfile(mask_path, dtype=np.uint8).astype(bool)
        cases.append((int(pm), mask, read_vecs(gt_path, np.int32)))
    efs = [16, 32, 64, 128, 256, 512, 1024]
    # A sweep stops once it passes 0.995 or a timed run takes over MAX_SECONDS
    # (hnswlib calls the Python filter for every node it visits).
    MAX_SECONDS = 10.0

    def emit(system, pm, params, ids, gt, secs):
        print(json.dumps({"system": system, "per_mille": pm, "params": params,
                          "recall": recall(ids, gt, k), "qps": nq / secs, "seconds": secs}),
              flush=True)

    import hnswlib
    idx = hnswlib.Index(space="ip" if a.metric == "ip" else "l2", dim=d)
    idx.init_index(max_elements=n, M=16, ef_construction=200, random_seed=1)
    idx.add_items(base, num_threads=a.threads)
    for pm, mask, gt in cases:
        allowed = mask.tolist()
        keep = lambda i: allowed[i]
        for ef in efs:
            idx.set_ef(ef)
            # Fewer allowed ids than k make hnswlib raise: ask for what exists.
            kk = min(k, int(mask.sum()))
            if kk == 0:
                break
            (ids, _), secs = timed(
                lambda: idx.knn_query(q, k=kk, num_threads=a.threads, filter=keep), a.repeats)
            ids = np.pad(ids.astype(np.int64), ((0, 0), (0, k - kk)), constant_values=-1)
            emit("hnswlib", pm, f"M=16 efC=200 ef={ef}", ids, gt, secs)
            if recall(ids, gt, k) >= 0.995 or secs > MAX_SECONDS:
                break
    del idx

    import faiss
    faiss.omp_set_num_threads(a.threads)
    fmetric = faiss.METRIC_INNER_PRODUCT if a.metric == "ip" else faiss.METRIC_L2
    idx = faiss.IndexHNSWFlat(d, 32, fmetric)
    idx.hnsw.efConstruction = 200
    idx.add(base)
    for pm, mask, gt in cases:
        sel = faiss.IDSelectorBitmap(np.packbits(mask, bitorder="little"))
        for ef in efs:
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)
            (_, ids), secs = timed(lambda: idx.search(q, k, params=params), a.repeats)
            emit("faiss-hnsw32", pm, f"HNSW32 efC=200 efSearch={ef}", ids, gt, secs)
            if recall(ids, gt, k) >= 0.995 or secs > MAX_SECONDS:
                break


if __name__ == "__main__":
    main()
