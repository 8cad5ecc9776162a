#!/bin/bash
# lavapipe.sh MODEL DIR SEED MATH...: rocky's GPU path on the Vulkan device 0 (lavapipe here) at ubatch 12,
# as the device check runs it, on the seed's check prompt (ids from run_model.sh's DIR/sSEED.log).
M=$1; D=$2; s=$3; shift 3
R=${R:-target/debug/rocky}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
IDS=$(grep -o 'token ids [0-9,]*' $D/s$s.log | cut -d' ' -f3)
for m in "$@"; do
  /usr/bin/time -f "seed $s $m %e s" nice $R prefill $M --token-ids $IDS --backend gpu --device 0 --ubatch 12 --math $m --logits-out $D/s$s.gpu-$m.f32 > $D/s$s.gpu-$m.log 2>&1
  tail -1 $D/s$s.gpu-$m.log
done
