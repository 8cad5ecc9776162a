//! rocky's model layer: GGUF files, GGML block formats, tokenizers, architectures as op graphs,
//! and the CPU reference forward pass that every GPU kernel is checked against.

pub mod act_quant;
pub mod arch;
pub mod chat;
pub mod formats;
pub mod fuse;
pub mod gguf;
pub mod graph;
pub mod reference;
pub mod synth;
pub mod tokenizer;
