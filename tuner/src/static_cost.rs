//! Scores of a GEMM candidate that need no execution, for `rocky tune --static`: the ranking a
//! device that can compile but not time (the Mali through Mesa's drm-shim) can still make.
//!
//! Two sources, and every score says which it came from ([`ScoreSource`]):
//! - **driver**: the time `rocky predict` predicts for the candidate's dispatch
//!   ([`driver_cost`]), from the driver's compiler statistics (panvk 26.x reports them through
//!   `VK_KHR_pipeline_executable_properties`: the Valhall compiler's FMA, CVT, SFU and
//!   load/store cycles per invocation, its `Loops`, registers and spills). Those counts are
//!   static (every loop body the compiler kept once), so each pipe is scaled by the loop factor
//!   of the IR pipe doing its work over the loops as the driver compiled them
//!   ([`IrEstimate::driver_factors`]), the busiest pipe taken after the scaling (load/store at
//!   the calibrated rate), times the invocations, on the G610 model with the built-in
//!   calibration, floored by the workload's bytes at the bandwidth
//!   ([`rocky_predict::dispatch_cost`]). One function builds that dispatch for both
//!   ([`driver_dispatch`]), so the ranking and the prediction cannot drift apart.
//! - **analytic** (where the driver reports no cycles: lavapipe, panvk 25.0.7, NVIDIA): the
//!   kernel's IR walked with each loop weighted by its trip count — arithmetic per lane
//!   (16-bit floats at half cost, packed dot products as one), load/store issues of at most
//!   16 bytes each (global and shared; contiguous scalar accesses merged as the driver
//!   merges them), barriers — per invocation, bounded by the larger of
//!   arithmetic and load/store (the way Mali's estimate is), times the invocations. The
//!   device's traits ([`CostModel::for_device`]) adjust it: where f16 math is emulated a
//!   16-bit lane costs twice an f32 one; where memory accesses run lane by lane (llvmpipe)
//!   every loaded or stored element costs one step while arithmetic runs a whole subgroup at
//!   once, and the two add up (a CPU does not overlap them as a GPU's pipes do).
//!
//! Either way a candidate the driver says spills is disqualified, and fewer registers break
//! ties. The numbers are estimates in their own units: comparable within one workload's
//! ranking only. How well they predict measured times is measured in
//! docs/measurements/2026-12-04-static-ranking.md.

use rocky_compiler::ir::{BinaryOp, Block, Expr, Module, Scalar, Stmt, Type, Unroll, Value};
use rocky_compiler::templates::gemm::interface::dispatch_grid;
use rocky_compiler::templates::gemm::{kernel_ir, GemmSchedule, GemmWorkload};
use rocky_compiler::{DeviceCaps, Workload};
use rocky_predict::{dispatch_cost, Constants, Cost, Dispatch, Pipes, Target, ValhallStats};
use rocky_tuning_db::Calibration;
use std::collections::{BTreeMap, HashMap};

/// Where a score came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreSource {
    /// The driver's `Cycles` statistic, scaled by the IR's loop trips and the invocations.
    DriverCycles,
    /// The IR model alone (the driver reports no cycle estimate).
    Analytic,
}

impl ScoreSource {
    /// The words stored with a ranking and printed beside it.
    pub fn describe(self) -> &'static str {
        match self {
            ScoreSource::DriverCycles => {
                "driver statistics: the `rocky predict` model's seconds for the dispatch (a \
                 PREDICTION): the compiler's per-pipe cycles per invocation \
                 (VK_KHR_pipeline_executable_properties), each pipe x its IR loop factor over \
                 the loops as the driver compiled them, busiest pipe (load/store at the \
                 calibrated rate) x invocations on a G610 MC4 (the constants are named \
                 with the ranking), floored by the bytes at the bandwidth; spills \
                 disqualify, compute time then registers break ties"
            }
            ScoreSource::Analytic => {
                "analytic: IR operation counts per invocation weighted by loop trips, combined \
                 by the device's traits (GPU: max of arithmetic and load/store issues; \
                 lane-serial memory such as llvmpipe: arithmetic per subgroup plus element \
                 accesses; emulated f16 at twice f32) x invocations (the driver reports no \
                 cycle estimate); driver spills disqualify where reported"
            }
        }
    }
}

/// What the device's traits change in the IR model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Cost of one 16-bit float lane relative to an f32 lane.
    pub f16_lane: f64,
    /// Memory accesses run element by element (`DeviceCaps::lane_serial_memory`).
    pub lane_serial: bool,
    /// Lanes that run one arithmetic step together where memory is lane-serial.
    pub simd: f64,
}

impl CostModel {
    /// A GPU: packed f16 at half cost, 16-byte load/store issues, pipes overlapping.
    pub const GPU: CostModel = CostModel {
        f16_lane: 0.5,
        lane_serial: false,
        simd: 1.0,
    };

    pub fn for_device(caps: &DeviceCaps) -> CostModel {
        CostModel {
            f16_lane: if caps.emulated_f16 { 2.0 } else { 0.5 },
            lane_serial: caps.lane_serial_memory,
            simd: f64::from(caps.subgroup_size.max(1)),
        }
    }

    /// Issues of a load or store of `bytes` bytes in `elems` elements.
    fn access(&self, bytes: u32, elems: u32) -> f64 {
        if self.lane_serial {
            f64::from(elems)
        } else {
            (f64::from(bytes) / 16.0).ceil()
        }
    }
}

/// Operation counts of one invocation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpCounts {
    /// Arithmetic lane-operations (16-bit float lanes at half, a packed 4x8 dot as one).
    pub arith: f64,
    /// Load/store issues (each moves at most 16 bytes), global and shared, and barriers.
    /// On a GPU, scalar accesses the driver merges are counted merged ([`count`]).
    pub ls: f64,
    /// Bytes read or written in storage buffers.
    pub global_bytes: f64,
    /// Of `ls`, the workgroup barriers: Valhall's load/store statistic leaves its `BARRIER`
    /// instructions out (see [`LoopFactors::driver_ls`]).
    pub barriers: f64,
}

impl OpCounts {
    fn add(&mut self, other: OpCounts, times: f64) {
        self.arith += other.arith * times;
        self.ls += other.ls * times;
        self.global_bytes += other.global_bytes * times;
        self.barriers += other.barriers * times;
    }

    /// Load/store issues without the barriers: in the units of Valhall's load/store statistic.
    fn ls_without_barriers(&self) -> f64 {
        self.ls - self.barriers
    }

    /// The bound per invocation: the busier of the arithmetic and load/store pipes (a GPU),
    /// or their sum with the arithmetic shared by a SIMD group (lane-serial memory: a CPU).
    pub fn bound(&self, model: &CostModel) -> f64 {
        if model.lane_serial {
            self.arith / model.simd + self.ls
        } else {
            self.arith.max(self.ls)
        }
    }
}

/// How many times a static per-invocation count (every loop body once, as a driver's
/// statistics count) must be taken to cover the loops: each its dynamic over its static count.
///
/// Per IR pipe, because the loops do not hold the same share of every pipe's work: a GEMM's K
/// loop holds nearly all its arithmetic but not its output stores, so its load/store count
/// grows by another factor than its arithmetic. A driver statistic of a pipe is scaled by the
/// factor of the IR pipe that does that work ([`LoopFactors::driver_pipes`]); `bound` is the
/// single factor of earlier predictions, the busiest IR pipe's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopFactors {
    /// Arithmetic lane-operations, dynamic over static.
    pub arith: f64,
    /// Load/store issues and barriers, dynamic over static.
    pub ls: f64,
    /// Of [`OpCounts::bound`] (the busier IR pipe): [`IrEstimate::loop_factor`].
    pub bound: f64,
    /// Load/store issues the loops add per invocation to the static count (dynamic minus
    /// static, barriers left out), where the IR sees load/store work: what
    /// [`LoopFactors::driver_ls`] adds to a driver's load/store statistic.
    pub ls_added: Option<f64>,
}

