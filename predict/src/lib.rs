//! What a Mali would do: a whole-prefill (and decode-step) time from the driver's own compiler
//! statistics, for a device that compiles but cannot time (the Mali shims), or a board before
//! anyone has timed it there.
//!
//! The model, per dispatch (all of it in [`dispatch_cost`]):
//!
//! ```text
//! compute = invocations × max over pipes(cycles_p × loop_factor_p) / cores / clock / efficiency
//! memory  = bytes / bandwidth                       (a lower bound: each byte moved once)
//! time    = max(compute, memory) + dispatch_fixed
//! ```
//!
//! plus `submit_fixed` per submit. `cycles` is the driver's per-invocation estimate: Mesa's
//! Valhall compiler counts each pipe's instructions of one thread and divides by the pipe's
//! per-core throughput (`va_print_stats`: 64 FMA, 64 CVT, 16 SFU per cycle, the Mali-G78 figures,
//! which the G610/G710 cores share), and reports the busiest pipe as `Cycles`. So `cycles` is
//! core-cycles per invocation, and `invocations × cycles / cores` is the time the busiest pipe
//! keeps the GPU. The statistic counts every loop body once: a loop factor (from the kernel's IR
//! or the shader's known loop trips) scales it to the loops' real trip counts. Spills are in it
//! already (spill and fill instructions are load/store instructions of the count).
//!
//! The loop factor is taken **per pipe** where the dispatch carries one per pipe
//! ([`Pipes::loop_factors`]): each pipe's static count is scaled by how much of *that pipe's*
//! work sits in the loops, and the busiest pipe is taken after the scaling. A pipe whose work is
//! mostly outside the loops (a GEMM's output stores) grows less than one whose work is all in
//! them; a single factor taken from the busiest IR pipe scaled the load/store count by the
//! arithmetic's loop share, so moving load/store work out of a loop into arithmetic raised the
//! predicted time of a load/store-bound kernel (docs/measurements/2026-12-06g-mali-gemm.md,
//! 2026-12-06h-mali-predict.md). Without per-pipe factors (lists written before, llama.cpp's)
//! the one `loop_factor` scales every pipe, as before.
//!
//! The free constants ([`Constants`]) are few on purpose: the achieved fraction of the issue
//! rate, a fixed cost per dispatch and per submit, and the issue efficiency at half occupancy.
//! [`fit`] fits one of them to one measured figure, in closed form or by bisection; every
//! prediction says which constants were fitted and to what. A prediction is never a
//! measurement: the numbers here are estimates of a model with the error the calibration
//! report states.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// FMA instructions one Valhall core issues per cycle in Mesa's statistics
/// (`va_print_stats` in src/panfrost/compiler/bifrost_compile.c: "Mali G78 peak performance: 64
/// FMA instructions per cycle"). fp16 vec2 FMAs are one instruction: fp16 peaks at twice.
pub const VALHALL_FMA_PER_CORE_CYCLE: f64 = 64.0;

/// The hardware a prediction is for, each value with where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub cores: u32,
    pub cores_from: String,
    pub clock_hz: f64,
    pub clock_from: String,
    /// Bytes per second the GPU reaches in DRAM.
    pub bandwidth: f64,
    pub bandwidth_from: String,
}

impl Target {
    /// The RK3588's Mali-G610 MC4 from documented figures only (where the driver says nothing).
    pub fn g610_mc4() -> Target {
        Target {
            name: "Mali-G610 MC4 (RK3588)".into(),
            cores: 4,
            cores_from: "documented: RK3588 datasheet, Mali-G610 MC4 (4 shader cores)".into(),
            clock_hz: 1.0e9,
            clock_from: "documented: RK3588 GPU top operating point 1.0 GHz (mainline \
                         rk3588-base.dtsi gpu opp table); the driver reports no clock"
                .into(),
            bandwidth: 27.0e9,
            bandwidth_from: "measured elsewhere: clpeak global-memory bandwidth ~27 GB/s on a \
                             G610 (cited in issue 35); LPDDR4X/5 64-bit theoretical ~34 GB/s"
                .into(),
        }
    }

    /// The same target with the core count the driver reported.
    pub fn with_cores(mut self, cores: u32, from: impl Into<String>) -> Target {
        self.cores = cores.max(1);
        self.cores_from = from.into();
        self
    }

    /// fp32 FMA issue rate in FLOP/s (2 per FMA) of the statistics' model.
    pub fn fp32_issue_flops(&self) -> f64 {
        f64::from(self.cores) * VALHALL_FMA_PER_CORE_CYCLE * 2.0 * self.clock_hz
    }

    /// Tokens per second when every token must read `bytes_per_token` once at the bandwidth.
    pub fn bandwidth_bound_tok_s(&self, bytes_per_token: f64) -> f64 {
        if bytes_per_token > 0.0 {
            self.bandwidth / bytes_per_token
        } else {
            f64::INFINITY
        }
    }
}

