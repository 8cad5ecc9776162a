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
//!   16 bytes each (global and shared), barriers — per invocation, bounded by the larger of
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

use rocky_compiler::ir::{Block, Expr, Module, Scalar, Stmt, Unroll};
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
    pub ls: f64,
    /// Bytes read or written in storage buffers.
    pub global_bytes: f64,
}

impl OpCounts {
    fn add(&mut self, other: OpCounts, times: f64) {
        self.arith += other.arith * times;
        self.ls += other.ls * times;
        self.global_bytes += other.global_bytes * times;
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
/// ([`LoopFactors::driver_pipes`]), `invocations` threads, `bytes` at least. The op, kernel
/// name, count and flops are the caller's to fill in. A driver that reports only `Cycles`
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
            loop_factors: Some(factors.driver_pipes()),
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
pub fn count(module: &Module, dynamic_trips: Option<f64>, model: &CostModel) -> OpCounts {
    count_block(
        &module.body,
        &constants(module),
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
        &constants(module),
        Weighting::Compiled(unrolled),
        model,
    )
}

/// The values of `module`'s constants by id.
fn constants(module: &Module) -> HashMap<u32, u32> {
    let mut consts: HashMap<u32, u32> = HashMap::new();
    module.walk(&mut |stmt| {
        if let Stmt::Let {
            result,
            expr: Expr::Const { bits },
            ..
        } = stmt
        {
            consts.insert(result.id(), *bits);
        }
    });
    consts
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
    consts: &HashMap<u32, u32>,
    weighting: Weighting,
    model: &CostModel,
) -> (OpCounts, f64) {
    let mut c = OpCounts::default();
    let mut loops = 0.0;
    for stmt in &block.0 {
        match stmt {
            Stmt::Let { result, expr, .. } => c.add(expr_cost(expr, result.ty, model), 1.0),
            Stmt::StoreVar { .. } => {}
            Stmt::StoreBuffer { value, .. } => {
                c.ls += model.access(value.ty.size_bytes(), value.ty.lanes());
                c.global_bytes += f64::from(value.ty.size_bytes());
            }
            Stmt::StoreShared { value, .. } => {
                c.ls += model.access(value.ty.size_bytes(), value.ty.lanes())
            }
            // Bounds checks are mostly taken: both branches count.
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                for body in [then_body, else_body] {
                    let (inner, inner_loops) = count_block(body, consts, weighting, model);
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
                let constant = match (consts.get(&start.id()), consts.get(&end.id())) {
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
                let (inner, inner_loops) = count_block(body, consts, weighting, model);
                c.add(inner, trips);
                loops += inner_loops * trips + if kept { 1.0 } else { 0.0 };
            }
            Stmt::Barrier | Stmt::DeviceMemoryBarrier | Stmt::PollAtLeast { .. } => c.ls += 1.0,
        }
    }
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
        Expr::LoadBuffer { .. } => OpCounts {
            ls: model.access(ty.size_bytes(), ty.lanes()),
            global_bytes: f64::from(ty.size_bytes()),
            ..Default::default()
        },
        Expr::LoadShared { .. } => OpCounts {
            ls: model.access(ty.size_bytes(), ty.lanes()),
            ..Default::default()
        },
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
        for i in 0..3 {
            b.store(y, b.c_u32(i), b.c_f32(0.0));
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
                bound: 10.0
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

    #[test]
    fn driver_cycles_are_used_where_reported_and_the_ir_model_elsewhere() {
        let once = OpCounts {
            arith: 4.0,
            ls: 10.0,
            global_bytes: 0.0,
        };
        let e = IrEstimate {
            dynamic: OpCounts {
                arith: 40.0,
                ls: 100.0,
                global_bytes: 0.0,
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
        // A hand-made statistics record: FMA 2, CVT 0.5, SFU 3, load/store 12 cycles, the
        // driver kept 3 loops (the hinted one unrolled), full occupancy.
        let mut stats = BTreeMap::from([
            ("Cycles".to_string(), 12.0),
            ("FMA".to_string(), 2.0),
            ("CVT".to_string(), 0.5),
            ("SFU".to_string(), 3.0),
            ("Load/store".to_string(), 12.0),
            ("Loops".to_string(), 3.0),
            ("Threads".to_string(), 2.0),
        ]);
        // Factors 42 / 5 (arithmetic) and 53 / 6 (load/store): FMA 16.8, SFU 25.2, load/store
        // 12 x 53 / 6 / 3.4946 = 30.33 cycles, the busiest; x 1e6 over 4 cores at 1 GHz.
        let expected = 1.0e6 * (12.0 * 53.0 / 6.0 / ls_rate) / 4.0 / 1e9 / eff;
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
        // An SFU-heavy record: SFU 30 x 8.4 = 252 cycles beats load/store's 30.33.
        stats.insert("SFU".to_string(), 30.0);
        let expected_sfu = 1.0e6 * (30.0 * 42.0 / 5.0) / 4.0 / 1e9 / eff;
        let (seconds, _) = score(&e, Some(&stats), &pm);
        assert!(
            (seconds / expected_sfu - 1.0).abs() < 1e-12,
            "{seconds} {expected_sfu}"
        );
        // A Loops count no reading keeps: every loop once (factors 21 and 53 / 3): SFU 1 x 21,
        // FMA 2 x 21 = 42, load/store 12 x 53 / 3 / 3.4946 = 60.66, the busiest.
        stats.insert("SFU".to_string(), 1.0);
        stats.insert("Loops".to_string(), 7.0);
        let expected_once = 1.0e6 * (12.0 * 53.0 / 3.0 / ls_rate) / 4.0 / 1e9 / eff;
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
