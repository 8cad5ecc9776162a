#!/usr/bin/env bash
# Runs rocky's whole test suite (after tools/setup.sh). Vulkan tests run on whatever device the
# loader finds; on a machine without a GPU that is lavapipe.
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
# The GGUF mutation fuzzer runs this long (the hostile-file requirement: at least 60 s in CI).
export ROCKY_FUZZ_SECONDS=${ROCKY_FUZZ_SECONDS:-60}
cargo test --workspace --no-fail-fast "$@"
