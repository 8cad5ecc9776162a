# sourced at the start of every device call (2026-12-05b): the Vulkan loader, the carried
# binaries (rocky, llama-bench, llama-server of the pinned llama.cpp 0c1e570), one or two synthesized
# Qwen2.5 Q4_K_M files (0.5B and 3B shapes, random weights, the Qwen2 vocabulary)
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)
export D=$PWD/.device; export R=$D/rocky; chmod +x $R
for b in llama-bench llama-server; do xz -dc $D/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
export LB=/tmp/llama-bench LS=/tmp/llama-server
# the agent-turn script polls /health with curl; the image may have none
command -v curl >/dev/null || { mkdir -p /tmp/bin; printf '%s\n' '#!/usr/bin/env python3' \
  'import sys,urllib.request' 'try: urllib.request.urlopen(sys.argv[-1],timeout=5); sys.exit(0)' \
  'except Exception: sys.exit(22)' > /tmp/bin/curl; chmod +x /tmp/bin/curl; export PATH=/tmp/bin:$PATH; }
$R devices 2>&1 | head -4
export GGML_VK_DISABLE_COOPMAT=1 GGML_VK_DISABLE_COOPMAT2=1
export ROOT=$PWD; cd /tmp
[ -f q05.gguf ] || $R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q05.gguf --force >/dev/null
[ -z "${NEED_Q3:-}" ] || [ -f q3.gguf ] || $R synth --shape qwen2.5-3b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q3.gguf --force >/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
