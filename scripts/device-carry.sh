#!/usr/bin/env bash
# Lays out the folders that carry binaries and data to the lent GPU machine,
# one folder per device call, numbered in the order the calls must run:
# .carry-1, .carry-2, ... Each holds at most what one call may carry beside
# the work tree (64 MiB in all; the room left is measured from the tree as
# it is now, so run this after the last commit before the calls).
#
#   scripts/device-carry.sh [ITEM...]     (default: every item that is here)
#
# Items, packed in the order given, each folder filled before the next:
#   bin            release binaries (scripts/device-pack.sh)
#   site           cuVS 26.6 for `bench --peers` (../shared/tools/cuvs; made
#                  in /tmp/cuvs-site when missing)
#   fashion-mnist, glove-50, synth-1m, ...   a data set of data/ (what
#                  `cargo xtask fetch` or `synth` left there), as a bundle
#   text           the text set's passages and the MiniLM model
#                  (data/downloads/debian-docs), embedded on the machine by
#                  the `text` step of scripts/device-run.sh
# A data bundle is an xz'd tar cut into pieces that fill each folder's room;
# scripts/device-run.sh unpacks it under /tmp/octex/data when its last piece
# has come. /tmp lasts while the machine stays warm (30 s idle), so the calls
# follow each other at once.
#
# Each folder gets common.sh (scripts/device-lib.sh) and a run.sh that
# unpacks what came; add the call's steps to it. A call is
#   export OUT; rm -rf .carry && cp -r .carry-N .carry && bash .carry/run.sh
# with carry [".carry-N"].
set -euo pipefail
cd "$(dirname "$0")/.."
data=${OCTEX_DATA:-data}
items=("$@")
if [ ${#items[@]} -eq 0 ]; then
  items=(bin site)
  for d in "$data"/*/manifest.json; do [ -e "$d" ] && items+=("$(basename "$(dirname "$d")")"); done
  [ -f "$data/downloads/debian-docs/model/model.safetensors" ] && items+=(text)
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Each staged item is a file in $stage/N-NAME/ (N: its place in the order);
# a bundle's file is NAME.tar.xz, cut into pieces below.
n=0
for item in "${items[@]}"; do
  n=$((n + 1))
  dir="$stage/$(printf %02d $n)-$item"
  mkdir -p "$dir"
  case "$item" in
    bin)
      bash scripts/device-pack.sh >/dev/null
      mv .carry/bin.tar.xz "$dir/" ;;
    site)
      site=${OCTEX_CUVS_SITE:-/tmp/cuvs-site}
      [ -f "$site/site.tar.xz" ] || bash ../shared/tools/cuvs/make-site.sh "$site" >/dev/null
      cp "$site/site.tar.xz" "$dir/"
      cp ../shared/tools/cuvs/env.sh "$dir/cuvs-env.sh" ;;
    text)
      [ -f "$data/downloads/debian-docs/base.txt" ] || { echo "no text passages: cargo xtask fetch debian-docs-minilm first" >&2; exit 1; }
      tar -cf - -C "$data" downloads/debian-docs/base.txt downloads/debian-docs/query.txt \
        downloads/debian-docs/packages.txt downloads/debian-docs/model \
        | xz -T0 -6 > "$dir/text.tar.xz" ;;
    *)
      [ -f "$data/$item/manifest.json" ] || { echo "no data set $data/$item (fetch it first)" >&2; exit 1; }
      tar -cf - -C "$data" "$item" | xz -T0 -6 > "$dir/$item.tar.xz" ;;
  esac
done

# The work tree's bytes (tracked files and untracked ones not ignored).
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
room=$(( (64 << 20) - tree - (1 << 20) ))
rm -rf .carry-[0-9]*
python3 - "$stage" "$room" <<'PY'
import os, sys
stage, room = sys.argv[1], int(sys.argv[2])
folders = []  # [free bytes, {name: bytes}]

def folder(need):
    if not folders or folders[-1][0] < need:
        folders.append([room, {}])
    return folders[-1]

for item in sorted(os.listdir(stage)):
    d = os.path.join(stage, item)
    files = sorted(os.listdir(d))
    if item.split("-", 1)[1] not in ("bin", "site"):
        # A bundle: pieces that fill the room, the first one what is left of
        # the current folder (if at least 1 MiB).
        path = os.path.join(d, files[0])
        name = files[0][: -len(".tar.xz")]
        size, done, pieces = os.path.getsize(path), 0, []
        with open(path, "rb") as src:
            while done < size:
                f = folder(1 << 20)
                take = min(f[0], size - done)
                part = f"{name}.tar.xz.part{len(pieces):02d}"
                f[1][part] = (path, done, take)
                f[0] -= take
                done += take
                pieces.append(f)
        for f in pieces:
            f[1][f"{name}.pieces"] = str(len(pieces)).encode()
    else:
        need = sum(os.path.getsize(os.path.join(d, x)) for x in files)
        if need > room:
            sys.exit(f"{item}: {need} bytes, more than one call's room ({room})")
        f = folder(need)
        for x in files:
            f[1][x] = (os.path.join(d, x), 0, os.path.getsize(os.path.join(d, x)))
        f[0] -= need

for i, (free, content) in enumerate(folders, 1):
    out = f".carry-{i}"
    os.makedirs(out)
    for name, what in content.items():
        with open(os.path.join(out, name), "wb") as dst:
            if isinstance(what, bytes):
                dst.write(what)
                continue
            path, start, length = what
            with open(path, "rb") as src:
                src.seek(start)
                while length:
                    chunk = src.read(min(length, 1 << 24))
                    dst.write(chunk)
                    length -= len(chunk)
    with open(os.path.join(out, "run.sh"), "w") as run:
        run.write("#!/bin/bash\n# Carries: " + ", ".join(sorted(content)) + "\n")
        run.write(f"TAG=carry-{i}; source .carry/common.sh\n")
        run.write("bash scripts/device-run.sh > $OUT/setup.log 2>&1\n")
        run.write("# The call's steps go here (device-lib.sh: tests, bench, quick, variants).\n")
    print(f"{out}: {room - free} of {room} bytes: {', '.join(sorted(content))}")
PY
for f in .carry-[0-9]*; do cp scripts/device-lib.sh "$f/common.sh"; done
