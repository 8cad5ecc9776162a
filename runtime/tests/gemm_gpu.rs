//! The compiler's GEMM kernels, run on the Vulkan device present (lavapipe in CI), agree with
//! the compiler's CPU reference: a seeded random sample of (workload, schedule) pairs across
//! weight formats, math modes the device supports, activation types, bias on/off and the
//! shapes of Qwen2.5 0.5B and 3B, each checked with `reference::compare` (the per-math
//! tolerance the tuner uses).
//!
//! Cost is bounded two ways, so the test stays within minutes on lavapipe on 2 cores:
//! - rows are drawn first (every M is tested), then (n, k) with an acceptance probability inversely
//!   proportional to the size (`MAC_BUDGET / (m·n·k)`), so big shapes are rare, and none
//!   above `MAX_PAIR_MACS` (M = 512 meets the small projections only; big K is tested at
//!   small M, the vocabulary by two fixed pairs);
//! - above `FULL_CHECK_MACS` the reference is computed for a seeded subset of output columns
//!   only (the weight rows of those columns form a smaller GEMM the reference computes
//!   exactly), and every other output is checked to have been written (Y starts as NaN).
//!
//! A few pairs run their weights in N-slices with an artificially small range limit, so the
//! slicing path (weight offsets, `n_offset`, `ldy`) is exercised on every device, not only on
//! those whose `maxStorageBufferRange` forces it. Two vocabulary-sized pairs are always run.
//!
//! `ROCKY_GEMM_PAIRS` and `ROCKY_GEMM_SEED` override the sample size and seed;
//! `ROCKY_GEMM_VERBOSE=1` prints every pair with its time (pairs over 10 s are always shown).

mod common;

use half::f16;
use rocky_compiler::templates::gemm::interface::{
    BINDING_BIAS, BINDING_WEIGHT, BINDING_X, BINDING_Y,
};
use rocky_compiler::templates::gemm::reference::{
    compare, reference, relative_tolerance, Mismatch, Reference,
};
use rocky_compiler::templates::gemm::{
    self, dispatch_grid_for, n_slices, split_k, ActType, GemmPush, GemmSchedule, GemmWorkload,
    Math, NSlice,
};
use rocky_compiler::testdata::{random_activations, random_weights, SplitMix64};
use rocky_compiler::{DeviceCaps, WeightFormat, WeightLayout};
use rocky_runtime::{device_caps, Buffer, ComputePipeline, Context, Recorder};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const DEFAULT_PAIRS: usize = 200;
const DEFAULT_SEED: u64 = 0x5EED_6E33;
/// Multiply-accumulates a drawn shape costs "for free"; larger shapes are accepted with
/// probability `MAC_BUDGET / (m·n·k)`.
const MAC_BUDGET: u64 = 1 << 20;
/// Sampled pairs larger than this are never drawn (on lavapipe they take tens of seconds).
const MAX_PAIR_MACS: u64 = 1 << 28;
/// Largest GEMM whose reference is computed for every output.
const FULL_CHECK_MACS: u64 = 1 << 25;
/// Output columns checked for larger ones.
const SAMPLED_COLUMNS: usize = 48;
/// Weight tensors above this are not drawn (F32/F16 vocabulary matrices of 0.5–1.2 GB).
const MAX_WEIGHT_BYTES: u64 = 350 << 20;
/// M values: 1 and 7 (decode-like, odd), 64 and 72 (a tile multiple and not), 512 (prefill
/// ubatch), drawn from this list (512 half as often as the others).
const ROW_DRAWS: [u32; 9] = [1, 7, 64, 72, 512, 1, 7, 64, 72];
/// (n, k) of the projections of Qwen2.5-0.5B (hidden 896, 2 KV heads of 64, FFN 4864) and
/// Qwen2.5-3B (hidden 2048, 2 KV heads of 128, FFN 11008), and their vocabulary (151936).
const SHAPES: [(u32, u32); 10] = [
    (896, 896),
    (128, 896),
    (4864, 896),
    (896, 4864),
    (151936, 896),
    (2048, 2048),
    (256, 2048),
    (11008, 2048),
    (2048, 11008),
    (151936, 2048),
];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        Err(_) => default,
    }
}

