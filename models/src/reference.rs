//! The CPU reference forward pass: a plain interpreter of the op graph in f32, parallel over
//! output rows with rayon. It is the oracle for every GPU kernel and prefill, so it favours
//! being obviously right over being fast: weights are dequantized row by row with the canonical
//! block decoders, sums of squares and softmax denominators are taken in f64.

use crate::act_quant::ActivationQuant;
use crate::arch::{Model, ModelConfig, ModelError};
use crate::formats;
use crate::gguf::GgufFile;
use crate::graph::{FoldedNorm, Graph, Op, RopePairing};
use rayon::prelude::*;
use rocky_compiler::templates::hadamard;
use rocky_compiler::{KvType, KvTypes};

/// Options that make the reference imitate a backend's storage choices. The default is an
/// f16 cache with f32 attention (llama.cpp's `-fa off`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceOptions {
    /// The cache's types: K and V are rounded as the cache stores them when they enter it
    /// (`KvType::round_trip`: f32 exact, f16 to nearest even, q8_0 as ggml's blocks), as
    /// llama.cpp's `-ctk`/`-ctv` caches and rocky's GPU cache do.
    pub kv: KvTypes,
    /// Attention as llama.cpp's CPU flash-attention kernel computes it over an f16 cache (its
    /// default, `-fa auto`) for a batch of fewer than 64 query rows: the query rounded to f16,
    /// keys taken in order with an online softmax, and the weighted sum of V kept in f16,
    /// rounded after every key (`ggml_vec_mad_f16` into its `VKQ16` accumulator); from 64 rows
    /// on llama.cpp's tiled kernel accumulates in f32 like [`attend`]. Not what rocky computes (its
    /// kernels accumulate in f32): it tells llama.cpp's own rounding apart from a bug when
    /// comparing with goldens made that way.
    pub flash_f16: bool,
    /// llama.cpp's Walsh-Hadamard rotation around a quantized cache (llama.cpp PR 21038, on
    /// by default in 0c1e570; `LLAMA_ATTN_ROT_DISABLE=1` turns it off), for heads of a
    /// multiple of 64: with a quantized K, Q and K are multiplied by the orthonormal Hadamard
    /// matrix of the largest power of two dividing head_dim (at least 64) before K enters
    /// the cache, which leaves q·k unchanged but spreads K's outliers over its q8_0 blocks;
    /// with a quantized V, V by the one of size 64 and the attention output back by it.
    /// Off by default, as in the GPU path (`ExecutorOptions::kv_rotation`), which rotates
    /// the same way where it is on (`rocky_compiler::templates::hadamard`).
    pub kv_rotation: bool,
    /// Q rounded to q8_0 blocks (per head) before q·k over a q8_0 K, as llama.cpp's CPU
    /// backend does: ggml dots a q8_0 row with its `vec_dot_type`, q8_0, in flash attention
    /// (`q_to_vec_dot`) and in `mul_mat` alike. Not what rocky computes (its Q stays f32).
    pub q8_0_query: bool,
    /// The projections' activations rounded as an integer-dot backend rounds them
    /// (`crate::act_quant`): rocky's int8 GEMMs, or llama.cpp's CPU `vec_dot_type`s. Exact
    /// (unrounded) by default.
    pub activations: ActivationQuant,
    /// Where set, `activations` applies only to the projections whose weight tensor's name
    /// contains this text (e.g. `ffn_down`), the others staying exact: each projection
    /// kind's share of the rounding's effect on the logits.
    pub activations_only: Option<&'static str>,
}

impl ReferenceOptions {
    /// What llama.cpp does by default (an f16 KV cache): the setting for golden comparisons.
    pub fn llama_cpp() -> Self {
        ReferenceOptions {
            kv: KvTypes::F16,
            flash_f16: false,
            ..ReferenceOptions::default()
        }
    }

    /// llama.cpp with `-fa off -ctk K -ctv V`: f32 attention over a cache of these types.
    pub fn with_kv(kv: KvTypes) -> Self {
        ReferenceOptions {
            kv,
            flash_f16: false,
            ..ReferenceOptions::default()
        }
    }

