//! The distinct GEMM workloads of a model's prefill graph at a ubatch size: what `rocky tune`
//! searches, each once however many layers share it; and its attention workloads at a few
//! KV lengths ([`attention_workloads`]).

use rocky_compiler::{AttentionWorkload, Workload};
use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_models::graph::Op;
use rocky_runtime::executor::{DefaultSchedules, ExecError, Executor, ExecutorOptions, GpuWeights};
use rocky_runtime::{CommandBudget, Context};
use std::time::Duration;

/// One workload and the graph nodes that run it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelWorkload {
    pub workload: Workload,
    /// Node labels (e.g. `blk.0.attn_q`) in graph order.
    pub labels: Vec<String>,
}

/// The distinct GEMM workloads the executor runs for `model` at `ubatch` tokens, in graph
/// order of first use.
///
/// Asks the executor itself (it decides the weight formats, activation types and the
/// last-row shapes), so the tuner tunes exactly the keys the prefill later looks up. This
/// uploads the weights and builds the default pipelines, which the tuner measures first anyway.
pub fn model_workloads(
    ctx: &Context,
    file: &GgufFile,
    model: &Model,
    ubatch: usize,
) -> Result<Vec<ModelWorkload>, ExecError> {
    model_workloads_with_progress(ctx, file, model, ubatch, &mut |_, _| {})
}

/// [`model_workloads`], reporting the weight upload as `progress(bytes done, bytes in all)`.
pub fn model_workloads_with_progress(
    ctx: &Context,
    file: &GgufFile,
    model: &Model,
    ubatch: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<ModelWorkload>, ExecError> {
    let weights = GpuWeights::upload_with_progress(ctx, file, model, progress)?;
    let options = ExecutorOptions {
        ubatch,
        budget: CommandBudget::for_device(ctx.info()),
        timeout: Duration::from_secs(600),
        profile: false,
    };
    let mut executor = Executor::new(ctx, model, weights, options, ubatch)?;
    executor.prepare(&DefaultSchedules)?;
    Ok(distinct_gemms(
        executor
            .used
            .iter()
            .map(|(label, w, _, _)| (label.as_str(), *w)),
    ))
}

/// The attention workloads `rocky tune` searches for `model` at `ubatch`: one per KV length
/// of `kv_lengths`, bucketed as the executor buckets its cache size
/// ([`AttentionWorkload::kv_bucket`]), lengths below the ubatch raised to it (a prefill's
/// cache holds at least one ubatch), duplicates dropped. A prefill whose bucket is not
/// tuned uses the nearest tuned one (see `DbSchedules`), so two lengths, one ubatch and a long
/// context, cover a model. Empty for a model without attention.
pub fn attention_workloads(model: &Model, ubatch: usize, kv_lengths: &[u32]) -> Vec<ModelWorkload> {
    let mut shape = None;
    let mut labels = Vec::new();
    for node in &model.graph.nodes {
        if let Op::Attention {
            n_heads,
            n_kv_heads,
            head_dim,
            ..
        } = &node.op
        {
            shape.get_or_insert((*n_heads as u32, *n_kv_heads as u32, *head_dim as u32));
            labels.push(node.label.clone());
        }
    }
    let Some((n_heads, n_kv_heads, head_dim)) = shape else {
        return Vec::new();
    };
    let m = ubatch.max(1) as u32;
    let mut out: Vec<ModelWorkload> = Vec::new();
    for &kv in kv_lengths {
        let w = Workload::Attention(AttentionWorkload {
            m,
            n_heads,
            n_kv_heads,
            head_dim,
            max_kv: AttentionWorkload::kv_bucket(kv.max(m)),
            window: 0,
        });
        if !out.iter().any(|o| o.workload == w) {
            out.push(ModelWorkload {
                workload: w,
                labels: labels.clone(),
            });
        }
    }
    out
}

/// Groups GEMM workloads by value, keeping the order of first appearance.
fn distinct_gemms<'a>(nodes: impl Iterator<Item = (&'a str, Workload)>) -> Vec<ModelWorkload> {
    let mut out: Vec<ModelWorkload> = Vec::new();
    for (label, w) in nodes.filter(|(_, w)| matches!(w, Workload::Gemm(_))) {
        match out.iter_mut().find(|m| m.workload == w) {
            Some(m) => m.labels.push(label.to_string()),
            None => out.push(ModelWorkload {
                workload: w,
                labels: vec![label.to_string()],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::{ActType, GemmWorkload, RmsNormWorkload, WeightFormat};

    fn gemm(n: u32) -> Workload {
        Workload::Gemm(GemmWorkload {
            m: 16,
            n,
            k: 256,
            act: ActType::F32,
            weight: WeightFormat::Q4K,
            layout: rocky_compiler::WeightLayout::Gguf,
            bias: false,
            epilogue: Default::default(),
        })
    }

    #[test]
    fn identical_gemms_are_grouped_and_other_ops_dropped() {
        let norm = Workload::RmsNorm(RmsNormWorkload::new(16, 256, 1e-6));
        let nodes = [
            ("blk.0.norm", norm),
            ("blk.0.q", gemm(256)),
            ("blk.0.ffn", gemm(512)),
            ("blk.1.q", gemm(256)),
        ];
        let got = distinct_gemms(nodes.into_iter());
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].workload, gemm(256));
        assert_eq!(got[0].labels, ["blk.0.q", "blk.1.q"]);
        assert_eq!(got[1].labels, ["blk.0.ffn"]);
    }
}
