# Call L (2026-12-05d): int8-dot GEMV. (1) schedule sweep at the decode shapes: the fma32
# default against int8_dot variants (median of 20 runs after the CPU-reference check);
# (2) decode, old binary (main d44a5ef, f32 GEMVs) against the new one (int8 GEMV default) and
# llama.cpp, 0.5B and 3B Q4_K_M, depth 0 and 2048, two interleaved rounds.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callL.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky; xz -dc .device/rocky-old.xz > /tmp/rocky-old; chmod +x /tmp/rocky-old
source .device/common.sh
k() { # N K W EPI SCHEDULE-JSON LABEL
  r=$(timeout 30 $R kernel --workload "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false,\"epilogue\":\"$4\"}}" ${5:+--schedule "$5"} --runs 20 2>&1 | grep -oE "[0-9.]+ GFLOP/s|[0-9.]+ GB/s|check +failed.*|refused.*|mismatch.*" | tr '\n' ' ')
  echo "$1x$2 $3 $4 $6: $r"
}
sweep() { # N K W EPI
  k $1 $2 $3 $4 "" default
  k $1 $2 $3 $4 '{"gemv":{"threads":64,"cols":2,"chunks_per_thread":8,"vector_width":4,"reduce":"subgroup","accumulate":"f32","math":"fma_f32"}}' f32-t64c2
  for t in 64 128 256; do for c in 1 2 4 8; do for u in 1 2; do
    k $1 $2 $3 $4 "{\"gemv\":{\"threads\":$t,\"cols\":$c,\"chunks_per_thread\":8,\"units_per_thread\":$u,\"vector_width\":1,\"reduce\":\"subgroup\",\"accumulate\":\"f32\",\"math\":\"int8_dot\"}}" "dot8 t$t c$c u$u"
  done; done; done
  for c in 1 2 4 8; do for u in 1 2; do
    k $1 $2 $3 $4 "{\"gemv\":{\"threads\":32,\"cols\":$c,\"chunks_per_thread\":8,\"units_per_thread\":$u,\"vector_width\":1,\"reduce\":\"one_subgroup\",\"accumulate\":\"f32\",\"math\":\"int8_dot\"}}" "dot8 t32onesg c$c u$u"
  done; done
}
t sweep
{ sweep 11008 2048 q4_k swiglu; sweep 2048 11008 q6_k residual; sweep 2048 2048 q4_k residual; sweep 256 2048 q4_k none; sweep 4864 896 q4_k swiglu; sweep 896 4864 q6_k residual; sweep 896 896 q5_0 none; sweep 151936 2048 q6_k none; } > $OUT/sweep.txt 2>&1
t sweep done
python3 - <<'PY' $OUT/sweep.txt
import sys,re,collections
best=collections.defaultdict(list); base={}
for l in open(sys.argv[1]):
    m=re.match(r"(\S+ \S+ \S+) (.+?): ([0-9.]+) GFLOP/s",l)
    if not m: continue
    best[m.group(1)].append((float(m.group(3)),m.group(2)))
for key,v in best.items():
    d=dict((b,a) for a,b in v); v.sort(reverse=True)
    print(key, 'default', d.get('default'), 'f32-t64c2', d.get('f32-t64c2'), 'best', v[:4])
PY
gen() { # LABEL BIN MODEL PROMPT_TOKENS
  l=$1 bin=$2 m=$3 n=$4
  ROCKY_DB=/tmp/none.sled timeout 90 $bin generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], ' '.join('%s %.3f' % kv for kv in d['decode_step_ms'].items()), 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:8])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
t decode; gen warm-new $R q05 8; gen warm-old /tmp/rocky-old q05 8; gen warm-new $R q3 8; gen warm-old /tmp/rocky-old q3 8
for round in 1 2; do
  for m in q05 q3; do
    t "round $round $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0-new $R $m 8; gen $m-d0-old /tmp/rocky-old $m 8; gen $m-d2048-new $R $m 2048; gen $m-d2048-old /tmp/rocky-old $m 2048
  done
done
t done