    /// llama.cpp's CPU backend with flash attention on (see [`ReferenceOptions::flash_f16`]).
    pub fn llama_cpp_flash() -> Self {
        ReferenceOptions {
            kv: KvTypes::F16,
            flash_f16: true,
            ..ReferenceOptions::default()
        }
    }
}

/// A prefill session: the KV cache of every layer and the number of positions filled.
pub struct CpuSession<'a> {
    file: &'a GgufFile,
    model: &'a Model,
    options: ReferenceOptions,
    /// Per layer: (K, V), each `n_past × n_kv_heads*head_dim`.
    kv: Vec<(Vec<f32>, Vec<f32>)>,
    n_past: usize,
    /// Called with each projection's weight name and input (rows of its in_features, before
    /// any activation rounding), see [`CpuSession::observe_linears`].
    observer: Option<LinearObserver<'a>>,
}

/// What [`CpuSession::observe_linears`] calls: (weight tensor name, input rows, in_features).
pub type LinearObserver<'a> = Box<dyn FnMut(&str, &[f32], usize) + Send + Sync + 'a>;

impl<'a> CpuSession<'a> {
    pub fn new(file: &'a GgufFile, model: &'a Model, options: ReferenceOptions) -> Self {
        CpuSession {
            file,
            model,
            options,
            kv: vec![(Vec::new(), Vec::new()); model.config.n_layer],
            n_past: 0,
            observer: None,
        }
    }

    /// Shows every projection's input to `observer` as the pass computes it (for measuring
    /// the arithmetic of GEMMs on a model's real activations); the fused gate/up projection
    /// shows its input once per weight.
    pub fn observe_linears(&mut self, observer: LinearObserver<'a>) {
        self.observer = Some(observer);
    }

    fn observe(&mut self, weight: &str, x: &[f32], k: usize) {
        if let Some(o) = self.observer.as_mut() {
            o(weight, x, k);
        }
    }

    /// Positions already in the cache.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Forgets the cached positions from `n_past` on (prefix reuse: the next `eval` continues
    /// from there). A larger `n_past` than cached changes nothing.
    pub fn truncate(&mut self, n_past: usize) {
        if n_past >= self.n_past {
            return;
        }
        for (k, v) in &mut self.kv {
            let width = k.len() / self.n_past;
            k.truncate(n_past * width);
            v.truncate(n_past * width);
        }
        self.n_past = n_past;
    }

