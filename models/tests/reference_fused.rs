//! The fusion pass keeps the model's function: the CPU reference of the fused graph (whose
//! fused ops are the unfused ops composed) gives the same logits as the unfused graph, bit for
//! bit, on the tiny Qwen2 files; and it does fuse there (one gate/up GEMM and two residual
//! GEMMs per layer, no SwiGLU or Add left, every RMSNorm folded into its projections, both
//! RoPEs of every layer folded into its attention).

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
        // Every RMSNorm folded into the projections that read it: two per layer (Q/K/V,
        // gate/up) and the output norm.
        assert_eq!(count(&fused, &|op| matches!(op, Op::RmsNorm { .. })), 0);
        assert_eq!(
            count(&fused, &|op| matches!(
                op,
                Op::Linear { norm: Some(_), .. } | Op::LinearSwiGlu { norm: Some(_), .. }
            )),
            4 * n_layer + 1
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
        assert_eq!(
            fused.graph.nodes.len(),
            model.graph.nodes.len() - 4 * n_layer - (2 * n_layer + 1) - 2 * n_layer
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
