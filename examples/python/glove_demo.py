"""The GloVe-50 demo in Python: what `cargo xtask demo` does, through the
`octex` package, with the same parameters (default build, default search,
k = 10), so it prints the same recall.

    cargo xtask fetch glove-50          # data/glove-50: base, queries, ground truth
    pip install ./python
    python examples/python/glove_demo.py [data/glove-50] [--backend cpu]
"""

import argparse
import os
import time

import numpy as np

import octex


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    dim = raw[0]
    return raw.reshape(-1, dim + 1)[:, 1:].view(dtype).copy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default="data/glove-50")
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    base = read_vecs(os.path.join(args.data, "base.fvecs"), np.float32)
    queries = read_vecs(os.path.join(args.data, "query.fvecs"), np.float32)
    gt = read_vecs(os.path.join(args.data, "gt.ivecs"), np.int32)[:, :10]
    print(f"glove-50: {len(base)} vectors, {len(queries)} queries, dimension {base.shape[1]}, cosine; "
          f"backend {args.backend}, GPU available: {octex.gpu_available()}")

    t = time.perf_counter()
    index = octex.build(base, metric="cosine", backend=args.backend, progress=True)
    print(f"built in {time.perf_counter() - t:.1f} s, {index.nbytes / len(base):.0f} bytes per vector")

    index.search(queries[:1000], k=10, backend=args.backend)  # warm-up
    t = time.perf_counter()
    ids, _ = index.search(queries, k=10, backend=args.backend)
    secs = time.perf_counter() - t
    recall = np.mean([len(set(row) & set(truth)) / 10 for row, truth in zip(ids, gt)])
    print(f"octex (defaults): recall@10 {recall:.4f}, {len(queries) / secs:.0f} QPS")


if __name__ == "__main__":
    main()
