#!/bin/sh
# tiles.sh: larger and smaller half-unit int8 micro-tiles at M = 512 (Mesa 26.1.6 shim, the
# register budget lifted by mali_dump so the estimate's refusals compile too)
cd /tmp/m4
S(){ echo "{\"bm\":$1,\"bn\":$2,\"bk\":64,\"tm\":$3,\"tn\":$4,\"split_k\":1,\"vector_width\":4,\"stage_a\":true,\"stage_b\":true,\"half_units\":true,\"accumulate\":\"f32\",\"math\":\"int8_dot\"}"; }
for wt in '"q4_k"' '"q6_k","layout":"aligned"' '"q5_0","layout":"aligned"'; do
  W="{\"m\":512,\"n\":11008,\"k\":2048,\"act\":\"f32\",\"weight\":$wt,\"bias\":false}"
  for c in "64 64 4 4" "48 64 3 4" "64 48 4 3" "64 80 4 5" "80 64 5 4" "64 96 4 6" "96 64 6 4" "64 128 4 8" "128 64 8 4" "128 128 8 8"; do
    set -- $c; ./ks.sh "$W" "$(S $1 $2 $3 $4)" "t$3x$4"; done; done
