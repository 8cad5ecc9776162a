//! CPU reference of the attention template: plain softmax attention in f64 over the cache
//! contents exactly as the kernel sees them (K and V decoded from the cache words in the
//! workload's types, `crate::kv_type`).
//!
//! [`reference_rows`] computes the values of some query rows once together with what the
//! allowed error depends on; [`ReferenceRows::expected`] then gives the check of one
//! schedule (its f16 options and key block change the bound). The tuner computes the
//! reference of a workload once and checks every candidate against it.

use super::schedule::AttentionSchedule;
use super::workload::AttentionWorkload;
use crate::templates::expected::Expected;

/// What the error bound of one (row, head) depends on.
#[derive(Clone, Debug)]
struct HeadStats {
    /// `max_j Σ_d |q_d·k_jd| / sqrt(head_dim)`: the score magnitude.
    s_mag: f64,
    /// `max_j Σ_d |k_jd|`.
    k_mag: f64,
    /// `max |v|` over the row's keys and the head.
    v_mag: f64,
    /// Softmax weights (normalised to sum 1), one per visible key.
    weights: Vec<f64>,
}

/// Reference values of chosen query rows, and the statistics of their error bounds.
#[derive(Clone, Debug)]
pub struct ReferenceRows {
    /// The query rows (0-based within the ubatch), in the order of `values`.
    pub rows: Vec<usize>,
    /// `rows.len() × q_width` values.
    pub values: Vec<f32>,
    head_dim: usize,
    n_heads: usize,
    /// Per (row, head), row-major.
    stats: Vec<HeadStats>,
}

const EPS32: f64 = 1.0 / 16_777_216.0; // 2⁻²⁴
const EPS16: f64 = 1.0 / 2048.0; // 2⁻¹¹, the unit roundoff of f16
const F16_MIN_NORMAL: f64 = 1.0 / 16384.0; // 2⁻¹⁴: below it a device may flush to zero

impl ReferenceRows {
    /// The check of schedule `s`'s output for these rows. Allowed error of each output, from
    /// what the kernel's arithmetic may lose, with `V = max |v|`, `S` the score magnitude,
    /// `n` the row's keys:
    /// - f32 q·k: pre-scaled q (1 rounding) and a dot product of head_dim terms summed in
    ///   some order: `|Δs| ≤ (head_dim + 8)·2⁻²⁴·S`. With `f16_qk`: q rounded to f16 and
    ///   each lane's `c = head_dim / (2·threads_per_row)` products per f16vec2 half (tiled: 4 per
    ///   chunk up to the fold, `AttentionSchedule::f16_qk_terms`) summed in
    ///   f16: `|Δs| ≤ (c + 2)·2⁻¹¹·S`, plus what flushing f16 subnormals to zero may lose
    ///   (2⁻¹⁴ per FMA and per q element times |k|): `2⁻¹⁴·(head_dim/2 + Σ_d|k_d|)`. A
    ///   softmax weight moves by at most `2|Δs|` relative (its own score and the max), the
    ///   weights and their normalisation together move the output by at most `4|Δs|·V`;
    /// - Vulkan's `exp` (3 + 2|x| ulp with |x| ≤ 2S + the masked gap) on the weights and on the
    ///   per-block rescaling: `(6 + 4S)·2⁻²³` relative, twice;
    /// - the f32 sums of weights and of weighted values over n keys: `2n·2⁻²⁴` relative;
    /// - with `f16_pv`: each weight rounded to f16 and a block's `kv_block` weighted values
    ///   summed in f16: `(kv_block + 1)·2⁻¹¹·V`; plus, per block, what flushing subnormals may
    ///   lose, at most all of the block's part (`V·Σ_block w`, w the normalised weights) and
    ///   at most `2⁻¹⁴·kv_block·(1 + V)` (both in the final scale, where the running rescaling
    ///   and the normalisation by a sum ≥ 1 only shrink it).
    ///
    /// - split-KV (`kv_splits`): the combine's own rescaling and sums (see the code).
    ///
    /// A worst-case bound that real errors stay far below.
    pub fn expected(&self, s: &AttentionSchedule) -> Expected {
        let hd = self.head_dim;
        let qw = self.n_heads * hd;
        let mut allowed = vec![0f32; self.values.len()];
        for (i, st) in self.stats.iter().enumerate() {
            let n = st.weights.len() as f64;
            let (s_mag, v_mag) = (st.s_mag, st.v_mag);
            let ds = if s.f16_qk {
                let c = f64::from(s.f16_qk_terms(hd as u32));
                (c + 2.0) * EPS16 * s_mag + F16_MIN_NORMAL * (hd as f64 / 2.0 + st.k_mag)
            } else {
                (hd as f64 + 8.0) * EPS32 * s_mag
            };
            let mut tol = v_mag * (4.0 * ds + (12.0 + 8.0 * s_mag) * 2.0 * EPS32 + 4.0 * n * EPS32);
            if s.f16_pv {
                let kvb = s.kv_block.max(1) as usize;
                tol += (kvb as f64 + 1.0) * EPS16 * v_mag;
                let flush = F16_MIN_NORMAL * kvb as f64 * (1.0 + v_mag);
                tol += st
                    .weights
                    .chunks(kvb)
                    .map(|b| (v_mag * b.iter().sum::<f64>()).min(flush))
                    .sum::<f64>();
            }
            if s.kv_splits > 1 {
                // The combine of split-KV (`combine.rs`): one more `exp` per piece
                // (|x| ≤ 2S: 3 + 4S ulp) in both the output and its normaliser, and sums over
                // at most `kv_splits` pieces.
                tol +=
                    v_mag * ((12.0 + 16.0 * s_mag) * EPS32 + 4.0 * f64::from(s.kv_splits) * EPS32);
            }
            let (r, h) = (i / self.n_heads, i % self.n_heads);
            allowed[r * qw + h * hd..][..hd].fill(tol as f32 + 1e-30);
        }
        Expected {
            values: self.values.clone(),
            allowed,
        }
    }
}

