//! Attention nodes: the new K and V rows written into the layer's cache (in a decode step with
//! folded RoPEs, rotated on the way: one kernel for both RoPEs and both writes), then attention
//! over it; split over the KV length (flash-decoding), its pieces write partials that the combine
//! kernel merges into the output. Around a q8_0 cache with the rotation on, Q is rotated in
//! place before attention and the output back after it (`hadamard`).

use super::{Kernel, NodeRecorder};
use crate::executor::{split_kv, w_attention, ExecError};
use rocky_compiler::templates::attention::AttentionPush;
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::hadamard::HadamardPush;
use rocky_compiler::templates::kv_cache::KvWritePush;
use rocky_compiler::templates::rope::RopePush;
use rocky_compiler::{Schedule, Workload};
use rocky_models::graph::Op;

impl<'s> NodeRecorder<'s, '_, '_> {
    fn layer(&self) -> usize {
        match &self.node.op {
            Op::Attention { layer, .. } => *layer,
            _ => unreachable!("an attention node"),
        }
    }

    fn head_dim(&self) -> u32 {
        match &self.node.op {
            Op::Attention { head_dim, .. } => *head_dim as u32,
            _ => unreachable!("an attention node"),
        }
    }

    /// K goes to the K cache, then V to the V cache: two dispatches, of this one kernel where
    /// both caches have its type and rotation, else of the kernel of each cache's (the node
    /// has one per distinct write, `node_workloads`).
    pub(super) fn kv_write(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let exec = self.exec;
        let layer = self.layer();
        let Workload::KvWrite(kw) = &kernel.actual else {
            unreachable!("a KV-write workload")
        };
        let types = exec.options.kv;
        let (rot_k, rot_v) = exec.kv_rotations(self.head_dim());
        let targets = [
            (1usize, &exec.kv[layer].0, types.k, rot_k.unwrap_or(0)),
            (2, &exec.kv[layer].1, types.v, rot_v.unwrap_or(0)),
        ];
        let mine = |t: &(usize, _, _, u32)| t.2 == kw.ty && t.3 == kw.rotation;
        for (input, cache, _, _) in targets.into_iter().filter(mine) {
            let named = vec![("src", self.input(input)?), ("cache", cache.whole())];
            let push = KvWritePush {
                m: self.rows,
                pos0: self.pos0,
            };
            self.emit_reading_position(kernel, named, push.to_bytes())?;
        }
        Ok(())
    }

    /// The folded RoPEs and the KV writes in one dispatch (a decode step's `Attention` with
    /// `rope`): q rotated in place, k rotated into the K cache, v copied into the V cache.
    pub(super) fn rope_kv_write(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let exec = self.exec;
        let layer = self.layer();
        let Op::Attention {
            rope: Some(rope), ..
        } = &self.node.op
        else {
            unreachable!("an attention node with a folded RoPE")
        };
        let mut named = vec![("x", self.input(0)?)];
        if let Some(f) = &rope.freq_factors {
            named.push(("freqs", exec.weights.get(f).whole()?));
        }
        named.extend([
            ("k", self.input(1)?),
            ("v", self.input(2)?),
            ("k_cache", exec.kv[layer].0.whole()),
            ("v_cache", exec.kv[layer].1.whole()),
        ]);
        let push = RopePush {
            m: self.rows,
            pos0: self.pos0,
        };
        self.emit_reading_position(kernel, named, push.to_bytes())
    }

    /// The Walsh-Hadamard rotation around a q8_0 cache, in place: of Q (the node's input 0)
    /// before attention, or of the attention output after it (`attended`), back into V's
    /// basis. A pass of its own rather than a step inside every attention family (row-wise,
    /// tiled, key-split, split-KV and its combine): it touches only the m × q_width values of
    /// Q or the output, next to attention's reads of the whole cache.
    pub(super) fn hadamard(
        &mut self,
        kernel: &Kernel<'s>,
        attended: bool,
    ) -> Result<(), ExecError> {
        let x = if attended {
            self.output()?
        } else {
            self.input(0)?
        };
        let push = HadamardPush { m: self.rows }.to_bytes();
        self.emit_kernel(kernel, vec![("x", x)], &push)
    }

