//! The end-of-generation tokens rocky stops at, against the set llama.cpp 0c1e57098 prints for
//! the same files (`llama-completion -m M -p hi -n 1 -no-cnv -v 2>&1 | grep 'print_info: EOG'`):
//! Gemma 3 270M: 1 '<eos>', 106 '<end_of_turn>', 212 '</s>'; the Qwen2 vocabulary:
//! 128247 '</s>', 151643 '<|endoftext|>', 151645 '<|im_end|>'.

mod common;

use common::{asset, shared};
use rocky_generate::EndOfGeneration;
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use std::path::Path;

fn eog(path: &Path) -> Vec<u32> {
    let file = GgufFile::open(path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    EndOfGeneration::from_vocabulary(&file, &tokenizer)
        .ids()
        .collect()
}

#[test]
fn gemma3_270m_end_of_generation_tokens_are_llama_cpps() {
    assert_eq!(eog(&asset("gemma-3-270m-q4_k_m.gguf")), vec![1, 106, 212]);
}

#[test]
fn qwen2_end_of_generation_tokens_are_llama_cpps() {
    assert_eq!(
        eog(&shared().join("models/qwen2-tiny-q8_0.gguf")),
        vec![128247, 151643, 151645]
    );
}