    /// Runs the graph over `tokens` (the next positions after those already cached) and
    /// returns the logits of the last one.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        let cfg = &self.model.config;
        if tokens.is_empty() {
            return Err(self.invalid("the prompt is empty: give at least one token".into()));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.n_vocab) {
            return Err(self.invalid(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                cfg.n_vocab
            )));
        }
        let graph: &Graph = &self.model.graph;
        let mut values: Vec<Option<Vec<f32>>> = vec![None; graph.n_values];
        let n = tokens.len();
        for node in &graph.nodes {
            let input = |i: usize| -> &[f32] {
                values[node.inputs[i]]
                    .as_deref()
                    .expect("graph inputs are produced before use")
            };
            let out = match &node.op {
                Op::Embedding { table, width } => self.embedding(table, *width, tokens)?,
                Op::RmsNorm { weight, eps, width } => {
                    let w = self.dense(weight)?;
                    rms_norm(input(0), &w, *eps, *width)
                }
                Op::Linear {
                    weight,
                    bias,
                    in_features,
                    out_features,
                    residual,
                    norm,
                } => {
                    let x = self.folded_norm(input(0), norm.as_ref(), *in_features)?;
                    self.observe(weight, &x, *in_features);
                    let mut y = self.linear(&x, weight, *in_features, *out_features)?;
                    if let Some(b) = bias {
                        let b = self.dense(b)?;
                        y.par_chunks_mut(*out_features)
                            .for_each(|row| row.iter_mut().zip(&b).for_each(|(y, b)| *y += b));
                    }
                    if *residual {
                        // The unfused Add: residual first, as the graph's `Add(r, y)` adds.
                        y = add(input(1), &y);
                    }
                    y
                }
                // The fused op as the unfused ops composed: the folded norm, both
                // projections, then SwiGLU.
                Op::LinearSwiGlu {
                    gate,
                    up,
                    in_features,
                    out_features,
                    norm,
                } => {
                    let x = self.folded_norm(input(0), norm.as_ref(), *in_features)?;
                    self.observe(gate, &x, *in_features);
                    self.observe(up, &x, *in_features);
                    let g = self.linear(&x, gate, *in_features, *out_features)?;
                    let u = self.linear(&x, up, *in_features, *out_features)?;
                    swiglu(&g, &u)
                }
                // The stacked projections as the separate ones composed: the folded norm, each
                // part's projection and bias, the parts' rows side by side.
                Op::LinearStack {
                    parts,
                    in_features,
                    norm,
                } => {
                    let x = self.folded_norm(input(0), norm.as_ref(), *in_features)?;
                    let width: usize = parts.iter().map(|p| p.out_features).sum();
                    let mut y = vec![0f32; n * width];
                    let mut offset = 0;
                    for part in parts {
                        self.observe(&part.weight, &x, *in_features);
                        let mut p =
                            self.linear(&x, &part.weight, *in_features, part.out_features)?;
                        if let Some(b) = &part.bias {
                            let b = self.dense(b)?;
                            p.chunks_mut(part.out_features)
                                .for_each(|row| row.iter_mut().zip(&b).for_each(|(y, b)| *y += b));
                        }
                        for (dst, src) in y.chunks_mut(width).zip(p.chunks(part.out_features)) {
                            dst[offset..offset + part.out_features].copy_from_slice(src);
                        }
                        offset += part.out_features;
                    }
                    y
                }
                Op::Slice { offset, width } => {
                    let x = input(0);
                    let row = x.len() / n;
                    x.chunks(row)
                        .flat_map(|r| &r[*offset..offset + width])
                        .copied()
                        .collect()
                }
                Op::Rope {
                    n_heads,
                    head_dim,
                    theta,
                    pairing,
                    freq_factors,
                } => {
                    let factors = self.rope_factors(freq_factors.as_deref(), *head_dim)?;
                    let mut x = input(0).to_vec();
                    let rope = Rope {
                        n_heads: *n_heads,
                        head_dim: *head_dim,
                        base: *theta,
                        pairing: *pairing,
                        freq_factors: factors.as_deref(),
                    };
                    rope.apply(&mut x, self.n_past);
                    x
                }
                Op::Attention {
                    layer,
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    sliding_window,
                    rope,
                } => {
                    let (mut q, mut k, v) =
                        (input(0).to_vec(), input(1).to_vec(), input(2).to_vec());
                    // A folded RoPE: the two `Op::Rope`s it replaced, as they ran.
                    if let Some(r) = rope {
                        let factors = self.rope_factors(r.freq_factors.as_deref(), *head_dim)?;
                        for (x, heads) in [(&mut q, *n_heads), (&mut k, *n_kv_heads)] {
                            let rope = Rope {
                                n_heads: heads,
                                head_dim: *head_dim,
                                base: r.theta,
                                pairing: r.pairing,
                                freq_factors: factors.as_deref(),
                            };
                            rope.apply(x, self.n_past);
                        }
                    }
                    let heads = Heads {
                        n_heads: *n_heads,
                        n_kv_heads: *n_kv_heads,
                        head_dim: *head_dim,
                    };
                    self.attention(&q, k, v, *layer, heads, *sliding_window)
                }
                Op::HeadRmsNorm {
                    weight,
                    eps,
                    head_dim,
                    ..
                } => {
                    // Each head is a row of its own for the norm.
                    let w = self.dense(weight)?;
                    rms_norm(input(0), &w, *eps, *head_dim)
                }
                Op::Scale { factor, .. } => input(0).iter().map(|v| v * factor).collect(),
                Op::GeGlu { .. } => geglu(input(0), input(1)),
                Op::SwiGlu { .. } => swiglu(input(0), input(1)),
                Op::Add { .. } => add(input(0), input(1)),
                Op::LastRow { width } => input(0)[(n - 1) * width..].to_vec(),
            };
            values[node.output] = Some(out);
        }
        self.n_past += n;
        Ok(values[graph.logits].take().expect("graph produces logits"))
    }

    /// A RoPE's frequency factors (`head_dim / 2` of them), where it has them.
    fn rope_factors(
        &self,
        name: Option<&str>,
        head_dim: usize,
    ) -> Result<Option<Vec<f32>>, ModelError> {
        let Some(name) = name else {
            return Ok(None);
        };
        let f = self.dense(name)?;
        if f.len() != head_dim / 2 {
            return Err(self.invalid(format!(
                "{name} has {} values, expected head_dim / 2 = {}",
                f.len(),
                head_dim / 2
            )));
        }
        Ok(Some(f))
    }

    fn invalid(&self, detail: String) -> ModelError {
        ModelError::Invalid {
            path: self.file.path().display().to_string(),
            detail,
        }
    }

    /// A whole tensor dequantized to f32 (norm weights and biases: small).
    fn dense(&self, name: &str) -> Result<Vec<f32>, ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| self.invalid(format!("tensor {name} is missing")))?;
        let mut out = vec![0f32; t.n_elements() as usize];
        formats::dequantize(t.ggml_type, self.file.tensor_data(t), &mut out)
            .map_err(|e| self.invalid(format!("tensor {name}: {e}")))?;
        Ok(out)
    }

    fn embedding(&self, table: &str, width: usize, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        let t = self
            .file
            .tensor(table)
            .ok_or_else(|| self.invalid(format!("tensor {table} is missing")))?;
        let row_bytes = t.ggml_type.row_bytes(width as u64).unwrap() as usize;
        let data = self.file.tensor_data(t);
        let mut out = vec![0f32; tokens.len() * width];
        for (row, &tok) in out.chunks_mut(width).zip(tokens) {
            let start = tok as usize * row_bytes;
            formats::dequantize(t.ggml_type, &data[start..start + row_bytes], row)
                .map_err(|e| self.invalid(format!("tensor {table}: {e}")))?;
        }
        Ok(out)
    }

    /// A projection's input: `x` itself, or with a folded RMSNorm `x` normalized as the
    /// unfused `RmsNorm` node would have (the fused graph computes the unfused one's values).
    fn folded_norm<'x>(
        &self,
        x: &'x [f32],
        norm: Option<&FoldedNorm>,
        width: usize,
    ) -> Result<std::borrow::Cow<'x, [f32]>, ModelError> {
        Ok(match norm {
            None => std::borrow::Cow::Borrowed(x),
            Some(n) => {
                let w = self.dense(&n.weight)?;
                std::borrow::Cow::Owned(rms_norm(x, &w, n.eps, width))
            }
        })
    }

    /// y[m, o] = Σ_k x[m, k] · W[o, k]. Weight rows are dequantized in groups of `GROUP` so
    /// each activation row is reused across several outputs while it is in cache.
    fn linear(
        &self,
        x: &[f32],
        weight: &str,
        k: usize,
        n_out: usize,
    ) -> Result<Vec<f32>, ModelError> {
        const GROUP: usize = 16;
        let t = self
            .file
            .tensor(weight)
            .ok_or_else(|| self.invalid(format!("tensor {weight} is missing")))?;
        let row_bytes = t.ggml_type.row_bytes(k as u64).unwrap() as usize;
        let data = self.file.tensor_data(t);
        let x = match self.options.activations_only {
            Some(only) if !weight.contains(only) => std::borrow::Cow::Borrowed(x),
            _ => self.options.activations.apply(t.ggml_type, x, k),
        };
        let x = &*x;
        let m = x.len() / k;
        let n_groups = n_out.div_ceil(GROUP);
        // Computed group-major ([group][m][GROUP]) then transposed into [m][n_out].
        let blocks: Vec<Vec<f32>> = (0..n_groups)
            .into_par_iter()
            .map(|g| -> Result<Vec<f32>, ModelError> {
                let rows = GROUP.min(n_out - g * GROUP);
                let mut w = vec![0f32; rows * k];
                for (r, wrow) in w.chunks_mut(k).enumerate() {
                    let start = (g * GROUP + r) * row_bytes;
                    formats::dequantize(t.ggml_type, &data[start..start + row_bytes], wrow)
                        .map_err(|e| self.invalid(format!("tensor {weight}: {e}")))?;
                }
                let mut out = vec![0f32; m * rows];
                for (mi, xrow) in x.chunks(k).enumerate() {
                    for (r, wrow) in w.chunks(k).enumerate() {
                        out[mi * rows + r] = dot(xrow, wrow);
                    }
                }
                Ok(out)
            })
            .collect::<Result<_, _>>()?;
        let mut y = vec![0f32; m * n_out];
        for (g, block) in blocks.iter().enumerate() {
            let rows = GROUP.min(n_out - g * GROUP);
            for mi in 0..m {
                y[mi * n_out + g * GROUP..][..rows].copy_from_slice(&block[mi * rows..][..rows]);
            }
        }
        Ok(y)
    }

    fn attention(
        &mut self,
        q: &[f32],
        mut k: Vec<f32>,
        mut v: Vec<f32>,
        layer: usize,
        heads: Heads,
        sliding_window: Option<usize>,
    ) -> Vec<f32> {
        let kv_width = heads.n_kv_heads * heads.head_dim;
        let opts = self.options;
        let (rotate_k, rotate_v) = opts.rotations(heads.head_dim);
        let mut q = q.to_vec();
        if let Some(n) = rotate_k {
            hadamard_rotate(&mut q, n);
            hadamard_rotate(&mut k, n);
        }
        if let Some(n) = rotate_v {
            hadamard_rotate(&mut v, n);
        }
        if opts.q8_0_query && opts.kv.k == KvType::Q8_0 {
            q = KvType::Q8_0.round_trip(&q, heads.head_dim);
        }
        k = opts.kv.k.round_trip(&k, kv_width);
        v = opts.kv.v.round_trip(&v, kv_width);
        let (kc, vc) = &mut self.kv[layer];
        kc.extend_from_slice(&k);
        vc.extend_from_slice(&v);
        // llama.cpp (0c1e570) takes its f32 tiled kernel for 64 query rows or more
        // (`GGML_FA_TILE_Q`) and the f16-accumulating one below that.
        let rows = q.len() / (heads.n_heads * heads.head_dim);
        let mut out = if opts.flash_f16 && rows < LLAMA_CPP_FA_TILE_Q {
            attend_flash_f16(&q, kc, vc, self.n_past, heads, sliding_window)
        } else {
            attend(&q, kc, vc, self.n_past, heads, sliding_window)
        };
        if let Some(n) = rotate_v {
            // H is symmetric and H·H = I: the output back in V's own basis.
            hadamard_rotate(&mut out, n);
        }
        out
    }
}

