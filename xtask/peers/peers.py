#!/usr/bin/env python3
"""Peer ANN libraries for `cargo xtask bench --peers`, timed the same way as octex.

Reads fvecs/ivecs, builds each peer, sweeps its search parameter, and prints one
JSON object per line: {"system", "params", "recall", "qps", "seconds", "build_seconds"}.
Throughput is the median of --repeats timed runs after one warm-up, over the
whole query set as one batch, on --threads threads.
"""
import argparse, json, os, sys, tempfile, time

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


def load_inputs(base_path, query_path, metric):
    """Base and queries as float32, normalised for cosine (the peers' space)."""
    base = read_vecs(base_path, np.float32)
    q = read_vecs(query_path, np.float32)
    if metric == "cosine":
        base = base / np.linalg.norm(base, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return base, q


def peak_rss_mib():
    # VmHWM belongs to this process's address space; ru_maxrss would carry the
    # high-water mark of the forked parent across exec.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return None


def recall(ids, gt, k):
    hits = 0
    for r, g in zip(ids, gt):
        hits += len(set(r[:k].tolist()) & set(g[:k].tolist()))
    return hits / (len(gt) * k)


def timed(fn, repeats):
    fn()  # warm-up
    times = []
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, float(np.median(times))


def emit(system, params, ids, gt, k, secs, build, nq):
    print(json.dumps({"system": system, "params": params, "recall": recall(ids, gt, k),
                      "qps": nq / secs, "seconds": secs, "build_seconds": build}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--gt", required=True)
    ap.add_argument("--metric", default="l2", choices=["l2", "cosine", "ip"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="hnswlib,faiss-hnsw,faiss-ivf,faiss-flat")
    ap.add_argument("--build-only", action="store_true", help="time the builds, skip the sweeps")
    a = ap.parse_args()
    base, q = load_inputs(a.base, a.queries, a.metric)
    gt = read_vecs(a.gt, np.int32)
    n, d = base.shape
    nq = q.shape[0]
    k = a.k
    systems = a.systems.split(",")
    efs = [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768]

    if "hnswlib" in systems:
        import hnswlib
        space = "ip" if a.metric == "ip" else "l2"
        idx = hnswlib.Index(space=space, dim=d)
        t = time.perf_counter()
        idx.init_index(max_elements=n, M=16, ef_construction=200, random_seed=1)
        idx.add_items(base, num_threads=a.threads)
        build = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "h.bin")
            idx.save_index(path)
            size = os.path.getsize(path)
        rss = peak_rss_mib()
        print(json.dumps({"build": "hnswlib", "params": "M=16 efC=200", "build_seconds": build,
                          "peak_rss_mib_with_data": rss, "index_bytes": size,
                          "bytes_per_vector": size / n}), flush=True)
        if not a.build_only:
            for ef in efs:
                if ef < k:
                    continue
                idx.set_ef(ef)
                (ids, _), secs = timed(lambda: idx.knn_query(q, k=k, num_threads=a.threads), a.repeats)
                emit("hnswlib", f"M=16 efC=200 ef={ef}", ids, gt, k, secs, build, nq)
        del idx

    import faiss
    faiss.omp_set_num_threads(a.threads)
    fmetric = faiss.METRIC_INNER_PRODUCT if a.metric == "ip" else faiss.METRIC_L2
    if "faiss-hnsw" in systems and not a.build_only:
        idx = faiss.IndexHNSWFlat(d, 32, fmetric)
        idx.hnsw.efConstruction = 200
        t = time.perf_counter()
        idx.add(base)
        build = time.perf_counter() - t
        for ef in efs:
            if ef < k:
                continue
            idx.hnsw.efSearch = ef
            (_, ids), secs = timed(lambda: idx.search(q, k), a.repeats)
            emit("faiss-hnsw32", f"HNSW32 efC=200 efSearch={ef}", ids, gt, k, secs, build, nq)
        del idx
    if "faiss-ivf" in systems and not a.build_only:
        nlist = int(4 * np.sqrt(n))
        quant = faiss.IndexFlat(d, fmetric)
        idx = faiss.IndexIVFFlat(quant, d, nlist, fmetric)
        t = time.perf_counter()
        idx.train(base)
        idx.add(base)
        build = time.perf_counter() - t
        for nprobe in [1, 2, 4, 8, 16, 32, 64, 128]:
            idx.nprobe = nprobe
            (_, ids), secs = timed(lambda: idx.search(q, k), a.repeats)
            emit("faiss-ivf-flat", f"nlist={nlist} nprobe={nprobe}", ids, gt, k, secs, build, nq)
        del idx
    if "faiss-flat" in systems and not a.build_only:
        idx = faiss.IndexFlat(d, fmetric)
        idx.add(base)
        (_, ids), secs = timed(lambda: idx.search(q, k), a.repeats)
        emit("faiss-flat (exact)", "brute force", ids, gt, k, secs, 0.0, nq)


if __name__ == "__main__":
    main()
