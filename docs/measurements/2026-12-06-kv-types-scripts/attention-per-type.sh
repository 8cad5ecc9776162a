#!/usr/bin/env bash
# Issue 37: the decode step's attention dispatch alone (m 1, the default split-KV schedule) of
# the tiny Qwen2 shape (4/2 heads of 64) at KV 2048 and 8192, f16 against q8_0 (K and V alike),
# types alternated ROUNDS times, `rocky bench-attention --runs 20` each (GPU timestamps).
# Usage: attention-per-type.sh ROCKY OUTDIR [ROUNDS]
set -euo pipefail
ROCKY=$1; OUT=$2; ROUNDS=${3:-3}
mkdir -p "$OUT"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
for round in $(seq "$ROUNDS"); do
  for t in f16 q8_0; do
    "$ROCKY" bench-attention --m 1 --kv 2048,8192 --heads 4 --kv-heads 2 --head-dim 64 \
      -ctk $t -ctv $t --runs 20 --db /nonexistent.sled --json > "$OUT/round$round-$t.json"
    echo "$(date +%T) round $round $t load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/progress.txt"
  done
done
