#!/usr/bin/env python3
"""One Markdown table from `cargo xtask bench --peers --recall 0.95 --recall 0.99`
results (results.json files): per data set, octex's defaults and tuned points
with the recall each reached and its QPS as a ratio of the best peer's at that
recall, and the build times.

    scripts/bench-table.py bench-out/*/results.json
"""
import json
import sys


def cell(chosen, role):
    for c in chosen:
        if c.get("role") == role:
            ratio = c.get("ratio")
            r = f"{ratio:.2f}x" if ratio is not None else "no peer reaches it"
            return f"{c['recall']:.4f}, {c['qps']:,.0f} QPS ({r})"
    return "-"


def main(paths):
    print("| set | n x d | defaults | recall=0.95 | recall=0.99 | build: octex / hnswlib |")
    print("| --- | --- | --- | --- | --- | --- |")
    for p in paths:
        r = json.load(open(p))
        ds = r["dataset"]
        chosen = r.get("chosen", [])
        hnsw = [b for b in r.get("peer_builds", []) if b.get("build") == "hnswlib"]
        ours = r.get("build", {}).get("seconds")
        build = "-"
        if ours is not None and hnsw:
            build = f"{ours:.1f} s / {hnsw[0]['build_seconds']:.1f} s"
        print(
            f"| {ds.get('name', p)} | {ds.get('base', '?')} x {ds.get('dim', '?')} "
            f"| {cell(chosen, 'defaults')} | {cell(chosen, 'recall=0.95')} "
            f"| {cell(chosen, 'recall=0.99')} | {build} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
