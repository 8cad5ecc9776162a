#!/bin/sh
# probe.sh BIN: the 26.1.6 compiler's statistics of the 3B's output GEMV (151936 x 2048 Q6_K, m = 1) and
# of the 0.5B's (151936 x 896 Q8_0), each in the GGUF and the aligned layout, with panvk's default schedule
S26=~/.cache/rocky/mali-shim26-26.1.6; BIN=$1
for W in \
 '{"gemv":{"m":1,"n":151936,"k":2048,"act":"f32","weight":"q6_k","bias":false}}' \
 '{"gemv":{"m":1,"n":151936,"k":2048,"act":"f32","weight":"q6_k","layout":"aligned","bias":false}}' \
 '{"gemv":{"m":1,"n":151936,"k":896,"act":"f32","weight":"q8_0","bias":false}}' \
 '{"gemv":{"m":1,"n":151936,"k":896,"act":"f32","weight":"q8_0","layout":"aligned","bias":false}}'; do
  echo "== $W"
  XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh $BIN kernel --workload "$W" --stats 2>&1 | grep -E "^(schedule|kernel|stats)"
done
