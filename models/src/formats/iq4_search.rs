//! The quantizer IQ4_NL and IQ4_XS share: ggml-quants.c `quantize_row_iq4_nl_impl` as
//! `quantize_iq4_nl` / `quantize_iq4_xs` call it without an importance matrix (what
//! llama-quantize does with no `--imatrix`): weights x², 7 trial scales each side. Step for
//! step and in ggml's f32 operation order, without fused multiply-adds (a compiler that
//! fuses ggml's `sumqx += w*q*x` may, now and then, pick another index; the file is valid
//! either way, its decoding is exact).

use super::half_floats::{encode_scale, ScaleOverflow};
use super::scale_search::nearest_int;

/// ggml's `kvalues_iq4nl`: the levels a 4-bit index stands for (before the scale).
pub(super) const VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Sub-blocks whose largest magnitude is below this are all zeros (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;
/// Trial scales each side of the first guess (ggml's `ntry` of the non-reference quantizers).
const NTRY: i32 = 7;
const SUB: usize = 32;

/// IQ4_XS's packed 6-bit sub-block scales (`ls + 32` split into 4 low and 2 high bits).
#[derive(Default)]
pub(super) struct SubScales {
    pub low: [u8; 4],
    pub high: u16,
}

/// ggml's `best_index_int8`: the index of the level nearest `x` (the upper one on ties).
fn best_index(x: f32) -> usize {
    let v = |i: usize| f32::from(VALUES[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        mu - 1
    } else {
        mu
    }
}

/// Weighted sums Σ w·q·x and Σ w·q² of `x` quantized with inverse scale `id`; the indices
/// go to `l` when given.
fn sums(x: &[f32], w: &[f32], id: f32, mut l: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for j in 0..x.len() {
        let i = best_index(id * x[j]);
        if let Some(l) = l.as_deref_mut() {
            l[j] = i as u8;
        }
        let q = f32::from(VALUES[i]);
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    (sumqx, sumq2)
}

/// The least-squares scale of one sub-block of 32 (0 for an all-zero one): the scale that
/// maps the value of largest magnitude to level -127, then the best of 15 trial scales.
fn sub_block_scale(x: &[f32]) -> f32 {
    let w: Vec<f32> = x.iter().map(|v| v * v).collect();
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(VALUES[0]);
    let d = -max / v0;
    let (sumqx, sumq2) = sums(x, &w, 1.0 / d, None);
    let mut d = sumqx / sumq2;
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(VALUES[0])) as f32 / max;
        let (sumqx, sumq2) = sums(x, &w, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Quantizes one IQ4_NL block (`x` of 32, `scales` None) or IQ4_XS super-block (`x` of 256,
/// `scales` Some): writes the f16 `d` into `dh`, the packed indices into `qs` and for IQ4_XS
/// the sub-block scales.
pub(super) fn quantize_super_block(
    x: &[f32],
    dh: &mut [u8; 2],
    qs: &mut [u8],
    scales: Option<&mut SubScales>,
) -> Result<(), ScaleOverflow> {
    let nb = x.len() / SUB;
    let sub_scales: Vec<f32> = x.chunks_exact(SUB).map(sub_block_scale).collect();
    let mut l = vec![0u8; x.len()];
    match scales {
        Some(packed) => {
            let (mut amax_scale, mut max_scale) = (0f32, 0f32);
            for &d in &sub_scales {
                if d.abs() > amax_scale {
                    amax_scale = d.abs();
                    max_scale = d;
                }
            }
            // ggml keeps the unrounded f32 d for the sub-block scales below.
            let d = -max_scale / 32.0;
            *dh = encode_scale(d)?.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            *packed = SubScales::default();
            for ib in 0..nb {
                let ls = nearest_int(id * sub_scales[ib]).clamp(-32, 31);
                let dl = d * ls as f32;
                let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
                let xb = &x[SUB * ib..SUB * (ib + 1)];
                for (lj, &v) in l[SUB * ib..SUB * (ib + 1)].iter_mut().zip(xb) {
                    *lj = best_index(idl * v) as u8;
                }
                let ls = (ls + 32) as u8;
                packed.low[ib / 2] |= (ls & 0x0f) << (4 * (ib % 2));
                packed.high |= u16::from(ls >> 4) << (2 * ib);
            }
        }
        None => {
            let d = sub_scales[0];
            *dh = encode_scale(d)?.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (lj, &v) in l.iter_mut().zip(x) {
                *lj = best_index(id * v) as u8;
            }
        }
    }
    for (i, q) in qs.chunks_exact_mut(16).enumerate() {
        for j in 0..16 {
            q[j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_picks_the_nearest_level_and_clamps() {
        // Against a brute-force nearest search (the upper level on ties, as ggml).
        for k in -1400..=1400 {
            let x = k as f32 / 10.0;
            let want = (0..16)
                .rev()
                .min_by(|&a, &b| {
                    let da = (x - f32::from(VALUES[a])).abs();
                    let db = (x - f32::from(VALUES[b])).abs();
                    da.partial_cmp(&db).unwrap()
                })
                .unwrap();
            let got = best_index(x);
            let (dg, dw) = (
                (x - f32::from(VALUES[got])).abs(),
                (x - f32::from(VALUES[want])).abs(),
            );
            assert_eq!(dg, dw, "x = {x}: index {got}, nearest {want}");
        }
        assert_eq!(best_index(-1000.0), 0);
        assert_eq!(best_index(1000.0), 15);
    }
}