/// The model's free constants, and which of them a calibration fitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constants {
    /// Achieved fraction of the statistics' issue rate.
    pub efficiency: f64,
    /// Seconds every dispatch costs besides its work (launch, barrier, drain).
    pub dispatch_s: f64,
    /// Seconds every submit costs (queue submit and wait).
    pub submit_s: f64,
    /// Multiplies `efficiency` for kernels at half occupancy (more than 32 work registers:
    /// half the threads in flight hide less latency).
    pub half_occupancy_efficiency: f64,
    /// Load/store thread-operations one core completes per cycle. Mesa's statistics assume 1
    /// (`va_print_stats`: "1 load/store operation per cycle"); a kernel's load/store cycles are
    /// divided by this before the busiest pipe is taken. Only dispatches that carry their
    /// per-pipe cycles see it. `serde(default)`: lists written before it existed read as 1.
    #[serde(default = "one")]
    pub ls_rate: f64,
    /// What was fitted, to which figure; empty for the priors.
    pub fitted: String,
}

impl Constants {
    /// Before any calibration: efficiency from clpeak's fp32 figure on a G610 at 1 GHz (~470
    /// GFLOP/s, issue 35) over the statistics' fp32 issue rate of 4 cores (512 GFLOP/s); no
    /// fixed costs; no occupancy penalty (no board figure to set one).
    pub fn priors() -> Constants {
        Constants {
            efficiency: 470.0 / 512.0,
            dispatch_s: 0.0,
            submit_s: 0.0,
            half_occupancy_efficiency: 1.0,
            ls_rate: 1.0,
            fitted: String::new(),
        }
    }
}

impl Constants {
    /// The default of `rocky predict`: the priors with ONE constant fitted to the one real Mali
    /// figure ([`SEED_FIGURE`]) through llama.cpp's own shaders and dispatches: the load/store
    /// unit's rate ([`SEED_LS_RATE`]). docs/measurements/2026-12-05d-mali-predict.md has the
    /// fit, the alternatives that fit the same figure, and how each predicts the others.
    pub fn seed_calibrated() -> Constants {
        Constants {
            ls_rate: SEED_LS_RATE,
            fitted: format!("ls_rate fitted to {SEED_FIGURE}"),
            ..Constants::priors()
        }
    }
}

/// The one real Mali figure the default constants are fitted to.
pub const SEED_FIGURE: &str = "the seed's llama.cpp Vulkan on panvk (Mesa 26.1.3) Qwen2.5-3B \
                               Q4_K_M pp512 at -ub 64: 21.0 tok/s \
                               (shared/seeds/rocky-vulkan-llama-README.md)";

/// Load/store thread-operations per core-cycle fitted to [`SEED_FIGURE`] with llama.cpp's
/// shaders compiled by Mesa 26.1.6 (`rocky predict --dispatches llama.json --fit-pp 21.0 --fit
/// ls-rate`); Mesa's statistics assume 1. The list weights llama.cpp's matmul loops by their
/// real trips, read from the driver's final code (`tools/llama_predict.py --shader-dump`,
/// docs/measurements/2026-12-06-predict-calibration.md: 3.4946); with every part of the
/// shader weighted by K / 32, as first assumed, the fit was 5.846.
pub const SEED_LS_RATE: f64 = 3.4946;

/// One dispatch (or `count` identical ones) as the model sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The op it belongs to ("attn_q", "ffn_down", "MUL_MAT q4_K"...).
    pub op: String,
    /// The kernel or pipeline name.
    pub kernel: String,
    /// How many such dispatches.
    pub count: f64,
    /// Invocations (threads) of one dispatch.
    pub invocations: f64,
    /// The driver's `Cycles` per invocation (every loop body once).
    pub cycles: f64,
    /// How many times the loops repeat what `cycles` counts once (1 without loops). Not used
    /// where `pipes` carries per-pipe loop factors (rocky's lists then keep here the factor of
    /// the IR's busiest pipe over the same static count: one factor for every pipe, as
    /// predictions before per-pipe factors took it).
    pub loop_factor: f64,
    /// Bytes one dispatch must move to or from DRAM at least.
    pub bytes: f64,
    /// Threads in flight over the most the core allows (1 full, 0.5 half); `None` unknown.
    pub occupancy: Option<f64>,
    /// Spilled registers the driver reports (their cost is already in `cycles`).
    pub spills: f64,
    /// Useful floating-point operations of one dispatch (for GFLOP/s).
    pub flops: f64,
    /// The driver's per-pipe cycles per invocation (FMA, CVT, SFU, load/store), where known,
    /// with each pipe's loop factor where known: then the busiest of them (each scaled by its
    /// loop factor, load/store at the constants' `ls_rate`) replaces `cycles × loop_factor`.
    #[serde(default)]
    pub pipes: Option<Pipes>,
}

/// The driver's per-pipe cycles of one invocation and how many times the loops repeat each.
///
/// Written as `{"cycles": [FMA, CVT, SFU, LS], "loop_factors": [...]}`; a list may also give
/// the four cycle counts alone as an array (lists written before per-pipe loop factors, and
/// tools/llama_predict.py's), which reads as no per-pipe factors.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "PipesForm")]
pub struct Pipes {
    /// FMA, CVT, SFU, load/store cycles per invocation, every loop body once (Mesa's
    /// statistics; load/store at Mesa's assumed 1 per cycle).
    pub cycles: [f64; 4],
    /// How many times the loops repeat each pipe's count, in the same order; `None`: the
    /// dispatch's one `loop_factor` for every pipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_factors: Option<[f64; 4]>,
}

