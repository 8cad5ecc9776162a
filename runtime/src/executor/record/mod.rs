//! Recording one node of a program: its kernels with their bindings, push constants and grids,
//! emitted into a [`DispatchSink`] (a stream, or the replay recorder). [`NodeRecorder`] holds
//! what every kernel of the node needs (the program, the activation set, the rows, the
//! input offsets) and emits; one module per op family does the rest:
//! - [`linear`]: the GEMV, the GEMM with its N-slices and split-K (reduce kernel or in place);
//! - [`attention`]: the KV write, attention and the split-KV combine;
//! - [`glue`]: embedding, RMSNorm (also per head), RoPE, the elementwise ops.

mod attention;
mod glue;
mod linear;

use super::{order_bindings, DispatchTime, ExecError, Executor, Program, ScheduleOrigin};
use crate::replay::DispatchSink;
use crate::{BufferRange, ComputePipeline, RuntimeError};
use rocky_compiler::{dispatch_grid, Schedule, Workload};
use rocky_models::graph::{Node, Op};

/// What every kernel of one node is recorded with.
pub(super) struct NodeRecorder<'s, 'm, 'l> {
    pub exec: &'s Executor<'m>,
    pub prog: &'s Program,
    pub stream: &'l mut dyn DispatchSink<'s>,
    pub log: &'l mut Vec<DispatchTime>,
    pub node_index: usize,
    pub node: &'s Node,
    /// The ubatch's number in the prompt (its token ids' region).
    pub ubatch: usize,
    /// Which set of activation slots and split-K scratch the ubatch uses.
    pub set: usize,
    /// Rows of the node's values.
    pub rows: u32,
    pub pos0: u32,
    /// Recorded for replay: position-reading kernels take their args form.
    pub replayed: bool,
    /// Byte offset of each input (views: the last row, RoPE in place).
    pub input_offsets: Vec<u64>,
}

/// One kernel of the node, as the program prepared it.
pub(super) struct Kernel<'s> {
    pub label: &'s str,
    /// The prepared workload and schedule (the pipelines' key).
    pub key: (&'s Workload, &'s Schedule),
    /// The workload at this run's rows.
    pub actual: Workload,
    pub origin: ScheduleOrigin,
    pub pipeline: &'s ComputePipeline,
    pub groups: [u32; 3],
    /// Rows the kernel runs over (a per-head norm: rows × heads).
    pub kernel_rows: u32,
}

impl<'s> NodeRecorder<'s, '_, '_> {
    /// Records every kernel the program prepared for the node.
    pub fn record(&mut self) -> Result<(), ExecError> {
        let prog = self.prog;
        // An attention node's Hadamard rotation before attention is Q's, after it the output's.
        let mut attended = false;
        for (label, w, s, origin) in &prog.used[prog.kernels_of[self.node_index].clone()] {
            let pipeline = &self.exec.pipelines[&(*w, *s)];
            let kernel_rows = match &self.node.op {
                Op::HeadRmsNorm { n_heads, .. } => self.rows * *n_heads as u32,
                _ => self.rows,
            };
            let actual = super::with_rows(w, kernel_rows);
            let groups = dispatch_grid(&actual, s).map_err(|r| refused(label, r))?;
            let kernel = Kernel {
                label,
                key: (w, s),
                actual,
                origin: *origin,
                pipeline,
                groups,
                kernel_rows,
            };
            match (&self.node.op, &kernel.actual) {
                (
                    Op::Linear { .. } | Op::LinearSwiGlu { .. } | Op::LinearStack { .. },
                    Workload::Gemv(_),
                ) => self.gemv(&kernel)?,
                (
                    Op::Linear { .. } | Op::LinearSwiGlu { .. } | Op::LinearStack { .. },
                    Workload::Gemm(_),
                ) => self.gemm(&kernel)?,
                (Op::Attention { .. }, Workload::KvWrite(_)) => self.kv_write(&kernel)?,
                (Op::Attention { .. }, Workload::RopeNeox(_)) => self.rope_kv_write(&kernel)?,
                (Op::Attention { .. }, Workload::Attention(_)) => {
                    self.attention(&kernel)?;
                    attended = true;
                }
                (Op::Attention { .. }, Workload::Hadamard(_)) => {
                    self.hadamard(&kernel, attended)?
                }
                _ => self.glue(&kernel)?,
            }
        }
        Ok(())
    }

