# Call N (2026-12-05d): Q4_K GEMV weights bound as 16-byte quads. bench-gemv of the binary
# before (words; bench without clock settling: its second run is the reference) and after
# (quads, settled), the same table for a few thread/column/unit variants (--schedule), then
# decode before/after against llama.cpp: 0.5B and 3B Q4_K_M, depth 0 and 2048, 2 rounds.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callN.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky; xz -dc .device/rocky-old.xz > /tmp/rocky-old; chmod +x /tmp/rocky-old
source .device/common.sh
t start
/tmp/rocky-old bench-gemv --runs 20 --json > /dev/null 2>&1
/tmp/rocky-old bench-gemv --runs 20 --json > $OUT/gemv-old.json 2>&1
$R bench-gemv --runs 20 --json > $OUT/gemv-new.json 2>&1
v() { echo "{\"gemv\":{\"threads\":$1,\"cols\":$2,\"chunks_per_thread\":8,\"units_per_thread\":$3,\"vector_width\":4,\"reduce\":\"$4\",\"accumulate\":\"f32\",\"math\":\"fma_f32\"}}"; }
i=0; for sch in "64 4 2 subgroup" "32 4 2 one_subgroup" "128 2 2 subgroup" "64 2 4 subgroup" "32 8 2 one_subgroup" "256 4 1 subgroup"; do
  i=$((i+1)); $R bench-gemv --runs 20 --json --schedule "$(v $sch)" > /tmp/gemv-v$i.json 2>&1
  python3 -c "
import json,sys; d=json.load(open('/tmp/gemv-v$i.json'))
for r in d['rows']:
  if r['variant']=='custom*': print('v$i', '$sch', r['model'], r['role'], r['weight'], 'cold %.1f us %.0f%%' % (r['cold']['median_ms']*1e3, r['percent_of_copy']))
"
done > $OUT/variants.txt
python3 - <<'PY' $OUT/gemv-old.json $OUT/gemv-new.json
import json,sys
o=json.load(open(sys.argv[1])); n=json.load(open(sys.argv[2]))
print('copy GB/s old run %.0f new run %.0f' % (o['copy_gbps'], n['copy_gbps']))
old={(r['model'],r['role'],r['weight'],r['variant']):r for r in o['rows']}
for r in n['rows']:
    k=(r['model'],r['role'],r['weight'],r['variant']); p=old.get(k)
    print(*k, 'cold us old %.1f new %.1f' % (p['cold']['median_ms']*1e3, r['cold']['median_ms']*1e3), 'of copy %.0f%% -> %.0f%%' % (p['percent_of_copy'], r['percent_of_copy']))
PY
gen() { # LABEL BIN MODEL PROMPT_TOKENS
  l=$1 bin=$2 m=$3 n=$4
  ROCKY_DB=/tmp/none.sled timeout 90 $bin generate $m.gguf --token-ids $(ids $n) -n 129 --temp 0 --ctx 4096 --json 2>$OUT/gen.err |
    python3 -c "import json,sys; d=json.load(sys.stdin); print('$l', 'decode %.1f tok/s' % d['decode_tokens_per_second'], 'wait %.3f' % d['decode_step_ms']['wait'], 'disp', d.get('decode_dispatches_per_step'), 'first', d['token_ids'][:8])" || echo "$l failed: $(tail -2 $OUT/gen.err)"
}
t decode; gen warm-new $R q05 8; gen warm-old /tmp/rocky-old q05 8; gen warm-new $R q3 8; gen warm-old /tmp/rocky-old q3 8
for round in 1 2; do
  for m in q05 q3; do
    t "round $round $m"; lb -m $m.gguf -p 0 -n 128 -d 0,2048 -r 2
    gen $m-d0-new $R $m 8; gen $m-d0-old /tmp/rocky-old $m 8; gen $m-d2048-new $R $m 2048; gen $m-d2048-old /tmp/rocky-old $m 2048
  done
done
t done
cat $OUT/variants.txt
