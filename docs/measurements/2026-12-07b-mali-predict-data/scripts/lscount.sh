#!/bin/sh
# lscount.sh VKC_OUTPUT: LS-unit ops of the final Valhall listing, split into the loop (up to the backward branch) and the rest
f=$1
start=$(grep -n "^block0 {" $f | tail -1 | cut -d: -f1)
# final listing = after the last "} from" of the pre-sched IR
fin=$(awk -v s=$start 'NR>s && /^} from|^} -> block[0-9]+  from|^} from/{l=NR} END{print l}' $f)
sed -n "$((fin+1)),\$p" $f | grep -v "^$" > ${TMPDIR:-/tmp}/_fin.txt
awk '{op=$1} /offset:-/{print "BACKBRANCH at", NR} ' ${TMPDIR:-/tmp}/_fin.txt | head -3
awk 'BEGIN{loop=0} NR==1{} /BRANCHZ.reconverge/ && !seen {seen=1; loop=1; next} {op=$1; if(op ~ /LOAD|STORE|LD_|ST_|BARRIER|LEA|ATOM/){ if(loop) L[op]++; else O[op]++ }} /offset:-/{loop=0} END{for(k in L) print "loop", k, L[k]; for(k in O) print "other", k, O[k]}' ${TMPDIR:-/tmp}/_fin.txt | sort
