//! The check every whole-prefill result passes before anything built on it is stored: the
//! logits are finite and agree with a reference within a relative tolerance, with the same
//! top-1 token.
//!
//! The error allowed is `tolerance × max|reference logit|`: one scale for the whole vector,
//! since a prefill's logits are one computation (a per-entry relative bound would fail the
//! small logits near zero on rounding alone). The top-1 token must be the reference's, or one
//! whose reference logit is within the allowed error of the reference's largest (a near tie
//! may flip on rounding). All-zero references are refused: zeros are what a driver that
//! executes nothing leaves, and nothing can be checked against them.

/// Tolerance of a candidate's logits against the default schedules' on the same device (the
/// graph step): the schedules differ in math (f32, packed f16, int8 dot products with
/// activations rounded to 8 bits) and accumulation order, and the error of each layer's
/// GEMMs (at most 1e-2 relative, see `relative_tolerance` of the GEMM reference) grows
/// through the layers. On lavapipe the tiny models' candidates stay below a tenth of it.
pub const GRAPH_TOLERANCE: f32 = 0.05;

/// Tolerance of the GPU's default prefill against the CPU reference (f32, f16 KV cache):
/// the same allowance as between schedules (the defaults are one of them).
pub const CPU_TOLERANCE: f32 = 0.05;

/// Prompt length of the check against the CPU reference: long enough to run attention over
/// several positions and a partial ubatch, short enough that the CPU forward pass of a 3B
/// model takes seconds on a board.
pub const CHECK_TOKENS: usize = 12;

/// How well checked logits agree with their reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Agreement {
    pub max_abs_diff: f32,
    /// max|reference logit|: the scale of the allowed error.
    pub scale: f32,
    pub tolerance: f32,
    /// The error allowed: `tolerance × scale`, or more where the check was given a larger
    /// floor ([`check_logits_with_floor`]).
    pub allowed: f32,
    pub top1_reference: usize,
    pub top1_got: usize,
}

impl Agreement {
    /// Largest error over the allowed error (below 1 passes).
    pub fn error_ratio(&self) -> f32 {
        self.max_abs_diff / self.allowed
    }
}

/// Checks `got` against `reference` (see the module documentation); `Err` says what is wrong.
pub fn check_logits(reference: &[f32], got: &[f32], tolerance: f32) -> Result<Agreement, String> {
    check_logits_with_floor(reference, got, tolerance, 0.0)
}

/// [`check_logits`] allowing an error of at least `floor` (`max(tolerance × max|logit|,
/// floor)`): for results whose arithmetic is known to move the logits further than the
/// tolerance does, by an amount measured on the same prompt (int8 activations:
/// [`crate::graph::CpuReference`]).
pub fn check_logits_with_floor(
    reference: &[f32],
    got: &[f32],
    tolerance: f32,
    floor: f32,
) -> Result<Agreement, String> {
    if reference.is_empty() || got.len() != reference.len() {
        return Err(format!(
            "{} logits against a reference of {}",
            got.len(),
            reference.len()
        ));
    }
    if let Some(i) = reference.iter().position(|v| !v.is_finite()) {
        return Err(format!("the reference logit {i} is {}", reference[i]));
    }
    if let Some(i) = got.iter().position(|v| !v.is_finite()) {
        return Err(format!("logit {i} is {} (not finite)", got[i]));
    }
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    if scale == 0.0 {
        return Err("the reference logits are all zero: nothing can be checked".into());
    }
    let (max_i, max_abs_diff) = reference
        .iter()
        .zip(got)
        .map(|(r, g)| (r - g).abs())
        .enumerate()
        .fold(
            (0, 0f32),
            |best, (i, d)| if d > best.1 { (i, d) } else { best },
        );
    let allowed = (tolerance * scale).max(floor);
    let agreement = Agreement {
        max_abs_diff,
        scale,
        tolerance,
        allowed,
        top1_reference: argmax(reference),
        top1_got: argmax(got),
    };
    if max_abs_diff > allowed {
        let why = if allowed > tolerance * scale {
            format!("the floor given for this arithmetic, over {tolerance} × max|logit| {scale:.4}")
        } else {
            format!("{tolerance} × max|logit| {scale:.4}")
        };
        return Err(format!(
            "logit {max_i} is {}, the reference {} (|Δ| {max_abs_diff:.4} > allowed {allowed:.4} \
             = {why})",
            got[max_i], reference[max_i]
        ));
    }
    let best = reference[agreement.top1_reference];
    if reference[agreement.top1_got] < best - allowed {
        return Err(format!(
            "top-1 token {} instead of the reference's {} (reference logits {} and {best})",
            agreement.top1_got, agreement.top1_reference, reference[agreement.top1_got]
        ));
    }
    Ok(agreement)
}

