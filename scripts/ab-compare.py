#!/usr/bin/env python3
"""Compare the quick-grid runs of an A/B on the GPU machine.

`abv SET INDEX V1 V2 ...` of scripts/device-lib.sh runs the quick grid of
each variant's binary twice, interleaved, into ab-V1-SET.json, ab-V2-SET.json
and so on (`variants` writes v-NAME-SET.json, once each). This prints, against
the first variant: the median QPS ratio over the grid (and at W = 1, W >= 3),
its range, the median batch-100 latency ratio, and the best QPS and lowest
batch-100 latency at recall 0.95, 0.99 and 0.995. The first variant's second
run against its first gives the noise.

  python3 scripts/ab-compare.py DIR SET main,lock          # ab-*-SET.json, two runs each
  python3 scripts/ab-compare.py --once DIR SET one,two     # v-*-SET.json, one run each
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        points = json.load(f)["points"]
    key = lambda p: (p["params"]["read_depth"], p["params"]["start_points"], p["params"]["waves"], p["params"]["rerank"])
    return {key(p): p for p in points if p["system"] == "octex GPU"}


def main():
    args = sys.argv[1:]
    once = args[0] == "--once"
    if once:
        args = args[1:]
    folder, data, names = args[0], args[1], args[2].split(",")
    if once:
        runs = {v: [load(f"{folder}/v-{v}-{data}.json")] for v in names}
    else:
        runs = {v: [load(f"{folder}/ab-{v}{rep}-{data}.json") for rep in (1, 2)] for v in names}
    base = names[0]
    keys = sorted(set.intersection(*(set(r[0]) for r in runs.values())))
    qps = lambda v, k: statistics.mean(r[k]["qps"] for r in runs[v])
    lat = lambda v, k: statistics.mean(r[k]["latency100_device_ms"] for r in runs[v])
    rec = lambda v, k: runs[v][0][k]["recall"]
    if not once:
        noise = statistics.median(runs[base][1][k]["qps"] / runs[base][0][k]["qps"] for k in keys)
        print(f"{data}: {len(keys)} points; noise ({base} run 2 / run 1) median {noise:.3f}")
    for v in names[1:]:
        ratio = [qps(v, k) / qps(base, k) for k in keys]
        w1 = [qps(v, k) / qps(base, k) for k in keys if k[2] == 1] or [float("nan")]
        w3 = [qps(v, k) / qps(base, k) for k in keys if k[2] >= 3] or [float("nan")]
        lat_ratio = statistics.median(lat(v, k) / lat(base, k) for k in keys)
        print(f"{v} / {base}: QPS median {statistics.median(ratio):.3f} (W1 {statistics.median(w1):.3f}, "
              f"W>=3 {statistics.median(w3):.3f}), min {min(ratio):.3f}, max {max(ratio):.3f}; "
              f"batch-100 latency median {lat_ratio:.3f}")
        for target in (0.95, 0.99, 0.995):
            best = lambda n: max((qps(n, k) for k in keys if rec(n, k) >= target), default=0.0)
            low = lambda n: min((lat(n, k) for k in keys if rec(n, k) >= target), default=float("nan"))
            b0, b1 = best(base), best(v)
            share = f"{b1 / b0:.3f}" if b0 else "-"
            print(f"  {target}: best {b0 / 1e6:.2f}M -> {b1 / 1e6:.2f}M ({share}); "
                  f"batch-100 {low(base):.4f} -> {low(v):.4f} ms")


if __name__ == "__main__":
    main()
