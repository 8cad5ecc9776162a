//! `rocky synth`: write a random-weight, Qwen2.5-shaped (or small Qwen3-/Gemma 3-/Llama 3-shaped) GGUF model.

use crate::error::{CliError, CmdResult};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use rocky_models::synth::{self, Progress, Quant, Shape, SynthConfig, SynthError, Vocabulary};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MIB: f64 = (1u64 << 20) as f64;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    rocky synth --shape tiny -o tiny-q4_k_m.gguf\n  \
    rocky synth --shape qwen2.5-3b --quant q4_k_m --vocab ggml-vocab-qwen2.gguf --seed 7 -o qwen2.5-3b-synth.gguf\n\n\
    The tokenizer copied into the new model is Qwen2's (llama.cpp's models/ggml-vocab-qwen2.gguf, \
    built into rocky) unless --vocab names another GPT-2-style BPE GGUF (any Qwen2 model). Weights are N(0, 0.02), norms 1 + N(0, 0.02), the same \
    for a given seed in every quantization.")]
pub struct Args {
    /// Model shape (Qwen2.5 config.json sizes; tiny: 256 hidden, 4 layers; qwen3-tiny,
    /// gemma3-tiny and llama-tiny: small Qwen3-, Gemma 3- and Llama 3-architecture test models).
    #[arg(long, value_parser = shape_parser())]
    pub shape: Shape,
    /// Tensor types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, or llama-quantize's q4_k_m /
    /// q5_k_m / iq4_nl / iq4_xs mix.
    #[arg(long, default_value = "q4_k_m", value_parser = quant_parser())]
    pub quant: Quant,
    /// GGUF file whose tokenizer (tokenizer.* keys) the model gets [default: the Qwen2
    /// vocabulary built into rocky].
    #[arg(long)]
    pub vocab: Option<PathBuf>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Output GGUF file.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

fn shape_parser() -> impl TypedValueParser<Value = Shape> {
    PossibleValuesParser::new(Shape::ALL.map(Shape::name))
        .map(|s| Shape::from_name(&s).expect("clap only passes listed shape names"))
}

fn quant_parser() -> impl TypedValueParser<Value = Quant> {
    PossibleValuesParser::new(Quant::ALL.map(Quant::name))
        .map(|s| Quant::from_name(&s).expect("clap only passes listed quant names"))
}

pub fn run(args: Args) -> CmdResult {
    let vocab = match &args.vocab {
        Some(path) => read_vocabulary(path)?,
        None => builtin_vocabulary()?,
    };
    check_output(&args)?;
    let config = SynthConfig {
        shape: args.shape,
        quant: args.quant,
        seed: args.seed,
    };
    eprintln!(
        "writing {} ({} {}, seed {}, {} tokens)",
        args.output.display(),
        config.shape.name(),
        config.quant.name(),
        config.seed,
        vocab.n_tokens
    );
    let start = Instant::now();
    let summary = synth::write_model(&args.output, &config, &vocab, report_progress).map_err(
        |e| match e {
            SynthError::Write { .. } => CliError::output(format!(
                "{e}\nCheck that the folder exists, is writable and has room for the model."
            )),
            SynthError::Vocabulary { .. } => CliError::input(e.to_string()),
        },
    )?;
    let seconds = start.elapsed().as_secs_f64();
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    let types: Vec<String> = summary
        .by_type
        .iter()
        .map(|(ty, (n, bytes))| format!("{ty} {n} ({:.1} MiB)", *bytes as f64 / MIB))
        .collect();
    eprintln!(
        "wrote {}: {} tensors, {:.3} B parameters, {:.1} MiB in {:.1} s ({:.0} MiB/s)\n  types: {}",
        args.output.display(),
        summary.n_tensors,
        summary.n_params as f64 / 1e9,
        summary.file_bytes as f64 / MIB,
        seconds,
        summary.file_bytes as f64 / MIB / seconds.max(1e-9),
        types.join(", ")
    );
    Ok(())
}

/// llama.cpp's ggml-vocab-qwen2.gguf, built into the binary rather than found at run time
/// (e.g. beside CARGO_MANIFEST_DIR) because the binary is often carried alone to a board,
/// where no checkout exists; 5.9 MB is small next to any model it makes.
/// assets/vocab/README.md has its origin and license.
const QWEN2_VOCAB: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/vocab/ggml-vocab-qwen2.gguf"
));

fn builtin_vocabulary() -> Result<Vocabulary, CliError> {
    let internal = |e: String| CliError::internal(format!("the built-in Qwen2 vocabulary: {e}"));
    let file = rocky_models::gguf::GgufFile::from_bytes(
        "<built-in ggml-vocab-qwen2.gguf>",
        QWEN2_VOCAB.to_vec(),
    )
    .map_err(|e| internal(e.to_string()))?;
    Vocabulary::from_gguf(&file).map_err(|e| internal(e.to_string()))
}

fn read_vocabulary(path: &Path) -> Result<Vocabulary, CliError> {
    if !path.exists() {
        return Err(CliError::input(format!(
            "vocabulary file {} does not exist: pass --vocab with llama.cpp's \
             models/ggml-vocab-qwen2.gguf or a Qwen2/Qwen2.5 GGUF model",
            path.display()
        )));
    }
    let file = super::open_gguf(path)?;
    Vocabulary::from_gguf(&file).map_err(|e| CliError::input(e.to_string()))
}

/// Refuses to replace an existing file without --force, and never replaces the vocabulary.
fn check_output(args: &Args) -> CmdResult {
    let out = &args.output;
    if out.is_dir() {
        return Err(CliError::usage(format!(
            "{} is a folder: give -o a file name, e.g. {}",
            out.display(),
            out.join("model.gguf").display()
        )));
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent.filter(|p| !p.is_dir()) {
        return Err(CliError::output(format!(
            "folder {} does not exist: create it first (mkdir -p {}) or choose another -o",
            dir.display(),
            dir.display()
        )));
    }
    if !out.exists() {
        return Ok(());
    }
    let same_file = match (
        out.canonicalize(),
        args.vocab.as_ref().map(|v| v.canonicalize()),
    ) {
        (Ok(a), Some(Ok(b))) => a == b,
        _ => false,
    };
    if same_file {
        return Err(CliError::usage(format!(
            "-o {} is the vocabulary file: choose another output name",
            out.display()
        )));
    }
    if !args.force {
        return Err(CliError::output(format!(
            "{} already exists: pass --force to replace it, or choose another -o",
            out.display()
        )));
    }
    Ok(())
}

/// Progress on stderr: one status line rewritten in place on a terminal, otherwise (a log
/// file, a remote job) a line per tenth of the data so logs stay short.
fn report_progress(p: &Progress) {
    let line = format!(
        "  tensor {:>4}/{} {:>8.1}/{:.1} MiB  {:<28} {:<5}",
        p.index + 1,
        p.n_tensors,
        p.bytes_done as f64 / MIB,
        p.bytes_total as f64 / MIB,
        p.tensor.name,
        p.tensor.ggml_type.name()
    );
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r{line}");
        let _ = err.flush();
        return;
    }
    let tenth = |bytes: u64| bytes * 10 / p.bytes_total.max(1);
    let before = p.bytes_done - p.tensor_bytes;
    if p.index == 0 || p.index + 1 == p.n_tensors || tenth(before) != tenth(p.bytes_done) {
        let _ = writeln!(err, "{line}");
    }
}
