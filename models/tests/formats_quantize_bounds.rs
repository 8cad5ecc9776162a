//! Quantize-then-dequantize error of every format on seeded data: each element must stay within
//! a bound derived from the format (and from the input alone, never from our output), and on
//! Gaussian data the RMS error relative to RMS(x) must stay below a per-format figure.

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocky_models::formats::{dequantize_to_vec, quantize, GgmlType};

const N: usize = 64 * 256;

struct Dataset {
    name: &'static str,
    data: Vec<f32>,
    /// Whether the RMS figure applies (Gaussian data, where the figures below were derived).
    gaussian: bool,
}

fn gaussian(rng: &mut StdRng, n: usize, sigma: f32) -> Vec<f32> {
    // Box-Muller; rand 0.8 has no normal distribution without rand_distr.
    (0..n)
        .map(|_| {
            let u1: f64 = 1.0 - rng.gen::<f64>();
            let u2: f64 = rng.gen::<f64>();
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32 * sigma
        })
        .collect()
}

fn datasets() -> Vec<Dataset> {
    let mut rng = StdRng::seed_from_u64(0x5eed_f0a7);
    let mut sets = vec![];
    let mut add = |name, data, gaussian| {
        sets.push(Dataset {
            name,
            data,
            gaussian,
        })
    };
    add("gaussian σ=1", gaussian(&mut rng, N, 1.0), true);
    add("gaussian σ=0.02", gaussian(&mut rng, N, 0.02), true);
    add("zeros", vec![0.0; N], false);
    add("constant 0.37", vec![0.37; N], false);
    add("constant -1.25", vec![-1.25; N], false);
    let mut outlier = gaussian(&mut rng, N, 0.02);
    for sb in outlier.chunks_exact_mut(256) {
        sb[77] = 100.0; // one per super-block, so 7 of its 8 sub-blocks are ordinary
    }
    add("one outlier per 256", outlier, false);
    // 1e-6: Q8_0's scale (≈ 2.5e-8) is below the smallest f16 subnormal and flushes to zero.
    add("tiny σ=1e-6", gaussian(&mut rng, N, 1e-6), false);
    // 1e-4: scales are f16 subnormals with only a few significant bits.
    add("tiny σ=1e-4", gaussian(&mut rng, N, 1e-4), false);
    add("large σ=1e4", gaussian(&mut rng, N, 1e4), false);
    let positive = gaussian(&mut rng, N, 1.0).iter().map(|v| v.abs()).collect();
    add("all positive", positive, false);
    let negative = gaussian(&mut rng, N, 1.0)
        .iter()
        .map(|v| -v.abs() - 1.0)
        .collect();
    add("all negative, offset -1", negative, false);
    // Blocks with max |x| = 127 and .5 fractions: Q8_0's scale is exactly 1 and every other
    // value is a rounding tie.
    let ties = (0..N)
        .map(|i| {
            if i % 32 == 0 {
                127.0
            } else {
                (i % 64) as f32 - 31.5
            }
        })
        .collect();
    add("rounding ties", ties, false);
    let mut sparse = vec![0.0f32; N];
    for _ in 0..N / 50 {
        let i = rng.gen_range(0..N);
        sparse[i] = rng.gen_range(-3.0..3.0);
    }
    add("sparse 2%", sparse, false);
    sets
}

/// |d - f16(d)|: how far the stored scale is from the one the levels were chosen with.
fn f16_error(d: f64) -> f64 {
    (d - f16::from_f64(d).to_f64()).abs()
}

fn amax(x: &[f32]) -> f64 {
    x.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64))
}

/// The value of largest magnitude (first on ties), which Q4_0/Q5_0 map to their lowest level.
fn signed_absmax(x: &[f32]) -> f64 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m }) as f64
}

