#!/usr/bin/env bash
# The CPU's disk tier: one search of INDEX in a memory cgroup of LIMIT bytes
# (cgroup v1 memory controller, root), the page cache dropped first; the
# search is told HOST_MEM (the placement plan then reads the rerank vectors
# from the file on demand). Prints xtask search's JSON (QPS, recall,
# resident MiB) and the cgroup's peak.
#
#   scripts/bench-tiers.sh LIMIT|none HOST_MEM|none INDEX QUERIES GT [search flags...]
#   scripts/bench-tiers.sh 250000000 120MiB idx.octex q.fvecs gt.ivecs --rerank 32
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$1 host=$2 index=$3 queries=$4 gt=$5
shift 5
cg=/sys/fs/cgroup/memory/octex-tiers
mkdir -p "$cg"
sync
echo 3 > /proc/sys/vm/drop_caches
if [ "$limit" = none ]; then echo -1 > "$cg/memory.limit_in_bytes"; else echo "$limit" > "$cg/memory.limit_in_bytes"; fi
echo 0 > "$cg/memory.max_usage_in_bytes"
mem=()
[ "$host" = none ] || mem=(--host-mem "$host")
sh -c "echo \$\$ > $cg/cgroup.procs; exec target/release/xtask search --backend cpu --index $index --queries $queries --gt $gt ${mem[*]} $*" | tail -1
echo "cgroup peak $(( $(cat "$cg/memory.max_usage_in_bytes") / 1048576 )) MiB (limit $limit, plan for $host)"