/// Causal GQA attention of query rows `rows` (indices into `q`, m × n_heads·head_dim, row i
/// at position `pos0 + i`) over `k_cache` / `v_cache` (KV-write layout, at least
/// `pos0 + max(rows) + 1` positions), in f64.
pub fn reference_rows(
    w: &AttentionWorkload,
    rows: &[usize],
    pos0: u32,
    q: &[f32],
    k_cache: &[u32],
    v_cache: &[u32],
) -> ReferenceRows {
    let (hd, qw, kw) = (
        w.head_dim as usize,
        w.q_width() as usize,
        w.kv_width() as usize,
    );
    let group = w.group() as usize;
    let last = rows.iter().copied().max().map_or(0, |r| r + 1);
    let positions = pos0 as usize + last;
    assert!(
        q.len() >= last * qw,
        "attention reference: q needs {last} rows"
    );
    let kw32 = kw as u32;
    assert!(
        k_cache.len() >= positions * w.kv.k.row_words(kw32) as usize
            && v_cache.len() >= positions * w.kv.v.row_words(kw32) as usize,
        "attention reference: the caches need {positions} positions"
    );
    let k_at = |j: usize, e: usize| f64::from(w.kv.k.cache_value(k_cache, kw32, j, e));
    let v_at = |j: usize, e: usize| f64::from(w.kv.v.cache_value(v_cache, kw32, j, e));
    let scale = 1.0 / (hd as f64).sqrt();
    let mut values = vec![0f32; rows.len() * qw];
    let mut stats = Vec::with_capacity(rows.len() * w.n_heads as usize);
    for (ri, &i) in rows.iter().enumerate() {
        let n_keys = pos0 as usize + i + 1;
        // A sliding window keeps the last `window` of them.
        let first = if w.is_windowed() {
            n_keys.saturating_sub(w.window as usize)
        } else {
            0
        };
        for h in 0..w.n_heads as usize {
            let kvh = h / group;
            let qv: Vec<f64> = (0..hd).map(|d| f64::from(q[i * qw + h * hd + d])).collect();
            let mut scores = Vec::with_capacity(n_keys);
            let (mut s_mag, mut k_mag) = (0f64, 0f64);
            for j in first..n_keys {
                let (mut dot, mut mag, mut kabs) = (0f64, 0f64, 0f64);
                for (d, &qd) in qv.iter().enumerate() {
                    let k = k_at(j, kvh * hd + d);
                    let p = qd * k;
                    dot += p;
                    mag += p.abs();
                    kabs += k.abs();
                }
                scores.push(dot * scale);
                s_mag = s_mag.max(mag * scale);
                k_mag = k_mag.max(kabs);
            }
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            weights.iter_mut().for_each(|p| *p /= sum);
            let mut v_mag = 0f64;
            for d in 0..hd {
                let mut o = 0f64;
                for (j, p) in (first..n_keys).zip(&weights) {
                    let v = v_at(j, kvh * hd + d);
                    o += p * v;
                    v_mag = v_mag.max(v.abs());
                }
                values[ri * qw + h * hd + d] = o as f32;
            }
            stats.push(HeadStats {
                s_mag,
                k_mag,
                v_mag,
                weights,
            });
        }
    }
    ReferenceRows {
        rows: rows.to_vec(),
        values,
        head_dim: hd,
        n_heads: w.n_heads as usize,
        stats,
    }
}

/// The first `m` rows with schedule `s`'s error bound (see [`ReferenceRows::expected`]).
pub fn reference_for(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    m: usize,
    pos0: u32,
    q: &[f32],
    k_cache: &[u32],
    v_cache: &[u32],
) -> Expected {
    let rows: Vec<usize> = (0..m).collect();
    reference_rows(w, &rows, pos0, q, k_cache, v_cache).expected(s)
}

/// The first `m` rows with the bound of f32 math (any schedule without the f16 options).
pub fn reference(
    w: &AttentionWorkload,
    m: usize,
    pos0: u32,
    q: &[f32],
    k_cache: &[u32],
    v_cache: &[u32],
) -> Expected {
    let f32_math = AttentionSchedule {
        rows: 1,
        kv_block: 1,
        threads_per_row: 1,
        group_heads: false,
        stage_kv: false,
        lane_reduce: super::schedule::LaneReduce::Shared,
        f16_qk: false,
        f16_pv: false,
        tile_rows: 0,
        tile_keys: 0,
        lane_rows: 0,
        kv_splits: 0,
        fused_combine: false,
    };
    reference_for(w, &f32_math, m, pos0, q, k_cache, v_cache)
}
