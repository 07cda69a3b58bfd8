"""The Python layer's overhead over the Rust call it wraps, at batch 10,000
and batch 1 (CPU, default parameters): the same search timed from Python and
inside Rust (`Index._rust_search_seconds`, no Python in the loop).

    python examples/python/overhead.py [data/glove-50]
"""

import os
import sys
import time

import numpy as np

import octex

sys.path.insert(0, os.path.dirname(__file__))
from glove_demo import read_vecs  # noqa: E402


def per_call(f, reps):
    f()
    t = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t) / reps


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "data/glove-50"
    base = read_vecs(os.path.join(data, "base.fvecs"), np.float32)
    queries = read_vecs(os.path.join(data, "query.fvecs"), np.float32)
    index = octex.build(base, metric="cosine", backend="cpu", progress=False)
    for batch, reps in [(10_000, 5), (1, 2_000)]:
        q = np.ascontiguousarray(queries[:batch])
        rust = min(index._inner._rust_search_seconds(q, 10, reps) for _ in range(3))
        py = min(per_call(lambda: index.search(q, 10, backend="cpu"), reps) for _ in range(3))
        print(f"batch {batch}: Rust {rust * 1e6:.1f} us/call, Python {py * 1e6:.1f} us/call, "
              f"overhead {(py - rust) * 1e6:.1f} us ({100 * (py / rust - 1):.1f}%)")


if __name__ == "__main__":
    main()
