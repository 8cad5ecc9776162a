//! Linear nodes (a projection, gate/up fused with SwiGLU, or a stack of projections): the GEMV template at one row,
//! else the GEMM over N-slices, with split-K through a reduce kernel or in place.

use super::{refused, Kernel, NodeRecorder};
use crate::executor::{folded_norm_weight, linear_operands, ExecError};
use crate::BufferRange;
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::gemm::{n_slices, Epilogue, GemmPush};
use rocky_compiler::templates::gemv;
use rocky_compiler::{GemmWorkload, Schedule, Workload};

impl<'s> NodeRecorder<'s, '_, '_> {
    /// The GEMV template (at most 8 rows): the GEMM's bindings, push constants and N-slices,
    /// its own grid, no split-K scratch.
    pub(super) fn gemv(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let (Workload::Gemv(gw), Schedule::Gemv(gs)) = (&kernel.actual, kernel.key.1) else {
            unreachable!("a GEMV workload has a GEMV schedule")
        };
        let (align, max_range) = self.binding_limits();
        let (weight, bias, residual) = linear_operands(&self.node.op);
        let bias = bias.as_deref();
        let wbuf = self.exec.weights.get(&weight);
        let slices = n_slices(gw, max_range, align).map_err(|r| refused(kernel.label, r))?;
        for slice in slices {
            let mut named: Vec<(&str, BufferRange)> = vec![
                ("x", self.input(0)?),
                (
                    "weight",
                    wbuf.range(slice.weight_offset, slice.weight_range)?,
                ),
                ("y", self.output()?),
            ];
            if let Some(b) = bias {
                named.push(("bias", self.exec.weights.get(b).whole()?));
            }
            if residual {
                named.push(("residual", self.input(1)?));
            }
            if let Some(norm) = folded_norm_weight(&self.node.op) {
                named.push(("norm_weight", self.exec.weights.get(norm).whole()?));
            }
            if let Epilogue::RopeKv(_) = gw.epilogue {
                self.rope_kv_bindings(kernel.label, &mut named)?;
            }
            self.emit(
                kernel.label,
                Workload::Gemv(GemmWorkload { n: slice.n, ..*gw }),
                kernel.origin,
                kernel.pipeline,
                named,
                &GemmPush::for_slice(gw, &slice).to_bytes(),
                gemv::dispatch_grid_for(slice.n, gs),
            )?;
        }
        Ok(())
    }

    /// A projection with the RoPE-and-KV-write epilogue (`executor::rope_kv`): its layer's
    /// caches, the RoPE's frequency factors and the step's position (the step-args buffer,
    /// which the host writes before every decode step, replayed or recorded anew).
    fn rope_kv_bindings(
        &self,
        label: &str,
        named: &mut Vec<(&'static str, BufferRange<'s>)>,
    ) -> Result<(), ExecError> {
        let exec = self.exec;
        let Some(site) = self.prog.rope_kv.projections.get(&self.node_index) else {
            return Err(ExecError::Unsupported(format!(
                "{label}: a RoPE-and-KV-write projection the step's plan does not name"
            )));
        };
        named.push(("k_cache", exec.kv[site.layer].0.whole()));
        named.push(("v_cache", exec.kv[site.layer].1.whole()));
        if let Some(f) = &site.freqs {
            named.push(("freqs", exec.weights.get(f).whole()?));
        }
        named.push(("position", exec.step_args.whole()));
        Ok(())
    }

    /// The GEMM over N-slices. Split across the grid, it writes partial sums into the node's
    /// scratch region; the reduce kernel adds them up into the output, or with
    /// `last_group_reduces` the GEMM's last group per tile does (binding Y, the partials and
    /// its tile counters).
    pub(super) fn gemm(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let (Workload::Gemm(gw), Schedule::Gemm(gs)) = (&kernel.actual, kernel.key.1) else {
            unreachable!("a GEMM workload has a GEMM schedule")
        };
        let (label, rows) = (kernel.label, self.rows);
        let (align, max_range) = self.binding_limits();
        let (weight, bias, residual) = linear_operands(&self.node.op);
        let bias = bias.as_deref();
        let residual = if residual { Some(self.input(1)?) } else { None };
        let exec = self.exec;
        let wbuf = exec.weights.get(&weight);
        let (prog, set) = (self.prog, self.set);
        let scratch = match (gs.k_groups > 1, prog.scratch_region_of[self.node_index]) {
            (false, _) => None,
            (true, Some(r)) => Some((
                r * prog.n_sets + set,
                exec.scratch[r * prog.n_sets + set].range(
                    0,
                    4 * rocky_compiler::templates::gemm::split_k::scratch_values(gw, gs),
                )?,
            )),
            (true, None) => {
                return Err(ExecError::Unsupported(format!(
                    "{label}: a split-K schedule without its scratch buffer"
                )))
            }
        };
        let in_place = scratch.filter(|_| gs.last_group_reduces);
        let split = scratch
            .filter(|_| !gs.last_group_reduces)
            .map(|(_, partials)| {
                (
                    &exec.reduce_pipelines[&(*kernel.key.0, *kernel.key.1)],
                    partials,
                )
            });
        let output = self.output()?;
        let slices = n_slices(gw, max_range, align).map_err(|r| refused(label, r))?;
        let counters = match in_place {
            Some(_) => {
                rocky_compiler::templates::gemm::interface::counter_layout(
                    rows, gw, gs, &slices, align,
                )
                .0
            }
            None => Vec::new(),
        };
        for (index, slice) in slices.into_iter().enumerate() {
            let mut named: Vec<(&str, BufferRange)> = vec![
                ("x", self.input(0)?),
                (
                    "weight",
                    wbuf.range(slice.weight_offset, slice.weight_range)?,
                ),
                ("y", split.map_or(output, |(_, scratch)| scratch)),
            ];
            if let (Some(b), None) = (bias, split) {
                named.push(("bias", exec.weights.get(b).whole()?));
            }
            if let (Some(r), None) = (residual, split) {
                named.push(("residual", r));
            }
            let groups = rocky_compiler::templates::gemm::dispatch_grid_for(
                rows,
                slice.n * gw.epilogue.rows_per_column(),
                gs,
            );
            if let Some((r, partials)) = in_place {
                let (offset, bytes) = counters[index];
                named.push(("partials", partials));
                named.push(("counters", exec.counters[r].range(offset, bytes)?));
            }
            self.emit(
                label,
                Workload::Gemm(GemmWorkload { n: slice.n, ..*gw }),
                kernel.origin,
                kernel.pipeline,
                named,
                &GemmPush::for_slice(gw, &slice).to_bytes(),
                groups,
            )?;
        }
        if let Some((reduce, scratch)) = split {
            use rocky_compiler::templates::gemm::split_k::reduce_grid;
            let mut named = vec![("partials", scratch), ("y", output)];
            if let Some(b) = bias {
                named.push(("bias", exec.weights.get(b).whole()?));
            }
            if let Some(r) = residual {
                named.push(("residual", r));
            }
            self.emit(
                &format!("{label}.reduce"),
                // What the reduce does: k_groups adds per output.
                Workload::Add(EltwiseWorkload {
                    m: rows,
                    width: gw.n * gs.k_groups,
                }),
                kernel.origin,
                reduce,
                named,
                &rocky_compiler::templates::gemm::split_k::reduce_push(gw).to_bytes(),
                reduce_grid(gw, rows),
            )?;
        }
        Ok(())
    }
}
