//! The compiler's GEMV kernels (M = 1 … 8), run on the Vulkan device present (lavapipe in CI),
//! agree with the compiler's CPU reference: every weight format (and the aligned layout where
//! it exists), both reductions the device offers, each epilogue, and the shapes of the
//! Qwen2.5-0.5B decode (k = 896 and 4864) including its vocabulary-sized output projection
//! (in N-slices where the device's binding range is smaller). Y starts as NaN, so an output
//! never written fails. A few seconds on lavapipe.

mod common;

use half::f16;
use rocky_compiler::templates::gemm::interface::{
    BINDING_BIAS, BINDING_RESIDUAL, BINDING_WEIGHT, BINDING_X, BINDING_Y,
};
use rocky_compiler::templates::gemm::{self, ActType, Epilogue, GemmPush, GemmWorkload};
use rocky_compiler::templates::gemv::{self, reference, GemvSchedule, Reduce};
use rocky_compiler::testdata::{random_activations, random_weights, SplitMix64};
use rocky_compiler::{DeviceCaps, WeightFormat, WeightLayout};
use rocky_runtime::{device_caps, Buffer, ComputePipeline, Context, Recorder};
use std::time::Duration;

struct Inputs {
    x: Vec<f32>,
    weight: Vec<u8>,
    bias: Option<Vec<f32>>,
    residual: Option<Vec<f32>>,
}

fn make_inputs(w: &GemmWorkload, seed: u64) -> Inputs {
    let tensor = |s| random_weights(w.weight, w.n as usize, w.k as usize, s);
    Inputs {
        x: random_activations((w.m * w.k) as usize, seed),
        weight: match w.epilogue {
            Epilogue::SwiGlu => {
                gemm::combine_gate_up(&tensor(seed ^ 1), &tensor(seed ^ 3)).unwrap()
            }
            _ => tensor(seed ^ 1),
        },
        bias: w.bias.then(|| random_activations(w.n as usize, seed ^ 2)),
        residual: (w.epilogue == Epilogue::Residual)
            .then(|| random_activations((w.m * w.n) as usize, seed ^ 4)),
    }
}

fn act_buffer(ctx: &Context, act: ActType, values: &[f32], label: &str) -> Buffer {
    match act {
        ActType::F32 => Buffer::from_slice(ctx, values, label),
        ActType::F16 => {
            let halfs: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            Buffer::from_slice(ctx, &halfs, label)
        }
    }
    .unwrap_or_else(|e| panic!("buffer {label}: {e}"))
}

/// Runs the pair on the device (one dispatch per N-slice) and returns Y as f32.
fn run(
    ctx: &Context,
    w: &GemmWorkload,
    s: &GemvSchedule,
    inputs: &Inputs,
    caps: &DeviceCaps,
) -> Result<(Vec<f32>, usize), String> {
    let kernel = gemv::instantiate(w, s, caps).map_err(|e| format!("refused: {e}"))?;
    let pipeline =
        ComputePipeline::from_kernel(ctx, None, &kernel).map_err(|e| format!("pipeline: {e}"))?;
    let slices = gemm::n_slices(
        w,
        caps.max_storage_buffer_range,
        u64::from(caps.min_storage_buffer_offset_alignment),
    )
    .map_err(|e| e.to_string())?;
    let x = act_buffer(ctx, w.act, &inputs.x, "x");
    let device_weight = rocky_compiler::dequant::layout::to_device(
        w.weight,
        w.layout,
        u64::from(w.k),
        u64::from(w.weight_rows()),
        &inputs.weight,
    )
    .map_err(|e| format!("weight layout: {e}"))?;
    let padded_len = (device_weight.len() as u64).div_ceil(4) * 4;
    let mut weight = Buffer::new(ctx, padded_len, "weight").map_err(|e| e.to_string())?;
    weight
        .upload_bytes(0, &device_weight)
        .map_err(|e| e.to_string())?;
    let y = act_buffer(ctx, w.act, &vec![f32::NAN; (w.m * w.n) as usize], "y");
    let bias = inputs
        .bias
        .as_ref()
        .map(|b| Buffer::from_slice(ctx, b, "bias").unwrap());
    let residual = inputs
        .residual
        .as_ref()
        .map(|r| act_buffer(ctx, w.act, r, "residual"));
    let mut rec = Recorder::new(ctx).map_err(|e| e.to_string())?;
    for slice in &slices {
        let bindings = kernel
            .meta
            .bindings
            .iter()
            .map(|b| match b.binding {
                BINDING_X => Ok(x.whole()),
                BINDING_WEIGHT => weight
                    .range(slice.weight_offset, slice.weight_range)
                    .map_err(|e| e.to_string()),
                BINDING_Y => Ok(y.whole()),
                BINDING_BIAS => bias
                    .as_ref()
                    .map(|b| b.whole())
                    .ok_or_else(|| "a bias the workload lacks".to_string()),
                BINDING_RESIDUAL => residual
                    .as_ref()
                    .map(|r| r.whole())
                    .ok_or_else(|| "a residual the workload lacks".to_string()),
                other => Err(format!("unknown GEMV binding {other} ({})", b.name)),
            })
            .collect::<Result<Vec<_>, String>>()?;
        let push = GemmPush::for_slice(w, slice).to_bytes();
        rec.dispatch(
            &pipeline,
            &bindings,
            &push,
            gemv::dispatch_grid_for(slice.n, s),
        )
        .map_err(|e| e.to_string())?;
    }
    rec.submit_and_wait(Duration::from_secs(300))
        .map_err(|e| e.to_string())?;
    drop(rec);
    let n = (w.m * w.n) as usize;
    let out = match w.act {
        ActType::F32 => y.download_f32(0, n).unwrap(),
        ActType::F16 => y
            .download::<f16>(0, n)
            .unwrap()
            .into_iter()
            .map(f16::to_f32)
            .collect(),
    };
    Ok((out, slices.len()))
}