impl LoopFactors {
    /// From the two counts of one kernel. A pipe with no static operations takes `bound`
    /// (the IR sees none of its work, so it knows no better), and `bound` is 1 where the
    /// kernel has no operations at all.
    pub fn of(static_once: &OpCounts, dynamic: &OpCounts, model: &CostModel) -> LoopFactors {
        let ratio = |d: f64, s: f64| (s > 0.0).then(|| d / s);
        let bound = ratio(dynamic.bound(model), static_once.bound(model)).unwrap_or(1.0);
        LoopFactors {
            arith: ratio(dynamic.arith, static_once.arith).unwrap_or(bound),
            ls: ratio(dynamic.ls, static_once.ls).unwrap_or(bound),
            bound,
            ls_added: (static_once.ls_without_barriers() > 0.0)
                .then(|| dynamic.ls_without_barriers() - static_once.ls_without_barriers()),
        }
    }

    /// The factor that scales a driver's load/store statistic of `driver_ls` cycles per
    /// invocation: `(driver_ls + ls_added) / driver_ls`, the **additive** form; the
    /// multiplicative `ls` where the IR sees no load/store work or the driver reports none.
    ///
    /// Why additive (docs/measurements/2026-12-07b-mali-predict.md): the driver's static count
    /// holds load/store-unit instructions the IR does not see (address computations
    /// `LEA_PKA` for the output stores, `LD_PKA.i32` of buffer lengths before the loop: 16 of
    /// the Q4_K GEMM's 87, 5 of the split attention's 20). Those run once, not once per trip,
    /// so `driver × IR dynamic / IR static` multiplies them by the loop factor. Adding only
    /// what the loops repeat keeps them once. Barriers are left out of what is added because
    /// Valhall's load/store statistic does not count its `BARRIER` instructions (Q4_K GEMM:
    /// 89 load/store-unit instructions, 2 of them barriers, statistic 87; attention: 21, 1,
    /// 20).
    pub fn driver_ls(&self, driver_ls: f64) -> f64 {
        match self.ls_added {
            Some(added) if driver_ls > 0.0 => (driver_ls + added) / driver_ls,
            _ => self.ls,
        }
    }

    /// In the order of the driver's per-pipe statistics (Valhall: FMA, CVT, SFU, load/store):
    /// the arithmetic factor for the three arithmetic pipes, the load/store one for load/store.
    pub fn driver_pipes(&self) -> [f64; 4] {
        [self.arith, self.arith, self.arith, self.ls]
    }

    /// Each factor at least `floor` (a kernel's loops never run its body fewer than once).
    pub fn at_least(self, floor: f64) -> LoopFactors {
        LoopFactors {
            arith: self.arith.max(floor),
            ls: self.ls.max(floor),
            bound: self.bound.max(floor),
            // No fewer load/store issues than the static count: nothing taken away.
            ls_added: self.ls_added.map(|a| a.max(0.0)),
        }
    }
}

/// The IR model of one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IrEstimate {
    /// Per invocation, loops weighted by their trip counts.
    pub dynamic: OpCounts,
    /// Per invocation, every loop body counted once (what a driver's static estimate sees).
    pub static_once: OpCounts,
    /// Per invocation as a driver that unrolls [`Unrolled::Requested`]'s, then
    /// [`Unrolled::Constant`]'s loops counts them, each with the loops it keeps
    /// ([`count_compiled`]): which of them the driver's statistics hold is known only once it
    /// compiled the kernel ([`IrEstimate::driver_factors`]).
    pub compiled: [(OpCounts, f64); 2],
    pub invocations: f64,
    /// Bytes the dispatch moves at least ([`bytes_of`]): the memory floor of its time.
    pub bytes: f64,
    pub model: CostModel,
}

impl IrEstimate {
    /// Whole-dispatch cost of the analytic score.
    pub fn analytic_score(&self) -> f64 {
        self.dynamic.bound(&self.model) * self.invocations
    }

    /// How many times a static per-invocation count must be taken to cover the loops: the
    /// ratio of the IR's busiest pipe (one factor for the whole kernel).
    pub fn loop_factor(&self) -> f64 {
        LoopFactors::of(&self.static_once, &self.dynamic, &self.model).bound
    }

    /// The same per IR pipe ([`LoopFactors`]).
    pub fn loop_factors(&self) -> LoopFactors {
        LoopFactors::of(&self.static_once, &self.dynamic, &self.model)
    }

    /// The reading of the loops a driver that reports `driver_loops` kept ([`driver_static`]).
    pub fn reading(&self, driver_loops: Option<f64>) -> Unrolled {
        pick_reading(driver_loops, |u| match u {
            Unrolled::Requested => self.compiled[0].1,
            Unrolled::Constant => self.compiled[1].1,
            Unrolled::Nothing => f64::NAN,
        })
    }

    /// The loop factors per IR pipe over the static counts of the loops as `unrolled` reads
    /// them: what scales a driver's statistics ([`driver_dispatch`]). `rocky predict` and
    /// `rocky tune --static` both take a GEMM's factors from here.
    pub fn factors_as_compiled(&self, unrolled: Unrolled) -> LoopFactors {
        let once = match unrolled {
            Unrolled::Nothing => &self.static_once,
            Unrolled::Requested => &self.compiled[0].0,
            Unrolled::Constant => &self.compiled[1].0,
        };
        LoopFactors::of(once, &self.dynamic, &self.model)
    }

    /// [`IrEstimate::factors_as_compiled`] of the reading the driver's `Loops` picks, with it.
    pub fn driver_factors(&self, driver_loops: Option<f64>) -> (LoopFactors, Unrolled) {
        let u = self.reading(driver_loops);
        (self.factors_as_compiled(u), u)
    }

    /// The numbers stored with a ranked candidate (`ir_…`).
    pub fn as_map(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("ir_arith_per_invocation".into(), self.dynamic.arith),
            ("ir_ls_per_invocation".into(), self.dynamic.ls),
            (
                "ir_global_bytes_per_invocation".into(),
                self.dynamic.global_bytes,
            ),
            ("ir_loop_factor".into(), self.loop_factor()),
            ("invocations".into(), self.invocations),
        ])
    }
}

/// The IR estimate of `s` on `w` (the main kernel; a split-K reduce pass is small and left out).
pub fn ir_estimate(w: &GemmWorkload, s: &GemmSchedule, model: CostModel) -> IrEstimate {
    let module = kernel_ir(w, s);
    // The K-slab loop's bounds come from push constants: its trips from the workload.
    let units = u64::from(w.k).div_ceil(32);
    let per_group = units.div_ceil(u64::from(s.k_groups.max(1)));
    let step = u64::from((s.bk / 32).max(1) * s.k_unroll.max(1));
    let k_trips = per_group.div_ceil(step).max(1) as f64;
    let grid = dispatch_grid(w, s);
    let invocations = grid.iter().map(|&g| f64::from(g)).product::<f64>() * f64::from(s.threads());
    IrEstimate {
        dynamic: count(&module, Some(k_trips), &model),
        static_once: count(&module, None, &model),
        compiled: [
            count_compiled(&module, Unrolled::Requested, &model),
            count_compiled(&module, Unrolled::Constant, &model),
        ],
        invocations,
        bytes: bytes_of(&Workload::Gemm(*w), 0),
        model,
    }
}

/// Bytes a dispatch of `w` must move at least (`kv` keys for attention): its weights, inputs
/// and outputs once. The memory floor of `rocky predict`'s time, and of the static ranking's.
pub fn bytes_of(w: &Workload, kv: usize) -> f64 {
    let f = |x: u32| f64::from(x);
    match w {
        Workload::Gemm(g) | Workload::Gemv(g) => {
            let act = f(g.act_bytes());
            g.weight_bytes() as f64
                + f(g.m) * f(g.k) * act
                + f(g.m) * f(g.n) * act
                + if g.bias { 4.0 * f(g.n) } else { 0.0 }
        }
        Workload::RmsNorm(x) => 8.0 * f(x.m) * f(x.width) + 4.0 * f(x.width),
        Workload::RopeNeox(x) => 8.0 * f(x.m) * f(x.n_heads) * f(x.head_dim),
        Workload::SwiGlu(x) | Workload::GeGlu(x) | Workload::Add(x) => 12.0 * f(x.m) * f(x.width),
        Workload::Scale(x) => 8.0 * f(x.m) * f(x.width),
        Workload::Embedding(x) => f(x.m) * (x.row_bytes() as f64 + 4.0 * f(x.width)),
        Workload::KvWrite(x) => 6.0 * f(x.m) * f(x.kv_width),
        // In place: each value read and written once.
        Workload::Hadamard(x) => 8.0 * f(x.m) * f(x.width),
        Workload::Attention(a) => {
            8.0 * f(a.m) * f(a.q_width()) + 2.0 * 2.0 * kv as f64 * f(a.kv_width())
        }
    }
}

