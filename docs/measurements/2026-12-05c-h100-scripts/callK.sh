# Call K (2026-12-05c): prefill after the executor's program split (no regression check):
# llama-bench pp512 against rocky bench pp512 (default schedules), 0.5B and 3B Q4_K_M, two rounds.
# Run: NEED_Q3=1 OUT=$OUT bash .device/callK.sh, carry [".gl", ".device"].
source .device/common.sh
for round in 1 2; do for m in q05 q3; do
  t "round $round $m"; lb -m $m.gguf -p 512 -n 0 -ub 512 -r 3; ROCKY_DB=/tmp/none.sled rb $m.gguf -p 512 -ub 512 -r 3 --backends default
done; done
t done
