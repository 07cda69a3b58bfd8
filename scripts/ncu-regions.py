#!/usr/bin/env python3
"""Where a kernel's time went, by region between block barriers.

Reads the per-instruction (SASS) counters that `profile:` of
scripts/device-run.sh brings back (prof-*.sass.csv.xz, from
`ncu --page source --print-source sass --csv`), cuts the code at every
BAR.SYNC and EXIT, and prints the regions with the most stall samples: their
share of samples and of executed instructions, the active threads per warp,
the commonest opcodes and the leading stall reasons.

  python3 scripts/ncu-regions.py PROFILE.sass.csv.xz [TOP]
"""
import csv
import lzma
import sys


def number(row, ix, name):
    try:
        return float(row[ix[name]].replace(",", ""))
    except (ValueError, KeyError):
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header, data = rows[1], rows[2:]
    ix = {n: i for i, n in enumerate(header)}
    samples = "Warp Stall Sampling (All Samples)"
    executed = "Instructions Executed"
    stalls = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    total_samples = sum(number(r, ix, samples) for r in data) or 1
    total_instr = sum(number(r, ix, executed) for r in data) or 1
    print(f"{len(data)} SASS instructions, {total_samples:.0f} stall samples, {total_instr:.3g} warp instructions")
    regions, current = [], []
    for r in data:
        current.append(r)
        if "BAR" in r[ix["Source"]] or "EXIT" in r[ix["Source"]]:
            regions.append(current)
            current = []
    regions.append(current)
    out = []
    for n, region in enumerate(regions):
        s = sum(number(r, ix, samples) for r in region)
        i = sum(number(r, ix, executed) for r in region)
        threads = sum(number(r, ix, "Thread Instructions Executed") for r in region) / max(i, 1)
        ops = {}
        for r in region:
            words = r[ix["Source"]].split()
            if not words:
                continue
            op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
            ops[op] = ops.get(op, 0) + number(r, ix, executed)
        common = sorted(ops.items(), key=lambda x: -x[1])[:5]
        leading = sorted(((sum(number(r, ix, k) for r in region), k[6:]) for k in stalls), reverse=True)[:3]
        out.append((s, n, region[0][ix["Address"]], len(region), i, threads, common, leading))
    print("region  first address       length  samples  instructions  threads/warp | opcodes | stalls")
    for s, n, addr, length, i, threads, common, leading in sorted(out, reverse=True)[:top]:
        opcodes = " ".join(f"{o}:{100 * c / max(i, 1):.0f}%" for o, c in common)
        reasons = " ".join(f"{k} {100 * v / max(s, 1):.0f}%" for v, k in leading)
        print(f"{n:6d}  {addr:18s} {length:7d}  {100 * s / total_samples:6.1f}%  {100 * i / total_instr:11.1f}%  {threads:12.1f} | {opcodes} | {reasons}")


if __name__ == "__main__":
    main()
