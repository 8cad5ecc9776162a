# sourced by every call script: setup, timers and the two bench wrappers
source .device/setup.sh > $OUT/setup.txt 2>&1
T0=$(date +%s); t() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
lb() { $LB "$@" -ngl 99 -n 0 -o md 2>&1 | grep -E "^\| qwen"; }
rb() { $R bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
IDS=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(150000)) for _ in range(512)))')
IDS4K=$(python3 -c 'import random; random.seed(1); print(",".join(str(random.randrange(150000)) for _ in range(4096)))')
prof() { name=$1; shift; $R prefill "$@" --profile > $OUT/profile-$name.txt 2>&1; echo "$name: $(grep -E "^GPU busy|^attention" $OUT/profile-$name.txt | tr '\n' ' ')"; }
