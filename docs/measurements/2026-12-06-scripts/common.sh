# sourced by every call script: setup, a timer and the bench wrappers
source .device/setup.sh > $OUT/setup.txt 2>&1
T0=$(date +%s); t() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
lb() { $LB "$@" -ngl 99 -o md 2>&1 | grep -E "^\| qwen"; }
rb() { $R bench "$@" --md 2>&1 | grep -E "^\| qwen"; }
ids() { python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(150000)) for _ in range($1)))"; }