impl ReferenceOptions {
    /// The Hadamard sizes [`ReferenceOptions::kv_rotation`] rotates K (with Q) and V by for
    /// heads of `head_dim`, as llama.cpp chooses them (`llama_kv_cache::build_input_k_rot`
    /// and `build_input_v_rot`): none for an unquantized type or a head_dim not a multiple
    /// of 64.
    fn rotations(&self, head_dim: usize) -> (Option<usize>, Option<usize>) {
        if !self.kv_rotation {
            return (None, None);
        }
        // The rule the GPU path uses too (one place decides which caches rotate).
        let (k, v) = hadamard::kv_rotation_sizes(self.kv, head_dim as u32);
        (k.map(|n| n as usize), v.map(|n| n as usize))
    }
}

/// Each run of `n` values of `x` (a power of two dividing its length) multiplied by the
/// orthonormal Walsh-Hadamard matrix of size `n` (Sylvester's order: entry (i, j) is
/// (-1)^popcount(i & j) / √n), computed as ggml's CPU backend does
/// (`ggml_compute_forward_fwht`): scaled by 1/√n first, then the butterflies, strides 1, 2,
/// 4, ...
///
/// The GPU kernels' reference ([`hadamard::reference`]), so both paths rotate alike.
pub fn hadamard_rotate(x: &mut [f32], n: usize) {
    hadamard::reference(x, n);
}