/// The dispatch `rocky predict` costs for a kernel the driver compiled: its statistics `v`
/// (per-pipe cycles per invocation, every kept loop body once), each pipe scaled by `factors`
/// (the arithmetic pipes by [`LoopFactors::arith`], load/store by [`LoopFactors::driver_ls`],
/// the additive form), `invocations` threads, `bytes` at least. The op, kernel name, count
/// and flops are the caller's to fill in. A driver that reports only `Cycles`
/// (no per-pipe counts) gets the single factor of the IR's busiest pipe.
pub fn driver_dispatch(
    v: &ValhallStats,
    factors: &LoopFactors,
    invocations: f64,
    bytes: f64,
) -> Dispatch {
    let cycles = [v.fma, v.cvt, v.sfu, v.load_store];
    Dispatch {
        op: String::new(),
        kernel: String::new(),
        count: 1.0,
        invocations,
        cycles: v.cycles,
        loop_factor: factors.bound,
        bytes,
        occupancy: v.occupancy(),
        spills: v.spills,
        flops: 0.0,
        pipes: cycles.iter().any(|&c| c > 0.0).then(|| Pipes {
            cycles,
            loop_factors: Some({
                let [fma, cvt, sfu, _] = factors.driver_pipes();
                [fma, cvt, sfu, factors.driver_ls(v.load_store)]
            }),
        }),
    }
}

/// What the static ranking costs a driver-compiled candidate on: `rocky predict`'s target and
/// constants.
#[derive(Clone, Debug, PartialEq)]
pub struct PredictModel {
    pub target: Target,
    pub constants: Constants,
}

impl PredictModel {
    /// The G610 MC4 (with `cores` where the driver says) at the built-in calibration, as
    /// `rocky predict --calibration builtin`.
    pub fn g610_builtin(cores: Option<(u32, String)>) -> PredictModel {
        let target = match cores {
            Some((n, from)) => Target::g610_mc4().with_cores(n, from),
            None => Target::g610_mc4(),
        };
        PredictModel {
            target,
            constants: Constants::seed_calibrated(),
        }
    }

    /// The model of a calibration stored in the tuning database (a figure measured on the
    /// device, `rocky predict --fit-pp … --save-calibration`), as `rocky predict` takes it: its
    /// constants, and the clock and bandwidth they were fitted at; cores where the driver says.
    pub fn from_calibration(c: &Calibration, cores: Option<(u32, String)>) -> PredictModel {
        let mut pm = PredictModel::g610_builtin(cores);
        pm.target.clock_hz = c.target.clock_hz;
        pm.target.clock_from = "the calibration's (its constants were fitted at it)".into();
        pm.target.bandwidth = c.target.bandwidth;
        pm.target.bandwidth_from = "the calibration's (its constants were fitted at it)".into();
        pm.constants = calibration_constants(c);
        pm
    }

    /// Which constants, in words (stored with a ranking).
    pub fn describe(&self) -> String {
        if self.constants.fitted.is_empty() {
            "the priors".into()
        } else {
            self.constants.fitted.clone()
        }
    }
}

/// The model's constants of a stored calibration.
pub fn calibration_constants(c: &Calibration) -> Constants {
    Constants {
        efficiency: c.constants.efficiency,
        dispatch_s: c.constants.dispatch_s,
        submit_s: c.constants.submit_s,
        half_occupancy_efficiency: c.constants.half_occupancy_efficiency,
        ls_rate: c.constants.ls_rate,
        fitted: format!(
            "{} fitted to {:.2} tok/s measured on {} ({}), tuning database",
            c.fitted,
            c.measured_tok_s,
            c.device.describe(),
            c.measured_by
        ),
    }
}

/// The predicted time of a candidate's dispatch from the driver's statistics (`stats`, flat),
/// as `rocky predict` costs it, with the loops' reading its `Loops` picked; `None` where the
/// statistics hold no cycles.
pub fn driver_cost(
    estimate: &IrEstimate,
    stats: &BTreeMap<String, f64>,
    pm: &PredictModel,
) -> Option<(Cost, Unrolled)> {
    let v = ValhallStats::from_flat(stats)?;
    let (factors, unrolled) = estimate.driver_factors(stat(stats, "loops"));
    let d = driver_dispatch(&v, &factors, estimate.invocations, estimate.bytes);
    Some((dispatch_cost(&pm.target, &pm.constants, &d), unrolled))
}

/// Per-invocation counts of `module`: loops with constant bounds weighted by their trips and
/// any other loop by `dynamic_trips`; with `None` every loop body once.
///
/// On a GPU (not lane-serial), scalar and short-vector accesses of one buffer or workgroup
/// array at contiguous indices from one base, in one straight-line block, count as the
/// 16-byte accesses the driver merges them into ([`Merged`]).
pub fn count(module: &Module, dynamic_trips: Option<f64>, model: &CostModel) -> OpCounts {
    count_block(
        &module.body,
        &Defs::of(module),
        Weighting::Trips(dynamic_trips),
        model,
    )
    .0
}

/// Which loops a driver is taken to unroll, and so to count at their trips in its static
/// statistics (which count every loop it keeps once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrolled {
    /// None: every loop body once (`count(m, None, …)`).
    Nothing,
    /// The loops with constant bounds that ask to be unrolled (`Unroll::Hint`, SPIR-V
    /// `LoopControl::Unroll`).
    Requested,
    /// Every loop with constant bounds that does not ask to stay a loop (`Unroll::Never`).
    Constant,
}

/// Per-invocation counts as a driver's static statistics see them if it unrolls `unrolled`'s
/// loops (each at its trips) and keeps the others (each body once), with the number of loops
/// the compiled code keeps (what Valhall's `Loops` statistic counts; a kept loop inside an
/// unrolled one is kept once per trip).
pub fn count_compiled(module: &Module, unrolled: Unrolled, model: &CostModel) -> (OpCounts, f64) {
    count_block(
        &module.body,
        &Defs::of(module),
        Weighting::Compiled(unrolled),
        model,
    )
}

/// The definitions of `module`'s values by id (its constants' bits apart), to read a load's
/// or store's index as a base plus a constant ([`Defs::affine`]).
struct Defs<'a> {
    consts: HashMap<u32, u32>,
    exprs: HashMap<u32, &'a Expr>,
}

impl<'a> Defs<'a> {
    fn of(module: &'a Module) -> Defs<'a> {
        let mut consts: HashMap<u32, u32> = HashMap::new();
        let mut exprs: HashMap<u32, &'a Expr> = HashMap::new();
        fn walk<'a>(block: &'a Block, c: &mut HashMap<u32, u32>, e: &mut HashMap<u32, &'a Expr>) {
            for stmt in &block.0 {
                match stmt {
                    Stmt::Let { result, expr, .. } => {
                        if let Expr::Const { bits } = expr {
                            c.insert(result.id(), *bits);
                        }
                        e.insert(result.id(), expr);
                    }
                    Stmt::If {
                        then_body,
                        else_body,
                        ..
                    } => {
                        walk(then_body, c, e);
                        walk(else_body, c, e);
                    }
                    Stmt::For { body, .. } => walk(body, c, e),
                    _ => {}
                }
            }
        }
        walk(&module.body, &mut consts, &mut exprs);
        Defs { consts, exprs }
    }