fn math_name(m: Math) -> &'static str {
    match m {
        Math::FmaF32 => "fma_f32",
        Math::FmaF16Packed => "fma_f16_packed",
        Math::Int8Dot => "int8_dot",
    }
}

/// Math modes the device can run for a weight format.
fn maths_for(weight: WeightFormat, caps: &DeviceCaps) -> Vec<Math> {
    let mut v = vec![Math::FmaF32];
    if caps.float16 {
        v.push(Math::FmaF16Packed);
    }
    if caps.integer_dot_product && weight.is_quantized() {
        v.push(Math::Int8Dot);
    }
    v
}

/// One sampled test case.
#[derive(Clone, Debug)]
struct Case {
    w: GemmWorkload,
    s: GemmSchedule,
    /// Byte limit for the weight binding when slicing is forced (else the device's).
    slice_limit: Option<u64>,
    seed: u64,
}

fn pick<T: Copy>(r: &mut SplitMix64, items: &[T]) -> T {
    items[(r.next_u64() % items.len() as u64) as usize]
}

/// Draws a workload of `weight` whose size passes the acceptance test.
fn draw_workload(r: &mut SplitMix64, weight: WeightFormat, caps: &DeviceCaps) -> GemmWorkload {
    // Rows first, so every M is tested (512 half as often: it is the costly one); then
    // shapes, weighted towards cheap ones.
    let m = pick(r, &ROW_DRAWS);
    loop {
        let (n, k) = pick(r, &SHAPES);
        let act = if caps.storage_16bit && r.next_u64() % 3 == 0 {
            ActType::F16
        } else {
            ActType::F32
        };
        let w = GemmWorkload {
            m,
            n,
            k,
            act,
            weight,
            layout: rocky_compiler::WeightLayout::Gguf,
            bias: r.next_u64() % 2 == 0,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        };
        // K-quants need k to be a multiple of 256 (896 is not: Qwen2.5-0.5B uses Q5_0/Q8_0
        // there), and huge plain-float vocabularies are left out.
        if gemm::validate_workload(&w).is_err() || w.weight_bytes() > MAX_WEIGHT_BYTES {
            continue;
        }
        let macs = u64::from(m) * u64::from(n) * u64::from(k);
        if macs > MAX_PAIR_MACS {
            continue;
        }
        let accept = (MAC_BUDGET as f64 / macs as f64).min(1.0);
        let unit = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if unit < accept {
            return w;
        }
    }
}

/// A schedule of `w` with `math`: usually a random member of the search space, sometimes the
/// default schedule (what untuned models run).
fn draw_schedule(
    r: &mut SplitMix64,
    w: &GemmWorkload,
    math: Math,
    caps: &DeviceCaps,
) -> Option<GemmSchedule> {
    let default = gemm::default_schedule(w, caps);
    if default.math == math && r.next_u64() % 8 == 0 {
        return Some(default);
    }
    let space: Vec<GemmSchedule> = gemm::search_space(w, caps)
        .into_iter()
        .filter(|s| s.math == math)
        .collect();
    (!space.is_empty()).then(|| pick(r, &space))
}