/// Query rows from which llama.cpp's CPU flash attention switches to its tiled f32 kernel.
const LLAMA_CPP_FA_TILE_Q: usize = 64;

/// [`attend`] in the order and precision of llama.cpp's CPU flash attention over an f16 cache
/// (ggml-cpu `ggml_compute_forward_flash_attn_ext_f16_one_chunk`): q·k of f16 q and k summed
/// in f32, an online softmax over the keys in order, V's weighted sum in f16.
fn attend_flash_f16(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    n_past: usize,
    heads: Heads,
    sliding_window: Option<usize>,
) -> Vec<f32> {
    use half::f16;
    for_each_head_row(q, kc, vc, n_past, heads, sliding_window, |r, o| {
        let qv: Vec<f32> = r.q.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        let mut acc = vec![f16::ZERO; o.len()];
        let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
        for j in r.keys.clone() {
            let s = dot(&qv, r.k(j)) * r.scale;
            let (mut ms, mut vs) = (1f32, 1f32);
            if s > m {
                ms = (m - s).exp();
                m = s;
                for a in acc.iter_mut() {
                    *a = f16::from_f32(a.to_f32() * ms);
                }
            } else {
                vs = (s - m).exp();
            }
            for (a, &v) in acc.iter_mut().zip(r.v(j)) {
                *a = f16::from_f32(a.to_f32() + v * vs);
            }
            sum = sum * ms + vs;
        }
        let inv = 1.0 / sum;
        for (o, a) in o.iter_mut().zip(&acc) {
            *o = a.to_f32() * inv;
        }
    })
}