/// Per-element bound on |x - deq(q(x))| for `ty`, from the format's definition.
fn bounds(ty: GgmlType, x: &[f32]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    match ty {
        // F32 stores x itself.
        GgmlType::F32 => out.resize(x.len(), 0.0),
        // Round to nearest: half an ulp, i.e. 2^-11 relative for normal f16 and 2^-25 (half the
        // subnormal spacing 2^-24) absolute below 2^-14. Inputs stay within ±65504 here.
        GgmlType::F16 => out.extend(
            x.iter()
                .map(|v| (v.abs() as f64 * 2f64.powi(-11)).max(2f64.powi(-25))),
        ),
        // bf16 keeps 8 significant bits: half an ulp is 2^-8 relative (subnormals: 2^-134).
        GgmlType::BF16 => out.extend(
            x.iter()
                .map(|v| (v.abs() as f64 * 2f64.powi(-8)).max(2f64.powi(-134))),
        ),
        // Q8_0: levels q·d with d = amax/127 and |q| ≤ 127, q = round(x/d): half a step; the
        // stored scale is f16(d), which moves level q by |q|·|d - f16(d)| ≤ 127·|d - f16(d)|;
        // 2^-20·amax covers the f32 roundings of x·(1/d) and q·f16(d).
        GgmlType::Q8_0 => {
            for b in x.chunks_exact(32) {
                let a = amax(b);
                let d = a / 127.0;
                let bound = 0.5 * d + 127.0 * f16_error(d) + a * 2f64.powi(-20);
                out.resize(out.len() + 32, bound);
            }
        }
        // Q4_0 / Q5_0: d = m / -L (m the signed absmax, L = 8 or 16) and levels (q - L)·d for
        // q in 0..2L. With t = x/d in [-L, L], rounding costs half a step except where t passes
        // L - 1/2: the top level is L - 1 (the value -m at t = L is one full step off). The f16
        // scale moves a level by at most L·|d - f16(d)|.
        GgmlType::Q4_0 | GgmlType::Q5_0 => {
            let l = if ty == GgmlType::Q4_0 { 8.0 } else { 16.0 };
            for b in x.chunks_exact(32) {
                let d = signed_absmax(b) / -l;
                let slack = l * f16_error(d) + amax(b) * 2f64.powi(-20);
                for &v in b {
                    let t = if d != 0.0 { v as f64 / d } else { 0.0 };
                    out.push((0.5f64).max(t - (l - 1.0)) * d.abs() + slack);
                }
            }
        }
        // Q4_1 / Q5_1: levels m + q·d with m = min(x), d = (max - min) / L (L = 15 or 31), q in
        // 0..=L: rounding costs half a step. The stored f16(d) moves a level by at most
        // L·|d - f16(d)|, the stored f16(m) every level by |m - f16(m)|; 2^-20·amax covers the
        // f32 roundings of (x - m)·(1/d) and q·d + m.
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let l = if ty == GgmlType::Q4_1 { 15.0 } else { 31.0 };
            for b in x.chunks_exact(32) {
                let min = b.iter().fold(f32::MAX, |m, &v| m.min(v)) as f64;
                let max = b.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
                let d = (max - min) / l;
                let bound = 0.5 * d + l * f16_error(d) + f16_error(min) + amax(b) * 2f64.powi(-20);
                out.resize(out.len() + 32, bound);
            }
        }
        // Q4_K / Q5_K: sub-block j of 32 is approximated as D_j·q - M_j, q in 0..=nmax. The
        // search starts from the grid over [min(x_j, 0), max(x_j)] with range R_j; rounding to
        // it costs R_j/(2·nmax). The fit may narrow the grid and clip extremes, and D_j, M_j are
        // stored as 6-bit fractions of the block's largest (error ≤ 1/126 of it, times ≤ nmax
        // levels ≈ 1/8 step): we allow one full step of the coarsest sub-block, R/nmax with
        // R = max_j R_j. A sub-block whose scale rounds to 0 (R_j < R/126) decodes to -M_j, off
        // by at most R_j + R/126 < R/nmax.
        // On top, the two f16 super-scales d (of D_j = d·sc_j) and dmin (of M_j = dmin·m_j) are
        // off by 2^-11 relative or, below 2^-14, by up to 2^-25 absolute. The decoded terms are
        // d·sc·q ≲ 2A and dmin·m ≲ A (A = max |x|), with sc, m ≤ 63: 3·2^-11·A relative, and
        // (63·nmax + 63)·2^-25 absolute, which dominates for tiny data (σ ≲ 1e-4), where the
        // format simply cannot resolve the values.
        GgmlType::Q4K | GgmlType::Q5K => {
            let nmax = if ty == GgmlType::Q4K { 15.0 } else { 31.0 };
            for sb in x.chunks_exact(256) {
                let r = sb
                    .chunks_exact(32)
                    .map(|s| {
                        let max = s.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
                        let min = s.iter().fold(0.0f32, |m, &v| m.min(v)) as f64;
                        max - min
                    })
                    .fold(0.0f64, f64::max);
                let f16_slack =
                    3.0 * 2f64.powi(-11) * amax(sb) + (63.0 * nmax + 63.0) * 2f64.powi(-25);
                out.resize(out.len() + 256, r / nmax + f16_slack);
            }
        }
        // Q6_K: sub-block j of 16 uses levels -32..=31 times a scale ≈ a_j/32 (a_j = max |x_j|),
        // so rounding costs half a step and the clamp at +31 one step; the 16 scales are stored
        // as i8 fractions of the largest (±1/256 of it, times ≤ 32 levels: 1/8 step). One full
        // step of the coarsest sub-block, A/32 with A = max |x| of the super-block, covers it;
        // sub-blocks whose scale rounds to 0 have a_j < A/256. The f16 super-scale d adds
        // 2^-11·A relative or, for tiny data, 2^-25 absolute times |sc·q| ≤ 128·32.
        GgmlType::Q6K => {
            for sb in x.chunks_exact(256) {
                let a = amax(sb);
                let bound = a / 32.0 + 2f64.powi(-11) * a + 128.0 * 32.0 * 2f64.powi(-25);
                out.resize(out.len() + 256, bound);
            }
        }
        // IQ4_NL / IQ4_XS: levels d·K[i] with K up to 23 apart and d a least-squares fit,
        // so a tight per-element bound depends on the fit. IQ4_XS also rounds each sub-block
        // scale to a 6-bit multiple of the super-block's, which zeroes sub-blocks far below
        // the largest. A loose bound, a quarter of the (super-)block's max |x|, catches broken
        // packing or indexing; the RMS limit below is the tight check. The f16 d adds up to
        // 2^-25 absolute (tiny data) times |K| ≤ 127, for IQ4_XS times |ls - 32| ≤ 32 too.
        GgmlType::IQ4NL | GgmlType::IQ4XS => {
            let levels = if ty == GgmlType::IQ4XS {
                32.0 * 127.0
            } else {
                127.0
            };
            for sb in x.chunks_exact(ty.block_size()) {
                let bound = amax(sb) / 4.0 + levels * 2f64.powi(-25);
                out.resize(out.len() + sb.len(), bound);
            }
        }
        other => panic!("no bound for {other}"),
    }
    out
}

