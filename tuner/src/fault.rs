//! Fault injection: make chosen trials fail on purpose, each at the stage where that failure
//! happens for real, so the tuner's recording and recovery paths can be tested (and shown)
//! on any device, lavapipe included.
//!
//! A [`FaultPlan`] maps a trial number to a [`Fault`]. The number is the one the tuner reports
//! in `Progress::Trial` (1-based, counting the key's trials already in the database; trial 1
//! of a fresh key is the default schedule), and the plan applies to every workload. Where and
//! how each fault is produced (the hooks are in `measure` and `gemm_gpu`):
//!
//! - `spirv_val`, at the validation stage before the pipeline: the kernel's real words with
//!   their last instruction dropped go to the real spirv-val, which rejects them (they are
//!   never given to the driver);
//! - `pipeline_creation`, at pipeline creation: `RuntimeError::PipelineCreation`
//!   (`VK_ERROR_UNKNOWN`) instead of calling the driver — simulated, since a driver compiler
//!   failure cannot be provoked safely with valid SPIR-V;
//! - `out_of_memory`, at `vkEndCommandBuffer` of the checked run: the
//!   `RuntimeError::CommandBufferOutOfMemory` of the recorded work, which is not submitted —
//!   simulated, since exhausting device memory on purpose would starve everything else;
//! - `device_lost`, at the fence wait of the checked run: the run completes, then
//!   `RuntimeError::DeviceLost` — simulated (a real loss needs a GPU reset), but what follows is
//!   real: the tuner drops the context and opens the device again;
//! - `timeout`, at the fence wait of the checked run: a real wait with a zero timeout, drained
//!   before anything is dropped;
//! - `mismatch`, at the check: one downloaded output moved far off before the real check
//!   against the CPU reference.
//!
//! The graph-level step (`graph`) has its own numbering, the candidates in the order they are
//! timed (1 = the baseline), and one fault:
//!
//! - `graph_logits`, after each of the candidate's prefills: its lowest logit is moved far
//!   above all others (so both its largest error and its top-1 token are wrong) before the
//!   real check against the reference logits.
//!
//! Failure messages start with [`INJECTED`]; the classification into a `FailureKind`, the
//! database writes and the recovery are the tuner's ordinary code paths.

use rocky_runtime::{Recorder, RuntimeError};
use rocky_tuning_db::FailureKind;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Prefix of the message of every failure a fault produced, so an injected failure is never
/// mistaken for a real one in the database.
pub const INJECTED: &str = "[injected]";

/// How long the checked run of a trial with an injected `timeout` is waited for: zero, a
/// poll of the fence (see [`timeout_error`] for a device that is done by then).
pub const TIMEOUT_WAIT: Duration = Duration::ZERO;

/// A failure that can be injected; each is a [`FailureKind`] the tuner must survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    SpirvVal,
    PipelineCreation,
    OutOfMemory,
    DeviceLost,
    Timeout,
    Mismatch,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::SpirvVal,
        Fault::PipelineCreation,
        Fault::OutOfMemory,
        Fault::DeviceLost,
        Fault::Timeout,
        Fault::Mismatch,
    ];

    /// The failure kind the trial records.
    pub fn kind(self) -> FailureKind {
        match self {
            Fault::SpirvVal => FailureKind::SpirvVal,
            Fault::PipelineCreation => FailureKind::PipelineCreation,
            Fault::OutOfMemory => FailureKind::OutOfMemory,
            Fault::DeviceLost => FailureKind::DeviceLost,
            Fault::Timeout => FailureKind::Timeout,
            Fault::Mismatch => FailureKind::Mismatch,
        }
    }

    /// The name used in plans, the same as the failure kind's (`spirv_val`, ...).
    pub fn name(self) -> &'static str {
        self.kind().as_str()
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failure injected into a candidate of the graph-level step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GraphFault {
    /// The candidate's logits are corrupted before they are checked.
    Logits,
}

impl GraphFault {
    pub const ALL: [GraphFault; 1] = [GraphFault::Logits];

    pub fn name(self) -> &'static str {
        match self {
            GraphFault::Logits => "graph_logits",
        }
    }
}

impl fmt::Display for GraphFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which trials fail and how; empty by default (no injection).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    by_trial: BTreeMap<usize, Fault>,
    /// Graph-level candidates (1-based, in timing order): a numbering of their own.
    by_candidate: BTreeMap<usize, GraphFault>,
}

/// Text that is not a fault plan.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid fault plan `{text}`: {reason}; write KIND@TRIAL[,KIND@TRIAL...] with KIND one of \
     {kinds} and TRIAL a trial number from 1 (e.g. `spirv_val@2,timeout@3`)",
    kinds = kind_list()
)]
pub struct FaultPlanError {
    pub text: String,
    pub reason: String,
}

fn kind_list() -> String {
    let kernel = Fault::ALL.map(Fault::name).join(", ");
    let graph = GraphFault::ALL.map(GraphFault::name).join(", ");
    format!("{kernel} (kernel trials) or {graph} (graph-level candidates)")
}

