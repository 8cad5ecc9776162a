//! The small ops: embedding (one dispatch per bindable piece of the table), RMSNorm and the
//! per-head RMSNorm, RoPE (in place; its args form when replayed), SwiGLU, GeGLU, add, scale.

use super::{refused, Kernel, NodeRecorder};
use crate::executor::ExecError;
use crate::BufferRange;
use rocky_compiler::templates::eltwise::{EltwisePush, ScalePush};
use rocky_compiler::templates::embedding::EmbeddingPush;
use rocky_compiler::templates::gemm::n_slices;
use rocky_compiler::templates::rms_norm::RmsNormPush;
use rocky_compiler::templates::rope::RopePush;
use rocky_compiler::{ActType, GemmWorkload, Workload};
use rocky_models::graph::Op;

impl<'s> NodeRecorder<'s, '_, '_> {
    pub(super) fn glue(&mut self, kernel: &Kernel<'s>) -> Result<(), ExecError> {
        let exec = self.exec;
        let rows = self.rows;
        let mut named: Vec<(&str, BufferRange)> = Vec::new();
        let push: Vec<u8> = match (&self.node.op, &kernel.actual) {
            (Op::Embedding { table, .. }, Workload::Embedding(e)) => {
                return self.embedding(kernel, table, e.table, e.layout, e.width)
            }
            (Op::RmsNorm { weight, .. }, _) => {
                named.push(("x", self.input(0)?));
                named.push(("weight", exec.weights.get(weight).whole()?));
                named.push(("y", self.output()?));
                RmsNormPush { m: rows }.to_bytes()
            }
            (Op::HeadRmsNorm { weight, .. }, _) => {
                named.push(("x", self.input(0)?));
                named.push(("weight", exec.weights.get(weight).whole()?));
                named.push(("y", self.output()?));
                RmsNormPush {
                    m: kernel.kernel_rows,
                }
                .to_bytes()
            }
            (Op::Rope { freq_factors, .. }, _) => {
                named.push(("x", self.input(0)?));
                if let Some(f) = freq_factors {
                    named.push(("freqs", exec.weights.get(f).whole()?));
                }
                let push = RopePush {
                    m: rows,
                    pos0: self.pos0,
                };
                return self.emit_reading_position(kernel, named, push.to_bytes());
            }
            (Op::SwiGlu { .. } | Op::GeGlu { .. }, _) => {
                named.push(("gate", self.input(0)?));
                named.push(("up", self.input(1)?));
                named.push(("y", self.output()?));
                EltwisePush { m: rows }.to_bytes()
            }
            (Op::Add { .. }, _) => {
                named.push(("a", self.input(0)?));
                named.push(("b", self.input(1)?));
                named.push(("y", self.output()?));
                EltwisePush { m: rows }.to_bytes()
            }
            (Op::Scale { factor, .. }, _) => {
                named.push(("x", self.input(0)?));
                named.push(("y", self.output()?));
                ScalePush {
                    m: rows,
                    factor: *factor,
                }
                .to_bytes()
            }
            (op, _) => {
                return Err(ExecError::Unsupported(format!(
                    "no GPU lowering for {op:?} ({})",
                    kernel.label
                )))
            }
        };
        self.emit_kernel(kernel, named, &push)
    }

    /// One dispatch per bindable piece of the table; each writes the rows of the ids in its
    /// piece.
    fn embedding(
        &mut self,
        kernel: &Kernel<'s>,
        table: &str,
        format: rocky_compiler::WeightFormat,
        layout: rocky_compiler::WeightLayout,
        width: u32,
    ) -> Result<(), ExecError> {
        let exec = self.exec;
        let rows = self.rows;
        let (align, max_range) = self.binding_limits();
        let table_buf = exec.weights.get(table);
        let as_rows = GemmWorkload {
            m: 1,
            n: exec.model.config.n_vocab as u32,
            k: width,
            act: ActType::F32,
            weight: format,
            // The table's rows as the device holds them (aligned where a tied output
            // projection repacked them).
            layout,
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        };
        let ids = exec
            .ids
            .range(self.ubatch as u64 * exec.ids_stride, u64::from(rows) * 4)?;
        for piece in n_slices(&as_rows, max_range, align).map_err(|r| refused(kernel.label, r))? {
            let named = vec![
                ("ids", ids),
                (
                    "table",
                    table_buf.range(piece.weight_offset, piece.weight_range)?,
                ),
                ("y", self.output()?),
            ];
            let push = EmbeddingPush {
                m: rows,
                row_base: piece.n_offset,
            };
            self.emit_kernel(kernel, named, &push.to_bytes())?;
        }
        Ok(())
    }
}
