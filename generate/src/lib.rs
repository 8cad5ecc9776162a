//! Text generation for rocky: the loop that turns a prompt into a continuation, over any
//! [`Evaluator`] (the CPU reference here, the GPU session in rocky-engine).
//!
//! One job per module: `evaluator` (what runs the model), `sampler` (which token next),
//! `stop` (when to end), `steer` (constraints and log-probabilities), `text` (bytes to whole characters), `generation` (the loop).

pub mod evaluator;
pub mod generation;
mod preparer;
pub mod sampler;
pub mod steer;
pub mod stop;
pub mod text;

pub use evaluator::{CpuEvaluator, EvalError, Evaluator, KvSnapshot};
pub use generation::{
    generate, generate_reusing, generate_steered, GenerateError, GenerateOptions, Generation,
    Steering, Step, StopReason,
};
pub use sampler::{argmax, argmax_in, Sampler, SamplerParams};
pub use steer::{log_probs, log_probs_in, Constraint, TokenLogprob, TokenSet};
pub use stop::{EndOfGeneration, StopStrings};
pub use text::{Utf8Stream, Vocabulary};