/// Causal grouped-query attention of the `q` rows at positions `n_past..` over the cached
/// keys and values `kc`, `vc` (positions `0..n_past + rows`). Position p sees keys
/// 0..=p, or with a sliding window of w the last w of them (p - w < j ≤ p).
fn attend(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    n_past: usize,
    heads: Heads,
    sliding_window: Option<usize>,
) -> Vec<f32> {
    for_each_head_row(q, kc, vc, n_past, heads, sliding_window, |r, o| {
        let scores: Vec<f32> = r.keys.clone().map(|j| dot(r.q, r.k(j)) * r.scale).collect();
        let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = weights.iter().map(|&w| w as f64).sum();
        let inv = (1.0 / sum) as f32;
        for (j, w) in r.keys.clone().zip(&weights) {
            for (o, vv) in o.iter_mut().zip(r.v(j)) {
                *o += w * inv * vv;
            }
        }
    })
}

/// One (query row, q head) of an attention op: its query, the keys it sees and its kv head's
/// rows of the cache.
struct HeadRow<'a> {
    q: &'a [f32],
    keys: std::ops::Range<usize>,
    kc: &'a [f32],
    vc: &'a [f32],
    /// Offset of the kv head within a cache row, and the cache row width.
    head_off: usize,
    kv_w: usize,
    head_dim: usize,
    /// 1/√head_dim.
    scale: f32,
}

impl HeadRow<'_> {
    fn k(&self, j: usize) -> &[f32] {
        &self.kc[j * self.kv_w + self.head_off..][..self.head_dim]
    }

    fn v(&self, j: usize) -> &[f32] {
        &self.vc[j * self.kv_w + self.head_off..][..self.head_dim]
    }
}

/// Causal grouped-query attention's bookkeeping, shared by [`attend`] and
/// [`attend_flash_f16`]: `row` fills the head_dim outputs of each (query row, q head) in
/// parallel. Position p sees keys 0..=p, or with a sliding window of w the last w of them.
fn for_each_head_row(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    n_past: usize,
    heads: Heads,
    sliding_window: Option<usize>,
    row: impl Fn(&HeadRow, &mut [f32]) + Sync,
) -> Vec<f32> {
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let q_w = n_heads * head_dim;
    let kv_w = n_kv_heads * head_dim;
    let n_new = q.len() / q_w;
    let group = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut out = vec![0f32; n_new * q_w];
    out.par_chunks_mut(head_dim)
        .enumerate()
        .for_each(|(idx, o)| {
            let (i, h) = (idx / n_heads, idx % n_heads);
            let n_keys = n_past + i + 1;
            let first = sliding_window.map_or(0, |w| n_keys.saturating_sub(w));
            let r = HeadRow {
                q: &q[i * q_w + h * head_dim..][..head_dim],
                keys: first..n_keys,
                kc,
                vc,
                head_off: (h / group) * head_dim,
                kv_w,
                head_dim,
                scale,
            };
            row(&r, o);
        });
    out
}