/// The sampled cases: formats round-robin, math modes round-robin per format, the rest drawn.
fn sample_cases(count: usize, seed: u64, caps: &DeviceCaps) -> Vec<Case> {
    let mut r = SplitMix64::new(seed);
    let mut cases = Vec::with_capacity(count + 2);
    let mut i = 0usize;
    while cases.len() < count {
        let weight = WeightFormat::ALL[i % WeightFormat::ALL.len()];
        let maths = maths_for(weight, caps);
        let math = maths[(i / WeightFormat::ALL.len()) % maths.len()];
        i += 1;
        let w = draw_workload(&mut r, weight, caps);
        let Some(s) = draw_schedule(&mut r, &w, math, caps) else {
            panic!("the search space of {w:?} has no {math:?} schedule on this device");
        };
        let slice_limit = (r.next_u64() % 6 == 0).then(|| {
            let parts = 2 + r.next_u64() % 3;
            (w.weight_bytes() / parts).max(1)
        });
        cases.push(Case {
            w,
            s,
            slice_limit,
            seed: r.next_u64(),
        });
    }
    // Vocabulary-sized tensors, always: larger than lavapipe's 128 MiB binding limit (sliced
    // by the device's own limit there), and the widest dispatch grids.
    for (weight, k, m, act) in [
        (WeightFormat::Q6K, 2048, 1, ActType::F32),
        (WeightFormat::F16, 896, 1, ActType::F16),
    ] {
        let act = if caps.storage_16bit {
            act
        } else {
            ActType::F32
        };
        let w = GemmWorkload {
            m,
            n: 151936,
            k,
            act,
            weight,
            layout: rocky_compiler::WeightLayout::Gguf,
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        };
        cases.push(Case {
            w,
            s: gemm::default_schedule(&w, caps),
            slice_limit: None,
            seed: r.next_u64(),
        });
    }
    cases
}

impl Case {
    /// The N-slices the case runs in: under the device's binding limit, or the forced one.
    fn slices(&self, caps: &DeviceCaps) -> Result<Vec<NSlice>, String> {
        let max_range = self
            .slice_limit
            .unwrap_or(caps.max_storage_buffer_range)
            .min(caps.max_storage_buffer_range);
        let align = u64::from(caps.min_storage_buffer_offset_alignment);
        n_slices(&self.w, max_range, align).map_err(|e| format!("n_slices: {e}"))
    }
}

/// Inputs of one case, as the reference sees them.
struct Inputs {
    x: Vec<f32>,
    weight: Vec<u8>,
    bias: Option<Vec<f32>>,
}

fn make_inputs(c: &Case) -> Inputs {
    let w = &c.w;
    Inputs {
        x: random_activations((w.m * w.k) as usize, c.seed),
        weight: random_weights(w.weight, w.n as usize, w.k as usize, c.seed ^ 1),
        bias: w.bias.then(|| random_activations(w.n as usize, c.seed ^ 2)),
    }
}

/// A buffer of activations in the workload's type.
fn act_buffer(ctx: &Context, act: ActType, values: &[f32], label: &str) -> Buffer {
    match act {
        ActType::F32 => Buffer::from_slice(ctx, values, label),
        _ => {
            let halfs: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            Buffer::from_slice(ctx, &halfs, label)
        }
    }
    .unwrap_or_else(|e| panic!("buffer {label}: {e}"))
}

fn download_act(buf: &Buffer, act: ActType, count: usize) -> Vec<f32> {
    match act {
        ActType::F32 => buf.download_f32(0, count).unwrap(),
        _ => buf
            .download::<f16>(0, count)
            .unwrap()
            .into_iter()
            .map(f16::to_f32)
            .collect(),
    }
}

