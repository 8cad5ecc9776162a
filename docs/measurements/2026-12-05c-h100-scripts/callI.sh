# Call I (2026-12-05c): GEMV schedule sweep on this GPU at the decode shapes (median of 30 runs
# after the CPU-reference check), to choose the desktop default.
source .device/common.sh
sweep() { # N K W EPI
  for t in 64 128 256; do for c in 2 4 8; do for u in 1 2; do
    s="{\"gemv\":{\"threads\":$t,\"cols\":$c,\"chunks_per_thread\":8,\"units_per_thread\":$u,\"vector_width\":4,\"reduce\":\"subgroup\",\"accumulate\":\"f32\",\"math\":\"fma_f32\"}}"
    r=$(timeout 20 $R kernel --workload "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false,\"epilogue\":\"$4\"}}" --schedule "$s" --runs 20 2>&1 | grep -oE "[0-9.]+ GFLOP/s|check +failed.*|refused.*" | head -1)
    echo "$1x$2 $3 $4 t$t c$c u$u: $r"
  done; done; done
  for c in 2 4 8; do for u in 1 2; do
    s="{\"gemv\":{\"threads\":32,\"cols\":$c,\"chunks_per_thread\":8,\"units_per_thread\":$u,\"vector_width\":4,\"reduce\":\"one_subgroup\",\"accumulate\":\"f32\",\"math\":\"fma_f32\"}}"
    r=$(timeout 20 $R kernel --workload "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false,\"epilogue\":\"$4\"}}" --schedule "$s" --runs 20 2>&1 | grep -oE "[0-9.]+ GFLOP/s|check +failed.*|refused.*" | head -1)
    echo "$1x$2 $3 $4 t32onesg c$c u$u: $r"
  done; done
}
{ sweep 11008 2048 q4_k swiglu; sweep 2048 11008 q6_k residual; sweep 2048 2048 q4_k residual; sweep 256 2048 q4_k none; sweep 896 4864 q6_k residual; sweep 896 896 q5_0 none; } > $OUT/sweep.txt 2>&1
python3 - <<'PY' $OUT/sweep.txt
import sys,re,collections
best=collections.defaultdict(list)
for l in open(sys.argv[1]):
    m=re.match(r"(\S+ \S+ \S+) (\S+ \S+ \S+): ([0-9.]+) GFLOP/s",l)
    if m: best[m.group(1)].append((float(m.group(3)),m.group(2)))
for k,v in best.items():
    v.sort(reverse=True); print(k, v[:5], 'current default t64 c2 u1:', [x for x in v if x[1]=='t64 c2 u1'])
PY
