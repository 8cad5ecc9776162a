source .device/setup.sh > $OUT/setup.txt 2>&1
T0=$(date +%s); t() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
lb() { $LB "$@" -ngl 99 -n 0 -o md 2>&1 | grep -E "^\| qwen"; }
rb() { $R bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
t "llama.cpp round 1"; lb -m q3.gguf -p 512,4096 -ub 512 -r 3; lb -m q3.gguf -p 512 -ub 64 -r 3; lb -m q05.gguf -p 512,4096 -ub 512 -r 3; lb -m q05.gguf -p 512 -ub 64 -r 3
t "rocky default"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q3.gguf -p 512 -ub 64 -r 3 --backends default; rb q05.gguf -p 512,4096 -ub 512 -r 3 --backends default; rb q05.gguf -p 512 -ub 64 -r 3 --backends default
IDS=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(150000)) for _ in range(512)))')
$R prefill q3.gguf --token-ids $IDS --ubatch 512 --profile > $OUT/profile3b-default.txt 2>&1; grep -E "^GPU busy|^host" $OUT/profile3b-default.txt
$R prefill q3.gguf --token-ids $IDS --ubatch 64 --profile > $OUT/profile3b-ub64.txt 2>&1; grep -E "^GPU busy|^host" $OUT/profile3b-ub64.txt
t "peak memory pp4096 (nvidia-smi, MiB)"; base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
mem() { f=$1; shift; nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > $f & P=$!; "$@" > /dev/null 2>&1; kill $P; sort -n $f | tail -1; }
echo "idle $base llama.cpp $(mem /tmp/ml.txt $LB -m q3.gguf -ngl 99 -n 0 -p 4096 -ub 512 -r 1) rocky $(mem /tmp/mr.txt $R bench q3.gguf -p 4096 -ub 512 -r 1 --backends default)"
t "tune ub512"; timeout 190 $R tune q3.gguf --ubatch 512 --trials 30 --time 150 --graph-time 20 --db t.sled > $OUT/tune512.txt 2>&1; tail -12 $OUT/tune512.txt
t "tune ub64"; timeout 70 $R tune q3.gguf --ubatch 64 --trials 12 --time 45 --graph-time 10 --db t.sled > $OUT/tune64.txt 2>&1; tail -10 $OUT/tune64.txt
t "rocky tuned"; rb q3.gguf -p 512,4096 -ub 512 -r 3 --backends tuned --db t.sled; rb q3.gguf -p 512 -ub 64 -r 3 --backends tuned --db t.sled
$R prefill q3.gguf --token-ids $IDS --ubatch 512 --profile --db t.sled > $OUT/profile3b-tuned.txt 2>&1; grep -E "^GPU busy|^host" $OUT/profile3b-tuned.txt
t "llama.cpp round 2"; lb -m q3.gguf -p 512 -ub 512,64 -r 3
$R db export -o $OUT/tuned-h200.jsonl --db t.sled > /dev/null 2>&1; t done
