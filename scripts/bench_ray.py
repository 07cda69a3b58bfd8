"""octex.ray measured on a local Ray cluster: a sharded index built by Ray
tasks and searched by Ray actors, against one index of the same data in one
process.

    python scripts/bench_ray.py --n 200000 --shards 4 --cpus 2
    python scripts/bench_ray.py --n 1000000 --shards 4 --gpus 1 --batch 500 10000 --no-serve

Prints build time per shard and in all, recall@10 against exact, QPS of
batched searches with 1 and 2 actors per shard against the same shards
searched in the calling process (the cost of fan-out and merge), and the
p50/p99 latency of single queries through a Ray Serve application.
With ``--gpus G`` the Ray cluster has G GPUs, each build task and actor asks
for G/shards of one (so the shards share the GPUs), and the one-index
comparison builds and searches on the GPU too.
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
    ap.add_argument("--batch", type=int, nargs="+", default=[500], help="batch sizes of the QPS runs")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs of the Ray cluster, shared by the shards")
    ap.add_argument("--no-serve", action="store_true", help="skip the Ray Serve latency")
    args = ap.parse_args()
    base = mixture(args.n, args.dim, 1)
    queries = mixture(args.queries, args.dim, 2)
    truth, _ = octex.knn(queries, base, 10)
    ray.init(num_cpus=args.cpus, num_gpus=args.gpus, include_dashboard=False, log_to_driver=False)
    resources = {"num_gpus": args.gpus / args.shards} if args.gpus else None
    backend = "gpu" if args.gpus else "cpu"
    print(f"{args.n} x {args.dim}, {args.shards} shards, {args.cpus} CPUs, {args.gpus} GPUs "
          f"(GPU usable here: {octex.gpu_available()}), Ray {ray.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/index"
        t = time.perf_counter()
        index = oray.build(base, metric="l2", shards=args.shards, path=path, resources=resources)
        print(f"build through Ray: {time.perf_counter() - t:.1f} s for {args.shards} shards "
              f"({args.shards / max(args.gpus or args.cpus, 1):.1f} shards per {'GPU' if args.gpus else 'CPU'}; tasks run side by side)")
        local = octex.ShardedIndex.load(path)
        t = time.perf_counter()
        one = octex.build(base, "l2", backend="auto", progress=False)
        print(f"one index of all {args.n}: built in {time.perf_counter() - t:.1f} s (same machine)")
        r_ray = recall(index.search(queries, 10)[0], truth)
        r_local = recall(local.search(queries, 10)[0], truth)
        r_one = recall(one.search(queries, 10)[0], truth)
        print(f"recall@10 (defaults): {args.shards} shards through Ray {r_ray:.4f}, "
              f"the same shards in this process {r_local:.4f}, one index {r_one:.4f}")
        for batch in args.batch:
            q_one = qps(lambda q: one.search(q, 10, backend=backend), queries, batch)
            q_local = qps(lambda q: local.search(q, 10, backend=backend), queries, batch)
            q_ray = qps(lambda q: index.search(q, 10), queries, batch)
            print(f"QPS at batch {batch}: one index {q_one:,.0f}; shards in this process "
                  f"{q_local:,.0f}; shards through Ray, 1 actor each {q_ray:,.0f} "
                  f"(fan-out and merge cost {1e3 * batch * (1 / q_ray - 1 / q_local):.1f} ms a batch)")
        index.close()
        two = oray.ShardedIndex.load(path, replicas=2, resources=resources and {"num_gpus": resources["num_gpus"] / 2})
        for batch in args.batch:
            q_two = qps(lambda q: two.search(q, 10), queries, batch)
            print(f"shards through Ray, 2 actors each (one batch at a time), batch {batch}: {q_two:,.0f} QPS")
        two.close()
        if args.no_serve:
            ray.shutdown()
            return
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
