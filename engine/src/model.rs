//! An opened GGUF model: the file, its architecture, and what turns text into its tokens (the
//! tokenizer, the chat format, the end-of-generation tokens), each built once on first use and
//! shared by every session and request after.

use crate::chat::ChatFormat;
use crate::error::LoadError;
use rocky_compiler::KvTypes;
use rocky_generate::{
    generate, CpuEvaluator, EndOfGeneration, Evaluator, GenerateOptions, Generation,
};
use rocky_models::arch::{self, Model as Architecture};
use rocky_models::gguf::{GgufError, GgufFile};
use rocky_models::reference::ReferenceOptions;
use rocky_models::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// A GGUF model opened for running: open it once, then open sessions on devices from it.
pub struct Model {
    path: PathBuf,
    file: GgufFile,
    arch: Architecture,
    /// Built on first use: a prompt given as token ids needs none, and a file without a usable
    /// vocabulary still prefills them.
    tokenizer: OnceLock<Result<Tokenizer, Arc<rocky_models::tokenizer::TokenizerError>>>,
    chat: OnceLock<ChatFormat>,
    end: OnceLock<EndOfGeneration>,
}

/// Opens `path` as a GGUF file, with an error that names the file and says what to do.
pub fn open_gguf(path: &Path) -> Result<GgufFile, LoadError> {
    if !path.exists() {
        return Err(LoadError::Missing {
            path: path.to_path_buf(),
        });
    }
    GgufFile::open(path).map_err(|e| match e {
        e @ GgufError::Io { .. } => LoadError::Read { source: e },
        e @ GgufError::Malformed { .. } => LoadError::Malformed { source: e },
    })
}

impl Model {
    /// Opens the GGUF file at `path` and reads its architecture (nothing is uploaded yet).
    pub fn open(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        let path = path.as_ref();
        let file = open_gguf(path)?;
        let arch = arch::load(&file)?;
        Ok(Model {
            path: path.to_path_buf(),
            file,
            arch,
            tokenizer: OnceLock::new(),
            chat: OnceLock::new(),
            end: OnceLock::new(),
        })
    }

    /// Where the model was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF file (metadata and tensor data).
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The architecture: configuration and prefill graph.
    pub fn arch(&self) -> &Architecture {
        &self.arch
    }

    /// Entries of the vocabulary (token ids are below this).
    pub fn n_vocab(&self) -> usize {
        self.arch.config.n_vocab
    }

    /// The model's tokenizer, built on the first call.
    pub fn tokenizer(&self) -> Result<&Tokenizer, LoadError> {
        self.tokenizer
            .get_or_init(|| Tokenizer::from_gguf(&self.file).map_err(Arc::new))
            .as_ref()
            .map_err(|e| LoadError::Tokenizer(e.clone()))
    }

    /// The chat format, parsed on the first call (needs the tokenizer for its BOS/EOS texts).
    pub fn chat_format(&self) -> Result<&ChatFormat, LoadError> {
        let tokenizer = self.tokenizer()?;
        Ok(self
            .chat
            .get_or_init(|| ChatFormat::of(&self.file, tokenizer)))
    }

    /// The tokens that end a generation (the vocabulary's EOS, end-of-turn and the like).
    pub fn end_of_generation(&self) -> Result<&EndOfGeneration, LoadError> {
        let tokenizer = self.tokenizer()?;
        Ok(self
            .end
            .get_or_init(|| EndOfGeneration::from_vocabulary(&self.file, tokenizer)))
    }

    /// Token ids of `text` as llama.cpp tokenizes a prompt (BOS and special tokens as the
    /// vocabulary asks).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, crate::error::TokenizeError> {
        self.tokenizer()?
            .encode(text, true, true)
            .map_err(crate::error::TokenizeError::Encode)
    }

    /// The CPU reference (f32, all cores) as an evaluator with `n_ctx` positions: slow, the
    /// oracle the GPU session is checked against.
    pub fn cpu_evaluator(&self, n_ctx: usize) -> CpuEvaluator<'_> {
        self.cpu_evaluator_with(n_ctx, KvTypes::default())
    }

    /// [`Model::cpu_evaluator`] over a KV cache of types `kv` (rounded as the GPU cache of
    /// those types rounds).
    pub fn cpu_evaluator_with(&self, n_ctx: usize, kv: KvTypes) -> CpuEvaluator<'_> {
        self.cpu_evaluator_options(n_ctx, ReferenceOptions::with_kv(kv))
    }

    /// [`Model::cpu_evaluator`] with the reference's storage options (cache types, the
    /// Hadamard rotation around a q8_0 cache).
    pub fn cpu_evaluator_options(
        &self,
        n_ctx: usize,
        options: ReferenceOptions,
    ) -> CpuEvaluator<'_> {
        CpuEvaluator::new(&self.file, &self.arch, options, n_ctx)
    }

    /// Continues `prompt` on `evaluator` (a [`crate::Session`] or [`Model::cpu_evaluator`])
    /// with this model's tokenizer and end-of-generation tokens; `on_text` gets each piece of
    /// text as it is made.
    pub fn generate(
        &self,
        evaluator: &mut dyn Evaluator,
        prompt: &[u32],
        options: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, crate::error::GenerateFailed> {
        let tokenizer = self.tokenizer()?;
        let end = self.end_of_generation()?;
        Ok(generate(
            evaluator, tokenizer, end, prompt, options, on_text,
        )?)
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("path", &self.path)
            .field("architecture", &self.arch.config.architecture)
            .finish_non_exhaustive()
    }
}