/// Runs the case on the GPU (one dispatch per N-slice) and returns Y as f32.
fn run_on_gpu(
    ctx: &Context,
    c: &Case,
    inputs: &Inputs,
    caps: &DeviceCaps,
) -> Result<Vec<f32>, String> {
    let (w, s) = (&c.w, &c.s);
    let kernel = gemm::instantiate(w, s, caps).map_err(|e| format!("refused: {e}"))?;
    let pipeline =
        ComputePipeline::from_kernel(ctx, None, &kernel).map_err(|e| format!("pipeline: {e}"))?;
    let slices = c.slices(caps)?;

    let x = act_buffer(ctx, w.act, &inputs.x, "x");
    // In the workload's layout (the inputs and the reference are GGUF).
    let device_weight = rocky_compiler::dequant::layout::to_device(
        w.weight,
        w.layout,
        u64::from(w.k),
        u64::from(w.weight_rows()),
        &inputs.weight,
    )
    .map_err(|e| format!("weight layout: {e}"))?;
    // Kernels read whole u32 words: pad the weights to a multiple of 4 bytes.
    let padded_len = (device_weight.len() as u64).div_ceil(4) * 4;
    let mut weight = Buffer::new(ctx, padded_len, "weight").map_err(|e| e.to_string())?;
    weight
        .upload_bytes(0, &device_weight)
        .map_err(|e| e.to_string())?;
    // NaN everywhere first, so an output the kernel never writes cannot pass.
    let y = act_buffer(ctx, w.act, &vec![f32::NAN; (w.m * w.n) as usize], "y");
    let bias = inputs
        .bias
        .as_ref()
        .map(|b| Buffer::from_slice(ctx, b, "bias").unwrap());

    // The last group of each tile reduces: partials, and zeroed tile counters per slice.
    let in_place = (s.k_groups > 1 && s.last_group_reduces).then(|| {
        let partials = Buffer::new(ctx, 4 * split_k::scratch_values(w, s), "partials").unwrap();
        let counters: Vec<Buffer> = slices
            .iter()
            .map(|slice| {
                let grid = dispatch_grid_for(w.m, slice.n, s);
                let count = gemm::interface::counters_of(grid) as usize;
                Buffer::from_slice(ctx, &vec![0u32; count], "tile counters").unwrap()
            })
            .collect();
        (partials, counters)
    });
    let split = if s.k_groups > 1 && !s.last_group_reduces {
        let k = split_k::instantiate_reduce(w, s, caps).map_err(|e| format!("reduce: {e}"))?;
        let p = ComputePipeline::from_kernel(ctx, None, &k).map_err(|e| format!("reduce: {e}"))?;
        let scratch = Buffer::new(ctx, 4 * split_k::scratch_values(w, s), "partials")
            .map_err(|e| e.to_string())?;
        Some((p, scratch))
    } else {
        None
    };
    let mut rec = Recorder::new(ctx).map_err(|e| e.to_string())?;
    for (index, slice) in slices.iter().enumerate() {
        let bindings = kernel
            .meta
            .bindings
            .iter()
            .map(|b| match b.binding {
                BINDING_X => Ok(x.whole()),
                BINDING_WEIGHT => weight
                    .range(slice.weight_offset, slice.weight_range)
                    .map_err(|e| e.to_string()),
                BINDING_Y => Ok(split.as_ref().map_or(y.whole(), |(_, p)| p.whole())),
                BINDING_BIAS => bias
                    .as_ref()
                    .map(|b| b.whole())
                    .ok_or_else(|| "the kernel binds a bias the workload lacks".to_string()),
                gemm::interface::BINDING_IN_PLACE_PARTIALS => in_place
                    .as_ref()
                    .map(|(p, _)| p.whole())
                    .ok_or_else(|| "partials without last_group_reduces".to_string()),
                gemm::interface::BINDING_TILE_COUNTERS => in_place
                    .as_ref()
                    .map(|(_, c)| c[index].whole())
                    .ok_or_else(|| "tile counters without last_group_reduces".to_string()),
                other => Err(format!("unknown GEMM binding {other} ({})", b.name)),
            })
            .collect::<Result<Vec<_>, String>>()?;
        let push = GemmPush::for_slice(w, slice).to_bytes();
        rec.dispatch(
            &pipeline,
            &bindings,
            &push,
            dispatch_grid_for(w.m, slice.n, s),
        )
        .map_err(|e| e.to_string())?;
    }
    if let Some((reduce, scratch)) = &split {
        // Split-K across the grid: add the groups' partial sums (and the bias) into Y.
        rec.barrier().map_err(|e| e.to_string())?;
        let bindings = reduce
            .meta()
            .bindings
            .iter()
            .map(|b| match b.binding {
                split_k::BINDING_PARTIALS => Ok(scratch.whole()),
                BINDING_Y => Ok(y.whole()),
                BINDING_BIAS => bias
                    .as_ref()
                    .map(|b| b.whole())
                    .ok_or_else(|| "the reduce binds a bias the workload lacks".to_string()),
                other => Err(format!("unknown reduce binding {other} ({})", b.name)),
            })
            .collect::<Result<Vec<_>, String>>()?;
        let push = split_k::reduce_push(w).to_bytes();
        rec.dispatch(reduce, &bindings, &push, split_k::reduce_grid(w, w.m))
            .map_err(|e| e.to_string())?;
    }
    rec.submit_and_wait(Duration::from_secs(300))
        .map_err(|e| e.to_string())?;
    drop(rec);
    if let Some((_, counters)) = &in_place {
        for c in counters {
            let left = c.download_u32(0, (c.size() / 4) as usize).unwrap();
            if left.iter().any(|&v| v != 0) {
                return Err("the tile counters were not left at zero".into());
            }
        }
    }
    Ok(download_act(&y, w.act, (w.m * w.n) as usize))
}

