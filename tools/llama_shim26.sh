#!/bin/bash
# llama_shim26.sh SHIM26_PREFIX OUT_PREFIX -- llama.cpp's Vulkan backend on the Mesa 26.x
# mali-shim (../shared/tools/mali-shim26), for its pipelines' Valhall statistics
# (GGML_VK_PIPELINE_STATS=1; nothing executes). No aarch64 build of the pinned llama.cpp exists
# here and building one on 2 cores takes hours, so this takes Debian sid's arm64 packages
# (llama.cpp-tools, libllama0, libggml0, libggml0-backend-vulkan and the newer libc/libstdc++
# they need) and unpacks them into a COPY of the shim's sysroot; the shim's own prefix is not
# touched. The driver stays the shim's (e.g. Mesa 26.1.6).
#
#   bash tools/llama_shim26.sh ~/.cache/rocky/mali-shim26-26.1.6 /tmp/llama-shim26
#   GGML_VK_PIPELINE_STATS=1 /tmp/llama-shim26/run-26.sh llama-bench -m M.gguf -ngl 99 \
#       -p 512 -n 0 -ub 64 -r 1 2> stats.log
#   tools/llama_predict.py --stats stats.log --model M.gguf -p 512 --ubatch 64 -o list.json
#
# Needs Debian's archive (apt, as root for nothing: a private apt config under OUT_PREFIX.apt).
set -euo pipefail
SRC=${1:?usage: llama_shim26.sh SHIM26_PREFIX OUT_PREFIX}
OUT=${2:?usage: llama_shim26.sh SHIM26_PREFIX OUT_PREFIX}
[ -f "$SRC/run-26.sh" ] && [ -d "$SRC/sysroot" ] || { echo "llama_shim26.sh: $SRC is no mali-shim26 prefix" >&2; exit 2; }
A=$OUT.apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/debs"
KR=/usr/share/keyrings/debian-archive-keyring.gpg
MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -E '^[[:space:]]*(URIs:|deb )' \
         | grep -o -E 'https?://[^ ]+/debian/?( |$)' | head -n 1 | tr -d ' ' || true)
[ -n "$MIRROR" ] || { echo "llama_shim26.sh: no Debian mirror in /etc/apt/sources.list*" >&2; exit 1; }
echo "deb [arch=arm64 signed-by=$KR] ${MIRROR%/} sid main" > "$A/sources.list"
APTOPT=(-o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::State::status=/dev/null
        -o APT::Architectures::=arm64 -o APT::Sandbox::User=root -o Acquire::Languages=none
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false)
apt-get "${APTOPT[@]}" update -qq
rm -f "$A"/debs/*.deb
(cd "$A/debs" && apt-get "${APTOPT[@]}" download -qq llama.cpp-tools:arm64 libllama0:arm64 \
   libggml0:arm64 libggml0-backend-vulkan:arm64 libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 \
   libgomp1:arm64 libssl3t64:arm64)
rm -rf "$OUT"
cp -a "$SRC" "$OUT"
for d in "$A"/debs/*.deb; do dpkg -x "$d" "$OUT/sysroot"; done
{
  echo "llama_shim26.sh: $(date -u +%FT%TZ) from $SRC"
  for d in "$A"/debs/*.deb; do dpkg-deb -f "$d" Package Version | paste -sd' '; done
} > "$OUT/LLAMA-PACKAGES"
cat "$OUT/LLAMA-PACKAGES"
echo "ready: GGML_VK_PIPELINE_STATS=1 $OUT/run-26.sh llama-bench -m M.gguf -ngl 99 -p 512 -n 0 -ub 64 -r 1"
