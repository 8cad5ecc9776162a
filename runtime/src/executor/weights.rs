//! A model's weights on the device: every tensor the graphs read, uploaded once, in the
//! device layout the compiler picks per format, with the tensors that fused ops read as one
//! combined into one buffer of their rows (gate and up; a stack's projections and biases).

use super::ExecError;
use crate::{device_caps, Buffer, BufferRange, Context, RuntimeError};
use rocky_compiler::dequant::layout::to_device;
use rocky_compiler::templates::gemm::default_layout;
use rocky_compiler::{DeviceCaps, WeightFormat, WeightLayout};
use rocky_models::arch::Model;
use rocky_models::formats::GgmlType;
use rocky_models::fuse::{fuse, CombinableInFile, Combined, FuseOptions};
use rocky_models::gguf::GgufFile;
use rocky_models::graph::{Graph, Op};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A model's weights on the device. Tensors that a fused op reads as one are uploaded as one
/// combined buffer of their rows (named [`combined_name`]): the gate and up tensors of every
/// SwiGLU pair that can fuse (same block format and shape, see `rocky_models::fuse`: the gate
/// rows, then the up rows), and the projections of one input that can stack (the attention's
/// Q, K and V where they share a block format: their rows in order, and their biases likewise).
/// A combined buffer serves both graphs: the fused kernel binds it whole, the separate ones
/// bind their parts. So whether tensors fuse is a choice of each executor
/// ([`ExecutorOptions::fuse`](super::ExecutorOptions::fuse)), made without uploading the model
/// again.
pub struct GpuWeights {
    buffers: HashMap<String, (Buffer, GgmlType)>,
    /// Tensors that live inside a combined buffer: name → (buffer name, byte offset, bytes).
    aliases: HashMap<String, (String, u64, u64)>,
    /// Combined buffers by name: their parts in order, and whether each part's columns of an
    /// output row start at an offset the device can bind (a stack's slices are views there).
    combos: HashMap<String, Combo>,
    /// Device layout per buffer (GGUF unless listed); every GEMM of a buffer reads this one.
    layouts: HashMap<String, WeightLayout>,
    /// Host time of the upload, and the part of it spent repacking.
    pub upload_time: Duration,
    pub repack_time: Duration,
}

/// One weight tensor on the device: a whole buffer or a part of a combined one.
#[derive(Clone, Copy)]
pub struct WeightRef<'a> {
    buffer: &'a Buffer,
    offset: u64,
    bytes: u64,
    pub ty: GgmlType,
}

impl<'a> WeightRef<'a> {
    /// The whole tensor as a binding.
    pub fn whole(&self) -> Result<BufferRange<'a>, RuntimeError> {
        self.buffer.range(self.offset, self.bytes)
    }

    /// `bytes` from `offset` within the tensor.
    pub fn range(&self, offset: u64, bytes: u64) -> Result<BufferRange<'a>, RuntimeError> {
        self.buffer.range(self.offset + offset, bytes)
    }
}

/// A combined buffer's parts (see [`GpuWeights`]).
struct Combo {
    parts: Vec<String>,
    views_aligned: bool,
}

/// The name of the combined gate/up tensor of a fused SwiGLU GEMM.
pub fn gate_up_name(gate: &str, up: &str) -> String {
    combined_name(&[gate, up])
}

/// The name of a buffer that combines tensors `parts` row-wise, in this order.
pub fn combined_name(parts: &[&str]) -> String {
    parts.join("+")
}

/// Rows of a tensor as a combined buffer stacks them: a matrix's output rows, a vector's
/// elements (a bias).
fn rows_of(t: &rocky_models::gguf::TensorInfo) -> u64 {
    match t.dims.as_slice() {
        [n] => *n,
        dims => dims.iter().skip(1).product(),
    }
}

/// What this upload combined: the fusion pass's question, answered by the buffers.
impl Combined for GpuWeights {
    fn gate_up(&self, gate: &str, up: &str) -> bool {
        self.is_combo(&[gate, up])
    }

    /// Also that each part's output columns can be bound where they start (the slices of a
    /// one-row stack are views) and the biases, if any, are combined too.
    fn stack(&self, weights: &[&str], biases: &[&str]) -> bool {
        let views = self
            .combos
            .get(&combined_name(weights))
            .is_some_and(|c| c.views_aligned);
        self.is_combo(weights) && views && (biases.is_empty() || self.is_combo(biases))
    }
}

