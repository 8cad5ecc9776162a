# Call C (2026-12-05b): issue 16's figures on the lent NVIDIA GPU (an H100 80GB HBM3 on 2026-12-05), side by side with llama.cpp in one call, on the
# synthesized Qwen2.5-0.5B Q4_K_M file: decode tok/s (rocky generate, default schedules, against
# llama-bench tg at depth 0 and 2048; split-KV and GEMV off for comparison), prefill pp512 for
# context, and the agent turns (rocky serve against llama-server, prompt cache on, 6 turns
# growing to ~3k tokens). Staging: .device/ holds rocky (stripped release build of this commit),
# llama-bench.xz and llama-server.xz (pinned llama.cpp), ggml-vocab-qwen2.gguf, the 0.5B tuned
# records (2026-12-03d callD) and these scripts; .gl/ the Vulkan loader debs.
# Run: OUT=$OUT bash .device/callC.sh, carry [".gl", ".device"].
source .device/common.sh
$R db import $D/tuned-05b.jsonl --db t05.sled 2>&1 | tail -1
t "llama.cpp decode (tg64 at depth 0 and 2048) and prefill"
lb -m q05.gguf -p 0 -n 64 -d 0,2048 -r 2; lb -m q05.gguf -p 512 -ub 512 -n 0 -r 3
gen() { # LABEL MODEL PROMPT_TOKENS ENV...
  l=$1 m=$2 n=$3; shift 3
  env "$@" ROCKY_DB=/tmp/none.sled timeout 60 $R generate $m.gguf --token-ids $(ids $n) -n 65 --temp 0 --ctx 4096 --json 2>$OUT/gen-$l.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'prefill %.0f tok/s' % d['prefill_tokens_per_second'], 'decode %.1f tok/s' % d['decode_tokens_per_second'])" || echo "$l failed: $(tail -2 $OUT/gen-$l.err)"
}
t "rocky decode (generate, 64 tokens after the prompt)"
gen d0 q05 8; gen d2048 q05 2048; gen d2048-nosplit q05 2048 ROCKY_KV_SPLITS=0; gen d0-gemm q05 8 ROCKY_GEMV=0; gen d2048-again q05 2048
t "rocky prefill"; rb q05.gguf -p 512 -ub 512 -r 3 --backends tuned,default --db t05.sled
t "agent turns"; cd $ROOT; ROCKY=$R LLAMA=/tmp THREADS=16 timeout 220 bash docs/measurements/2026-12-04-agent-turns-scripts/run.sh $OUT/turns /tmp/q05.gguf > $OUT/turns.log 2>&1; echo "rc $?"; cat $OUT/turns/rocky.md $OUT/turns/llama.md 2>/dev/null | tail -30; cd /tmp
t "llama.cpp decode round 2"; lb -m q05.gguf -p 0 -n 64 -d 0,2048 -r 2
t done
