#!/bin/bash
# run_model.sh MODEL DIR SEEDS...: rocky's exact / emulated logits and llama.cpp's real log-softmax per seed
M=$1; D=$2; shift 2
mkdir -p $D
for s in "$@"; do
  nice /work/target-mali/debug/examples/act_quant_distance $M --write $D $s > $D/s$s.log 2>&1
  ids=$(grep -o 'token ids [0-9,]*' $D/s$s.log | cut -d' ' -f3)
  python3 /tmp/i8/llama_logprobs.py ~/.cache/rocky/llama.cpp/bin $M $D/llamareal_tmp $ids 2>> $D/llama.log
  mv $D/llamareal_tmp.0.logprobs.f32 $D/llamareal.s$s.logprobs.f32
done
echo finished >> $D/llama.log