/// RMS(x - deq(q(x))) / RMS(x) on Gaussian data must stay below these. Derivation: a uniform
/// rounding error of step s has RMS s/√12. For N(0,1) the max |x| of 32 values is ≈ 2.35 (of 16:
/// ≈ 2.03), so Q8_0: s ≈ 2.35/127 → 0.53%; Q5_0: s ≈ 2.35/16 → 4.2%; Q4_0: s ≈ 2.35/8 → 8.5%;
/// Q4_1 / Q5_1: the range of 32 values (≈ 4.1) over 15 / 31 levels → 7.9% / 3.8%; Q6_K: s ≈
/// 2.03/32 → 1.8%; Q4_K / Q5_K: the range of 32 values (≈ 4.1) over 15 / 31 levels →
/// 7.9% / 3.8%, which the least-squares fit lowers a little. F16 / BF16: relative rounding
/// uniform within ±2^-11 / ±2^-8 of |x|, in RMS about 2^-11/√3·0.8 ≈ 2.3e-4 / 1.8e-3 (the 0.8 for
/// where x sits within its binade). Limits: those figures plus ~15%.
fn rms_limit(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 2.7e-4,
        GgmlType::BF16 => 2.1e-3,
        GgmlType::Q8_0 => 0.0062,
        GgmlType::Q4_0 => 0.098,
        GgmlType::Q5_0 => 0.049,
        GgmlType::Q4_1 => 0.091,
        GgmlType::Q5_1 => 0.044,
        GgmlType::Q4K => 0.082,
        GgmlType::Q5K => 0.044,
        GgmlType::Q6K => 0.021,
        // 16 non-uniform levels over about ±2.35 (finer near 0, where Gaussian data is
        // dense): no worse than Q4_0's uniform 16 (measured 7.6%), so Q4_0's limit.
        GgmlType::IQ4NL => 0.098,
        GgmlType::IQ4XS => 0.098,
        other => panic!("no RMS limit for {other}"),
    }
}

const TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_1,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
];

#[test]
fn roundtrip_error_stays_within_format_bounds() {
    let mut failures = Vec::new();
    for ty in TYPES {
        for set in datasets() {
            let x = &set.data;
            let q = quantize(ty, x).unwrap_or_else(|e| panic!("{ty} {}: {e}", set.name));
            assert_eq!(q.len(), ty.type_size() * x.len() / ty.block_size());
            let y = dequantize_to_vec(ty, &q, x.len()).unwrap();
            let bound = bounds(ty, x);
            let (mut worst, mut worst_at, mut sum_e2, mut sum_x2) = (0.0f64, 0, 0.0f64, 0.0f64);
            let mut violations = 0;
            for i in 0..x.len() {
                let err = (x[i] as f64 - y[i] as f64).abs();
                sum_e2 += err * err;
                sum_x2 += x[i] as f64 * x[i] as f64;
                let ratio = if bound[i] > 0.0 {
                    err / bound[i]
                } else if err == 0.0 {
                    0.0
                } else {
                    f64::INFINITY
                };
                if ratio.is_nan() || ratio > 1.0 {
                    violations += 1;
                }
                if ratio > worst || ratio.is_nan() {
                    (worst, worst_at) = (ratio, i);
                }
            }
            let rel_rms = if sum_x2 > 0.0 {
                (sum_e2 / sum_x2).sqrt()
            } else {
                sum_e2.sqrt()
            };
            println!(
                "{:5} {:24} max err/bound {worst:.3}  rel RMS {rel_rms:.5}",
                ty.name(),
                set.name
            );
            if violations > 0 {
                let i = worst_at;
                failures.push(format!(
                    "{ty} on {}: {violations} elements beyond the bound; worst at {i}: x = {:e}, got {:e}, bound {:e}",
                    set.name, x[i], y[i], bound[i]
                ));
            }
            if set.gaussian && rel_rms > rms_limit(ty) {
                failures.push(format!(
                    "{ty} on {}: relative RMS error {rel_rms:.5} above {}",
                    set.name,
                    rms_limit(ty)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// All-zero input must come back as exact zeros, and inputs already on a format's grid must
/// come back unchanged (closed form: integers with max |x| = 127 are Q8_0 levels with d = 1;
/// integers in -8..=7 with a -8 in each block are Q4_0 levels with d = 1; f16 values are F16's).
#[test]
fn zeros_and_on_grid_values_are_exact() {
    for ty in TYPES {
        let y = dequantize_to_vec(ty, &quantize(ty, &[0.0; 512]).unwrap(), 512).unwrap();
        assert!(y.iter().all(|&v| v == 0.0), "{ty}: zeros did not stay zero");
    }
    let q8: Vec<f32> = (0..256)
        .map(|i| {
            if i % 32 == 0 {
                -127.0
            } else {
                ((i * 37) % 255) as f32 - 127.0
            }
        })
        .collect();
    let q4: Vec<f32> = (0..256)
        .map(|i| {
            if i % 32 == 5 {
                -8.0
            } else {
                ((i * 7) % 16) as f32 - 8.0
            }
        })
        .collect();
    let f16s: Vec<f32> = (0..u16::MAX)
        .step_by(97)
        .map(|bits| f16::from_bits(bits).to_f32())
        .filter(|v| v.is_finite())
        .collect();
    for (ty, x) in [
        (GgmlType::Q8_0, &q8),
        (GgmlType::Q4_0, &q4),
        (GgmlType::F16, &f16s),
    ] {
        let y = dequantize_to_vec(ty, &quantize(ty, x).unwrap(), x.len()).unwrap();
        assert_eq!(&y, x, "{ty}: on-grid values changed");
    }
}