/// The head layout of an attention op.
#[derive(Clone, Copy, Debug)]
struct Heads {
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

/// Runs a whole prompt from an empty cache and returns the last position's logits.
pub fn forward(
    file: &GgufFile,
    model: &Model,
    tokens: &[u32],
    options: ReferenceOptions,
) -> Result<Vec<f32>, ModelError> {
    CpuSession::new(file, model, options).eval(tokens)
}

/// Dot product with 8 independent partial sums: vectorizes, and rounds less than one chain.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// RMSNorm per row, the sum of squares in f64 (as ggml does).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, width: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(width)
        .zip(x.par_chunks(width))
        .for_each(|(o, row)| {
            let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
            let scale = 1.0 / ((ss / width as f64) as f32 + eps).sqrt();
            for ((o, &v), &w) in o.iter_mut().zip(row).zip(weight) {
                *o = v * scale * w;
            }
        });
    out
}

/// One RoPE op's parameters (see `Op::Rope`).
#[derive(Clone, Copy, Debug)]
pub struct Rope<'a> {
    pub n_heads: usize,
    pub head_dim: usize,
    pub base: f32,
    pub pairing: RopePairing,
    /// `head_dim / 2` divisors of the pairs' angles (Llama 3's rope_freqs).
    pub freq_factors: Option<&'a [f32]>,
}

impl Rope<'_> {
    /// RoPE in place over rows of `n_heads × head_dim`, row r at position `pos0 + r`. The
    /// angles follow ggml's rope cache: θ_i = pos · base^(-2i/d), built by repeated
    /// multiplication in f32 exactly as ggml does (so positions far into the context match),
    /// then divided by the pair's frequency factor in f32 (`theta / ff` in
    /// ggml_rope_cache_init).
    pub fn apply(&self, x: &mut [f32], pos0: usize) {
        let (head_dim, pairing) = (self.head_dim, self.pairing);
        let half = head_dim / 2;
        let theta_scale = self.base.powf(-2.0 / head_dim as f32);
        x.par_chunks_mut(self.n_heads * head_dim)
            .enumerate()
            .for_each(|(r, row)| {
                let mut theta = (pos0 + r) as f32;
                let mut cs = vec![(0f32, 0f32); half];
                for (i, c) in cs.iter_mut().enumerate() {
                    let angle = match self.freq_factors {
                        Some(f) => theta / f[i],
                        None => theta,
                    };
                    *c = (angle.cos(), angle.sin());
                    theta *= theta_scale;
                }
                for head in row.chunks_mut(head_dim) {
                    for (i, &(cos, sin)) in cs.iter().enumerate() {
                        let (lo, hi) = pairing.offsets(i, head_dim);
                        let (a, b) = (head[lo], head[hi]);
                        head[lo] = a * cos - b * sin;
                        head[hi] = a * sin + b * cos;
                    }
                }
            });
    }
}

/// Statistics comparing two logit vectors, used by tests and `rocky prefill --compare`.
#[derive(Clone, Copy, Debug)]
pub struct LogitComparison {
    pub max_abs_diff: f32,
    pub correlation: f64,
    pub top1_a: usize,
    pub top1_b: usize,
    /// Gap between the top-1 and top-2 logits of `a`.
    pub gap_a: f32,
}

