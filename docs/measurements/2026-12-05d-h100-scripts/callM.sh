# Call M (2026-12-05d): rocky bench-gemv on this GPU: the decode GEMVs of the Qwen2.5-0.5B and
# 3B shapes warm (in cache) and cold (cache flushed by a 2 x 256 MiB copy before each run),
# default and int8 schedules, against the copy bandwidth; then the 3B gate/up and down GEMVs
# cold for a few int8 / f32 schedules (rocky kernel has no cold timing: bench-gemv rows only).
# Run: OUT=$OUT bash .device/callM.sh, carry [".gl", ".device"].
xz -dc .device/rocky.xz > .device/rocky
source .device/common.sh
t start
$R bench-gemv --int8 --runs 20 --md > $OUT/bench-gemv.md 2>&1; echo "rc $?"
cat $OUT/bench-gemv.md
$R bench-gemv --int8 --runs 20 --json > $OUT/bench-gemv.json 2>&1
t done
