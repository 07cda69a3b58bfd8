"""octex.ray measured on a local Ray cluster: a sharded index built by Ray
tasks and searched by Ray actors, against one index of the same data in one
process.

    python scripts/bench_ray.py --n 200000 --shards 4 --cpus 2

Prints build time per shard and in all, recall@10 against exact, QPS of
batched searches with 1 and 2 actors per shard against the same shards
searched in the calling process (the cost of fan-out and merge), and the
p50/p99 latency of single queries through a Ray Serve application.
"""

import argparse
import os
import tempfile
import time

import numpy as np
import ray

import octex
import octex.ray as oray


def mixture(n, dim, seed):
    rng = np.random.default_rng(seed)
    decay = 1.0 / (1.0 + np.arange(dim) / 8.0)
    centres = 4.0 * rng.normal(size=(64, dim)) * decay
    picks = rng.integers(0, 64, n)
    return (centres[picks] + rng.normal(size=(n, dim)) * decay).astype(np.float32)


def recall(found, truth):
    return np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)])


def qps(fn, queries, batch, repeats=3):
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        for a in range(0, len(queries), batch):
            fn(queries[a : a + batch])
        best = max(best, len(queries) / (time.perf_counter() - t))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=os.cpu_count())
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    base = mixture(args.n, args.dim, 1)
    queries = mixture(args.queries, args.dim, 2)
    truth, _ = octex.knn(queries, base, 10)
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    print(f"{args.n} x {args.dim}, {args.shards} shards, {args.cpus} CPUs, Ray {ray.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/index"
        t = time.perf_counter()
        index = oray.build(base, metric="l2", shards=args.shards, path=path)
        print(f"build through Ray: {time.perf_counter() - t:.1f} s for {args.shards} shards "
              f"({args.shards / args.cpus:.1f} shards per CPU; tasks run side by side)")
        local = octex.ShardedIndex.load(path)
        t = time.perf_counter()
        one = octex.build(base, "l2", progress=False)
        print(f"one index of all {args.n}: built in {time.perf_counter() - t:.1f} s (same machine)")
        r_ray = recall(index.search(queries, 10)[0], truth)
        r_local = recall(local.search(queries, 10)[0], truth)
        r_one = recall(one.search(queries, 10)[0], truth)
        print(f"recall@10 (defaults): {args.shards} shards through Ray {r_ray:.4f}, "
              f"the same shards in this process {r_local:.4f}, one index {r_one:.4f}")
        q_one = qps(lambda q: one.search(q, 10, backend="cpu"), queries, args.batch)
        q_local = qps(lambda q: local.search(q, 10), queries, args.batch)
        q_ray = qps(lambda q: index.search(q, 10), queries, args.batch)
        print(f"QPS at batch {args.batch}: one index {q_one:,.0f}; shards in this process "
              f"{q_local:,.0f}; shards through Ray, 1 actor each {q_ray:,.0f} "
              f"(fan-out and merge cost {1e3 * args.batch * (1 / q_ray - 1 / q_local):.1f} ms a batch)")
        index.close()
        two = oray.ShardedIndex.load(path, replicas=2)
        q_two = qps(lambda q: two.search(q, 10), queries, args.batch)
        print(f"shards through Ray, 2 actors each (one batch at a time): {q_two:,.0f} QPS")
        two.close()
        from ray import serve

        handle = serve.run(oray.serve_app(path), name="octex", route_prefix=None)
        lat = []
        for q in queries[:300]:
            t = time.perf_counter()
            handle.search.remote([q.tolist()], 10).result()
            lat.append(time.perf_counter() - t)
        lat = np.array(lat[20:]) * 1e3
        print(f"Serve, one query a call: p50 {np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms")
        serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
