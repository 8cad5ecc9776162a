//! The counter-ordered form of every kind of kernel a decode step runs (`ir::chain`) passes
//! spirv-val for Vulkan 1.2 on a desktop and a Mali-like profile, and keeps the contract the
//! runtime relies on: the original bindings first, `chain` last, three more push words.

mod common;

use common::{desktop_vk12, mali_vk12, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::ir::chain::{ModelData, CHAIN_BINDING_NAME, CHAIN_PUSH_WORDS};
use rocky_compiler::templates::attention::{self, combine::instantiate_combine};
use rocky_compiler::templates::gemm::{ActType, Epilogue, GemmWorkload};
use rocky_compiler::templates::{instantiate_with_args, reads_position};
use rocky_compiler::{
    default_schedule, instantiate, AttentionWorkload, CompiledKernel, DeviceCaps, EltwiseWorkload,
    EmbeddingWorkload, KvTypes, RmsNormWorkload, RopeWorkload, WeightFormat, WeightLayout,
    Workload,
};

fn gemv(weight: WeightFormat, n: u32, k: u32, epilogue: Epilogue, norm: bool) -> Workload {
    Workload::Gemv(GemmWorkload {
        m: 1,
        n,
        k,
        act: ActType::F32,
        weight,
        layout: WeightLayout::Gguf,
        bias: false,
        epilogue,
        rms_norm_eps_bits: norm.then_some(1e-6f32.to_bits()),
    })
}

fn workloads() -> Vec<Workload> {
    use WeightFormat::{Q4K, Q6K, Q8_0};
    let attn = AttentionWorkload {
        m: 1,
        n_heads: 16,
        n_kv_heads: 2,
        head_dim: 128,
        max_kv: 4096,
        window: 0,
        kv: KvTypes::F16,
    };
    vec![
        gemv(Q4K, 2560, 2048, Epilogue::None, true),
        gemv(Q4K, 11008, 2048, Epilogue::SwiGlu, true),
        gemv(Q6K, 2048, 11008, Epilogue::Residual, false),
        gemv(Q4K, 2048, 11008, Epilogue::Residual, false),
        gemv(Q8_0, 4864, 896, Epilogue::SwiGlu, true),
        gemv(Q6K, 151936, 2048, Epilogue::None, true),
        Workload::RmsNorm(RmsNormWorkload::new(1, 2048, 1e-6)),
        Workload::RopeNeox(RopeWorkload::new(1, 16, 128, 1e6).with_kv_write(2, KvTypes::F16)),
        Workload::Add(EltwiseWorkload { m: 1, width: 2048 }),
        Workload::Embedding(EmbeddingWorkload::gguf(1, 2048, WeightFormat::Q4K)),
        Workload::Attention(attn),
    ]
}

fn check(label: &str, plain: &CompiledKernel) -> Result<(), String> {
    let chained = plain
        .chained(ModelData::Cached)
        .ok_or_else(|| format!("{label}: no source to chain"))?
        .map_err(|r| format!("{label}: refused: {r}"))?;
    let (p, c) = (&plain.meta, &chained.meta);
    let names = |m: &rocky_compiler::KernelMeta| -> Vec<String> {
        m.bindings.iter().map(|b| b.name.clone()).collect()
    };
    let mut expected = names(p);
    expected.push(CHAIN_BINDING_NAME.into());
    if names(c) != expected {
        return Err(format!(
            "{label}: bindings {:?}, want {expected:?}",
            names(c)
        ));
    }
    let chain = c.bindings.last().unwrap();
    if chain.read_only || chain.binding <= p.bindings.iter().map(|b| b.binding).max().unwrap() {
        return Err(format!("{label}: chain binding {chain:?}"));
    }
    if c.push_constant_bytes != p.push_constant_bytes + 4 * CHAIN_PUSH_WORDS {
        return Err(format!(
            "{label}: push {} bytes, plain {}",
            c.push_constant_bytes, p.push_constant_bytes
        ));
    }
    if c.workgroup_size != p.workgroup_size || c.shared_bytes != p.shared_bytes {
        return Err(format!("{label}: workgroup or shared memory changed"));
    }
    spirv_val(&chained.spirv, "vulkan1.2")
        .map_err(|e| format!("{label}: {e}\n{}", spirv_dis(&chained.spirv)))
}

#[test]
fn the_chained_form_of_every_decode_kernel_kind_passes_spirv_val() {
    require_spirv_val();
    let profiles: [(&str, DeviceCaps); 2] = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    let mut failures = Vec::new();
    let mut checked = 0;
    for (pname, caps) in &profiles {
        for w in workloads() {
            let s = default_schedule(&w, caps);
            let label = format!("{pname} {}", w.kind());
            let plain = instantiate(&w, &s, caps).expect("the default instantiates");
            let mut kernels = vec![(label.clone(), plain)];
            if reads_position(&w) {
                let args = instantiate_with_args(&w, &s, caps).expect("args form");
                kernels.push((format!("{label} args"), args));
            }
            if let (Workload::Attention(aw), rocky_compiler::Schedule::Attention(a)) = (&w, &s) {
                if attention::split_kv::is_split(a) {
                    let combine = instantiate_combine(aw, a, caps).expect("combine");
                    kernels.push((format!("{label} combine"), combine));
                }
            }
            for (l, k) in kernels {
                checked += 1;
                if let Err(e) = check(&l, &k) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(checked >= 24, "only {checked} kernels checked");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
