//! The scale searches of ggml's reference K-quant quantizers (ggml-quants.c `make_qx_quants`,
//! `make_qkx2_quants`), step for step and in the same f32 operation order, so that our blocks
//! are the ones llama-quantize writes without an importance matrix. Reordering any sum or
//! product here changes rounding and therefore, now and then, a chosen quant.

/// Round to the nearest integer, ties to even, exactly as ggml's `nearest_int`: adding 1.5·2^23
/// pushes the fraction out of the f32 mantissa under the default rounding mode. Valid for
/// |x| ≤ 2^22, which ggml asserts; outside that range we return what ggml's code computes.
#[inline]
pub(super) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Sub-blocks whose largest magnitude is below this are all zeros (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Symmetric quantization of `x` to levels `-nmax..nmax-1` with weights x² (ggml's
/// `make_qx_quants` with `rmse_type = 1` and no importance weights, the only form the
/// reference Q6_K quantizer uses). Writes `level + nmax` into `l` and returns the scale.
///
/// Starts from the scale that maps the largest-magnitude value to `-nmax`, then tries 18 nearby
/// scales and keeps the weighted least-squares optimum.
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    debug_assert_eq!(x.len(), l.len());
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);

    let mut iscale = -nmax_f / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (&v, li) in x.iter().zip(l.iter_mut()) {
        let q = level(iscale, v);
        *li = (q + nmax) as u8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax_f + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let q = level(iscale, v);
            let w = v * v;
            sumlx += w * v * q as f32;
            suml2 += w * q as f32 * q as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (&v, li) in x.iter().zip(l.iter_mut()) {
                *li = (level(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Parameters of ggml's `make_qkx2_quants` search over candidate scales
/// `iscale = (nmax + rmin + rdelta·i) / (max - min)` for `i` in `0..=nstep`.
pub(super) struct Qkx2Search {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
}

/// Asymmetric quantization `x ≈ scale·l - min` with levels `0..=nmax` and the given weights,
/// minimising the weighted squared error (ggml's `make_qkx2_quants` with `use_mad = false`).
/// Writes the levels into `l` (`aux` is scratch of the same length) and returns
/// `(scale, min)`, where `min ≥ 0` is the subtracted offset.
pub(super) fn make_qkx2_quants(
    search: &Qkx2Search,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    aux: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    debug_assert!(n > 0 && weights.len() == n && l.len() == n && aux.len() == n);
    let nmax = search.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for is in 0..=search.nstep {
        // `min` may have moved to the best fit so far: ggml uses the updated value here too.
        iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let w = weights[i];
            let qf = q as f32;
            sum_l += w * qf;
            sum_l2 += w * qf * qf;
            sum_xl += w * qf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (2.4999998, 2),
            (-7.6, -8),
            (4_194_303.0, 4_194_303),
        ];
        for (x, want) in cases {
            assert_eq!(nearest_int(x), want, "nearest_int({x})");
            assert_eq!(nearest_int(x), x.round_ties_even() as i32, "{x}");
        }
    }

    #[test]
    fn qx_quants_of_a_ramp_hit_the_grid_exactly() {
        // x = k/4 for k in -8..8: max |x| is -2 (k = -8), so the first scale maps -2 to level -8
        // and every value lands on an integer level: the fit is exact and scale = 1/4.
        let x: Vec<f32> = (-8..8).map(|k| k as f32 / 4.0).collect();
        let mut l = vec![0u8; x.len()];
        let scale = make_qx_quants(8, &x, &mut l);
        assert_eq!(scale, 0.25);
        let levels: Vec<i32> = l.iter().map(|&q| q as i32 - 8).collect();
        assert_eq!(levels, (-8..8).collect::<Vec<_>>());
    }

    #[test]
    fn qkx2_of_an_affine_grid_recovers_scale_and_min() {
        // x = 0.1·k - 0.5 for k in 0..=15 is exactly representable: scale 0.1, min 0.5.
        let x: Vec<f32> = (0..16).map(|k| 0.1 * k as f32 - 0.5).collect();
        let w = vec![1.0f32; 16];
        let (mut l, mut aux) = (vec![0u8; 16], vec![0u8; 16]);
        let search = Qkx2Search {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
        };
        let (scale, min) = make_qkx2_quants(&search, &x, &w, &mut l, &mut aux);
        assert!(
            (scale - 0.1).abs() < 1e-6 && (min - 0.5).abs() < 1e-6,
            "{scale} {min}"
        );
        assert_eq!(l, (0..16).collect::<Vec<u8>>());
    }
}