    /// `v` as a base and a constant offset: `(None, c)` for a constant. Sums, differences,
    /// products and shifts by constants are read through, to a depth of 8; anything else is
    /// a base of its own. A right shift by k is read through where 2^k divides the offset
    /// (`(b + 4c) >> 2 = (b >> 2) + c`) or the base ([`Defs::zeros`]: then
    /// `(b + c) >> k = (b >> k) + (c >> k)`, and the Q6_K GEMM's four word loads `(b + 4j)
    /// >> 4`, j < 4, of one 16-byte element are one load, as in its listing).
    fn affine(&self, v: Value, depth: u32) -> (Option<Base>, i64) {
        let own = (Some(Base::Value(v.id())), 0);
        let Some(expr) = self.exprs.get(&v.id()).filter(|_| depth <= 8) else {
            return own;
        };
        let (op, a, b) = match expr {
            Expr::Const { bits } => return (None, i64::from(*bits)),
            Expr::Binary(op, a, b) => (*op, *a, *b),
            _ => return own,
        };
        let ((ba, ca), (bb, cb)) = (self.affine(a, depth + 1), self.affine(b, depth + 1));
        let shift = (0..32).contains(&cb);
        // Offsets are small in practice; one that would overflow makes the value its own base.
        let read = match (op, ba, bb) {
            // Constants fold (the Q5_0 GEMM's `(j & 3) << 2`).
            (_, None, None) => fold(op, ca, cb).map(|c| (None, c)),
            (BinaryOp::Add, x, None) | (BinaryOp::Add, None, x) => {
                ca.checked_add(cb).map(|c| (x, c))
            }
            (BinaryOp::Add, Some(x), Some(y)) => ca
                .checked_add(cb)
                .map(|c| (Some(Base::Add(Box::new(x), Box::new(y))), c)),
            (BinaryOp::Sub, x, None) => ca.checked_sub(cb).map(|c| (x, c)),
            (BinaryOp::Mul, Some(x), None) => ca
                .checked_mul(cb)
                .map(|c| (Some(Base::Mul(Box::new(x), cb)), c)),
            (BinaryOp::Mul, None, Some(y)) => ca
                .checked_mul(cb)
                .map(|c| (Some(Base::Mul(Box::new(y), ca)), c)),
            (BinaryOp::Shl, Some(x), None) if shift && ca.unsigned_abs() < 1 << 31 => {
                Some((Some(Base::Shl(Box::new(x), cb)), ca << cb))
            }
            // floor((b + c) / 2^k) = b / 2^k + floor(c / 2^k) where 2^k divides b (c >= 0):
            // either the offset keeps its low bits clear or the base is known to.
            (BinaryOp::Shr, Some(x), None)
                if shift && ca >= 0 && (ca % (1 << cb) == 0 || self.base_zeros(&x) >= cb) =>
            {
                Some((Some(Base::Shr(Box::new(x), cb)), ca >> cb))
            }
            _ => None,
        };
        read.unwrap_or(own)
    }
}

/// `a op b` of two constant indices (u32 arithmetic), where it is defined.
fn fold(op: BinaryOp, a: i64, b: i64) -> Option<i64> {
    let (x, y) = (a as u32, b as u32);
    let v = match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Div => x.checked_div(y)?,
        BinaryOp::Rem => x.checked_rem(y)?,
        BinaryOp::BitAnd => x & y,
        BinaryOp::BitOr => x | y,
        BinaryOp::BitXor => x ^ y,
        BinaryOp::Shl => x.checked_shl(y)?,
        BinaryOp::Shr => x.checked_shr(y)?,
        _ => return None,
    };
    Some(i64::from(v))
}

impl Defs<'_> {
    /// How many low bits of `v` are known to be zero (at most 32), from constants and the
    /// products, shifts, sums and masks over them: the alignment the driver can prove.
    fn zeros(&self, id: u32, depth: u32) -> i64 {
        let Some(expr) = self.exprs.get(&id).filter(|_| depth <= 8) else {
            return 0;
        };
        let z = |x: &Value| self.zeros(x.id(), depth + 1);
        let constant = |x: &Value| self.consts.get(&x.id()).map(|&c| i64::from(c));
        match expr {
            Expr::Const { bits } => i64::from(bits.trailing_zeros()),
            Expr::Binary(BinaryOp::Mul, a, b) => (z(a) + z(b)).min(32),
            Expr::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) => z(a).min(z(b)),
            Expr::Binary(BinaryOp::BitAnd, a, b) => z(a).max(z(b)),
            Expr::Binary(BinaryOp::Shl, a, b) => constant(b).map_or(0, |k| (z(a) + k).min(32)),
            Expr::Binary(BinaryOp::Shr, a, b) => constant(b).map_or(0, |k| (z(a) - k).max(0)),
            _ => 0,
        }
    }

    /// [`Defs::zeros`] of a base.
    fn base_zeros(&self, b: &Base) -> i64 {
        match b {
            Base::Value(id) => self.zeros(*id, 0),
            Base::Add(a, b) => self.base_zeros(a).min(self.base_zeros(b)),
            Base::Mul(a, k) => (self.base_zeros(a) + k.trailing_zeros() as i64).min(32),
            Base::Shl(a, k) => (self.base_zeros(a) + k).min(32),
            Base::Shr(a, k) => (self.base_zeros(a) - k).max(0),
        }
    }
}

/// The base of an index read as base plus constant ([`Defs::affine`]): equal bases are equal
/// values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Base {
    Value(u32),
    Add(Box<Base>, Box<Base>),
    Mul(Box<Base>, i64),
    Shl(Box<Base>, i64),
    Shr(Box<Base>, i64),
}

/// Where an access goes: storage buffer or workgroup array, and whether it stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Space {
    Buffer(u32),
    Shared(u32),
}

/// The accesses of one straight-line block, counted as the driver merges them.
///
/// Valhall merges scalar loads and stores of one buffer or workgroup array at contiguous
/// addresses from one base into 16-byte ones (Mesa's load/store vectorizer). Checked against
/// the driver's final code of the Mali default GEMMs (docs/measurements/2026-12-07b-mali-predict.md):
/// the Q4_K 4x4 GEMM's K loop loads its scales and quants as runs of 4 and 8 `u32`, and its
/// products read the workgroup arrays as runs of 4 `u32` or `f32`; its listing holds
/// `LOAD.i128` and `LD_PKA.i128` for them (40 and 7 per trip), and `STORE.i128` for the
/// staged runs (3), where the IR had counted each element. So: the accesses of one key (space,
/// load or store, base) are read as byte ranges, overlapping or touching ranges join into runs,
/// and each run costs one issue per 16 bytes. Only within one block: an `if`, a loop or a
/// barrier ends the straight-line code the driver merges in (its basic blocks), so the
/// pending accesses are counted there.
#[derive(Default)]
struct Merged {
    /// Byte ranges `[start, end)` by (space, store, base).
    pending: HashMap<AccessKey, Vec<(i64, i64)>>,
}

/// What merges: one space, loads or stores, one base.
type AccessKey = (Space, bool, Option<Base>);

impl Merged {
    /// One access of `bytes` bytes at element `index` of elements of `bytes` bytes.
    fn add(&mut self, defs: &Defs, space: Space, store: bool, index: Value, bytes: u32) {
        let (base, offset) = defs.affine(index, 0);
        let at = offset * i64::from(bytes);
        self.pending
            .entry((space, store, base))
            .or_default()
            .push((at, at + i64::from(bytes)));
    }

    /// The issues of the pending accesses; none pending afterwards.
    fn flush(&mut self) -> f64 {
        let mut issues = 0.0;
        for (_, mut ranges) in self.pending.drain() {
            ranges.sort_unstable();
            let mut run: Option<(i64, i64)> = None;
            for (a, b) in ranges {
                run = match run {
                    Some((s, e)) if a <= e => Some((s, e.max(b))),
                    Some((s, e)) => {
                        issues += ((e - s) as f64 / 16.0).ceil();
                        Some((a, b))
                    }
                    None => Some((a, b)),
                };
            }
            if let Some((s, e)) = run {
                issues += ((e - s) as f64 / 16.0).ceil();
            }
        }
        issues
    }
}

/// How [`count_block`] weights a loop body.
#[derive(Clone, Copy)]
enum Weighting {
    /// [`count`]'s: constant bounds at their trips and others at the given trips; `None`: once.
    Trips(Option<f64>),
    /// [`count_compiled`]'s.
    Compiled(Unrolled),
}

