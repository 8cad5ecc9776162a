//! The distinct GEMM workloads of a model's prefill graph at a ubatch size and GEMV workloads
//! of its decode step: what `rocky tune` searches, each once however many layers share it; and its attention workloads at a few
//! KV lengths and of its decode step ([`attention_workloads`]).

use rocky_compiler::{AttentionWorkload, KvTypes, Workload};
use rocky_models::arch::Model;
use rocky_models::fuse::FuseOptions;
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

/// The distinct GEMM workloads the executor runs for `model` at `ubatch` tokens, then the GEMV
/// workloads of a decode step (m = 1), in graph order of first use: those of the default graph, then the fused gate/up GEMMs where gate and
/// up can fuse (whether they should is the graph-level step's choice, which needs both tuned).
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
    let weights = std::sync::Arc::new(GpuWeights::upload_with_progress(
        ctx, file, model, progress,
    )?);
    let mut variants = vec![FuseOptions::DEFAULT];
    if weights.has_combined() {
        variants.push(FuseOptions::ALL);
    }
    let mut used: Vec<(String, Workload)> = Vec::new();
    // The prefill at `ubatch`, then a decode step (one row: the GEMV workloads, keyed apart
    // from the GEMMs, so `rocky tune` tunes decode too).
    let mut sizes = vec![ubatch];
    if ubatch != 1 {
        sizes.push(1);
    }
    for rows in sizes {
        for &fuse in &variants {
            let options = ExecutorOptions {
                ubatch: rows,
                budget: CommandBudget::for_device(ctx.info()),
                timeout: Duration::from_secs(600),
                profile: false,
                fuse,
                overlap: false,
                kv: Default::default(),
                kv_rotation: false,
            };
            let mut executor = Executor::new(ctx, model, weights.clone(), options, rows)?;
            executor.prepare(&DefaultSchedules)?;
            used.extend(executor.used().iter().map(|(l, w, _, _)| (l.clone(), *w)));
            if rows == 1 {
                // The decode step's own program: its fusions (the RMSNorm folded into the
                // GEMVs) make workloads a one-row prefill does not have.
                executor.prepare_decode(&DefaultSchedules)?;
                used.extend(executor.used().iter().map(|(l, w, _, _)| (l.clone(), *w)));
            }
        }
    }
    Ok(distinct_gemms(used.iter().map(|(l, w)| (l.as_str(), *w))))
}

/// The attention workloads `rocky tune` searches for `model` at `ubatch`: one per KV length
/// of `kv_lengths`, bucketed as the executor buckets its cache size
/// ([`AttentionWorkload::kv_bucket`]), lengths below the ubatch raised to it (a prefill's
/// cache holds at least one ubatch), duplicates dropped. A prefill whose bucket is not
/// tuned uses the nearest tuned one (see `DbSchedules`), so two lengths, one ubatch and a long
/// context, cover a model. Over a cache of types `kv` (keyed apart: a record of one type never
/// serves another). Empty for a model without attention.
pub fn attention_workloads(
    model: &Model,
    ubatch: usize,
    kv_lengths: &[u32],
    kv_types: KvTypes,
) -> Vec<ModelWorkload> {
    let mut shape = None;
    // Layers by sliding window (0: none): Gemma 3's local and global layers are different
    // workloads (the executor keys each by its window).
    let mut by_window: Vec<(u32, Vec<String>)> = Vec::new();
    for node in &model.graph.nodes {
        if let Op::Attention {
            n_heads,
            n_kv_heads,
            head_dim,
            sliding_window,
            ..
        } = &node.op
        {
            shape.get_or_insert((*n_heads as u32, *n_kv_heads as u32, *head_dim as u32));
            let window = sliding_window.map_or(0, |w| w as u32);
            match by_window.iter_mut().find(|(w, _)| *w == window) {
                Some((_, labels)) => labels.push(node.label.clone()),
                None => by_window.push((window, vec![node.label.clone()])),
            }
        }
    }
    let Some((n_heads, n_kv_heads, head_dim)) = shape else {
        return Vec::new();
    };
    let m = ubatch.max(1) as u32;
    let mut out: Vec<ModelWorkload> = Vec::new();
    // The prefill's ubatch at every length, then the decode step (m = 1, where the default
    // splits the keys over several workgroups: `split_kv`) at the longest: a decode step at
    // any length uses that record (the nearest tuned KV length of its shape).
    let longest = kv_lengths.iter().copied().max();
    let runs = kv_lengths
        .iter()
        .map(|&kv| (m, kv))
        .chain(longest.filter(|_| m > 1).map(|kv| (1, kv)));
    for (m, kv) in runs {
        for (window, labels) in &by_window {
            let w = Workload::Attention(AttentionWorkload {
                m,
                n_heads,
                n_kv_heads,
                head_dim,
                max_kv: AttentionWorkload::kv_bucket(kv.max(m)),
                window: *window,
                kv: kv_types,
            });
            if !out.iter().any(|o| o.workload == w) {
                out.push(ModelWorkload {
                    workload: w,
                    labels: labels.clone(),
                });
            }
        }
    }
    out
}