    /// The activation slot range of `value` at `rows` rows from byte `offset`.
    pub fn slot(
        &self,
        value: usize,
        rows: u32,
        offset: u64,
    ) -> Result<BufferRange<'s>, RuntimeError> {
        self.prog
            .value_range(&self.exec.logits, value, self.set, rows, offset)
    }

    /// Input `i` of the node, at its offset.
    pub fn input(&self, i: usize) -> Result<BufferRange<'s>, RuntimeError> {
        self.slot(self.node.inputs[i], self.rows, self.input_offsets[i])
    }

    /// The node's output.
    pub fn output(&self) -> Result<BufferRange<'s>, RuntimeError> {
        self.slot(self.node.output, self.rows, 0)
    }

    /// Emits `kernel` with its whole grid where it reads the step's position (RoPE, the KV
    /// writes): its args form with `m` and `pos0` in the step-args buffer when the step is
    /// recorded for replay, else its push constants (`Executor::position_reader`).
    pub fn emit_reading_position(
        &mut self,
        kernel: &Kernel<'s>,
        mut named: Vec<(&'static str, BufferRange<'s>)>,
        push: Vec<u8>,
    ) -> Result<(), ExecError> {
        let (pipeline, push) =
            self.exec
                .position_reader(self.replayed, kernel.key, kernel.pipeline, push, &mut named);
        self.emit(
            kernel.label,
            kernel.actual,
            kernel.origin,
            pipeline,
            named,
            &push,
            kernel.groups,
        )
    }

    /// Emits one dispatch (bindings by name) and logs it for the profile.
    #[allow(clippy::too_many_arguments)]
    pub fn emit(
        &mut self,
        label: &str,
        workload: Workload,
        origin: ScheduleOrigin,
        pipeline: &'s ComputePipeline,
        named: Vec<(&str, BufferRange<'s>)>,
        push: &[u8],
        groups: [u32; 3],
    ) -> Result<(), ExecError> {
        let bindings = order_bindings(pipeline, named, label)?;
        self.stream
            .dispatch(pipeline, &bindings, push, groups)
            .map_err(|e| match e {
                RuntimeError::InvalidDispatch { kernel, reason } => ExecError::Refused {
                    label: label.to_string(),
                    reason: format!("{kernel}: {reason}"),
                },
                e => self.exec.submit_error(e),
            })?;
        if self.exec.options.profile {
            self.log.push(DispatchTime {
                label: label.to_string(),
                kernel: pipeline.meta().name.clone(),
                workload,
                origin,
                seconds: 0.0,
            });
        }
        Ok(())
    }

    /// Emits `kernel` as prepared, with these bindings and push constants.
    pub fn emit_kernel(
        &mut self,
        kernel: &Kernel<'s>,
        named: Vec<(&str, BufferRange<'s>)>,
        push: &[u8],
    ) -> Result<(), ExecError> {
        self.emit(
            kernel.label,
            kernel.actual,
            kernel.origin,
            kernel.pipeline,
            named,
            push,
            kernel.groups,
        )
    }

    /// The device's storage-buffer offset alignment and largest bindable range.
    pub fn binding_limits(&self) -> (u64, u64) {
        let caps = self.exec.ctx.caps();
        (
            caps.min_storage_buffer_offset_alignment,
            u64::from(caps.max_storage_buffer_range),
        )
    }
}

/// A kernel the compiler refused at these rows, named by the node's label.
pub(super) fn refused(label: &str, r: rocky_compiler::Refusal) -> ExecError {
    ExecError::Refused {
        label: label.to_string(),
        reason: r.to_string(),
    }
}
