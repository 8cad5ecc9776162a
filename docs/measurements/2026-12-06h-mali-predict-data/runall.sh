#!/bin/sh
# runall.sh TAG BIN: rocky predict under the Mesa 26.1.6 shim for the 3B and 0.5B at ub 64 and 512
S26=~/.cache/rocky/mali-shim26-26.1.6; TAG=$1; BIN=$2
for m in q3:/tmp/m3/q3.gguf q05:/tmp/m4/q05.gguf; do
  name=${m%%:*}; f=${m#*:}
  for ub in 64 512; do
    t0=$(date +%s)
    XDG_CACHE_HOME=$(mktemp -d) nice $S26/run-26.sh $BIN predict $f -p 512 -u $ub --decode 8 \
      --calibration builtin --db /tmp/h/none-$TAG.sled --save-dispatches /tmp/h/lists/$TAG-$name-ub$ub \
      > /tmp/h/out/$TAG-$name-ub$ub.txt 2>&1
    echo "EXIT $?" >> /tmp/h/out/$TAG-$name-ub$ub.txt
    echo "$TAG $name ub$ub $(( $(date +%s) - t0 )) s" >> /tmp/h/out/times.txt
  done
done
