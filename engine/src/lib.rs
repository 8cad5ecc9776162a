//! rocky as a library: open a GGUF model, open a session on a Vulkan device with the device's
//! tuned schedules (`rocky tune`'s database), then prefill, decode, generate, and keep or
//! restore the KV cache. The `rocky` CLI and `rocky serve` are thin users of this crate.
//!
//! ```no_run
//! use rocky_engine::{EngineOptions, GenerateOptions, Model, SamplerParams, Session};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Model::open("qwen2.5-0.5b-instruct-q4_k_m.gguf")?;
//! let prompt = model.tokenize("The capital of France is")?;
//! let mut session = Session::open(&model, &EngineOptions::default(), prompt.len() + 32)?;
//! let options = GenerateOptions {
//!     max_new_tokens: 32,
//!     sampler: SamplerParams::greedy(),
//!     stop_strings: Vec::new(),
//! };
//! let reply = session.generate(&prompt, &options, &mut |text| print!("{text}"))?;
//! println!("\n{} tokens, {:.1} tok/s", reply.tokens.len(), reply.decode_tokens_per_second().unwrap_or(0.0));
//! # Ok(())
//! # }
//! ```
//!
//! One job per module: `model` (the opened file and its tokenizer, chat format and end
//! tokens, each built once), `options` (device, database, overrides), `session` (the model on
//! a device), `schedules` and `staging` (where kernels' schedules come from), `evaluator`
//! (the session as rocky-generate's evaluator), `decode_time` and `profile` (where time went),
//! `chat` (chat messages to prompt text), `error` (what can fail).

pub mod chat;
pub mod decode_time;
pub mod error;
pub mod evaluator;
pub mod model;
pub mod options;
pub mod profile;
mod pyjson;
mod schedules;
pub mod session;
pub mod staging;

pub use chat::ChatFormat;
pub use decode_time::DecodeTime;
pub use error::{ChatError, GenerateFailed, LoadError, SessionError, TokenizeError};
pub use model::{open_gguf, Model};
pub use options::{Database, EngineOptions, DEFAULT_UBATCH, MAX_UBATCH};
pub use profile::ProfileRow;
pub use session::{Session, UbatchOrigin, UploadProgress};

// What a user of the engine needs from the crates below it, so one dependency suffices.
pub use rocky_generate::{
    EndOfGeneration, EvalError, Evaluator, GenerateError, GenerateOptions, Generation,
    SamplerParams, StopReason,
};
pub use rocky_models::chat::Message;
pub use rocky_models::tokenizer::Tokenizer;
pub use rocky_runtime::executor::{
    KvSnapshot, LayoutChoice, MathFamily, PrefillStats, ScheduleSource,
};
pub use rocky_runtime::DeviceSelector;