impl Pipes {
    /// The four cycle counts without per-pipe loop factors.
    pub fn cycles(cycles: [f64; 4]) -> Pipes {
        Pipes {
            cycles,
            loop_factors: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PipesForm {
    Cycles([f64; 4]),
    Full {
        cycles: [f64; 4],
        #[serde(default)]
        loop_factors: Option<[f64; 4]>,
    },
}

impl From<PipesForm> for Pipes {
    fn from(f: PipesForm) -> Pipes {
        match f {
            PipesForm::Cycles(cycles) => Pipes::cycles(cycles),
            PipesForm::Full {
                cycles,
                loop_factors,
            } => Pipes {
                cycles,
                loop_factors,
            },
        }
    }
}

fn one() -> f64 {
    1.0
}

impl Dispatch {
    /// Core-cycles per invocation at `ls_rate`, every loop body once (the driver's `cycles`
    /// without per-pipe figures).
    pub fn busiest(&self, ls_rate: f64) -> f64 {
        match self.pipes {
            Some(p) => {
                let [fma, cvt, sfu, ls] = p.cycles;
                fma.max(cvt).max(sfu).max(ls / ls_rate.max(1e-9))
            }
            None => self.cycles,
        }
    }

    /// Core-cycles per invocation at `ls_rate` over the loops' real trips: each pipe's cycles
    /// times its own loop factor, the busiest of them (load/store divided by `ls_rate`).
    /// Without per-pipe loop factors every pipe takes `loop_factor`, i.e.
    /// `busiest × loop_factor`.
    pub fn loop_cycles(&self, ls_rate: f64) -> f64 {
        match self.pipes {
            Some(Pipes {
                cycles,
                loop_factors: Some(f),
            }) => {
                let ls = cycles[3] * f[3] / ls_rate.max(1e-9);
                (0..3).map(|i| cycles[i] * f[i]).fold(ls, f64::max)
            }
            _ => self.busiest(ls_rate) * self.loop_factor,
        }
    }

    /// The loop factor the busiest pipe's static count is effectively scaled by:
    /// [`Dispatch::loop_cycles`] over [`Dispatch::busiest`] (`loop_factor` without per-pipe
    /// factors). What the prediction's table shows.
    pub fn effective_loop_factor(&self, ls_rate: f64) -> f64 {
        let once = self.busiest(ls_rate);
        if once > 0.0 {
            self.loop_cycles(ls_rate) / once
        } else {
            self.loop_factor
        }
    }
}

/// What bounds a dispatch in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Memory,
}

/// The predicted time of one dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub compute_s: f64,
    pub memory_s: f64,
    pub fixed_s: f64,
    pub total_s: f64,
    pub bound: Bound,
}

/// The model of one dispatch (see the crate's documentation).
pub fn dispatch_cost(t: &Target, c: &Constants, d: &Dispatch) -> Cost {
    let occupancy_eff = match d.occupancy {
        Some(o) if o < 1.0 => c.half_occupancy_efficiency,
        _ => 1.0,
    };
    let efficiency = (c.efficiency * occupancy_eff).max(1e-9);
    let core_cycles = d.invocations * d.loop_cycles(c.ls_rate) / f64::from(t.cores.max(1));
    let compute_s = core_cycles / t.clock_hz / efficiency;
    let memory_s = d.bytes / t.bandwidth;
    let (work, bound) = if compute_s >= memory_s {
        (compute_s, Bound::Compute)
    } else {
        (memory_s, Bound::Memory)
    };
    Cost {
        compute_s,
        memory_s,
        fixed_s: c.dispatch_s,
        total_s: work + c.dispatch_s,
        bound,
    }
}

/// One line of the per-op table: the dispatches of one (op, kernel), summed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub op: String,
    pub kernel: String,
    pub calls: f64,
    pub compute_s: f64,
    pub memory_s: f64,
    pub fixed_s: f64,
    pub total_s: f64,
    /// The bound of most of its time.
    pub bound: Bound,
    pub flops: f64,
    /// Driver statistics of the kernel, for the table.
    pub cycles: f64,
    /// [`Dispatch::effective_loop_factor`]: how many times the busiest pipe's static count was
    /// taken (per-pipe loop factors applied).
    pub loop_factor: f64,
    pub occupancy: Option<f64>,
    pub spills: f64,
}

/// A whole prediction: the table, slowest first, and the sums.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub rows: Vec<Row>,
    pub dispatches: f64,
    pub submits: f64,
    pub tokens: f64,
    /// Seconds of all dispatches and submits.
    pub total_s: f64,
    pub tok_per_s: f64,
    /// Shares of the total: bound by compute, by memory, fixed costs.
    pub compute_share: f64,
    pub memory_share: f64,
    pub fixed_share: f64,
}