/// The reference for output columns `cols` only: the weight rows of those columns (and their
/// bias values) form an m × |cols| GEMM the reference computes exactly.
fn reference_columns(c: &Case, inputs: &Inputs, cols: &[u32]) -> Reference {
    let w = &c.w;
    let row = w.weight.row_bytes(u64::from(w.k)) as usize;
    let weight: Vec<u8> = cols
        .iter()
        .flat_map(|&j| &inputs.weight[j as usize * row..(j as usize + 1) * row])
        .copied()
        .collect();
    let bias: Option<Vec<f32>> = inputs
        .bias
        .as_ref()
        .map(|b| cols.iter().map(|&j| b[j as usize]).collect());
    let sub = GemmWorkload {
        n: cols.len() as u32,
        ..*w
    };
    reference(&sub, c.s.math, &inputs.x, &weight, bias.as_deref()).expect("reference inputs")
}

/// Largest |error| / allowed error over the outputs, with the allowance `compare` applies
/// (for the report; pass/fail is `compare`'s verdict).
fn max_error_ratio(w: &GemmWorkload, s: &GemmSchedule, got: &[f32], r: &Reference) -> f64 {
    let rel = relative_tolerance(s);
    let mut worst = 0f64;
    for (i, &g) in got.iter().enumerate() {
        let mut allowed = rel * r.magnitude[i] + 2.0 * r.rounding_flip[i] + 1e-30;
        if w.act == ActType::F16 {
            allowed += r.y[i].abs() * 2f32.powi(-11) + 6e-8;
        }
        worst = worst.max(f64::from((g - r.y[i]).abs()) / f64::from(allowed));
    }
    worst
}

/// What one case checked.
struct Outcome {
    columns_checked: usize,
    ratio: f64,
    slices: usize,
}

