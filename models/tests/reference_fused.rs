//! The fusion pass keeps the model's function: the CPU reference of the fused graph (whose
//! fused ops are the unfused ops composed) gives the same logits as the unfused graph, bit for
//! bit, on the tiny Qwen2 files; and it does fuse there (one gate/up GEMM and two residual
//! GEMMs per layer, no SwiGLU or Add left, Q/K/V stacked where they share a type, every
//! RMSNorm folded into its projections, both RoPEs of every layer folded into its attention).

mod common;

use rocky_models::arch::{self, Model};
use rocky_models::fuse::{fuse_for_file, FuseOptions};
use rocky_models::gguf::GgufFile;
use rocky_models::graph::Op;
use rocky_models::reference::{forward, ReferenceOptions};

#[test]
fn fused_graph_gives_the_unfused_logits() {
    for name in ["qwen2-tiny-q4_k_m.gguf", "qwen2-tiny-q8_0.gguf"] {
        let path = common::shared().join("models").join(name);
        let file = GgufFile::open(&path).unwrap();
        let model = arch::load(&file).unwrap();
        let fused = Model {
            config: model.config.clone(),
            graph: fuse_for_file(&model.graph, &file, FuseOptions::ALL),
        };
        let n_layer = model.config.n_layer;
        let count =
            |m: &Model, f: &dyn Fn(&Op) -> bool| m.graph.nodes.iter().filter(|n| f(&n.op)).count();
        assert_eq!(
            count(&fused, &|op| matches!(op, Op::LinearSwiGlu { .. })),
            n_layer
        );
        assert_eq!(
            count(&fused, &|op| matches!(
                op,
                Op::Linear { residual: true, .. }
            )),
            2 * n_layer
        );
        assert_eq!(
            count(&fused, &|op| matches!(
                op,
                Op::SwiGlu { .. } | Op::Add { .. }
            )),
            0
        );
        // Q, K and V stacked where the file holds them in one type (a run in graph order cut
        // where the type changes), with a slice per part.
        let ty = |l: usize, p: &str| {
            file.tensor(&format!("blk.{l}.attn_{p}.weight"))
                .unwrap()
                .ggml_type
        };
        let mut want_stacks: Vec<Vec<String>> = Vec::new();
        let mut unstacked = 0;
        for l in 0..n_layer {
            for run in ["q", "k", "v"].chunk_by(|&a, &b| ty(l, a) == ty(l, b)) {
                if run.len() >= 2 {
                    let names = run.iter().map(|r| format!("blk.{l}.attn_{r}.weight"));
                    want_stacks.push(names.collect());
                } else {
                    unstacked += 1;
                }
            }
        }
        let got_stacks: Vec<Vec<String>> = fused
            .graph
            .nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::LinearStack { parts, .. } => {
                    Some(parts.iter().map(|p| p.weight.clone()).collect())
                }
                _ => None,
            })
            .collect();
        assert_eq!(got_stacks, want_stacks, "{name}");
        assert!(!got_stacks.is_empty(), "{name}: nothing stacked");
        let stacked_parts: usize = want_stacks.iter().map(Vec::len).sum();
        assert_eq!(
            count(&fused, &|op| matches!(op, Op::Slice { .. })),
            stacked_parts
        );
        // Every RMSNorm folded into the projections that read it: per layer the Q/K/V stacks
        // and projections, gate/up; and the output norm.
        assert_eq!(count(&fused, &|op| matches!(op, Op::RmsNorm { .. })), 0);
        assert_eq!(
            count(&fused, &|op| matches!(
                op,
                Op::Linear { norm: Some(_), .. }
                    | Op::LinearSwiGlu { norm: Some(_), .. }
                    | Op::LinearStack { norm: Some(_), .. }
            )),
            want_stacks.len() + unstacked + n_layer + 1
        );
        // Both RoPEs of every layer folded into its attention.
        assert_eq!(count(&fused, &|op| matches!(op, Op::Rope { .. })), 0);
        assert_eq!(
            count(&fused, &|op| matches!(
                op,
                Op::Attention { rope: Some(_), .. }
            )),
            n_layer
        );
        // Gate/up: -2 per layer, residuals -2, norms -(2 per layer + 1), RoPEs -2, stacks +1 each.
        assert_eq!(
            fused.graph.nodes.len(),
            model.graph.nodes.len() - 4 * n_layer - (2 * n_layer + 1) - 2 * n_layer
                + want_stacks.len()
        );
        let tokens: Vec<u32> = (0..23).map(|i| (i * 37 + 5) % 1000).collect();
        let opts = ReferenceOptions::llama_cpp();
        let want = forward(&file, &model, &tokens, opts).unwrap();
        let got = forward(&file, &fused, &tokens, opts).unwrap();
        assert_eq!(got, want, "{name}: fused and unfused logits differ");
        let off = Model {
            config: model.config.clone(),
            graph: fuse_for_file(&model.graph, &file, FuseOptions::NONE),
        };
        assert_eq!(off.graph.nodes.len(), model.graph.nodes.len());
    }
}