/// Sums `dispatches` (and `submits` submits) into the time of `tokens` tokens.
pub fn predict(
    t: &Target,
    c: &Constants,
    dispatches: &[Dispatch],
    submits: f64,
    tokens: f64,
) -> Prediction {
    let mut rows: Vec<Row> = Vec::new();
    let (mut compute, mut memory, mut fixed, mut n) = (0.0, 0.0, 0.0, 0.0);
    for d in dispatches {
        let cost = dispatch_cost(t, c, d);
        let k = d.count;
        n += k;
        fixed += cost.fixed_s * k;
        match cost.bound {
            Bound::Compute => compute += cost.compute_s * k,
            Bound::Memory => memory += cost.memory_s * k,
        }
        let row = match rows
            .iter_mut()
            .find(|r| r.op == d.op && r.kernel == d.kernel)
        {
            Some(r) => r,
            None => {
                rows.push(Row {
                    op: d.op.clone(),
                    kernel: d.kernel.clone(),
                    calls: 0.0,
                    compute_s: 0.0,
                    memory_s: 0.0,
                    fixed_s: 0.0,
                    total_s: 0.0,
                    bound: cost.bound,
                    flops: 0.0,
                    cycles: d.cycles,
                    loop_factor: d.effective_loop_factor(c.ls_rate),
                    occupancy: d.occupancy,
                    spills: d.spills,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        row.calls += k;
        row.compute_s += cost.compute_s * k;
        row.memory_s += cost.memory_s * k;
        row.fixed_s += cost.fixed_s * k;
        row.total_s += cost.total_s * k;
        row.flops += d.flops * k;
        row.bound = if row.compute_s >= row.memory_s {
            Bound::Compute
        } else {
            Bound::Memory
        };
    }
    let submit_total = submits * c.submit_s;
    fixed += submit_total;
    let total_s = compute + memory + fixed;
    rows.sort_by(|a, b| b.total_s.total_cmp(&a.total_s));
    let share = |x: f64| if total_s > 0.0 { x / total_s } else { 0.0 };
    Prediction {
        rows,
        dispatches: n,
        submits,
        tokens,
        total_s,
        tok_per_s: if total_s > 0.0 {
            tokens / total_s
        } else {
            f64::INFINITY
        },
        compute_share: share(compute),
        memory_share: share(memory),
        fixed_share: share(fixed),
    }
}

/// The constant a calibration fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitParam {
    /// The fixed cost per dispatch (closed form).
    DispatchCost,
    /// The achieved fraction of the issue rate (bisection).
    Efficiency,
    /// The load/store unit's thread-operations per core-cycle (bisection).
    LoadStoreRate,
}

impl FitParam {
    /// The constant's field name in [`Constants`] (and in a stored calibration).
    pub fn name(self) -> &'static str {
        match self {
            FitParam::DispatchCost => "dispatch_s",
            FitParam::Efficiency => "efficiency",
            FitParam::LoadStoreRate => "ls_rate",
        }
    }

    /// From [`FitParam::name`].
    pub fn from_name(name: &str) -> Option<FitParam> {
        [
            FitParam::DispatchCost,
            FitParam::Efficiency,
            FitParam::LoadStoreRate,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// The order [`fit_first`] tries constants in when a board's figure calibrates the model: the
/// achieved fraction of the issue rate first (it scales every compute-bound dispatch), then the
/// load/store rate (only load/store-bound ones), then a per-dispatch cost (only adds time).
pub const FIT_ORDER: [FitParam; 3] = [
    FitParam::Efficiency,
    FitParam::LoadStoreRate,
    FitParam::DispatchCost,
];

/// [`fit`] of the first of `order` that has a solution, with the constant it fitted; the error
/// lists why each failed. Still one figure, one constant.
pub fn fit_first(
    t: &Target,
    base: &Constants,
    list: &DispatchList,
    measured_tok_s: f64,
    order: &[FitParam],
) -> Result<(Constants, FitParam), FitError> {
    let mut why = Vec::new();
    for &param in order {
        match fit(t, base, list, measured_tok_s, param) {
            Ok(c) => return Ok((c, param)),
            Err(e) => why.push(format!("{}: {e}", param.name())),
        }
    }
    Err(FitError(format!(
        "no single constant reproduces {measured_tok_s} tok/s ({})",
        why.join("; ")
    )))
}

/// Why a fit has no solution.
#[derive(Clone, Debug, PartialEq)]
pub struct FitError(pub String);

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FitError {}

/// A dispatch list to cost: rocky's, or one a tool made (llama.cpp's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchList {
    /// What it is ("llama.cpp 0.7.0 (Debian) Qwen2.5-3B Q4_K_M ub 64").
    pub name: String,
    /// Where the statistics came from (driver and version).
    #[serde(default)]
    pub statistics: String,
    /// Tokens the dispatches process.
    pub tokens: f64,
    /// Queue submits (each costs `submit_s`).
    #[serde(default)]
    pub submits: f64,
    pub dispatches: Vec<Dispatch>,
}

impl DispatchList {
    /// [`predict`] of this list.
    pub fn predict(&self, t: &Target, c: &Constants) -> Prediction {
        predict(t, c, &self.dispatches, self.submits, self.tokens)
    }
}

/// `base` with `param` set so that `list` predicts `measured_tok_s` (the list's name is stored
/// in [`Constants::fitted`] as the figure's).
pub fn fit(
    t: &Target,
    base: &Constants,
    list: &DispatchList,
    measured_tok_s: f64,
    param: FitParam,
) -> Result<Constants, FitError> {
    let (dispatches, submits, tokens, what) = (
        &list.dispatches,
        list.submits,
        list.tokens,
        list.name.as_str(),
    );
    if !(measured_tok_s > 0.0 && measured_tok_s.is_finite()) {
        return Err(FitError(format!(
            "the measured figure must be a positive tok/s, not {measured_tok_s}"
        )));
    }
    let n: f64 = dispatches.iter().map(|d| d.count).sum();
    if n <= 0.0 {
        return Err(FitError("no dispatches to fit".into()));
    }
    let target_s = tokens / measured_tok_s;
    let mut c = base.clone();
    match param {
        FitParam::DispatchCost => {
            c.dispatch_s = 0.0;
            let without = predict(t, &c, dispatches, submits, tokens).total_s;
            let per = (target_s - without) / n;
            if per < 0.0 {
                return Err(FitError(format!(
                    "the model without a per-dispatch cost already predicts {:.3} s, slower \
                     than the measured {target_s:.3} s: a fixed cost cannot explain the figure",
                    without
                )));
            }
            c.dispatch_s = per;
        }
        FitParam::Efficiency => {
            let at = |e: f64| {
                let mut k = c.clone();
                k.efficiency = e;
                predict(t, &k, dispatches, submits, tokens).total_s
            };
            if at(1.0) > target_s {
                return Err(FitError(format!(
                    "even at the full issue rate the model predicts {:.3} s, slower than the \
                     measured {target_s:.3} s",
                    at(1.0)
                )));
            }
            let (mut lo, mut hi) = (1e-6, 1.0);
            if at(lo) < target_s {
                return Err(FitError(
                    "the figure is slower than any efficiency explains: fixed costs or memory \
                     bound it"
                        .into(),
                ));
            }
            for _ in 0..200 {
                let mid = (lo * hi).sqrt();
                if at(mid) > target_s {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            c.efficiency = hi;
        }
        FitParam::LoadStoreRate => {}
    }
    if param == FitParam::LoadStoreRate {
        let at = |r: f64| {
            let mut k = c.clone();
            k.ls_rate = r;
            predict(t, &k, dispatches, submits, tokens).total_s
        };
        let (mut lo, mut hi) = (1.0 / 64.0, 256.0);
        if at(hi) > target_s {
            return Err(FitError(format!(
                "even a load/store unit {hi} times Mesa's rate leaves {:.3} s, slower than the \
                 measured {target_s:.3} s: another pipe or memory bounds it",
                at(hi)
            )));
        }
        if at(lo) < target_s {
            return Err(FitError(
                "the figure is slower than any load/store rate explains".into(),
            ));
        }
        for _ in 0..200 {
            let mid = (lo * hi).sqrt();
            if at(mid) > target_s {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        c.ls_rate = hi;
    }
    let note = format!("{} fitted to {what} ({measured_tok_s} tok/s)", param.name());
    c.fitted = if base.fitted.is_empty() {
        note
    } else {
        format!("{}; {note}", base.fitted)
    };
    Ok(c)
}

/// The Valhall statistics the model reads, from the driver's names (panvk 26.x through
/// VK_KHR_pipeline_executable_properties, or llama.cpp's `GGML_VK_PIPELINE_STATS` lines, which
/// print the same names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ValhallStats {
    /// The busiest pipe's cycles per invocation (`Cycles`).
    pub cycles: f64,
    pub fma: f64,
    pub cvt: f64,
    pub sfu: f64,
    pub load_store: f64,
    pub spills: f64,
    pub fills: f64,
    pub registers: f64,
    /// `Threads`: 2 at full occupancy (at most 32 work registers), 1 at half.
    pub threads: f64,
    pub loops: f64,
}

impl ValhallStats {
    /// From `name → value` (case-insensitive names); `None` without a `Cycles` or per-pipe
    /// cycle statistic (Mesa 25.0.7's panvk reports only code size).
    pub fn from_flat(flat: &BTreeMap<String, f64>) -> Option<ValhallStats> {
        let get = |name: &str| {
            flat.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        };
        let fma = get("FMA").unwrap_or(0.0);
        let cvt = get("CVT").unwrap_or(0.0);
        let sfu = get("SFU").unwrap_or(0.0);
        let load_store = get("Load/store").unwrap_or(0.0);
        let busiest = fma.max(cvt).max(sfu).max(load_store);
        let cycles = get("Cycles").unwrap_or(busiest);
        if cycles.is_nan() || cycles <= 0.0 {
            return None;
        }
        Some(ValhallStats {
            cycles,
            fma,
            cvt,
            sfu,
            load_store,
            spills: get("Spills").unwrap_or(0.0),
            fills: get("Fills").unwrap_or(0.0),
            registers: get("Registers used").unwrap_or(0.0),
            threads: get("Threads").unwrap_or(0.0),
            loops: get("Loops").unwrap_or(0.0),
        })
    }

    /// Occupancy: `Threads` over 2 (Valhall keeps twice the threads at ≤ 32 registers).
    pub fn occupancy(&self) -> Option<f64> {
        (self.threads > 0.0).then(|| (self.threads / 2.0).min(1.0))
    }

    /// The busiest pipe's name.
    pub fn busiest_pipe(&self) -> &'static str {
        let pipes = [
            ("fma", self.fma),
            ("cvt", self.cvt),
            ("sfu", self.sfu),
            ("load/store", self.load_store),
        ];
        pipes
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or("?", |p| p.0)
    }
}

/// Relative error of a prediction against a measured figure: (predicted − measured) / measured.
pub fn relative_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(invocations: f64, cycles: f64, loop_factor: f64, bytes: f64) -> Dispatch {
        Dispatch {
            op: "op".into(),
            kernel: "k".into(),
            count: 1.0,
            invocations,
            cycles,
            loop_factor,
            bytes,
            occupancy: Some(1.0),
            spills: 0.0,
            flops: 0.0,
            pipes: None,
        }
    }

    fn exact() -> Constants {
        Constants {
            efficiency: 1.0,
            ..Constants::priors()
        }
    }

    #[test]
    fn a_compute_bound_dispatch_takes_its_core_cycles_at_the_clock() {
        // 1 M invocations x 10 cycles x 4 loop repeats over 4 cores at 1 GHz = 10 ms.
        let t = Target::g610_mc4();
        let c = exact();
        let cost = dispatch_cost(&t, &c, &one(1.0e6, 10.0, 4.0, 1.0e3));
        assert!((cost.compute_s - 0.010).abs() < 1e-12, "{cost:?}");
        assert_eq!(cost.bound, Bound::Compute);
        assert_eq!(cost.total_s, cost.compute_s);
        // Half the efficiency: twice the time.
        let half = Constants {
            efficiency: 0.5,
            ..exact()
        };
        let slow = dispatch_cost(&t, &half, &one(1.0e6, 10.0, 4.0, 1.0e3));
        assert!((slow.compute_s - 0.020).abs() < 1e-12);
    }

    #[test]
    fn a_memory_bound_dispatch_takes_its_bytes_at_the_bandwidth_plus_the_fixed_cost() {
        let t = Target::g610_mc4();
        let c = Constants {
            dispatch_s: 20e-6,
            ..exact()
        };
        // 27 MB at 27 GB/s = 1 ms; its compute is 1 µs.
        let cost = dispatch_cost(&t, &c, &one(1000.0, 4.0, 1.0, 27.0e6));
        assert_eq!(cost.bound, Bound::Memory);
        assert!((cost.total_s - (1e-3 + 20e-6)).abs() < 1e-12, "{cost:?}");
    }

    #[test]
    fn half_occupancy_scales_the_efficiency() {
        let t = Target::g610_mc4();
        let c = Constants {
            half_occupancy_efficiency: 0.5,
            ..exact()
        };
        let mut d = one(4.0e6, 1.0, 1.0, 0.0);
        let full = dispatch_cost(&t, &c, &d).compute_s;
        d.occupancy = Some(0.5);
        let half = dispatch_cost(&t, &c, &d).compute_s;
        assert!((half / full - 2.0).abs() < 1e-12);
    }

    #[test]
    fn the_fp32_issue_rate_of_a_g610_mc4_at_1_ghz_is_512_gflops() {
        assert_eq!(Target::g610_mc4().fp32_issue_flops(), 512.0e9);
        // clpeak's 470 GFLOP/s is the prior efficiency.
        assert!((Constants::priors().efficiency - 0.918).abs() < 1e-3);
    }

    #[test]
    fn predict_sums_counts_submits_and_tokens() {
        let t = Target::g610_mc4();
        let c = Constants {
            dispatch_s: 1e-3,
            submit_s: 2e-3,
            ..exact()
        };
        let mut a = one(4.0e6, 1.0, 1.0, 0.0); // 1 ms compute
        a.count = 3.0;
        let b = one(1000.0, 1.0, 1.0, 27.0e6); // 1 ms memory
        let p = predict(&t, &c, &[a, b], 2.0, 10.0);
        // 3 x (1 + 1) + (1 + 1) + 2 x 2 ms = 12 ms for 10 tokens.
        assert!((p.total_s - 0.012).abs() < 1e-12, "{p:?}");
        assert!((p.tok_per_s - 10.0 / 0.012).abs() < 1e-6);
        assert_eq!(p.dispatches, 4.0);
        assert_eq!(p.rows.len(), 1, "same op and kernel: one row");
        assert_eq!(p.rows[0].calls, 4.0);
        assert!((p.fixed_share - 8.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn a_fitted_constant_reproduces_its_figure_exactly() {
        let t = Target::g610_mc4();
        let mut d = one(4.0e6, 1.0, 1.0, 0.0);
        d.count = 100.0; // 100 ms of compute at efficiency 1
        let list = DispatchList {
            name: "x".into(),
            statistics: String::new(),
            tokens: 512.0,
            submits: 1.0,
            dispatches: vec![d],
        };
        let base = exact();
        // 512 tokens at 4096 tok/s = 125 ms: 25 ms of fixed cost over 100 dispatches.
        let c = fit(&t, &base, &list, 4096.0, FitParam::DispatchCost).unwrap();
        assert!((c.dispatch_s - 0.25e-3).abs() < 1e-12, "{c:?}");
        let p = list.predict(&t, &c);
        assert!((p.tok_per_s - 4096.0).abs() < 1e-6);
        assert!(c.fitted.contains("dispatch_s"));
        // Efficiency instead: 100 ms / 0.8 = 125 ms.
        let e = fit(&t, &base, &list, 4096.0, FitParam::Efficiency).unwrap();
        assert!((e.efficiency - 0.8).abs() < 1e-9, "{e:?}");
        // A figure faster than the work allows has no fixed cost to fit.
        assert!(fit(&t, &base, &list, 1.0e6, FitParam::DispatchCost).is_err());
        assert!(fit(&t, &base, &list, 0.0, FitParam::DispatchCost).is_err());
    }

    #[test]
    fn the_load_store_rate_divides_only_the_load_store_pipe_and_fits_exactly() {
        let t = Target::g610_mc4();
        let mut d = one(4.0e6, 8.0, 1.0, 0.0);
        // FMA 2, CVT 1, SFU 1, load/store 8 cycles: at rate 1 the load/store pipe (8) bounds
        // it, at rate 2 still (4), at rate 8 the FMA pipe (2).
        d.pipes = Some(Pipes::cycles([2.0, 1.0, 1.0, 8.0]));
        let at = |r: f64| {
            let c = Constants {
                ls_rate: r,
                ..exact()
            };
            dispatch_cost(&t, &c, &d).compute_s
        };
        assert!((at(1.0) - 8e-3).abs() < 1e-12);
        assert!((at(2.0) - 4e-3).abs() < 1e-12);
        assert!((at(8.0) - 2e-3).abs() < 1e-12);
        let mut many = d.clone();
        many.count = 10.0; // 80 ms at rate 1
        let list = DispatchList {
            name: "ls".into(),
            statistics: String::new(),
            tokens: 10.0,
            submits: 0.0,
            dispatches: vec![many],
        };
        // 10 tokens at 250 tok/s = 40 ms: rate 2.
        let c = fit(&t, &exact(), &list, 250.0, FitParam::LoadStoreRate).unwrap();
        assert!((c.ls_rate - 2.0).abs() < 1e-9, "{c:?}");
        // Faster than the FMA pipe allows (20 ms): no rate explains it.
        assert!(fit(&t, &exact(), &list, 1000.0, FitParam::LoadStoreRate).is_err());
    }

    #[test]
    fn each_pipe_takes_its_own_loop_factor_before_the_busiest_is_taken() {
        // Static counts (every loop body once): FMA 10, CVT 1, SFU 12, load/store 80 cycles per
        // invocation; at ls_rate 4 load/store is the busiest pipe (20). The IR says the
        // arithmetic runs 40 times what the static count sees (all of it in the K loop) and
        // the load/store 20 times (much of it, the output stores, outside the loop).
        let t = Target::g610_mc4();
        let c = Constants {
            ls_rate: 4.0,
            ..exact()
        };
        // 4 M invocations over 4 cores at 1 GHz: 1 ms per cycle of an invocation.
        let mut d = one(4.0e6, 20.0, 40.0, 0.0);
        d.pipes = Some(Pipes::cycles([10.0, 1.0, 12.0, 80.0]));
        // The single factor (the IR's busiest pipe, arithmetic: 40) scales the busiest static
        // pipe: 20 x 40 = 800 cycles, 800 ms.
        let single = dispatch_cost(&t, &c, &d).compute_s;
        assert!((single - 0.800).abs() < 1e-12, "{single}");
        assert_eq!(d.effective_loop_factor(c.ls_rate), 40.0);
        // Per pipe: FMA 10 x 40 = 400, CVT 40, SFU 12 x 40 = 480, load/store 80 x 20 / 4 = 400:
        // the SFU (480 cycles, 480 ms) bounds it, not load/store.
        d.pipes = Some(Pipes {
            cycles: [10.0, 1.0, 12.0, 80.0],
            loop_factors: Some([40.0, 40.0, 40.0, 20.0]),
        });
        let per_pipe = dispatch_cost(&t, &c, &d).compute_s;
        assert!((per_pipe - 0.480).abs() < 1e-12, "{per_pipe}");
        // The table's loop factor: 480 over the static busiest 20.
        assert!((d.effective_loop_factor(c.ls_rate) - 24.0).abs() < 1e-12);
        // And the per-pipe factors round-trip through a saved list; the four cycles alone (a
        // list written before, or tools/llama_predict.py's) read as no per-pipe factors.
        let json = serde_json::to_string(&d).unwrap();
        let back: Dispatch = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        let old = json.replace(
            r#"{"cycles":[10.0,1.0,12.0,80.0],"loop_factors":[40.0,40.0,40.0,20.0]}"#,
            "[10.0,1.0,12.0,80.0]",
        );
        assert_ne!(old, json, "{json}");
        let old: Dispatch = serde_json::from_str(&old).unwrap();
        assert_eq!(old.pipes, Some(Pipes::cycles([10.0, 1.0, 12.0, 80.0])));
        assert!((dispatch_cost(&t, &c, &old).compute_s - single).abs() < 1e-12);
    }

    #[test]
    fn moving_load_store_work_into_arithmetic_in_the_loop_is_no_longer_penalized() {
        // The Q4_K 4x4 GEMM of docs/measurements/2026-12-06g-mali-gemm.md, m 512, 11008 x 2048:
        // the change took two load/store instructions out of the K loop (driver LS 89 -> 87)
        // and added arithmetic to it, so the IR's arithmetic dynamic/static ratio rose
        // 39.82 -> 41.89 while its load/store ratio stayed 47.76 (6256 / 131). The
        // load/store pipe is the busiest either way (87 / 3.4946 = 24.9 against SFU 10.6).
        let t = Target::g610_mc4();
        let c = Constants::seed_calibrated();
        let gemm = |pipes: [f64; 4], arith: f64, ls: f64| {
            let mut d = one(4.0e6, pipes[3], arith, 0.0);
            d.pipes = Some(Pipes {
                cycles: pipes,
                loop_factors: Some([arith, arith, arith, ls]),
            });
            d
        };
        let before = gemm(
            [7.11, 9.16, 10.75, 89.0],
            1033.0_f64.recip() * 41136.0,
            47.76,
        );
        let after = gemm(
            [8.55, 8.06, 10.56, 87.0],
            1118.0_f64.recip() * 46832.0,
            47.76,
        );
        let time = |d: &Dispatch| dispatch_cost(&t, &c, d).compute_s;
        // Per pipe: the load/store pipe at its own factor, so the change scales the time by
        // the driver's own load/store ratio, 87 / 89.
        assert!((time(&after) / time(&before) - 87.0 / 89.0).abs() < 1e-12);
        // The single factor (arithmetic's) on the load/store count: 87 x 41.89 over 89 x 39.82
        // = 1.028, slower.
        let single = |d: &Dispatch| {
            let mut d = d.clone();
            d.pipes = Some(Pipes::cycles(d.pipes.unwrap().cycles));
            time(&d)
        };
        let old_ratio = single(&after) / single(&before);
        let expected = (87.0 * 46832.0 / 1118.0) / (89.0 * 41136.0 / 1033.0);
        assert!((old_ratio - expected).abs() < 1e-12, "{old_ratio}");
        assert!(old_ratio > 1.02);
    }

    #[test]
    fn fit_first_takes_the_first_constant_that_reproduces_the_figure() {
        let t = Target::g610_mc4();
        // 10 dispatches of FMA 2, load/store 8 cycles: 80 ms at ls_rate 1, efficiency 1.
        let mut d = one(4.0e6, 8.0, 1.0, 0.0);
        d.pipes = Some(Pipes::cycles([2.0, 1.0, 1.0, 8.0]));
        d.count = 10.0;
        let list = DispatchList {
            name: "order".into(),
            statistics: String::new(),
            tokens: 10.0,
            submits: 0.0,
            dispatches: vec![d],
        };
        // Slower than the model (100 ms): efficiency 0.8 reproduces it.
        let (c, p) = fit_first(&t, &exact(), &list, 100.0, &FIT_ORDER).unwrap();
        assert_eq!(p, FitParam::Efficiency);
        assert!((c.efficiency - 0.8).abs() < 1e-9, "{c:?}");
        // Faster (40 ms): no efficiency ≤ 1 explains it; the load/store rate 2 does.
        let (c, p) = fit_first(&t, &exact(), &list, 250.0, &FIT_ORDER).unwrap();
        assert_eq!(p, FitParam::LoadStoreRate);
        assert!((c.ls_rate - 2.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.efficiency, 1.0);
        // Faster than the FMA pipe allows (10 ms): nothing; the error names every attempt.
        let e = fit_first(&t, &exact(), &list, 2000.0, &FIT_ORDER)
            .unwrap_err()
            .to_string();
        for name in ["efficiency", "ls_rate", "dispatch_s"] {
            assert!(e.contains(name), "{e}");
        }
        for p in FIT_ORDER {
            assert_eq!(FitParam::from_name(p.name()), Some(p));
        }
    }

    #[test]
    fn valhall_statistics_read_from_the_drivers_names() {
        let flat: BTreeMap<String, f64> = [
            ("Instructions", 2351.0),
            ("Cycles", 285.0),
            ("FMA", 5.8125),
            ("CVT", 21.1719),
            ("SFU", 21.0625),
            ("Load/store", 285.0),
            ("Threads", 1.0),
            ("Spills", 25.0),
            ("Fills", 34.0),
            ("Registers used", 64.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let s = ValhallStats::from_flat(&flat).unwrap();
        assert_eq!(s.cycles, 285.0);
        assert_eq!(s.busiest_pipe(), "load/store");
        assert_eq!(s.occupancy(), Some(0.5));
        assert_eq!((s.spills, s.fills, s.registers), (25.0, 34.0, 64.0));
        // Mesa 25.0.7 reports only its code size: no cycles, no statistics for the model.
        let code_only = BTreeMap::from([("Code Size".to_string(), 29824.0)]);
        assert!(ValhallStats::from_flat(&code_only).is_none());
    }
}
