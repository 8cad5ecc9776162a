# Call H (2026-12-05c): where a one-row step's GPU time goes: the one-token prefill profile with
# every fusion (as the decode step runs), 0.5B and 3B; GEMV kernels alone at the 3B shapes.
source .device/common.sh
for m in q05 q3; do
  ROCKY_FUSE=1 ROCKY_DB=/tmp/none.sled $R prefill $m.gguf --token-ids $(ids 1) --ubatch 1 --profile > $OUT/profile-$m.txt 2>&1
done
g() { # N K W [epilogue]
  for r in 1 2; do timeout 20 $R kernel --workload "{\"gemv\":{\"m\":1,\"n\":$1,\"k\":$2,\"act\":\"f32\",\"weight\":\"$3\",\"bias\":false}}" --runs 50 2>&1 | grep -oE "median [0-9.]+ ms|differs.*" | head -1 | sed "s/^/gemv n=$1 k=$2 $3: /"; done
}
{ g 2048 2048 q5_0; g 256 2048 q5_0; g 11008 2048 q4_k; g 2048 11008 q6_k; g 151936 2048 q6_k; g 896 896 q5_0; g 4864 896 q4_k; } > $OUT/gemv.txt 2>&1
cat $OUT/gemv.txt