fn check_case(ctx: &Context, c: &Case, caps: &DeviceCaps) -> Result<Outcome, String> {
    let w = &c.w;
    let inputs = make_inputs(c);
    let got = run_on_gpu(ctx, c, &inputs, caps)?;
    let macs = u64::from(w.m) * u64::from(w.n) * u64::from(w.k);
    let cols: Vec<u32> = if macs <= FULL_CHECK_MACS {
        (0..w.n).collect()
    } else {
        // Seeded columns, plus both ends and both sides of every slice boundary.
        let mut r = SplitMix64::new(c.seed ^ 3);
        let mut cols: Vec<u32> = (0..SAMPLED_COLUMNS)
            .map(|_| (r.next_u64() % u64::from(w.n)) as u32)
            .collect();
        cols.extend([0, w.n - 1]);
        for sl in c.slices(caps)? {
            cols.push(sl.n_offset);
            cols.push(sl.n_offset + sl.n - 1);
        }
        cols.sort_unstable();
        cols.dedup();
        if let Some(i) = got.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "y[{}][{}] = {} (never written, or not finite)",
                i / w.n as usize,
                i % w.n as usize,
                got[i]
            ));
        }
        cols
    };
    let r = reference_columns(c, &inputs, &cols);
    let sub = GemmWorkload {
        n: cols.len() as u32,
        ..*w
    };
    let got_sub: Vec<f32> = (0..w.m as usize)
        .flat_map(|row| cols.iter().map(move |&j| (row, j)))
        .map(|(row, j)| got[row * w.n as usize + j as usize])
        .collect();
    compare(&sub, &c.s, &got_sub, &r).map_err(|e| match e {
        // Name the column of the whole output, not of the checked subset.
        Mismatch::Value {
            row,
            col,
            got,
            want,
            allowed,
        } => format!(
            "y[{row}][{}] = {got}, reference {want} (allowed error {allowed})",
            cols[col as usize]
        ),
        other => other.to_string(),
    })?;
    Ok(Outcome {
        columns_checked: cols.len(),
        ratio: max_error_ratio(&sub, &c.s, &got_sub, &r),
        slices: c.slices(caps)?.len(),
    })
}

#[derive(Default)]
struct Tally {
    pairs: usize,
    full: usize,
    sampled: usize,
    sliced: usize,
    max_ratio: f64,
}

