source .device/setup.sh > $OUT/setup.txt 2>&1
bash $D/sweep2.sh "64 256 2048 q4_k --bias" "64 2048 2048 q4_k --bias" "64 2048 11008 q6_k" "64 2048 11008 q4_k" "64 11008 2048 q4_k" "512 256 2048 q4_k --bias" "512 2048 2048 q4_k" > $OUT/sweep2.txt 2>&1
echo "== llama.cpp round 1"; $LB -m q3.gguf -ngl 99 -p 512 -n 0 -ub 512,64 -r 3 -o md 2>&1 | grep -E "^\| qwen"
$LB -m q05.gguf -ngl 99 -p 512 -n 0 -ub 512,64 -r 3 -o md 2>&1 | grep -E "^\| qwen"
echo "== rocky default"; $R bench q3.gguf -p 512 -ub 512,64 -r 3 --backends default --md 2>&1 | grep -E "^\| qwen"
$R bench q05.gguf -p 512 -ub 512,64 -r 3 --backends default --md 2>&1 | grep -E "^\| qwen"
$R prefill q3.gguf --token-ids $(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(150000)) for _ in range(512)))') --ubatch 512 --profile > $OUT/profile3b.txt 2>&1; grep -iE "busy|outside|wall" $OUT/profile3b.txt | head -5
echo "== tune"; timeout 200 $R tune q3.gguf --ubatch 512 --trials 24 --time 150 --graph-time 30 --db t.sled > $OUT/tune.txt 2>&1; tail -4 $OUT/tune.txt
echo "== rocky tuned"; $R bench q3.gguf -p 512 -ub 512,64 -r 3 --backends tuned --db t.sled --md 2>&1 | grep -E "^\| qwen"
echo "== llama.cpp round 2"; $LB -m q3.gguf -ngl 99 -p 512 -n 0 -ub 512 -r 3 -o md 2>&1 | grep -E "^\| qwen"
$R db export -o $OUT/tuned-h200.jsonl --db t.sled > /dev/null 2>&1