fn check(
    ctx: &Context,
    w: &GemmWorkload,
    s: &GemvSchedule,
    caps: &DeviceCaps,
    seed: u64,
) -> Result<usize, String> {
    let inputs = make_inputs(w, seed);
    let r = reference::reference(
        w,
        s,
        &inputs.x,
        &inputs.weight,
        inputs.bias.as_deref(),
        inputs.residual.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let (y, slices) = run(ctx, w, s, &inputs, caps)?;
    reference::compare(w, s, &y, &r).map_err(|e| e.to_string())?;
    Ok(slices)
}

#[test]
fn gemv_kernels_match_the_cpu_reference_on_the_device() {
    let ctx = common::context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let mut r = SplitMix64::new(0x6E37);
    let mut failures = Vec::new();
    let mut reduces = std::collections::BTreeSet::new();
    let mut checked = 0;
    for (i, weight) in WeightFormat::ALL.into_iter().enumerate() {
        let k = if weight.block_elems() == 256 {
            1024
        } else {
            896
        };
        let epilogue = [Epilogue::None, Epilogue::SwiGlu, Epilogue::Residual][i % 3];
        let layouts: &[WeightLayout] = if WeightLayout::Aligned.supports(weight) {
            &[WeightLayout::Gguf, WeightLayout::Aligned]
        } else {
            &[WeightLayout::Gguf]
        };
        for &layout in layouts {
            let w = GemmWorkload {
                m: [1, 1, 3, 8][i % 4],
                n: 96 + i as u32,
                k,
                act: if i % 5 == 4 {
                    ActType::F16
                } else {
                    ActType::F32
                },
                weight,
                layout,
                bias: epilogue != Epilogue::SwiGlu && i % 2 == 0,
                epilogue,
                rms_norm_eps_bits: None,
            };
            let space = gemv::search_space(&w, &caps);
            let mut schedules = vec![gemv::default_schedule(&w, &caps)];
            schedules.push(space[(r.next_u64() % space.len() as u64) as usize]);
            // Both reductions the device has.
            for reduce in [Reduce::Shared, Reduce::Subgroup] {
                if let Some(s) = space.iter().find(|s| s.reduce == reduce) {
                    schedules.push(*s);
                }
            }
            for s in schedules {
                reduces.insert(s.reduce);
                checked += 1;
                if let Err(e) = check(&ctx, &w, &s, &caps, r.next_u64()) {
                    failures.push(format!("{} ({w:?}): {e}", s.name(&w)));
                }
            }
        }
    }
    println!("{checked} GEMV pairs, reductions {reduces:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The decode shapes of the Qwen2.5-0.5B file, the vocabulary included (136 MB of Q8_0: in
/// N-slices on lavapipe, whose binding range is 128 MiB).
#[test]
fn qwen_decode_shapes_match_the_cpu_reference() {
    let ctx = common::context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let w = |n, k, weight, epilogue| GemmWorkload {
        m: 1,
        n,
        k,
        act: ActType::F32,
        weight,
        layout: WeightLayout::Gguf,
        bias: false,
        epilogue,
        rms_norm_eps_bits: None,
    };
    for (i, w) in [
        w(4864, 896, WeightFormat::Q8_0, Epilogue::SwiGlu),
        w(896, 4864, WeightFormat::Q8_0, Epilogue::Residual),
        w(151936, 896, WeightFormat::Q8_0, Epilogue::None),
    ]
    .iter()
    .enumerate()
    {
        let s = gemv::default_schedule(w, &caps);
        let slices = check(&ctx, w, &s, &caps, 40 + i as u64)
            .unwrap_or_else(|e| panic!("{}: {e}", s.name(w)));
        println!("{} in {slices} slice(s)", s.name(w));
    }
}
