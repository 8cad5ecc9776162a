#!/bin/sh
# pred.sh TAG BIN MODEL NAME UB: rocky predict under the 26.1.6 shim, pp512 + 8 decode steps, calibration builtin
S26=~/.cache/rocky/mali-shim26-26.1.6; TAG=$1; BIN=$2; M=$3; NAME=$4; UB=$5
mkdir -p /tmp/m9/e/lists /tmp/m9/e/out
t0=$(date +%s)
XDG_CACHE_HOME=$(mktemp -d) nice $S26/run-26.sh $BIN predict $M -p 512 -u $UB --decode 8 \
  --calibration builtin --db /tmp/m9/e/none-$TAG-$NAME-$UB.sled --save-dispatches /tmp/m9/e/lists/$TAG-$NAME-ub$UB \
  > /tmp/m9/e/out/$TAG-$NAME-ub$UB.txt 2>&1
echo "EXIT $?" >> /tmp/m9/e/out/$TAG-$NAME-ub$UB.txt
echo "predict $TAG $NAME ub$UB $(( $(date +%s) - t0 )) s" >> /tmp/m9/e/out/times.txt
