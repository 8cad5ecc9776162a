# NOT RUN: the session that wrote these (2026-12-05) was never lent an H200 (8 tries: "no device
# machine could be started", then "no new device machine is lent at present"). Staging: .device/ holds
# rocky (stripped release), llama-bench.xz and llama-server.xz (pinned llama.cpp 0c1e570), the Qwen2
# vocabulary, call K's tuned records of 2026-12-04, spearman.py and these scripts; .gl/ the Vulkan
# loader debs (device README). Run: OUT=$OUT bash .device/callA.sh, carry [".gl", ".device"].
# Call A (2026-12-05): where rocky stands on this host, side by side with llama.cpp in one call:
# prefill (default and call K.s tuned records of 2026-12-04), decode tok/s (generate vs llama-bench tg at
# depth 0 and 2048, split-KV on/off, GEMV on/off), GEMV against GEMM at 1-8 rows per kernel,
# and issue 16's agent turns (rocky serve vs llama-server, 6 turns growing to ~3k tokens).
source .device/common.sh
$R db import $D/tuned-3b-k.jsonl --db t3.sled 2>&1 | tail -1; $R db import $D/tuned-05b-k.jsonl --db t05.sled 2>&1 | tail -1
t "llama.cpp prefill + decode"; for m in q05 q3; do lb -m $m.gguf -p 512 -ub 512,64 -n 0 -r 3; lb -m $m.gguf -p 0 -n 64 -d 0,2048 -r 2; done
t "rocky prefill"; for m in q05:t05 q3:t3; do rb ${m%%:*}.gguf -p 512 -ub 512,64 -r 3 --backends tuned,default --db ${m##*:}.sled; done
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 65 --temp 0 --ctx 4096 --json 2>$OUT/gen-$l.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'prefill %.0f tok/s' % d['prefill_tokens_per_second'], 'decode %.1f tok/s' % d['decode_tokens_per_second'])" || echo "$l failed: $(tail -2 $OUT/gen-$l.err)"
}
t "rocky decode"; for m in q05 q3; do gen $m-d0 $m 8; gen $m-d2048 $m 2048; gen $m-d2048-nosplit $m 2048 ROCKY_KV_SPLITS=0; gen $m-d0-gemm $m 8 ROCKY_GEMV=0; done
t "GEMV vs GEMM per kernel (median of 20 runs, ms)"
for s in "896 896 q5_0" "4864 896 q5_0" "896 4864 q6_k" "2048 2048 q4_k" "11008 2048 q4_k" "2048 11008 q6_k"; do
  set -- $s; for m in 1 2 3 4 6 8; do
    a=$($R kernel --workload "{\"gemv\":{\"m\":$m,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false}}" --runs 20 2>&1 | grep -oE "median [0-9.]+ ms|differs.*" | head -1)
    b=$($R kernel --m $m --n $1 --k $2 --weight $3 --runs 20 2>&1 | grep -oE "median [0-9.]+ ms|differs.*" | head -1)
    echo "n=$1 k=$2 $3 m=$m gemv: $a gemm: $b"; done; done | tee $OUT/gemv-vs-gemm.txt
t "agent turns"; cd $ROOT; ROCKY=$R LLAMA=/tmp THREADS=16 timeout 200 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh $OUT/turns /tmp/q05.gguf > $OUT/turns.log 2>&1; echo "rc $?"; cat $OUT/turns/rocky.md $OUT/turns/llama.md 2>/dev/null | tail -30; cd /tmp
t "llama.cpp prefill round 2"; for m in q05 q3; do lb -m $m.gguf -p 512 -ub 512,64 -n 0 -r 3; done
t done
