//! CPU reference of the attention template: plain softmax attention in f64 over the cache
//! contents exactly as the kernel sees them (f16 K and V, unpacked from the cache words).

use half::f16;

use super::workload::AttentionWorkload;
use crate::templates::expected::Expected;

fn half_at(words: &[u32], index: usize) -> f64 {
    let w = words[index / 2];
    let bits = if index % 2 == 0 {
        w as u16
    } else {
        (w >> 16) as u16
    };
    f16::from_bits(bits).to_f64()
}

/// Causal GQA attention of the first `m` rows of `q` (m × n_heads·head_dim, row i at
/// position `pos0 + i`) over `k_cache` / `v_cache` (KV-write layout, at least `pos0 + m`
/// positions), in f64.
///
/// Allowed error of each output, from what the kernel's f32 arithmetic may lose, with
/// `V = max |v|` over the row's keys and head, `S = max_j Σ_d |q_d·k_jd| / sqrt(head_dim)`
/// (the score magnitude) and `n` the row's keys:
/// - each score: pre-scaled q (1 rounding) and a dot product of head_dim terms summed in
///   some order: `|Δs| ≤ (head_dim + 8)·2⁻²⁴·S`; a softmax weight moves by at most
///   `2|Δs|` relative (its own score and the max), the weights and their normalisation
///   together move the output by at most `4|Δs|·V`;
/// - Vulkan's `exp` (3 + 2|x| ulp with |x| ≤ 2S + the masked gap) on the weights and on the
///   per-block rescaling: `(6 + 4S)·2⁻²³` relative, twice;
/// - the f32 sums of weights and of weighted values over n keys: `2n·2⁻²⁴` relative.
///
/// `allowed = V·(4(head_dim + 8)·2⁻²⁴·S + (12 + 8S)·2⁻²³ + 4n·2⁻²⁴)`, a worst-case bound that
/// real errors stay far below.
pub fn reference(
    w: &AttentionWorkload,
    m: usize,
    pos0: u32,
    q: &[f32],
    k_cache: &[u32],
    v_cache: &[u32],
) -> Expected {
    let (hd, qw, kw) = (
        w.head_dim as usize,
        w.q_width() as usize,
        w.kv_width() as usize,
    );
    let group = w.group() as usize;
    let positions = pos0 as usize + m;
    assert!(q.len() >= m * qw, "attention reference: q needs {m} rows");
    assert!(
        k_cache.len() * 2 >= positions * kw && v_cache.len() * 2 >= positions * kw,
        "attention reference: the caches need {positions} positions"
    );
    let scale = 1.0 / (hd as f64).sqrt();
    let eps = 2f64.powi(-24);
    let mut values = vec![0f32; m * qw];
    let mut allowed = vec![0f32; m * qw];
    for i in 0..m {
        let n_keys = pos0 as usize + i + 1;
        for h in 0..w.n_heads as usize {
            let kvh = h / group;
            let qv: Vec<f64> = (0..hd).map(|d| f64::from(q[i * qw + h * hd + d])).collect();
            let mut scores = Vec::with_capacity(n_keys);
            let mut s_mag = 0f64;
            for j in 0..n_keys {
                let base = j * kw + kvh * hd;
                let (mut dot, mut mag) = (0f64, 0f64);
                for (d, &qd) in qv.iter().enumerate() {
                    let p = qd * half_at(k_cache, base + d);
                    dot += p;
                    mag += p.abs();
                }
                scores.push(dot * scale);
                s_mag = s_mag.max(mag * scale);
            }
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            let mut v_mag = 0f64;
            for d in 0..hd {
                let mut o = 0f64;
                for (j, p) in weights.iter().enumerate() {
                    let v = half_at(v_cache, j * kw + kvh * hd + d);
                    o += p * v;
                    v_mag = v_mag.max(v.abs());
                }
                values[i * qw + h * hd + d] = (o / sum) as f32;
            }
            let rel = 4.0 * (hd as f64 + 8.0) * eps * s_mag
                + (12.0 + 8.0 * s_mag) * 2.0 * eps
                + 4.0 * n_keys as f64 * eps;
            let tol = (v_mag * rel) as f32 + 1e-30;
            allowed[i * qw + h * hd..][..hd].fill(tol);
        }
    }
    Expected { values, allowed }
}
