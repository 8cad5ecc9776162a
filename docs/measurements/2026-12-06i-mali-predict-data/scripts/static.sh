#!/bin/sh
# static.sh TAG BIN: rocky tune --static on the 3B (ub 64, 16 candidates per workload) under the 26.1.6 shim
S26=~/.cache/rocky/mali-shim26-26.1.6; TAG=$1; BIN=$2
t0=$(date +%s)
rm -rf /tmp/i/st-$TAG.sled
XDG_CACHE_HOME=$(mktemp -d) nice $S26/run-26.sh $BIN tune /tmp/q3.gguf --ubatch 64 --static --static-sample 16 \
  --db /tmp/i/st-$TAG.sled --json > /tmp/i/out/static-$TAG.json 2> /tmp/i/out/static-$TAG.txt
echo "EXIT $?" >> /tmp/i/out/static-$TAG.txt
echo "static $TAG $(( $(date +%s) - t0 )) s" >> /tmp/i/out/times.txt