/// Which device layout the weight upload gives each GEMM weight tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LayoutChoice {
    /// The compiler's default for the device and format (`default_layout`).
    #[default]
    Auto,
    /// This layout wherever the format has it (the rest stay GGUF).
    Force(WeightLayout),
}

impl GpuWeights {
    /// Uploads every tensor the graph uses, the embedding table included (the gather runs on
    /// the GPU, so no ubatch waits for the host; Qwen2.5 up to 3B ties it to the output
    /// projection, which needs it on the device anyway).
    pub fn upload(ctx: &Context, file: &GgufFile, model: &Model) -> Result<GpuWeights, ExecError> {
        Self::upload_with_progress(ctx, file, model, &mut |_, _| {})
    }

    /// [`GpuWeights::upload_with_layouts`] with the default layouts.
    pub fn upload_with_progress(
        ctx: &Context,
        file: &GgufFile,
        model: &Model,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GpuWeights, ExecError> {
        Self::upload_with_layouts(ctx, file, model, LayoutChoice::Auto, progress)
    }

    /// [`GpuWeights::upload`], calling `progress(bytes done, bytes in all)` after each tensor
    /// (a 3B model is ~2 GB: seconds to minutes on a board's memory bus), with each GEMM
    /// weight in the layout `choice` picks ([`weight_layouts`]) and every fusable gate/up
    /// pair in one combined buffer.
    pub fn upload_with_layouts(
        ctx: &Context,
        file: &GgufFile,
        model: &Model,
        choice: LayoutChoice,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GpuWeights, ExecError> {
        let start = Instant::now();
        // A combined tensor is bound whole by the fused kernel: combine only what fits one
        // binding.
        let can = CombinableInFile {
            file,
            max_bytes: u64::from(ctx.caps().max_storage_buffer_range),
        };
        let align = ctx.caps().min_storage_buffer_offset_alignment.max(4);
        // The graph with everything that can fuse fused: what decides the combined buffers.
        // Norms stay unfolded, so their weights are listed (folded, a projection reads them).
        let every_pair = FuseOptions {
            norm: false,
            rope: false,
            ..FuseOptions::ALL
        };
        let graph = fuse(&model.graph, every_pair, &can);
        let caps = device_caps(ctx.info(), ctx.caps());
        let mut layouts = weight_layouts(file, &graph, choice, &caps);
        let mut repack_time = Duration::ZERO;
        // (buffer name, the tensors it holds: one, or several combined row-wise)
        let mut names: Vec<(String, Vec<&str>)> = Vec::new();
        for node in &graph.nodes {
            match &node.op {
                Op::Embedding { table, .. } => names.push((table.clone(), vec![table])),
                Op::RmsNorm { weight, .. } | Op::HeadRmsNorm { weight, .. } => {
                    names.push((weight.clone(), vec![weight]))
                }
                Op::Rope {
                    freq_factors: Some(f),
                    ..
                } => names.push((f.clone(), vec![f])),
                Op::Linear { weight, bias, .. } => {
                    names.push((weight.clone(), vec![weight]));
                    if let Some(b) = bias {
                        names.push((b.clone(), vec![b]));
                    }
                }
                Op::LinearSwiGlu { gate, up, .. } => {
                    names.push((gate_up_name(gate, up), vec![gate, up]))
                }
                Op::LinearStack { parts, .. } => {
                    let weights: Vec<&str> = parts.iter().map(|p| p.weight.as_str()).collect();
                    names.push((combined_name(&weights), weights));
                    let biases: Vec<&str> =
                        parts.iter().filter_map(|p| p.bias.as_deref()).collect();
                    if !biases.is_empty() {
                        names.push((combined_name(&biases), biases));
                    }
                }
                _ => {}
            }
        }
        names.sort_unstable();
        names.dedup();
        let tensors = names
            .iter()
            .map(|(_, parts)| {
                parts
                    .iter()
                    .map(|&name| {
                        file.tensor(name).ok_or_else(|| {
                            ExecError::Unsupported(format!(
                                "tensor {name} is missing from the model"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let total: u64 = tensors.iter().flatten().map(|t| t.size).sum();
        let mut done = 0;
        let mut buffers = HashMap::new();
        let mut aliases = HashMap::new();
        let mut combos = HashMap::new();
        for ((name, names_of_parts), parts) in names.into_iter().zip(tensors) {
            // Row combining comes first, before anything per format: the combined tensor is
            // the parts' rows in order (gate then up: `rocky_compiler::templates::gemm::
            // combine_gate_up`'s layout).
            let data: std::borrow::Cow<[u8]> = match parts.as_slice() {
                [one] => file.tensor_data(one).into(),
                _ => parts
                    .iter()
                    .map(|t| file.tensor_data(t))
                    .collect::<Vec<_>>()
                    .concat()
                    .into(),
            };
            // Then the repack, row by row over all of the buffer's rows (each row is repacked
            // on its own, so the parts keep their order and each starts at its share of the
            // bytes).
            let repack_start = Instant::now();
            let data = repack_for_upload(&name, &parts, &data, &layouts)?;
            repack_time += repack_start.elapsed();
            let ty = parts[0].ggml_type;
            if parts.len() == 1 {
                buffers.insert(name.clone(), (upload_bytes(ctx, &name, &data)?, ty));
            } else {
                // Each part's bytes: its share of the rows (a repacked row has one length
                // for all parts, as they share the row length).
                let all_bytes: u64 = parts.iter().map(|t| t.size).sum();
                let len = data.len() as u64;
                let mut offsets = vec![0u64];
                let mut acc = 0;
                for t in &parts {
                    acc += t.size;
                    offsets.push(len * acc / all_bytes);
                }
                let rows: Vec<u64> = parts.iter().map(|t| rows_of(t)).collect();
                let views_aligned = rows
                    .iter()
                    .scan(0u64, |start, r| {
                        let at = *start;
                        *start += r;
                        Some(at * 4 % align == 0)
                    })
                    .all(|ok| ok);
                if offsets.iter().all(|o| o % align == 0) {
                    let buf = upload_bytes(ctx, &name, &data)?;
                    for (i, part) in names_of_parts.iter().enumerate() {
                        let bytes = offsets[i + 1] - offsets[i];
                        aliases.insert(part.to_string(), (name.clone(), offsets[i], bytes));
                    }
                    buffers.insert(name.clone(), (buf, ty));
                    combos.insert(
                        name,
                        Combo {
                            parts: names_of_parts.iter().map(|p| p.to_string()).collect(),
                            views_aligned,
                        },
                    );
                } else {
                    // A part cannot be bound at an offset the device accepts: a buffer per
                    // part (already repacked), and they never fuse.
                    let layout = layouts.remove(&name);
                    for (i, part) in names_of_parts.iter().enumerate() {
                        let bytes = &data[offsets[i] as usize..offsets[i + 1] as usize];
                        if let Some(l) = layout {
                            layouts.insert(part.to_string(), l);
                        }
                        buffers.insert(part.to_string(), (upload_bytes(ctx, part, bytes)?, ty));
                    }
                }
            }
            done += parts.iter().map(|t| t.size).sum::<u64>();
            progress(done, total);
        }
        Ok(GpuWeights {
            buffers,
            aliases,
            combos,
            layouts,
            upload_time: start.elapsed(),
            repack_time,
        })
    }

    /// Whether tensors `parts` are one combined buffer, exactly these in this order.
    fn is_combo(&self, parts: &[&str]) -> bool {
        self.combos
            .get(&combined_name(parts))
            .is_some_and(|c| c.parts.iter().map(String::as_str).eq(parts.iter().copied()))
    }

    /// Whether `gate` and `up` share one combined buffer (so their GEMMs may fuse).
    pub fn combined(&self, gate: &str, up: &str) -> bool {
        self.is_combo(&[gate, up])
    }

    /// Whether any tensors are combined (whether fusing them is a choice at all).
    pub fn has_combined(&self) -> bool {
        !self.combos.is_empty()
    }

    /// The device layout of tensor or buffer `name` (a tensor, a combined [`gate_up_name`],
    /// or a tensor inside one).
    pub fn layout(&self, name: &str) -> WeightLayout {
        let buffer = self.aliases.get(name).map_or(name, |(b, _, _)| b.as_str());
        self.layouts.get(buffer).copied().unwrap_or_default()
    }

    /// Buffers in a layout other than GGUF, with it (sorted by name).
    pub fn repacked(&self) -> Vec<(&str, WeightLayout)> {
        let mut v: Vec<_> = self
            .layouts
            .iter()
            .filter(|(_, l)| !l.is_gguf())
            .map(|(n, l)| (n.as_str(), *l))
            .collect();
        v.sort_unstable();
        v
    }

    /// Bytes of every weight buffer, and the largest one (name, bytes).
    pub fn footprint(&self) -> (u64, Option<(&str, u64)>) {
        let total = self.buffers.values().map(|(b, _)| b.size()).sum();
        let largest = self
            .buffers
            .iter()
            .map(|(name, (b, _))| (name.as_str(), b.size()))
            .max_by_key(|&(_, bytes)| bytes);
        (total, largest)
    }

    /// Tensor or combined buffer `name` on the device.
    pub(super) fn get(&self, name: &str) -> WeightRef<'_> {
        let (buffer, offset, bytes) = match self.aliases.get(name) {
            Some((b, offset, bytes)) => (b.as_str(), *offset, Some(*bytes)),
            None => (name, 0, None),
        };
        let (buffer, ty) = &self.buffers[buffer];
        WeightRef {
            buffer,
            offset,
            bytes: bytes.unwrap_or(buffer.size()),
            ty: *ty,
        }
    }
}

/// The device layout of every GEMM weight buffer of `graph` (the fused graph) that is not
/// GGUF: a `Linear`'s tensor, a `LinearSwiGlu`'s combined gate/up tensor (named
/// [`gate_up_name`]) or a `LinearStack`'s combined weights ([`combined_name`]). A tensor the
/// embedding gather also reads (tied output projections) stays GGUF except where workgroup
/// memory is slow (panvk): there the embedding gathers from the repacked table, so the decode
/// step's largest GEMV reads its Q6_K or Q8_0 rows with 16-byte loads (on Mesa 26.1.6 the
/// 3B's 151936 × 2048 Q6_K output GEMV's load/store cycles fall 78 -> 36 and SFU 35.4 -> 23.7,
/// a compiler estimate: docs/measurements/2026-12-06i-mali-predict.md). Desktops keep GGUF, as
/// measured, unless a layout is forced (`--weight-layout`), which then holds for the gathered
/// table too. A tensor whose format or row length has no other layout stays GGUF.
fn weight_layouts(
    file: &GgufFile,
    graph: &Graph,
    choice: LayoutChoice,
    caps: &DeviceCaps,
) -> HashMap<String, WeightLayout> {
    let tables: Vec<&str> = graph
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Embedding { table, .. } => Some(table.as_str()),
            _ => None,
        })
        .collect();
    let mut out = HashMap::new();
    for node in &graph.nodes {
        let (name, parts, in_features) = match &node.op {
            Op::Linear {
                weight,
                in_features,
                ..
            } => (weight.clone(), vec![weight.as_str()], *in_features),
            Op::LinearSwiGlu {
                gate,
                up,
                in_features,
                ..
            } => (
                gate_up_name(gate, up),
                vec![gate.as_str(), up.as_str()],
                *in_features,
            ),
            Op::LinearStack {
                parts, in_features, ..
            } => {
                let weights: Vec<&str> = parts.iter().map(|p| p.weight.as_str()).collect();
                (combined_name(&weights), weights, *in_features)
            }
            _ => continue,
        };
        let Some(t) = file.tensor(parts[0]) else {
            continue;
        };
        let Ok(format) = weight_format(t.ggml_type, parts[0]) else {
            continue;
        };
        let layout = match choice {
            LayoutChoice::Auto => default_layout(format, caps),
            LayoutChoice::Force(l) => l,
        };
        let fits = layout.supports(format)
            && (in_features as u64) % u64::from(format.block_elems()) == 0
            && parts.iter().all(|p| {
                file.tensor(p).is_some_and(|u| {
                    u.ggml_type == t.ggml_type && u.dims.first() == Some(&(in_features as u64))
                })
            });
        // A combined gate/up tensor is bound whole: it must still fit one binding once a
        // partial last group has made its rows longer.
        let rows: u64 = parts
            .iter()
            .filter_map(|p| file.tensor(p))
            .map(|t| t.dims.iter().skip(1).product::<u64>())
            .sum();
        let bound = rows.saturating_mul(layout.row_bytes(format, in_features as u64));
        let fits = fits
            && (parts.len() == 1 || bound.next_multiple_of(4) <= caps.max_storage_buffer_range);
        let gathered = parts.iter().any(|p| tables.contains(p));
        let forced = matches!(choice, LayoutChoice::Force(_));
        if !layout.is_gguf() && fits && (!gathered || forced || caps.shared_memory_is_slow) {
            out.insert(name, layout);
        }
    }
    out
}

/// A device buffer holding `data`, padded to a multiple of 4 bytes (kernels read weights as
/// u32 words).
fn upload_bytes(ctx: &Context, name: &str, data: &[u8]) -> Result<Buffer, ExecError> {
    let mut buf = Buffer::new(ctx, (data.len() as u64).next_multiple_of(4), name)?;
    buf.upload_bytes(0, data)?;
    Ok(buf)
}

/// The bytes of buffer `name` (holding the rows of `parts`, row-combined already) as the
/// device holds them: as they are, or repacked into its layout (`dequant::layout`; the GGUF
/// file is never rewritten).
fn repack_for_upload<'a>(
    name: &str,
    parts: &[&rocky_models::gguf::TensorInfo],
    data: &'a [u8],
    layouts: &HashMap<String, WeightLayout>,
) -> Result<std::borrow::Cow<'a, [u8]>, ExecError> {
    let Some(&layout) = layouts.get(name) else {
        return Ok(std::borrow::Cow::Borrowed(data));
    };
    let format = weight_format(parts[0].ggml_type, name)?;
    let k = parts[0].dims[0];
    let rows = parts
        .iter()
        .map(|t| t.dims.iter().skip(1).product::<u64>())
        .sum();
    to_device(format, layout, k, rows, data)
        .map_err(|e| ExecError::Unsupported(format!("tensor {name}: {e}")))
}

pub(super) fn weight_format(ty: GgmlType, tensor: &str) -> Result<WeightFormat, ExecError> {
    Ok(match ty {
        GgmlType::F32 => WeightFormat::F32,
        GgmlType::F16 => WeightFormat::F16,
        GgmlType::BF16 => WeightFormat::BF16,
        GgmlType::Q8_0 => WeightFormat::Q8_0,
        GgmlType::Q5_0 => WeightFormat::Q5_0,
        GgmlType::Q4_0 => WeightFormat::Q4_0,
        GgmlType::Q4_1 => WeightFormat::Q4_1,
        GgmlType::Q5_1 => WeightFormat::Q5_1,
        GgmlType::Q4K => WeightFormat::Q4K,
        GgmlType::Q5K => WeightFormat::Q5K,
        GgmlType::Q6K => WeightFormat::Q6K,
        GgmlType::IQ4NL => WeightFormat::IQ4NL,
        GgmlType::IQ4XS => WeightFormat::IQ4XS,
        other => {
            // The list comes from the compiler's formats, so it cannot go stale.
            let gpu: Vec<&str> = WeightFormat::ALL.iter().map(|f| f.ggml_name()).collect();
            return Err(ExecError::Unsupported(format!(
                "tensor {tensor} is {other}, which has no GPU kernel yet (GPU formats: {}); run with --backend cpu or requantize",
                gpu.join(", ")
            )));
        }
    })
}

#[cfg(test)]
mod weight_format_tests {
    use super::*;

    /// Every type the CPU reference computes with has a GPU format, so no model reaches this
    /// refusal through the CLI (the loader refuses other types first); it is checked here.
    #[test]
    fn a_type_without_gpu_kernels_is_named_with_the_gpu_formats() {
        for ty in GgmlType::ALL.into_iter().filter(|t| t.can_dequantize()) {
            assert!(weight_format(ty, "t").is_ok(), "{ty} has no GPU format");
        }
        let e = weight_format(GgmlType::Q2K, "blk.0.ffn_up.weight").unwrap_err();
        let msg = e.to_string();
        for part in [
            "blk.0.ffn_up.weight",
            "is Q2_K",
            "no GPU kernel",
            "BF16",
            "Q5_1",
            "--backend cpu",
        ] {
            assert!(msg.contains(part), "{part:?} missing from {msg}");
        }
    }
}
