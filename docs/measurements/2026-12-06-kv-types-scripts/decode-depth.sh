#!/usr/bin/env bash
# Issue 37: decode at depth 2048 and 8192 with an f16 and a q8_0 KV cache (K and V alike) on
# a tiny Qwen2-shaped model (4 layers, hidden 256, 4/2 heads of 64), greedy, STEPS decode
# steps per run (default 64), types alternated, REPS runs each at each of DEPTHS (default
# "2048 8192"); each run through cpu_step.py (the process's CPU time over the decode window
# beside rocky's wall-clock tok/s). Then one `--profile --json` run per type at the last depth
# (GPU time per decode step by op).
# Token ids 100 + i·7919 mod ID_MOD (default 150000; 31000 for a 32k vocabulary).
# Usage: [ID_MOD=N] decode-depth.sh ROCKY MODEL OUT.jsonl [REPS]
set -euo pipefail
ROCKY=$1; MODEL=$2; OUT=$3; REPS=${4:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
STEPS=${STEPS:-64}
for depth in ${DEPTHS:-2048 8192}; do
  ids=$(python3 -c "print(','.join(str(100 + i * 7919 % ${ID_MOD:-150000}) for i in range($depth)))")
  for rep in $(seq "$REPS"); do
    for t in f16 q8_0; do
      r=$(python3 "$HERE/cpu_step.py" "$ROCKY" generate "$MODEL" --token-ids "$ids" -n $((STEPS + 1)) --temp 0 \
        --ctx $((depth + STEPS + 16)) -ctk $t -ctv $t --db /nonexistent.sled)
      echo "{\"depth\": $depth, \"type\": \"$t\", \"rep\": $rep, \"r\": $r}" >> "$OUT"
    done
  done
done
for t in f16 q8_0; do
  "$ROCKY" generate "$MODEL" --token-ids "$ids" -n 17 --temp 0 --ctx $((depth + 80)) \
    -ctk $t -ctv $t --db /nonexistent.sled --profile --json > "${OUT%.jsonl}-profile-$depth-$t.json"
done
