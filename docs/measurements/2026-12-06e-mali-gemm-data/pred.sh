#!/bin/sh
# pred.sh BIN TAG : predictions for 3B and 0.5B at ub 512 and 64 (Mesa 26.1.6 shim)
B=$1; T=$2; S26=~/.cache/rocky/mali-shim26-26.1.6; mkdir -p /tmp/mali2/pred /tmp/mali2/lists
for m in q3 q05; do for ub in 512 64; do
  DB=$(mktemp -d)/empty.sled
  XDG_CACHE_HOME=$(mktemp -d) $S26/run-26.sh $B predict /tmp/mali2/$m.gguf -p 512 -u $ub --decode 8 --calibration builtin --db $DB --save-dispatches /tmp/mali2/lists/$T-$m-ub$ub > /tmp/mali2/pred/$T-$m-ub$ub.txt 2>&1
  echo "$T $m ub$ub: $(grep 'predicted prefill' /tmp/mali2/pred/$T-$m-ub$ub.txt)"
done; done