impl FaultPlan {
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    /// This plan with trial `number` (1-based) failing with `fault`; replaces an earlier
    /// fault at the same number.
    pub fn with(mut self, number: usize, fault: Fault) -> FaultPlan {
        self.by_trial.insert(number, fault);
        self
    }

    /// Parses `KIND@TRIAL` items separated by commas, e.g. `spirv_val@2,timeout@3`. Spaces
    /// around items are ignored; a trial number given twice is an error.
    pub fn parse(text: &str) -> Result<FaultPlan, FaultPlanError> {
        let error = |reason: String| FaultPlanError {
            text: text.to_string(),
            reason,
        };
        if text.trim().is_empty() {
            return Err(error("it is empty".into()));
        }
        let mut plan = FaultPlan::new();
        for item in text.split(',').map(str::trim) {
            let Some((kind, number)) = item.split_once('@') else {
                return Err(error(format!("`{item}` has no `@TRIAL`")));
            };
            let (kind, number) = (kind.trim(), number.trim());
            let graph = GraphFault::ALL.into_iter().find(|f| f.name() == kind);
            let fault = Fault::ALL.into_iter().find(|f| f.name() == kind);
            if fault.is_none() && graph.is_none() {
                return Err(error(format!("`{kind}` is not a fault kind")));
            }
            let number: usize = number
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| error(format!("`{number}` is not a trial number from 1")))?;
            if let Some(graph) = graph {
                if plan.by_candidate.insert(number, graph).is_some() {
                    return Err(error(format!(
                        "graph candidate {number} is given two faults"
                    )));
                }
                continue;
            }
            let Some(fault) = fault else { continue };
            if let Some(earlier) = plan.at(number) {
                return Err(error(format!(
                    "trial {number} is given two faults ({earlier} and {fault})"
                )));
            }
            plan = plan.with(number, fault);
        }
        Ok(plan)
    }

    /// The fault of trial `number`, if any.
    pub fn at(&self, number: usize) -> Option<Fault> {
        self.by_trial.get(&number).copied()
    }

    /// This plan with graph-level candidate `number` (1-based) failing with `fault`.
    pub fn with_graph(mut self, number: usize, fault: GraphFault) -> FaultPlan {
        self.by_candidate.insert(number, fault);
        self
    }

    /// The fault of graph-level candidate `number` (1-based, in timing order), if any.
    pub fn graph_at(&self, number: usize) -> Option<GraphFault> {
        self.by_candidate.get(&number).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_trial.is_empty() && self.by_candidate.is_empty()
    }

    /// (trial number, fault) in trial order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Fault)> + '_ {
        self.by_trial.iter().map(|(&n, &f)| (n, f))
    }
}

impl FromStr for FaultPlan {
    type Err = FaultPlanError;
    fn from_str(s: &str) -> Result<FaultPlan, FaultPlanError> {
        FaultPlan::parse(s)
    }
}

/// The plan's text form, which [`FaultPlan::parse`] reads back.
impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .iter()
            .map(|(n, fault)| format!("{fault}@{n}"))
            .chain(self.by_candidate.iter().map(|(n, f)| format!("{f}@{n}")))
            .collect();
        f.write_str(&items.join(","))
    }
}

/// `words` without their last instruction. For a kernel that is the `OpFunctionEnd` of its
/// last function, so the module no longer validates. `None` when the words do not parse as a
/// SPIR-V module with at least one instruction.
pub fn drop_last_instruction(words: &[u32]) -> Option<Vec<u32>> {
    const HEADER_WORDS: usize = 5;
    let mut at = HEADER_WORDS;
    let mut last = None;
    while at < words.len() {
        // The high half-word of an instruction's first word is its length in words.
        let len = (words[at] >> 16) as usize;
        if len == 0 || at + len > words.len() {
            return None;
        }
        last = Some(at);
        at += len;
    }
    last.map(|start| words[..start].to_vec())
}

/// What a driver reports when it cannot build a pipeline from valid SPIR-V (its compiler
/// failed): `VK_ERROR_UNKNOWN` from `vkCreateComputePipelines`, as panvk does.
pub fn pipeline_creation_error(kernel: &str) -> RuntimeError {
    RuntimeError::PipelineCreation {
        kernel: kernel.to_string(),
        result: ash::vk::Result::ERROR_UNKNOWN,
    }
}

/// What `Recorder::submit` returns when `vkEndCommandBuffer` runs out of device memory for
/// the work `rec` holds (panvk's per-dispatch shared-memory allocations are made there).
pub fn command_buffer_out_of_memory(rec: &Recorder<'_>) -> RuntimeError {
    RuntimeError::CommandBufferOutOfMemory {
        stage: rocky_runtime::SubmitStage::End,
        kind: rocky_runtime::OomKind::Device,
        dispatches: rec.dispatch_count(),
        declared_shared_bytes: rec.declared_shared_bytes(),
    }
}

/// What a fence wait returns when the driver lost the device during `what`.
pub fn device_lost_error(what: &str) -> RuntimeError {
    RuntimeError::DeviceLost {
        during: what.to_string(),
    }
}