pub(crate) fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::corrupt_logits;

    fn reference() -> Vec<f32> {
        (0..1000)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 5.0)
            .collect()
    }

    #[test]
    fn small_rounding_passes_and_reports_its_ratio() {
        let r = reference();
        let got: Vec<f32> = r.iter().map(|v| v * 1.001 + 1e-3).collect();
        let a = check_logits(&r, &got, 0.05).unwrap();
        assert_eq!(a.scale, 10.0);
        assert!(a.error_ratio() < 0.1, "{a:?}");
        assert_eq!(a.top1_reference, a.top1_got);
    }

    #[test]
    fn corrupted_nan_zero_and_short_logits_fail() {
        let r = reference();
        let mut bad = r.clone();
        corrupt_logits(&mut bad);
        assert!(check_logits(&r, &bad, 0.05)
            .unwrap_err()
            .contains("allowed"));
        let mut nan = r.clone();
        nan[7] = f32::NAN;
        assert!(check_logits(&r, &nan, 0.05)
            .unwrap_err()
            .contains("not finite"));
        // What a driver that runs nothing leaves, on either side.
        let zeros = vec![0.0; r.len()];
        assert!(check_logits(&r, &zeros, 0.05).is_err());
        assert!(check_logits(&zeros, &r, 0.05)
            .unwrap_err()
            .contains("all zero"));
        assert!(check_logits(&r, &r[1..], 0.05).is_err());
        assert!(check_logits(&[], &[], 0.05).is_err());
    }

    #[test]
    fn a_floor_raises_the_allowance_and_never_lowers_it() {
        let r = reference();
        let mut got = r.clone();
        got[3] += 0.8;
        // 0.05 × max|logit| 10 = 0.5 < 0.8.
        assert!(check_logits(&r, &got, 0.05).is_err());
        let a = check_logits_with_floor(&r, &got, 0.05, 1.0).unwrap();
        assert_eq!(a.allowed, 1.0);
        assert!((a.error_ratio() - 0.8).abs() < 1e-5, "{a:?}");
        // A floor below the tolerance's allowance changes nothing.
        let e = check_logits_with_floor(&r, &got, 0.05, 0.1).unwrap_err();
        assert!(e.contains("allowed 0.5000 = 0.05 × max|logit|"), "{e}");
        got[3] += 0.5;
        let e = check_logits_with_floor(&r, &got, 0.05, 1.0).unwrap_err();
        assert!(e.contains("allowed 1.0000 = the floor"), "{e}");
    }

    #[test]
    fn the_top_token_may_flip_only_within_a_near_tie() {
        let r = vec![1.0, 5.0, 4.99, -3.0];
        // A near tie (0.01 apart, 0.25 allowed) may flip.
        assert!(check_logits(&r, &[1.0, 4.98, 4.995, -3.0], 0.05).is_ok());
        // A clear gap may not, even when every logit is within the allowance.
        let r = vec![1.0, 5.0, 4.7, -3.0];
        let e = check_logits(&r, &[1.0, 4.85, 4.86, -3.0], 0.05).unwrap_err();
        assert!(e.contains("top-1 token 2"), "{e}");
    }
}