#[test]
fn sampled_gemm_pairs_match_the_cpu_reference() {
    let ctx = common::context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let count = env_or("ROCKY_GEMM_PAIRS", DEFAULT_PAIRS);
    let seed = env_or("ROCKY_GEMM_SEED", DEFAULT_SEED);
    let cases = sample_cases(count, seed, &caps);
    println!(
        "device: {} ({}), {} pairs, seed {seed:#x}",
        ctx.info().name,
        ctx.info().device_type.as_str(),
        cases.len()
    );

    let start = Instant::now();
    let mut tally: BTreeMap<(String, &'static str), Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut by_rows: BTreeMap<u32, usize> = BTreeMap::new();
    let (mut f16_act, mut with_bias, mut defaults) = (0, 0, 0);
    for (i, c) in cases.iter().enumerate() {
        let t = Instant::now();
        let outcome = check_case(&ctx, c, &caps);
        let secs = t.elapsed().as_secs_f64();
        if secs > 10.0 || std::env::var_os("ROCKY_GEMM_VERBOSE").is_some() {
            println!(
                "  pair {i}: {:.1} s for {:?} / {}",
                secs,
                c.w,
                c.s.name(&c.w)
            );
        }
        match outcome {
            Ok(o) => {
                let t = tally
                    .entry((c.w.weight.to_string(), math_name(c.s.math)))
                    .or_default();
                t.pairs += 1;
                if o.columns_checked == c.w.n as usize {
                    t.full += 1;
                } else {
                    t.sampled += 1;
                }
                if o.slices > 1 {
                    t.sliced += 1;
                }
                t.max_ratio = t.max_ratio.max(o.ratio);
                *by_rows.entry(c.w.m).or_default() += 1;
                f16_act += usize::from(c.w.act == ActType::F16);
                with_bias += usize::from(c.w.bias);
                defaults += usize::from(c.s == gemm::default_schedule(&c.w, &caps));
            }
            Err(e) => failures.push(format!(
                "pair {i}: {:?}\n  schedule {}\n  slice limit {:?}: {e}",
                c.w,
                serde_json::to_string(&c.s).unwrap(),
                c.slice_limit
            )),
        }
    }

    println!(
        "\n{:<6} {:<15} {:>6} {:>6} {:>8} {:>7} {:>16}",
        "format", "math", "pairs", "full", "sampled", "sliced", "max err/allowed"
    );
    for ((format, math), t) in &tally {
        println!(
            "{format:<6} {math:<15} {:>6} {:>6} {:>8} {:>7} {:>16.4}",
            t.pairs, t.full, t.sampled, t.sliced, t.max_ratio
        );
    }
    println!(
        "rows: {by_rows:?}; f16 activations {f16_act}; bias {with_bias}; default schedules \
         {defaults}; {} failures; {:.1} s",
        failures.len(),
        start.elapsed().as_secs_f64()
    );

    assert!(
        failures.is_empty(),
        "{} of {} pairs failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    // Every format ran with every math mode the device supports for it.
    for format in WeightFormat::ALL {
        for math in maths_for(format, &caps) {
            assert!(
                tally.contains_key(&(format.to_string(), math_name(math))),
                "no {format} × {} pair ran",
                math_name(math)
            );
        }
    }
    assert!(
        tally.values().any(|t| t.sliced > 0),
        "no pair ran in several N-slices"
    );
}

/// The aligned weight layout (`dequant::layout`, repacked on the host like the executor's
/// upload) against the CPU reference on the GGUF bytes: for each format that has it, the
/// default schedule, the Mali default where the device can run it, wide loads, and random
/// members of the search space, on Qwen-shaped and partial-group row lengths, one sliced.
#[test]
fn aligned_layout_gemms_match_the_cpu_reference() {
    let ctx = common::context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let mali = DeviceCaps {
        subgroup_size: caps.subgroup_size,
        ..DeviceCaps::mali_g610()
    };
    let mut r = SplitMix64::new(0xA11C);
    let mut cases = Vec::new();
    for weight in WeightFormat::ALL
        .into_iter()
        .filter(|&f| WeightLayout::Aligned.supports(f))
    {
        // k = 896 leaves Q8_0/Q5_0 rows with a partial last group (28 blocks); Q6_K needs
        // multiples of 256 (2304: 9 super-blocks, a partial group).
        let shapes: &[(u32, u32, u32)] = if weight == WeightFormat::Q6K {
            &[(7, 256, 2048), (72, 96, 2304), (512, 64, 2048)]
        } else {
            &[(7, 128, 896), (72, 96, 2048), (512, 64, 896)]
        };
        for &(m, n, k) in shapes {
            let w = GemmWorkload {
                m,
                n,
                k,
                act: ActType::F32,
                weight,
                layout: WeightLayout::Aligned,
                bias: r.next_u64() % 2 == 0,
                epilogue: Default::default(),
                rms_norm_eps_bits: None,
            };
            let mut schedules = vec![gemm::default_schedule(&w, &caps)];
            let space = gemm::search_space(&w, &caps);
            schedules.extend((0..3).map(|_| pick(&mut r, &space)));
            schedules.extend(space.iter().filter(|s| s.wide_loads).take(1));
            let mali_default = gemm::default_schedule(&w, &mali);
            if mali_default.validate(&w, &caps).is_ok() {
                schedules.push(mali_default);
            }
            for (i, s) in schedules.into_iter().enumerate() {
                cases.push(Case {
                    w,
                    s,
                    // One case per shape in slices.
                    slice_limit: (i == 1).then(|| (w.weight_bytes() / 3).max(1)),
                    seed: r.next_u64(),
                });
            }
        }
    }
    let mut failures = Vec::new();
    let mut sliced = 0;
    for c in &cases {
        match check_case(&ctx, c, &caps) {
            Ok(o) => sliced += usize::from(o.slices > 1),
            Err(e) => failures.push(format!(
                "{:?}\n  schedule {}: {e}",
                c.w,
                serde_json::to_string(&c.s).unwrap()
            )),
        }
    }
    println!("{} aligned-layout pairs, {sliced} in slices", cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(sliced > 0, "no case ran in slices");
}