/// The counts of `block` and the loops it keeps (see [`count_compiled`]).
fn count_block(
    block: &Block,
    defs: &Defs,
    weighting: Weighting,
    model: &CostModel,
) -> (OpCounts, f64) {
    let mut c = OpCounts::default();
    let mut loops = 0.0;
    // A GPU's accesses wait here until the straight-line code ends, then count merged.
    let mut merged = Merged::default();
    let access = |c: &mut OpCounts,
                  merged: &mut Merged,
                  space: Space,
                  store: bool,
                  index: Value,
                  ty: Type| {
        if model.lane_serial {
            c.ls += model.access(ty.size_bytes(), ty.lanes());
        } else {
            merged.add(defs, space, store, index, ty.size_bytes());
        }
    };
    for stmt in &block.0 {
        match stmt {
            Stmt::Let {
                result,
                expr: Expr::LoadBuffer { buffer, index },
                ..
            } => {
                access(
                    &mut c,
                    &mut merged,
                    Space::Buffer(*buffer),
                    false,
                    *index,
                    result.ty,
                );
                c.global_bytes += f64::from(result.ty.size_bytes());
            }
            Stmt::Let {
                result,
                expr: Expr::LoadShared { array, index },
                ..
            } => access(
                &mut c,
                &mut merged,
                Space::Shared(*array),
                false,
                *index,
                result.ty,
            ),
            Stmt::Let { result, expr, .. } => c.add(expr_cost(expr, result.ty, model), 1.0),
            Stmt::StoreVar { .. } => {}
            Stmt::StoreBuffer {
                buffer,
                index,
                value,
            } => {
                access(
                    &mut c,
                    &mut merged,
                    Space::Buffer(*buffer),
                    true,
                    *index,
                    value.ty,
                );
                c.global_bytes += f64::from(value.ty.size_bytes());
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => access(
                &mut c,
                &mut merged,
                Space::Shared(*array),
                true,
                *index,
                value.ty,
            ),
            // Bounds checks are mostly taken: both branches count.
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                c.ls += merged.flush();
                for body in [then_body, else_body] {
                    let (inner, inner_loops) = count_block(body, defs, weighting, model);
                    c.add(inner, 1.0);
                    loops += inner_loops;
                }
            }
            Stmt::For {
                start,
                end,
                step,
                unroll,
                body,
                ..
            } => {
                c.ls += merged.flush();
                let constant = match (defs.consts.get(&start.id()), defs.consts.get(&end.id())) {
                    (Some(&a), Some(&b)) => {
                        Some(f64::from(b.saturating_sub(a).div_ceil((*step).max(1))))
                    }
                    _ => None,
                };
                let unrolled = |u: Unrolled| match u {
                    Unrolled::Nothing => false,
                    Unrolled::Requested => *unroll == Unroll::Hint,
                    Unrolled::Constant => *unroll != Unroll::Never,
                };
                // (trips the body counts, whether the loop stays a loop)
                let (trips, kept) = match (weighting, constant) {
                    (Weighting::Trips(None), _) => (1.0, true),
                    (Weighting::Trips(Some(_)), Some(n)) => (n, true),
                    (Weighting::Trips(Some(t)), None) => (t, true),
                    (Weighting::Compiled(u), Some(n)) if unrolled(u) => (n, false),
                    (Weighting::Compiled(_), _) => (1.0, true),
                };
                let (inner, inner_loops) = count_block(body, defs, weighting, model);
                c.add(inner, trips);
                loops += inner_loops * trips + if kept { 1.0 } else { 0.0 };
            }
            Stmt::Barrier => {
                c.ls += merged.flush() + 1.0;
                c.barriers += 1.0;
            }
            Stmt::DeviceMemoryBarrier | Stmt::PollAtLeast { .. } => c.ls += merged.flush() + 1.0,
        }
    }
    c.ls += merged.flush();
    (c, loops)
}

fn expr_cost(expr: &Expr, ty: rocky_compiler::ir::Type, model: &CostModel) -> OpCounts {
    let lanes = f64::from(ty.lanes());
    // Float lanes of type `t`: 16-bit ones at the device's relative cost.
    let float = |t: rocky_compiler::ir::Type| {
        let n = f64::from(t.lanes());
        if t.scalar == Scalar::F16 {
            n * model.f16_lane
        } else {
            n
        }
    };
    let arith = |a: f64| OpCounts {
        arith: a,
        ..Default::default()
    };
    match expr {
        Expr::Const { .. }
        | Expr::Builtin(_)
        | Expr::Push(_)
        | Expr::LoadVar(_)
        | Expr::ArrayLength { .. }
        | Expr::Splat(_)
        | Expr::Extract { .. }
        | Expr::Construct(_)
        | Expr::Bitcast(_) => OpCounts::default(),
        // Counted by `count_block`, merged where the driver merges them.
        Expr::LoadBuffer { .. } | Expr::LoadShared { .. } => OpCounts::default(),
        Expr::AtomicAdd { .. } => OpCounts {
            ls: 4.0,
            global_bytes: 4.0,
            ..Default::default()
        },
        Expr::Unary(_, v) | Expr::Convert(v) => arith(lanes.max(f64::from(v.ty.lanes()))),
        Expr::Binary(_, a, _) | Expr::Dot(a, _) => arith(float(a.ty)),
        Expr::Fma(..) | Expr::Select { .. } => arith(float(ty)),
        Expr::Dot4x8Packed { .. } | Expr::UnpackHalf2x16(_) | Expr::PackHalf2x16(_) => arith(1.0),
        Expr::BitFieldExtract { .. } => arith(lanes),
        Expr::Subgroup { .. } => arith(2.0 * lanes),
    }
}

/// The static counts a driver's statistics are taken to hold, and which loops that takes as
/// unrolled: the first of [`Unrolled::Requested`] and [`Unrolled::Constant`] that keeps as many
/// loops as the driver reports (`driver_loops`, Valhall's `Loops`), else every loop once
/// ([`Unrolled::Nothing`]: how the driver compiled the loops is not known).
///
/// A driver that unrolls a loop counts its body once per trip in its static statistics, so a
/// loop factor (dynamic over static) whose static count has that loop once counts its trips
/// twice (docs/measurements/2026-12-06h-mali-predict.md: the Q4_K GEMM's constant loops inside
/// its K loop, `Loops: 1`).
pub fn driver_static(
    module: &Module,
    model: &CostModel,
    driver_loops: Option<f64>,
) -> (OpCounts, Unrolled) {
    match pick_reading(driver_loops, |u| count_compiled(module, u, model).1) {
        Unrolled::Nothing => (count(module, None, model), Unrolled::Nothing),
        u => (count_compiled(module, u, model).0, u),
    }
}

/// The first of [`Unrolled::Requested`] and [`Unrolled::Constant`] whose kept loops (`kept`)
/// equal the driver's `Loops`, else [`Unrolled::Nothing`].
fn pick_reading(driver_loops: Option<f64>, kept: impl Fn(Unrolled) -> f64) -> Unrolled {
    driver_loops
        .and_then(|n| {
            [Unrolled::Requested, Unrolled::Constant]
                .into_iter()
                .find(|&u| kept(u) == n)
        })
        .unwrap_or(Unrolled::Nothing)
}

/// The driver's statistic named like `name` (case-insensitive, exact or as a prefix of a
/// longer name such as "Registers used").
pub fn stat(stats: &BTreeMap<String, f64>, name: &str) -> Option<f64> {
    let name = name.to_ascii_lowercase();
    stats
        .iter()
        .find(|(k, _)| k.to_ascii_lowercase() == name)
        .or_else(|| {
            stats
                .iter()
                .find(|(k, _)| k.to_ascii_lowercase().starts_with(&name))
        })
        .map(|(_, v)| *v)
}

