#!/bin/bash
# Split-KV decode measurement on lavapipe (see docs/measurements/2026-12-05-split-kv-decode.md)
set -x
export XDG_RUNTIME_DIR=$(mktemp -d)
cd /work/wt-splitkv
R=./target/debug/rocky
M=/tmp/skv/qwen05-q4km.gguf
[ -f $M ] || $R synth --shape qwen2.5-0.5b --quant q4_k_m --seed 1 -o $M
IDS=$(python3 -c "print(','.join(str((i*7919+13)%50000+10) for i in range(2048)))")
uptime
for run in off default 8; do
  case $run in off) E=0;; default) E=;; 8) E=8;; esac
  ROCKY_KV_SPLITS=$E ROCKY_DB=/tmp/skv/none.sled $R generate $M --token-ids $IDS -n 33 --temp 0 --json > /tmp/skv/rocky-$run.json 2>/tmp/skv/rocky-$run.err
  python3 -c "import json;d=json.load(open('/tmp/skv/rocky-$run.json'));print('$run', {k:v for k,v in d.items() if 'second' in k or k in ('token_ids',)})"
  uptime
done
GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_COOPMAT=1 GGML_VK_DISABLE_COOPMAT2=1 \
  /tmp/llama/bin/llama-bench -m $M -p 0 -n 32 -d 2048 -r 1 -o md > /tmp/skv/llama.md 2>/tmp/skv/llama.err
cat /tmp/skv/llama.md
uptime
