#!/bin/bash
while ! grep -q done /tmp/i8/h3.shares4.log; do sleep 5; done
export XDG_RUNTIME_DIR=$(mktemp -d)
for s in 1 4; do
IDS=$(grep -o 'token ids [0-9,]*' /tmp/i8/h3/s$s.log | cut -d' ' -f3)
for m in int8 f16; do
  /usr/bin/time -f "seed $s $m %e s" nice /work/target-mali/debug/rocky prefill /tmp/h3.gguf --token-ids $IDS --backend gpu --device 0 --ubatch 12 --math $m --logits-out /tmp/i8/h3/s$s.gpu-$m.f32 > /tmp/i8/h3/s$s.gpu-$m.log 2>&1
  tail -1 /tmp/i8/h3/s$s.gpu-$m.log
done; done
echo lvp-done
