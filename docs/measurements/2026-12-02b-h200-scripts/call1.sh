set -x
source .device/setup.sh
$LB -m q3.gguf -ngl 99 -p 512 -n 0 -ub 512,64 -r 3 -o md 2>&1 | grep -E "^\|"
$R bench q3.gguf -p 512 -ub 512,64 -r 3 --backends default --md 2>&1 | tail -5
$LB -m q05.gguf -ngl 99 -p 512 -n 0 -ub 512,64 -r 3 -o md 2>&1 | grep -E "^\|"
$R bench q05.gguf -p 512 -ub 512,64 -r 3 --backends default --md 2>&1 | tail -5
set +x
RUNS=30 bash $D/sweep1.sh "512 11008 2048 q4_k" "512 2048 11008 q6_k" "512 2048 11008 q4_k" "512 2048 2048 q4_k --bias" "512 256 2048 q4_k --bias" "512 256 2048 q6_k --bias" "64 11008 2048 q4_k" "64 2048 11008 q6_k" "64 2048 2048 q4_k --bias" "64 256 2048 q4_k --bias" 2>&1 | tee $OUT/sweep1.txt