/// The error of a [`TIMEOUT_WAIT`] wait: the real one when the wait timed out (as on lavapipe
/// and on GPUs); when the device had already finished (a driver that runs the work inside
/// `vkQueueSubmit`), the error a slower run would have given.
pub fn timeout_error(waited: Result<(), RuntimeError>, what: &str) -> RuntimeError {
    match waited {
        // The timeout itself, or a real failure of the wait (device loss), as it is.
        Err(e) => e,
        Ok(()) => RuntimeError::Timeout {
            what: format!("{what} (it finished within the submit call)"),
            waited: TIMEOUT_WAIT,
        },
    }
}

/// Moves output `index` of `got` far outside any tolerance, as a miscompiled kernel would
/// (the caller picks an output the check compares).
pub fn perturb(got: &mut [f32], index: usize) {
    if let Some(v) = got.get_mut(index) {
        *v += 1.0e3 * (1.0 + v.abs());
    }
}

/// Corrupts a graph candidate's logits as a broken kernel would: the lowest logit becomes far
/// larger than every other, so the largest error and the top-1 token are both wrong.
pub fn corrupt_logits(logits: &mut [f32]) {
    let lowest = logits
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i);
    let highest = logits.iter().copied().fold(0f32, |m, v| m.max(v.abs()));
    if let Some(i) = lowest {
        logits[i] = 1.0e3 * (1.0 + highest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_parses_and_prints_back() {
        let plan = FaultPlan::parse(" spirv_val@2, timeout@3 ,mismatch@10").unwrap();
        assert_eq!(plan.at(2), Some(Fault::SpirvVal));
        assert_eq!(plan.at(3), Some(Fault::Timeout));
        assert_eq!(plan.at(10), Some(Fault::Mismatch));
        assert_eq!(plan.at(1), None);
        assert_eq!(plan.to_string(), "spirv_val@2,timeout@3,mismatch@10");
        assert_eq!(FaultPlan::parse(&plan.to_string()).unwrap(), plan);
    }

    #[test]
    fn graph_faults_have_their_own_numbering() {
        let plan = FaultPlan::parse("mismatch@2,graph_logits@2,graph_logits@5").unwrap();
        assert_eq!(plan.at(2), Some(Fault::Mismatch));
        assert_eq!(plan.graph_at(2), Some(GraphFault::Logits));
        assert_eq!(plan.graph_at(5), Some(GraphFault::Logits));
        assert_eq!(plan.graph_at(1), None);
        assert_eq!(plan.at(5), None);
        assert_eq!(FaultPlan::parse(&plan.to_string()).unwrap(), plan);
        let e = FaultPlan::parse("graph_logits@1,graph_logits@1").unwrap_err();
        assert!(e.to_string().contains("graph candidate 1"), "{e}");
    }

    #[test]
    fn corrupted_logits_change_the_top_token() {
        let mut logits = vec![0.5f32, 3.0, -2.0, 1.0];
        corrupt_logits(&mut logits);
        assert_eq!(logits[1], 3.0);
        assert!(logits[2] > 1000.0, "{logits:?}");
    }

    #[test]
    fn every_fault_kind_parses_by_its_failure_kind_name() {
        for fault in Fault::ALL {
            let text = format!("{}@1", fault.kind().as_str());
            assert_eq!(
                FaultPlan::parse(&text).unwrap().at(1),
                Some(fault),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_plans_are_errors_naming_the_problem() {
        for (text, want) in [
            ("", "it is empty"),
            ("timeout", "`timeout` has no `@TRIAL`"),
            ("meltdown@2", "`meltdown` is not a fault kind"),
            ("refused@2", "`refused` is not a fault kind"),
            ("timeout@0", "`0` is not a trial number from 1"),
            ("timeout@x", "`x` is not a trial number from 1"),
            ("timeout@2,", "`` has no `@TRIAL`"),
            (
                "timeout@2,mismatch@2",
                "trial 2 is given two faults (timeout and mismatch)",
            ),
        ] {
            let e = FaultPlan::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            // The message says what a good plan looks like.
            assert!(
                e.contains("KIND@TRIAL") && e.contains("pipeline_creation"),
                "{e}"
            );
        }
    }

    #[test]
    fn dropping_the_last_instruction_cuts_exactly_one_instruction() {
        // Header, then OpCapability Shader (2 words), then OpFunctionEnd (1 word).
        let words = [
            0x0723_0203,
            0x0001_0500,
            0,
            10,
            0,
            0x0002_0011,
            1,
            0x0001_0038,
        ];
        assert_eq!(drop_last_instruction(&words).unwrap(), &words[..7]);
        // A length running past the end is not a module.
        assert_eq!(
            drop_last_instruction(&[0x0723_0203, 0, 0, 0, 0, 0x0005_0011, 1]),
            None
        );
        assert_eq!(drop_last_instruction(&words[..5]), None);
    }

    #[test]
    fn a_perturbed_output_is_far_from_the_original() {
        let mut got = vec![0.5f32, -2.0];
        perturb(&mut got, 1);
        assert_eq!(got[0], 0.5);
        assert!((got[1] - -2.0).abs() > 1000.0);
    }
}
