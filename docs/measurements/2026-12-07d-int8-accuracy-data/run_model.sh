#!/bin/bash
# run_model.sh MODEL DIR SEEDS...: per seed, rocky's exact / rocky-int8 / llama.cpp-emulated logits of
# `rocky bench`'s check prompt (act_quant_distance --write) and llama.cpp's real log-softmax
# (llama_logprobs.py: llama-server, CPU, 2 threads). ACT: the built example (default: the dev build);
# LLAMA_BIN: the pinned llama.cpp's bin folder (../shared/tools/llama.cpp/build.sh).
M=$1; D=$2; shift 2
ACT=${ACT:-target/debug/examples/act_quant_distance}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/rocky/llama.cpp/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p $D
for s in "$@"; do
  nice $ACT $M --write $D $s > $D/s$s.log 2>&1
  ids=$(grep -o 'token ids [0-9,]*' $D/s$s.log | cut -d' ' -f3)
  python3 $HERE/llama_logprobs.py $LLAMA_BIN $M $D/llamareal_tmp $ids 2>> $D/llama.log
  mv $D/llamareal_tmp.0.logprobs.f32 $D/llamareal.s$s.logprobs.f32
done
echo finished >> $D/llama.log
