//! Quantizes an all-F32 model of one of `rocky synth`'s shapes into a quantization mix the way
//! llama-quantize does without an importance matrix: the tensor types of `synth::tensor_plan`
//! (models/tests/synth_plan.rs checks them against llama-quantize's own files) and ggml's
//! reference quantizers (models/tests/formats_vs_gguf_py.rs checks them byte for byte), with
//! llama-quantize's metadata and tensor order.
//!
//! tools/prepare-test-assets.sh makes the tiny Q8_0 and Q4_K_M test models with it where the
//! shared folder (which holds llama-quantize's copies) is not beside the clone:
//!
//! ```sh
//! cargo run -p rocky-models --example requantize -- qwen2-tiny-f32.gguf out.gguf q4_k_m
//! ```

use std::path::Path;
use std::process::ExitCode;

use rayon::prelude::*;
use rocky_models::formats::{quantize, GgmlType};
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, TensorInfo, TensorSpec};
use rocky_models::synth::{tensor_plan, PlannedTensor, Quant, Shape};

/// GGML_QNT_VERSION, which llama-quantize writes as `general.quantization_version`.
const QUANTIZATION_VERSION: u32 = 2;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, quant] = args.as_slice() else {
        eprintln!("usage: requantize IN_F32.gguf OUT.gguf QUANT   (QUANT: q8_0, q4_k_m, ...)");
        return ExitCode::from(2);
    };
    let Some(quant) = Quant::from_name(quant) else {
        eprintln!("error: unknown quantization mix {quant:?}");
        return ExitCode::from(2);
    };
    match requantize(Path::new(input), Path::new(output), quant) {
        Ok(n) => {
            eprintln!("wrote {output}: {n} tensors, {}", quant.name());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {input}: {e}");
            ExitCode::from(3)
        }
    }
}

fn requantize(input: &Path, output: &Path, quant: Quant) -> Result<usize, String> {
    let file = GgufFile::open(input).map_err(|e| e.to_string())?;
    if let Some(t) = file.tensors.iter().find(|t| t.ggml_type != GgmlType::F32) {
        return Err(format!(
            "{} is {}: the input must be all F32 (quantizing twice is not what llama-quantize does)",
            t.name, t.ggml_type
        ));
    }
    let plan = plan_for(&file, quant)?;
    let mut tensors: Vec<&TensorInfo> = file.tensors.iter().collect();
    tensors.sort_by_key(|t| llama_quantize_order(&t.name));

    let mut writer = GgufWriter::new();
    // llama-quantize copies the source's keys, then adds the quantization version and sets the
    // file type last.
    for (key, value) in &file.metadata {
        if key != "general.file_type" && key != "general.quantization_version" {
            writer.set(key, value.clone());
        }
    }
    if quant.is_quantized() {
        writer.set(
            "general.quantization_version",
            MetaValue::U32(QUANTIZATION_VERSION),
        );
    }
    writer.set("general.file_type", MetaValue::U32(quant.file_type()));
    let types: Vec<GgmlType> = tensors.iter().map(|t| plan_type(&plan, t)).collect();
    for (t, &ggml_type) in tensors.iter().zip(&types) {
        writer.add_tensor(TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ggml_type,
        });
    }
    writer
        .write(output, |i, spec| {
            let values = f32_values(file.tensor_data(tensors[i]));
            quantize_rows(spec.ggml_type, &values, spec.dims[0] as usize).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", spec.name),
                )
            })
        })
        .map_err(|e| format!("writing {}: {e}", output.display()))?;
    Ok(tensors.len())
}

/// The plan of the synth shape whose tensors (names and dims) are exactly the file's.
fn plan_for(file: &GgufFile, quant: Quant) -> Result<Vec<PlannedTensor>, String> {
    let n_vocab = file
        .tensor("token_embd.weight")
        .and_then(|t| t.dims.get(1).copied())
        .ok_or("no token_embd.weight of two dimensions")?;
    let arch = file.architecture().map_err(|e| e.to_string())?;
    for shape in Shape::ALL {
        let mut params = shape.params();
        params.n_vocab = n_vocab;
        if params.arch.name() != arch {
            continue;
        }
        let plan = tensor_plan(&params, quant);
        let same = plan.len() == file.tensors.len()
            && plan
                .iter()
                .all(|p| file.tensor(&p.name).is_some_and(|t| t.dims == p.dims));
        if same {
            return Ok(plan);
        }
    }
    Err(format!(
        "its {arch} tensors are not those of any `rocky synth --shape` (the types of other shapes are not known)"
    ))
}

fn plan_type(plan: &[PlannedTensor], t: &TensorInfo) -> GgmlType {
    plan.iter()
        .find(|p| p.name == t.name)
        .map(|p| p.ggml_type)
        .expect("plan_for matched every tensor name")
}

/// llama-quantize writes the tensors that belong to no block first, by name, then each block's
/// by name.
fn llama_quantize_order(name: &str) -> (Option<u64>, String) {
    let block = name
        .strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok());
    (block, name.to_string())
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Rows quantized in parallel (each row is a whole number of blocks), concatenated.
fn quantize_rows(
    ty: GgmlType,
    values: &[f32],
    row_len: usize,
) -> Result<Vec<u8>, rocky_models::formats::FormatError> {
    let rows: Vec<Vec<u8>> = values
        .par_chunks(row_len)
        .map(|row| quantize(ty, row))
        .collect::<Result<_, _>>()?;
    Ok(rows.concat())
}
