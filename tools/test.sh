#!/usr/bin/env bash
# Runs rocky's whole test suite (after tools/setup.sh). Vulkan tests run on whatever device the
# loader finds; on a machine without a GPU that is lavapipe.
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
# The GGUF mutation fuzzer runs this long (the hostile-file requirement: at least 60 s in CI).
export ROCKY_FUZZ_SECONDS=${ROCKY_FUZZ_SECONDS:-60}
# --mali: only the Mali tier, the opt-in tests included (after tools/setup.sh --mali): the
# aarch64 rocky that tests/mali_shim26.rs runs under qemu on Mesa 26.1.6's panvk (a debug build:
# measured faster in all than release, see docs/measurements/2026-12-02c-mali-shim-recording.md),
# then every mali_shim test with the ignored ones; a missing shim is a failure there.
if [ "${1:-}" = --mali ]; then
  shift
  export ROCKY_MALI_REQUIRED=1
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build --bin rocky --target aarch64-unknown-linux-gnu
  exec cargo test -p rocky --no-fail-fast --test mali_shim_vk11 --test mali_shim_stats --test mali_shim_attention \
    --test mali_shim_recording --test mali_shim26 "$@" -- --include-ignored
fi
# The lint gate: formatting, then clippy with every warning an error (lints are declared once,
# in the root Cargo.toml's [workspace.lints]; tools/setup.sh installs both components).
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# Tests that cannot run here (their references are in the shared folder beside the clone, or a
# Mali shim is not installed) append "reason<TAB>test" to this file: summarized below, one line
# per reason.
export ROCKY_SKIP_LOG=${ROCKY_SKIP_LOG:-$PWD/target/skipped-tests.txt}
mkdir -p "$(dirname "$ROCKY_SKIP_LOG")"
: >"$ROCKY_SKIP_LOG"
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
if [ -s "$ROCKY_SKIP_LOG" ]; then
  sort -u "$ROCKY_SKIP_LOG" | awk -F'\t' '
    { tests[$1] = tests[$1] (n[$1]++ ? ", " : "") $2 }
    END { for (r in tests) printf "%d tests (%s) %s\n", n[r], tests[r], r }'
fi
exit $status