    pub(super) fn attention(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let Workload::Attention(aw) = &kernel.actual else {
            unreachable!("an attention workload")
        };
        let exec = self.exec;
        let (layer, rows, pos0) = (self.layer(), self.rows, self.pos0);
        let mut named = vec![
            ("q", self.input(0)?),
            ("k_cache", exec.kv[layer].0.whole()),
            ("v_cache", exec.kv[layer].1.whole()),
        ];
        // A split schedule at one piece runs its un-split twin (prepared beside it): the
        // output written directly, no partials and no combine dispatch. (`step_splits` is 1
        // and `single_piece_twin` None for a schedule that does not split.)
        let twin = match kernel.key.1 {
            Schedule::Attention(a)
                if split_kv::step_splits(aw, a, rows, pos0, exec.compute_units) == 1 =>
            {
                split_kv::single_piece_twin(kernel.key.0, kernel.key.1, &exec.caps)
            }
            _ => None,
        };
        let (key_schedule, key_pipeline, groups) = match &twin {
            Some(t @ Schedule::Attention(plain)) => (
                t,
                &exec.pipelines[&(*kernel.key.0, *t)],
                rocky_compiler::templates::attention::dispatch_grid(aw, plain),
            ),
            _ => (kernel.key.1, kernel.pipeline, kernel.groups),
        };
        let (pipeline, push) = exec.position_reader(
            self.replayed,
            (kernel.key.0, key_schedule),
            key_pipeline,
            AttentionPush { m: rows, pos0 }.to_bytes(),
            &mut named,
        );
        // The profile's FLOPs: the keys this ubatch really attends.
        let mut seen = kernel.actual;
        if let Workload::Attention(a) = &mut seen {
            a.max_kv = pos0 + rows;
        }
        let split = match key_schedule {
            Schedule::Attention(a) if a.kv_splits > 1 => Some(*a),
            _ => None,
        };
        let Some(a) = split else {
            named.push(("out", self.output()?));
            return self.emit(
                kernel.label,
                seen,
                kernel.origin,
                pipeline,
                named,
                &push,
                groups,
            );
        };
        // Split-KV: the pieces along z write their partials, then the combine merges them
        // into the output (ordered by the hazards on the scratch).
        let pieces = split_kv::step_splits(aw, &a, rows, pos0, exec.compute_units);
        let scratch = exec.attn_scratch[self.set].range(
            0,
            4 * rocky_compiler::templates::attention::split_kv::scratch_values(
                w_attention(kernel.key.0),
                &a,
            ),
        )?;
        named.push(("partials", scratch));
        let mut grid = kernel.groups;
        grid[2] = pieces;
        if a.fused_combine {
            // The last piece of each tile merges the pieces into the output: one dispatch.
            let tiles = rocky_compiler::templates::attention::split_kv::counters_for(grid);
            named.push(("out", self.output()?));
            named.push((
                "counters",
                exec.attn_counters[self.set].range(0, 4 * u64::from(tiles))?,
            ));
            return self.emit(
                kernel.label,
                seen,
                kernel.origin,
                pipeline,
                named,
                &push,
                grid,
            );
        }
        self.emit(
            kernel.label,
            seen,
            kernel.origin,
            pipeline,
            named,
            &push,
            grid,
        )?;
        use rocky_compiler::templates::attention::combine::{combine_grid, CombinePush};
        let named = vec![("partials", scratch), ("out", self.output()?)];
        let push = CombinePush {
            m: rows,
            splits: pieces,
        }
        .to_bytes();
        self.emit(
            &format!("{}.combine", kernel.label),
            // What the combine does: one weighted add per piece and output.
            Workload::Add(EltwiseWorkload {
                m: rows,
                width: aw.q_width() * pieces,
            }),
            kernel.origin,
            &exec.reduce_pipelines[&(*kernel.key.0, *kernel.key.1)],
            named,
            &push,
            combine_grid(aw, rows),
        )
    }
}