pub fn compare_logits(a: &[f32], b: &[f32]) -> LogitComparison {
    let max_abs_diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let n = a.len() as f64;
    let (ma, mb) = (
        a.iter().map(|&x| x as f64).sum::<f64>() / n,
        b.iter().map(|&x| x as f64).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    let top = top_k(a, 2);
    LogitComparison {
        max_abs_diff,
        correlation: sab / (saa.sqrt() * sbb.sqrt()),
        top1_a: top[0].0,
        top1_b: top_k(b, 1)[0].0,
        gap_a: top[0].1 - top.get(1).map_or(f32::NEG_INFINITY, |t| t.1),
    }
}

/// The k largest logits as (index, value), largest first.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut idx: Vec<(usize, f32)> = logits.iter().cloned().enumerate().collect();
    let k = k.min(idx.len());
    if k == 0 {
        return idx;
    }
    idx.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    idx.truncate(k);
    idx.sort_by(|a, b| b.1.total_cmp(&a.1));
    idx
}

impl ModelConfig {
    /// Bytes of an f32 KV cache for `n_ctx` positions (for messages and planning).
    pub fn kv_cache_bytes_f32(&self, n_ctx: usize) -> u64 {
        (2 * self.n_layer * n_ctx * self.n_head_kv * self.head_dim * 4) as u64
    }

    /// Bytes of K and V of one position, all layers, in a cache of types `kv` (rocky's GPU
    /// layout, `KvType::row_bytes`).
    pub fn kv_bytes_per_position(&self, kv: KvTypes) -> u64 {
        let kv_width = (self.n_head_kv * self.head_dim) as u32;
        self.n_layer as u64 * kv.position_bytes(kv_width)
    }
}

fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
        .collect()
}

/// gelu(gate) * up, GELU with ggml's tanh approximation:
/// 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))).
fn geglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| gelu_tanh(g) * u)
        .collect()
}

pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(a, b)| a + b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADS: Heads = Heads {
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 4,
    };

    /// Zero queries give every visible key the same weight: each output is the mean of the
    /// values the position sees, a closed form for the mask.
    fn mean_of_visible(n: usize, window: Option<usize>) -> Vec<f32> {
        let q = vec![0f32; n * 8];
        let k: Vec<f32> = (0..n * 4).map(|i| (i as f32 * 0.37).sin()).collect();
        let v: Vec<f32> = (0..n * 4).map(|i| (i / 4) as f32).collect();
        attend(&q, &k, &v, 0, HEADS, window)
    }

    #[test]
    fn causal_attention_averages_every_earlier_position_under_uniform_scores() {
        let out = mean_of_visible(6, None);
        for p in 0..6 {
            let want = (0..=p).sum::<usize>() as f32 / (p + 1) as f32;
            for &o in &out[p * 8..(p + 1) * 8] {
                assert!((o - want).abs() < 1e-5, "position {p}: {o} != {want}");
            }
        }
    }

    #[test]
    fn a_sliding_window_keeps_the_last_w_positions() {
        let w: usize = 3;
        let out = mean_of_visible(7, Some(w));
        for p in 0..7usize {
            let first = (p + 1).saturating_sub(w);
            let want = (first..=p).sum::<usize>() as f32 / (p + 1 - first) as f32;
            for &o in &out[p * 8..(p + 1) * 8] {
                assert!((o - want).abs() < 1e-5, "position {p}: {o} != {want}");
            }
        }
        // A window as long as the prompt is plain causal attention.
        assert_eq!(mean_of_visible(5, Some(5)), mean_of_visible(5, None));
    }

    #[test]
    fn hadamard_rotation_is_sylvesters_orthonormal_matrix() {
        for n in [64usize, 128] {
            // Two runs of n values: each is rotated on its own.
            let x: Vec<f32> = (0..2 * n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                .collect();
            let mut y = x.clone();
            hadamard_rotate(&mut y, n);
            for (run, out) in x.chunks(n).zip(y.chunks(n)) {
                for (i, &o) in out.iter().enumerate() {
                    let want: f64 = run
                        .iter()
                        .enumerate()
                        .map(|(j, &v)| {
                            let sign = if (i & j).count_ones() % 2 == 0 {
                                1.0
                            } else {
                                -1.0
                            };
                            sign * v as f64 / (n as f64).sqrt()
                        })
                        .sum();
                    assert!((o as f64 - want).abs() < 1e-5, "n {n} i {i}: {o} vs {want}");
                }
            }
            // Its own inverse: rotating twice gives the values back.
            hadamard_rotate(&mut y, n);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }
}