/// A candidate's score: where the driver reports cycles, the seconds `rocky predict` predicts
/// for its dispatch ([`driver_cost`]); else the IR model's analytic score (its own units).
pub fn score(
    estimate: &IrEstimate,
    stats: Option<&BTreeMap<String, f64>>,
    pm: &PredictModel,
) -> (f64, ScoreSource) {
    match stats.and_then(|s| driver_cost(estimate, s, pm)) {
        Some((cost, _)) if cost.total_s.is_finite() && cost.total_s > 0.0 => {
            (cost.total_s, ScoreSource::DriverCycles)
        }
        _ => (estimate.analytic_score(), ScoreSource::Analytic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::ir::{Access, KernelBuilder, Type, Unroll};

    #[test]
    fn loops_multiply_their_body_by_constant_trips_and_dynamic_ones_by_the_given_count() {
        // for i in 0..8 { for j in 0..n (push) { y[j] = x[j] * 2.0 } } : per innermost body one
        // f32 multiply, one 4-byte load (1 issue) and one 4-byte store (1 issue).
        let b = KernelBuilder::new("t", [1, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let y = b.buffer(1, "y", Type::F32, Access::WriteOnly);
        let n = b.push(b.push_field("n", Type::U32));
        b.for_range(b.c_u32(0), b.c_u32(8), 1, Unroll::Auto, |_| {
            b.for_range(b.c_u32(0), n, 1, Unroll::Auto, |j| {
                let v = b.load(x, j);
                b.store(y, j, b.mul(v, b.c_f32(2.0)));
            });
        });
        let m = b.finish();
        let dynamic = count(&m, Some(10.0), &CostModel::GPU);
        assert_eq!(dynamic.arith, 80.0);
        assert_eq!(dynamic.ls, 160.0);
        assert_eq!(dynamic.global_bytes, 640.0);
        let once = count(&m, None, &CostModel::GPU);
        assert_eq!((once.arith, once.ls), (1.0, 2.0));
        // Lane-serial memory (llvmpipe): one step per element, the arithmetic shared by 8
        // lanes and added: (1 / 8 + 2) per inner body.
        let cpu = CostModel {
            f16_lane: 2.0,
            lane_serial: true,
            simd: 8.0,
        };
        let dynamic = count(&m, Some(10.0), &cpu);
        assert_eq!(dynamic.bound(&cpu), 80.0 / 8.0 + 160.0);
    }

    #[test]
    fn loop_factors_are_taken_per_pipe() {
        // for j in 0..n (push) { v = x[j]; 4 arithmetic operations on it } then 3 stores after
        // the loop: every loop once, arithmetic 4 and load/store 1 + 3 = 4; at 10 trips
        // arithmetic 40 and load/store 10 + 3 = 13. The busier IR pipe is the arithmetic:
        // its factor 40 / 4 = 10 is the single factor; the load/store's own is 13 / 4 = 3.25.
        let b = KernelBuilder::new("t", [1, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let y = b.buffer(1, "y", Type::F32, Access::WriteOnly);
        let n = b.push(b.push_field("n", Type::U32));
        b.for_range(b.c_u32(0), n, 1, Unroll::Auto, |j| {
            let v = b.load(x, j);
            let two = b.c_f32(2.0);
            let _ = b.mul(b.add(b.mul(b.add(v, two), two), two), two);
        });
        // Apart (elements 0, 8 and 16), so the three stores do not merge into one.
        for i in 0..3 {
            b.store(y, b.c_u32(8 * i), b.c_f32(0.0));
        }
        let m = b.finish();
        let model = CostModel::GPU;
        let once = count(&m, None, &model);
        let dynamic = count(&m, Some(10.0), &model);
        assert_eq!((once.arith, once.ls), (4.0, 4.0));
        assert_eq!((dynamic.arith, dynamic.ls), (40.0, 13.0));
        let f = LoopFactors::of(&once, &dynamic, &model);
        assert_eq!(
            f,
            LoopFactors {
                arith: 10.0,
                ls: 3.25,
                bound: 10.0,
                ls_added: Some(9.0),
            }
        );
        assert_eq!(f.driver_pipes(), [10.0, 10.0, 10.0, 3.25]);
        // A pipe the IR sees no work of takes the bound's factor; no work at all: 1.
        let no_ls = OpCounts { ls: 0.0, ..once };
        assert_eq!(LoopFactors::of(&no_ls, &dynamic, &model).ls, 10.0);
        let none = OpCounts::default();
        assert_eq!(LoopFactors::of(&none, &none, &model).bound, 1.0);
        assert_eq!(
            LoopFactors::of(&none, &none, &model).at_least(1.0).arith,
            1.0
        );
    }

    /// for j in 0..n (push, a kept loop) { v = x[j]; for i in 0..4 (asks to unroll) {
    /// y[i] = v * 2 } }, then for 0..2 (constant, no hint) { 1 + 1 } and for 0..3 (never
    /// unroll) { x[i] }.
    fn kernel_with_a_hinted_loop_in_a_kept_one() -> Module {
        let b = KernelBuilder::new("t", [1, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let y = b.buffer(1, "y", Type::F32, Access::WriteOnly);
        let n = b.push(b.push_field("n", Type::U32));
        b.for_range(b.c_u32(0), n, 1, Unroll::Auto, |j| {
            let v = b.load(x, j);
            b.for_range(b.c_u32(0), b.c_u32(4), 1, Unroll::Hint, |i| {
                b.store(y, i, b.mul(v, b.c_f32(2.0)));
            });
        });
        b.for_range(b.c_u32(0), b.c_u32(2), 1, Unroll::Auto, |_| {
            let _ = b.add(b.c_f32(1.0), b.c_f32(1.0));
        });
        b.for_range(b.c_u32(0), b.c_u32(3), 1, Unroll::Never, |i| {
            let _ = b.load(x, i);
        });
        b.finish()
    }

    /// The IR estimate of [`kernel_with_a_hinted_loop_in_a_kept_one`] at 10 trips of its kept
    /// loop, 1e6 invocations moving `bytes`.
    fn estimate_of_the_hinted_kernel(bytes: f64) -> IrEstimate {
        let m = kernel_with_a_hinted_loop_in_a_kept_one();
        let model = CostModel::GPU;
        IrEstimate {
            dynamic: count(&m, Some(10.0), &model),
            static_once: count(&m, None, &model),
            compiled: [
                count_compiled(&m, Unrolled::Requested, &model),
                count_compiled(&m, Unrolled::Constant, &model),
            ],
            invocations: 1.0e6,
            bytes,
            model,
        }
    }

    #[test]
    fn static_counts_follow_the_loops_the_driver_kept() {
        let m = kernel_with_a_hinted_loop_in_a_kept_one();
        let model = CostModel::GPU;
        let at = |u| {
            let (c, loops) = count_compiled(&m, u, &model);
            (c.arith, c.ls, loops)
        };
        // Every loop once: arithmetic 1 + 1, load/store 1 + 1 + 1; 4 loops.
        assert_eq!(at(Unrolled::Nothing), (2.0, 3.0, 4.0));
        assert_eq!(
            (count(&m, None, &model).arith, count(&m, None, &model).ls),
            (2.0, 3.0)
        );
        // The hinted loop unrolled: arithmetic 4 + 1, load/store 1 + 4 + 1; 3 loops kept.
        assert_eq!(at(Unrolled::Requested), (5.0, 6.0, 3.0));
        // Every constant loop but the never-unroll one: arithmetic 4 + 2; 2 loops kept.
        assert_eq!(at(Unrolled::Constant), (6.0, 6.0, 2.0));
        // The driver's Loops statistic picks the reading that keeps as many loops; none
        // matches, or no statistic: every loop once.
        assert_eq!(driver_static(&m, &model, Some(3.0)).1, Unrolled::Requested);
        assert_eq!(driver_static(&m, &model, Some(2.0)).1, Unrolled::Constant);
        assert_eq!(driver_static(&m, &model, Some(1.0)).1, Unrolled::Nothing);
        assert_eq!(driver_static(&m, &model, None).1, Unrolled::Nothing);
        // At 10 trips of the kept loop: arithmetic 10 x 4 + 2 = 42, load/store 10 x 5 + 3 = 53.
        // Over the counts with the hinted loop unrolled the factors are 42 / 5 and 53 / 6; over
        // every loop once they would count the unrolled loop's 4 trips twice (21, 17.7).
        let dynamic = count(&m, Some(10.0), &model);
        assert_eq!((dynamic.arith, dynamic.ls), (42.0, 53.0));
        let (compiled, _) = driver_static(&m, &model, Some(3.0));
        let f = LoopFactors::of(&compiled, &dynamic, &model);
        assert!(
            (f.arith - 8.4).abs() < 1e-12 && (f.ls - 53.0 / 6.0).abs() < 1e-12,
            "{f:?}"
        );
        // A loop kept inside an unrolled one is kept once per trip.
        let b = KernelBuilder::new("t", [1, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let n = b.push(b.push_field("n", Type::U32));
        b.for_range(b.c_u32(0), b.c_u32(2), 1, Unroll::Hint, |_| {
            b.for_range(b.c_u32(0), n, 1, Unroll::Auto, |j| {
                let _ = b.load(x, j);
            });
        });
        let nested = b.finish();
        assert_eq!(count_compiled(&nested, Unrolled::Requested, &model).1, 2.0);
        assert_eq!(count_compiled(&nested, Unrolled::Nothing, &model).1, 2.0);
        assert_eq!(
            count_compiled(&nested, Unrolled::Requested, &model).0.ls,
            2.0
        );
    }

    /// Load/store-unit instructions in the final Valhall code of the Mali default kernels
    /// (Mesa 26.1.6 under the drm-shim, `BIFROST_MESA_DEBUG=shaders`; counted by
    /// docs/measurements/2026-12-07b-mali-predict-data/scripts/lscount.sh), without `BARRIER`,
    /// which the driver's load/store statistic leaves out: the driver's compiled code is the
    /// reference here, not this model.
    struct Listing {
        /// Per trip of the kernel's one kept loop (the K loop; attention's key blocks).
        body: f64,
        /// Outside it, once per invocation.
        outside: f64,
        /// The driver's `Load/store` statistic (cycles per invocation, every loop once).
        statistic: f64,
        /// The loop's trips in the dispatch checked.
        trips: f64,
    }

    impl Listing {
        /// What the listing executes per invocation.
        fn executed(&self) -> f64 {
            self.outside + self.body * self.trips
        }
    }

    /// The IR's per-trip load/store issues of `m`'s loops with run-time bounds (merged,
    /// barriers out), and the model's load/store per invocation: the statistic scaled by
    /// [`LoopFactors::driver_ls`] over the reading the driver's `Loops` picks.
    fn ir_body_and_model(m: &Module, l: &Listing, driver_loops: f64) -> (f64, f64) {
        let model = CostModel::for_device(&rocky_compiler::DeviceCaps::mali_g610());
        let at = |t: f64| count(m, Some(t), &model).ls_without_barriers();
        let (once, _) = driver_static(m, &model, Some(driver_loops));
        let f = LoopFactors::of(&once, &count(m, Some(l.trips), &model), &model);
        (at(2.0) - at(1.0), l.statistic * f.driver_ls(l.statistic))
    }

    #[test]
    fn merged_load_store_counts_match_the_driver_listings_of_the_default_gemms() {
        use rocky_compiler::dequant::WeightFormat;
        use rocky_compiler::templates::gemm::{default_layout, default_schedule};
        use rocky_compiler::templates::gemm::{ActType, Epilogue};
        let caps = rocky_compiler::DeviceCaps::mali_g610();
        let gemm_with = |m, n, k, weight, bias, epilogue| {
            let mut w = GemmWorkload {
                m,
                n,
                k,
                act: ActType::F32,
                weight,
                layout: Default::default(),
                bias,
                epilogue,
                rms_norm_eps_bits: None,
            };
            w.layout = default_layout(weight, &caps);
            (w, default_schedule(&w, &caps))
        };
        let gemm = |m, n, k, weight, bias| gemm_with(m, n, k, weight, bias, Epilogue::None);
        // (workload, its listing; W staged two threads per unit, `split_w_staging`,
        // docs/measurements/2026-12-07c-mali-prefill.md). Q4_K, its first column pair's W
        // packed (`packed_w`, docs/measurements/2026-12-07e-mali-prefill.md):
        // `gemm_q4_k_f32_b64x64x64_t4x4_k1_v4_s11_hu_p1_acc32_dot8`, the K loop 6 LD_PKA.i128 +
        // 36 LOAD.i128 + 1 LOAD.i32 + 2 STORE.i128 + 1 STORE.i64 + 3 STORE.i32 (the staging's
        // two layouts in two branches, both counted), outside 16 LEA_PKA + 16 STORE.i32 (the
        // 3B's ffn_gate/up; with W as bytes 6 + 40 + 1 + 2 + 3, statistic 84). Q6_K (aligned layout): `gemm_q6_k_f32_b64x64x64_
        // t4x4_…`, 8 + 38 + 1 + 2 + 3 in the loop, the same 32 outside (the 3B's ffn_down
        // without its residual). Q8_0 (aligned): `gemm_q8_0_f32_bias_b20x16x64_t5x1_…_fma32`,
        // 19 LD_PKA.i128 in the loop, outside 5 LD_PKA.i32 (the bias) + 5 LEA_PKA + 5
        // STORE.i32 (the 0.5B's attn_v). Q5_0 (aligned): `gemm_q5_0_f32_b64x64x64_t4x4_…`,
        // 7 + 36 + 1 + 2 + 3 in the loop, 32 outside (the 0.5B's ffn_gate/up). The 3B's ffn_down itself,
        // Q6_K with the residual epilogue: the same loop, outside 16 LD_PKA.i32 (the residual)
        // + 16 LEA_PKA + 16 STORE.i32, statistic 100. (Before the split: bodies 55, 56, 50,
        // statistics 87, 88, 104, 82, 2026-12-07b.)
        let cases = [
            (
                gemm(512, 11008, 2048, WeightFormat::Q4K, false),
                Listing {
                    body: 49.0,
                    outside: 32.0,
                    statistic: 81.0,
                    trips: 32.0,
                },
            ),
            (
                gemm(512, 2048, 11008, WeightFormat::Q6K, false),
                Listing {
                    body: 52.0,
                    outside: 32.0,
                    statistic: 84.0,
                    trips: 172.0,
                },
            ),
            (
                gemm_with(
                    512,
                    2048,
                    11008,
                    WeightFormat::Q6K,
                    false,
                    Epilogue::Residual,
                ),
                Listing {
                    body: 52.0,
                    outside: 48.0,
                    statistic: 100.0,
                    trips: 172.0,
                },
            ),
            (
                gemm(512, 4864, 896, WeightFormat::Q5_0, false),
                Listing {
                    body: 49.0,
                    outside: 32.0,
                    statistic: 81.0,
                    trips: 14.0,
                },
            ),
            (
                gemm(512, 128, 896, WeightFormat::Q8_0, true),
                Listing {
                    body: 19.0,
                    outside: 15.0,
                    statistic: 34.0,
                    trips: 7.0,
                },
            ),
        ];
        for ((w, s), l) in cases {
            let m = kernel_ir(&w, &s);
            let name = s.name(&w);
            // The driver reported `Loops: 1` for each.
            let (body, model_ls) = ir_body_and_model(&m, &l, 1.0);
            assert_eq!(body, l.body, "{name}: the K loop's merged load/store");
            assert!(
                (model_ls - l.executed()).abs() < 1e-9,
                "{name}: model {model_ls} listing {}",
                l.executed()
            );
            // ir_estimate's trips are the listing's, and rank by the same factor.
            let e = ir_estimate(&w, &s, CostModel::for_device(&caps));
            let (f, _) = e.driver_factors(Some(1.0));
            assert!((l.statistic * f.driver_ls(l.statistic) - l.executed()).abs() < 1e-9);
        }
    }

    #[test]
    fn the_split_attention_matches_its_driver_listing() {
        use rocky_compiler::templates::attention::{self, AttentionWorkload};
        use rocky_compiler::{Schedule, Workload};
        // The 3B's decode attention with panvk's default (split32), listing of
        // docs/measurements/2026-12-06j-mali-predict-data/out/attn-listing-ls.txt: per key
        // block 177 (score loop 16 x 6, P.V loop 16 x 5, 1 store between, the barrier left
        // out); once 8 (2 LD_PKA.i32 before the loop, 3 LEA_PKA + 3 STORE of the partials);
        // statistic 20. At 3 blocks: 539.
        let caps = rocky_compiler::DeviceCaps::mali_g610();
        let aw = AttentionWorkload {
            m: 1,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: 128,
            max_kv: 1024,
            window: 0,
            kv: Default::default(),
        };
        let Schedule::Attention(a) =
            rocky_compiler::templates::default_schedule(&Workload::Attention(aw), &caps)
        else {
            panic!("attention schedule");
        };
        let m = attention::kernel_ir(&aw, &a);
        let l = Listing {
            body: 177.0,
            outside: 8.0,
            statistic: 20.0,
            trips: 3.0,
        };
        // The driver kept the block loop and both inner loops: `Loops: 3`.
        let (body, model_ls) = ir_body_and_model(&m, &l, 3.0);
        assert_eq!(body, l.body);
        assert!((model_ls - l.executed()).abs() < 1e-9, "{model_ls}");
    }

    #[test]
    fn driver_cycles_are_used_where_reported_and_the_ir_model_elsewhere() {
        let once = OpCounts {
            arith: 4.0,
            ls: 10.0,
            ..Default::default()
        };
        let e = IrEstimate {
            dynamic: OpCounts {
                arith: 40.0,
                ls: 100.0,
                ..Default::default()
            },
            static_once: once,
            compiled: [(once, 1.0), (once, 1.0)],
            invocations: 64.0,
            bytes: 0.0,
            model: CostModel::GPU,
        };
        let pm = PredictModel::g610_builtin(None);
        assert_eq!(score(&e, None, &pm), (6400.0, ScoreSource::Analytic));
        let code_size_only = BTreeMap::from([("Code Size".to_string(), 14208.0)]);
        assert_eq!(
            score(&e, Some(&code_size_only), &pm).1,
            ScoreSource::Analytic
        );
        let valhall = BTreeMap::from([
            ("Cycles".to_string(), 26.0),
            ("Registers used".to_string(), 59.0),
        ]);
        // Cycles alone (no per-pipe counts): 26 cycles x (100 / 10) loop repeats x 64
        // invocations, over 4 cores at 1 GHz and the prior efficiency 470 / 512.
        let (seconds, source) = score(&e, Some(&valhall), &pm);
        assert_eq!(source, ScoreSource::DriverCycles);
        let expected = 26.0 * 10.0 * 64.0 / 4.0 / 1e9 / (470.0 / 512.0);
        assert!(
            (seconds / expected - 1.0).abs() < 1e-12,
            "{seconds} {expected}"
        );
        assert_eq!(stat(&valhall, "registers"), Some(59.0));
    }

    /// A calibration measured on a board replaces the built-in constants, clock and
    /// bandwidth in the ranking's model, as in `rocky predict`: the same record at half the
    /// efficiency and half the clock costs four times the compute time.
    #[test]
    fn a_stored_calibration_replaces_the_built_in_constants() {
        use rocky_tuning_db::{CalibrationConstants, CalibrationTarget, DeviceFingerprint};
        let c = Calibration {
            device: DeviceFingerprint {
                vendor_id: 0x13b5,
                device_id: 0xa8670000,
                driver_id: "MESA_PANVK".into(),
                driver_name: "panvk".into(),
                driver_version: "26.1.3".into(),
                device_name: "Mali-G610 MC4".into(),
            },
            compiler_version: "test".into(),
            model: "qwen2.5-3b-q4_k_m.gguf".into(),
            n_prompt: 512,
            ubatch: 64,
            measured_tok_s: 31.0,
            measured_by: "rocky bench -p 512 -ub 64".into(),
            predicted_tok_s: 53.4,
            base: "built-in".into(),
            fitted: "efficiency".into(),
            constants: CalibrationConstants {
                efficiency: 470.0 / 1024.0,
                ls_rate: rocky_predict::SEED_LS_RATE,
                dispatch_s: 0.0,
                submit_s: 0.0,
                half_occupancy_efficiency: 1.0,
            },
            target: CalibrationTarget {
                cores: 4,
                clock_hz: 0.5e9,
                bandwidth: 20.0e9,
            },
            statistics: "driver statistics".into(),
            host: "board".into(),
            date: 0,
        };
        let pm = PredictModel::from_calibration(&c, Some((4, "the driver".into())));
        assert_eq!(pm.target.clock_hz, 0.5e9);
        assert_eq!(pm.target.bandwidth, 20.0e9);
        assert_eq!(pm.constants.efficiency, 470.0 / 1024.0);
        assert!(pm.describe().contains("31.00 tok/s"), "{}", pm.describe());
        let e = estimate_of_the_hinted_kernel(0.0);
        let stats = BTreeMap::from([
            ("FMA".to_string(), 2.0),
            ("Load/store".to_string(), 12.0),
            ("Loops".to_string(), 3.0),
        ]);
        let built_in = score(&e, Some(&stats), &PredictModel::g610_builtin(None)).0;
        let calibrated = score(&e, Some(&stats), &pm).0;
        assert!(
            (calibrated / built_in - 4.0).abs() < 1e-12,
            "{calibrated} {built_in}"
        );
    }

    #[test]
    fn the_ranking_predicts_a_dispatch_as_rocky_predict_does_in_closed_form() {
        // Counted in `static_counts_follow_the_loops_the_driver_kept` (by hand) as arithmetic
        // 42 / load-store 53 at 10 trips of its kept loop; 5 / 6 with its hinted loop unrolled
        // (3 loops kept); 2 / 3 with every loop once.
        let e = estimate_of_the_hinted_kernel(1.0e3);
        let pm = PredictModel::g610_builtin(None);
        let ls_rate = rocky_predict::SEED_LS_RATE;
        let eff = 470.0 / 512.0;
        // A hand-made statistics record: FMA 2, CVT 0.5, SFU 3, load/store 120 cycles, the
        // driver kept 3 loops (the hinted one unrolled), full occupancy.
        let mut stats = BTreeMap::from([
            ("Cycles".to_string(), 120.0),
            ("FMA".to_string(), 2.0),
            ("CVT".to_string(), 0.5),
            ("SFU".to_string(), 3.0),
            ("Load/store".to_string(), 120.0),
            ("Loops".to_string(), 3.0),
            ("Threads".to_string(), 2.0),
        ]);
        // Arithmetic factor 42 / 5: FMA 16.8, SFU 25.2. Load/store additive: the driver's 120
        // plus the 53 - 6 = 47 issues the loops add, (120 + 47) / 3.4946 = 47.79 cycles, the
        // busiest; x 1e6 over 4 cores at 1 GHz.
        let expected = 1.0e6 * ((120.0 + 47.0) / ls_rate) / 4.0 / 1e9 / eff;
        let (seconds, source) = score(&e, Some(&stats), &pm);
        assert_eq!(source, ScoreSource::DriverCycles);
        assert!(
            (seconds / expected - 1.0).abs() < 1e-12,
            "{seconds} {expected}"
        );
        let (cost, unrolled) = driver_cost(&e, &stats, &pm).unwrap();
        assert_eq!(unrolled, Unrolled::Requested);
        assert_eq!(cost.bound, rocky_predict::Bound::Compute);
        // The same dispatch through rocky_predict's own entry (what `rocky predict` sums).
        let d = driver_dispatch(
            &ValhallStats::from_flat(&stats).unwrap(),
            &e.factors_as_compiled(Unrolled::Requested),
            e.invocations,
            e.bytes,
        );
        let p = rocky_predict::predict(&pm.target, &pm.constants, &[d], 0.0, 1.0);
        assert!((p.total_s / expected - 1.0).abs() < 1e-12, "{p:?}");
        // An SFU-heavy record: SFU 30 x 8.4 = 252 cycles beats load/store's 47.79.
        stats.insert("SFU".to_string(), 30.0);
        let expected_sfu = 1.0e6 * (30.0 * 42.0 / 5.0) / 4.0 / 1e9 / eff;
        let (seconds, _) = score(&e, Some(&stats), &pm);
        assert!(
            (seconds / expected_sfu - 1.0).abs() < 1e-12,
            "{seconds} {expected_sfu}"
        );
        // A Loops count no reading keeps: every loop once (arithmetic factor 21, load/store
        // added 53 - 3 = 50): SFU 1 x 21, FMA 2 x 21 = 42, load/store (120 + 50) / 3.4946 =
        // 48.65, the busiest.
        stats.insert("SFU".to_string(), 1.0);
        stats.insert("Loops".to_string(), 7.0);
        let expected_once = 1.0e6 * ((120.0 + 50.0) / ls_rate) / 4.0 / 1e9 / eff;
        let (seconds, _) = score(&e, Some(&stats), &pm);
        assert!(
            (seconds / expected_once - 1.0).abs() < 1e-12,
            "{seconds} {expected_once}"
        );
        // The memory floor: 1 GB at 27 GB/s outlasts the compute.
        let big = IrEstimate { bytes: 1.0e9, ..e };
        let (seconds, _) = score(&big, Some(&stats), &pm);
        assert!((seconds - 1.0e9 / 27.0e9).abs() < 1e-12, "{seconds}");
    }
}
