# sourced at the start of every device call
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)
export D=$PWD/.device; export R=$D/rocky; chmod +x $R
xz -dc $D/llama-bench.xz > /tmp/llama-bench; chmod +x /tmp/llama-bench; export LB=/tmp/llama-bench
ls /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d 2>&1 | head -3; $R devices 2>&1 | head -4
export GGML_VK_DISABLE_COOPMAT=1 GGML_VK_DISABLE_COOPMAT2=1
cd /tmp
[ -f q05.gguf ] || $R synth --shape qwen2.5-0.5b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q05.gguf --force >/dev/null
[ -f q3.gguf ] || $R synth --shape qwen2.5-3b --quant q4_k_m --vocab $D/ggml-vocab-qwen2.gguf --seed 1 -o q3.gguf --force >/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