/// Groups GEMM workloads by value, keeping the order of first appearance.
fn distinct_gemms<'a>(nodes: impl Iterator<Item = (&'a str, Workload)>) -> Vec<ModelWorkload> {
    let mut out: Vec<ModelWorkload> = Vec::new();
    for (label, w) in nodes.filter(|(_, w)| matches!(w, Workload::Gemm(_) | Workload::Gemv(_))) {
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
    use rocky_models::arch::ModelConfig;
    use rocky_models::graph::GraphBuilder;

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
            rms_norm_eps_bits: None,
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

    /// Two attention layers, one with a sliding window: each window is a workload of its own
    /// at every KV length and in the decode step, labelled with its layers.
    #[test]
    fn windowed_and_global_layers_are_separate_attention_workloads() {
        let (mut g, tokens) = GraphBuilder::new();
        let mut x = tokens;
        for (layer, sliding_window) in [(0, Some(512)), (1, None)] {
            x = g.push(
                format!("blk.{layer}.attn"),
                Op::Attention {
                    layer,
                    n_heads: 4,
                    n_kv_heads: 1,
                    head_dim: 64,
                    sliding_window,
                    rope: None,
                },
                &[x, x, x],
            );
        }
        let config = ModelConfig {
            architecture: "gemma3".into(),
            n_embd: 256,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 1,
            head_dim: 64,
            n_ff: 512,
            n_vocab: 16,
            n_ctx_train: 4096,
            rope_theta: 1e6,
            rms_eps: 1e-6,
            tied_output: true,
        };
        let model = Model {
            config,
            graph: g.finish(tokens, x),
        };
        let got: Vec<(u32, u32, u32, Vec<String>)> =
            attention_workloads(&model, 64, &[64, 4096], KvTypes::default())
                .into_iter()
                .map(|mw| match mw.workload {
                    Workload::Attention(a) => (a.m, a.max_kv, a.window, mw.labels),
                    other => panic!("not attention: {other:?}"),
                })
                .collect();
        let local = vec!["blk.0.attn".to_string()];
        let global = vec!["blk.1.attn".to_string()];
        assert_eq!(
            got,
            vec![
                (64, 64, 512, local.clone()),
                (64, 64, 0, global.clone()),
                (64, 4096, 512, local.clone()),
                (64, 4096, 0, global.clone()),
                // The decode step at the longest length.
                (1, 4096, 512, local),
                (1, 4096, 0, global),
            ]
        );
        // Over a q8_0/f32 cache the same shapes are other workloads: their database keys carry
        // the types, while an f16 cache's keys stay as they were before types existed.
        let typed = attention_workloads(
            &model,
            64,
            &[64, 4096],
            KvTypes::new(rocky_compiler::KvType::Q8_0, rocky_compiler::KvType::F32),
        );
        let plain = attention_workloads(&model, 64, &[64, 4096], KvTypes::default());
        assert_eq!(typed.len(), plain.len());
        for (t, p) in typed.iter().zip(&plain) {
            assert_ne!(t.workload, p.workload);
            let tk = serde_json::to_string(&t.workload).unwrap();
            let pk = serde_json::to_string(&p.workload).unwrap();
            assert!(tk.contains(r#""kv":{"k":"q8_0","v":"f32"}"#), "{tk}");
            assert!(!pk.contains(r#""kv""#), "{pk}");
            // A stored key without the field reads back as the f16 cache's workload.
            assert_eq!(serde_json::from_str::<Workload>(&pk).unwrap(), p.workload);
        }
    }
}
