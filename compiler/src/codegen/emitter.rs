//! The lowering itself: globals, then the entry function block by block.

use rspirv::binary::Assemble;
use rspirv::dr::{Builder, InsertPoint, Instruction, Operand};
use rspirv::spirv::{
    self, AddressingModel, BuiltIn, Decoration, ExecutionMode, ExecutionModel, FunctionControl,
    GlslStd450Op as Gl, GroupOperation, LoopControl, MemoryModel, MemorySemantics, Op, Scope,
    SelectionControl, StorageClass, Word,
};

use super::capabilities::capabilities_and_extensions;
use super::types::TypeTable;
use super::CodegenError;
use crate::ir::analysis::{features, BuiltinVar};
use crate::ir::{
    Access, BinaryOp, Block, Builtin, DotSign, Expr, Module, Scalar, Stmt, SubgroupOp, Type,
    UnaryOp, Unroll, Value,
};

pub struct Emitter<'m> {
    m: &'m Module,
    version: (u8, u8),
    b: Builder,
    t: TypeTable,
    glsl: Word,
    values: Vec<Word>,
    vars: Vec<Word>,
    buffers: Vec<Word>,
    shared: Vec<Word>,
    push: Option<Word>,
    builtins: Vec<(BuiltinVar, Word)>,
    /// Label of the block currently being filled (phi predecessors need it).
    current: Word,
}

/// Float arithmetic a driver could fuse with its neighbours (the only place NoContraction
/// means something).
fn contractible(expr: &Expr, ty: Type) -> bool {
    ty.scalar.is_float()
        && matches!(
            expr,
            Expr::Binary(
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div,
                _,
                _
            ) | Expr::Unary(UnaryOp::Neg, _)
        )
}

fn berr(e: rspirv::dr::Error) -> CodegenError {
    CodegenError::Builder(format!("{e:?}"))
}

impl<'m> Emitter<'m> {
    pub fn new(m: &'m Module, version: (u8, u8)) -> Self {
        let mut b = Builder::new();
        b.set_version(version.0, version.1);
        Emitter {
            m,
            version,
            b,
            t: TypeTable::default(),
            glsl: 0,
            values: vec![0; m.value_count as usize],
            vars: Vec::new(),
            buffers: Vec::new(),
            shared: Vec::new(),
            push: None,
            builtins: Vec::new(),
            current: 0,
        }
    }

    pub fn run(mut self) -> Result<Vec<u32>, CodegenError> {
        let f = features(self.m);
        let (caps, exts) = capabilities_and_extensions(&f, self.version);
        for c in caps {
            self.b.capability(c);
        }
        for e in exts {
            self.b.extension(e);
        }
        self.glsl = self.b.ext_inst_import("GLSL.std.450");
        self.b
            .memory_model(AddressingModel::Logical, MemoryModel::GLSL450);

        let mut interface = Vec::new();
        self.declare_globals(&f.builtins, &mut interface);

        let void = self.t.void(&mut self.b);
        let fn_ty = self.t.function(&mut self.b, void);
        let main = self
            .b
            .begin_function(void, None, FunctionControl::NONE, fn_ty)
            .map_err(berr)?;
        self.current = self.b.begin_block(None).map_err(berr)?;
        // Function-storage variables must open the entry block.
        for v in &self.m.vars {
            let ty = self.t.value(&mut self.b, v.ty);
            let ptr = self.t.pointer(&mut self.b, StorageClass::Function, ty);
            let w = self.b.variable(ptr, None, StorageClass::Function, None);
            self.b.name(w, v.name.clone());
            self.vars.push(w);
        }
        self.block(&self.m.body)?;
        self.b.ret().map_err(berr)?;
        self.b.end_function().map_err(berr)?;

        self.b
            .entry_point(ExecutionModel::GLCompute, main, "main", interface);
        self.b
            .execution_mode(main, ExecutionMode::LocalSize, self.m.workgroup_size);
        self.b.name(main, "main");
        Ok(self.b.module().assemble())
    }

    fn declare_globals(
        &mut self,
        builtins: &std::collections::BTreeSet<BuiltinVar>,
        interface: &mut Vec<Word>,
    ) {
        // Before SPIR-V 1.4 the interface lists only Input/Output variables; from 1.4 on it
        // lists every global the entry point uses.
        let all_globals = self.version >= (1, 4);
        for decl in &self.m.buffers {
            let st = self.t.buffer_block(&mut self.b, decl.elem);
            let ptr = self.t.pointer(&mut self.b, StorageClass::StorageBuffer, st);
            let var = self
                .b
                .variable(ptr, None, StorageClass::StorageBuffer, None);
            self.b
                .decorate(var, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
            self.b.decorate(
                var,
                Decoration::Binding,
                [Operand::LiteralBit32(decl.binding)],
            );
            if decl.access == Access::ReadOnly {
                self.b.decorate(var, Decoration::NonWritable, []);
            }
            if decl.coherent {
                self.b.decorate(var, Decoration::Coherent, []);
            }
            self.b.name(var, decl.name.clone());
            self.buffers.push(var);
            if all_globals {
                interface.push(var);
            }
        }
        if !self.m.push.is_empty() {
            let members: Vec<Type> = self.m.push.iter().map(|p| p.ty).collect();
            let st = self.t.push_block(&mut self.b, &members);
            for (i, p) in self.m.push.iter().enumerate() {
                self.b.member_name(st, i as u32, p.name.clone());
            }
            let ptr = self.t.pointer(&mut self.b, StorageClass::PushConstant, st);
            let var = self.b.variable(ptr, None, StorageClass::PushConstant, None);
            self.b.name(var, "push");
            self.push = Some(var);
            if all_globals {
                interface.push(var);
            }
        }
        for decl in &self.m.shared {
            let arr = self.t.array(&mut self.b, decl.elem, decl.len);
            let ptr = self.t.pointer(&mut self.b, StorageClass::Workgroup, arr);
            let var = self.b.variable(ptr, None, StorageClass::Workgroup, None);
            self.b.name(var, decl.name.clone());
            self.shared.push(var);
            if all_globals {
                interface.push(var);
            }
        }
        for &bv in builtins {
            let ty = if bv.is_vector() {
                Type::vec(Scalar::U32, 3)
            } else {
                Type::U32
            };
            let t = self.t.value(&mut self.b, ty);
            let ptr = self.t.pointer(&mut self.b, StorageClass::Input, t);
            let var = self.b.variable(ptr, None, StorageClass::Input, None);
            let which = match bv {
                BuiltinVar::GlobalInvocationId => BuiltIn::GlobalInvocationId,
                BuiltinVar::LocalInvocationId => BuiltIn::LocalInvocationId,
                BuiltinVar::WorkgroupId => BuiltIn::WorkgroupId,
                BuiltinVar::NumWorkgroups => BuiltIn::NumWorkgroups,
                BuiltinVar::LocalInvocationIndex => BuiltIn::LocalInvocationIndex,
                BuiltinVar::SubgroupSize => BuiltIn::SubgroupSize,
                BuiltinVar::SubgroupInvocationId => BuiltIn::SubgroupLocalInvocationId,
                BuiltinVar::SubgroupId => BuiltIn::SubgroupId,
                BuiltinVar::NumSubgroups => BuiltIn::NumSubgroups,
            };
            self.b
                .decorate(var, Decoration::BuiltIn, [Operand::BuiltIn(which)]);
            self.builtins.push((bv, var));
            interface.push(var);
        }
    }

    // ---- helpers ----------------------------------------------------------------------------

    fn ty(&mut self, ty: Type) -> Word {
        self.t.value(&mut self.b, ty)
    }

    fn konst(&mut self, ty: Type, bits: u32) -> Word {
        self.t.constant(&mut self.b, ty, bits)
    }

    fn val(&self, v: Value) -> Word {
        self.values[v.id as usize]
    }

    /// Appends `op` with result type `ty` and returns the result id.
    fn inst(&mut self, op: Op, ty: Word, operands: Vec<Operand>) -> Result<Word, CodegenError> {
        let id = self.b.id();
        self.inst_with_id(op, ty, id, operands)
    }

    fn inst_with_id(
        &mut self,
        op: Op,
        ty: Word,
        id: Word,
        operands: Vec<Operand>,
    ) -> Result<Word, CodegenError> {
        self.b
            .insert_into_block(
                InsertPoint::End,
                Instruction::new(op, Some(ty), Some(id), operands),
            )
            .map_err(berr)?;
        Ok(id)
    }

    fn void_inst(&mut self, op: Op, operands: Vec<Operand>) -> Result<(), CodegenError> {
        self.b
            .insert_into_block(InsertPoint::End, Instruction::new(op, None, None, operands))
            .map_err(berr)
    }

    fn ext(&mut self, ty: Word, op: Gl, args: &[Word]) -> Result<Word, CodegenError> {
        let mut operands = vec![
            Operand::IdRef(self.glsl),
            Operand::LiteralExtInstInteger(op as u32),
        ];
        operands.extend(args.iter().map(|&a| Operand::IdRef(a)));
        self.inst(Op::ExtInst, ty, operands)
    }

    fn ids(words: &[Word]) -> Vec<Operand> {
        words.iter().map(|&w| Operand::IdRef(w)).collect()
    }

    fn unsupported(&self, detail: String) -> CodegenError {
        CodegenError::Unsupported {
            kernel: self.m.name.clone(),
            detail,
        }
    }

    fn buffer_elem_ptr(&mut self, buffer: u32, index: Value) -> Result<Word, CodegenError> {
        let elem = self.m.buffers[buffer as usize].elem;
        let e = self.ty(elem);
        let ptr = self.t.pointer(&mut self.b, StorageClass::StorageBuffer, e);
        let zero = self.konst(Type::U32, 0);
        let base = self.buffers[buffer as usize];
        let idx = self.val(index);
        self.inst(Op::AccessChain, ptr, Self::ids(&[base, zero, idx]))
    }

    fn shared_elem_ptr(&mut self, array: u32, index: Value) -> Result<Word, CodegenError> {
        let elem = self.m.shared[array as usize].elem;
        let e = self.ty(elem);
        let ptr = self.t.pointer(&mut self.b, StorageClass::Workgroup, e);
        let base = self.shared[array as usize];
        let idx = self.val(index);
        self.inst(Op::AccessChain, ptr, Self::ids(&[base, idx]))
    }

    // ---- statements -------------------------------------------------------------------------

    fn block(&mut self, block: &Block) -> Result<(), CodegenError> {
        for stmt in &block.0 {
            self.stmt(stmt)?;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<(), CodegenError> {
        match stmt {
            Stmt::Let {
                result,
                expr,
                precise,
            } => {
                let w = self.expr(*result, expr)?;
                if *precise && contractible(expr, result.ty) {
                    self.b.decorate(w, Decoration::NoContraction, []);
                }
                self.values[result.id as usize] = w;
            }
            Stmt::StoreVar { var, value } => {
                let (p, v) = (self.vars[*var as usize], self.val(*value));
                self.void_inst(Op::Store, Self::ids(&[p, v]))?;
            }
            Stmt::StoreBuffer {
                buffer,
                index,
                value,
            } => {
                let p = self.buffer_elem_ptr(*buffer, *index)?;
                let v = self.val(*value);
                self.void_inst(Op::Store, Self::ids(&[p, v]))?;
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                let p = self.shared_elem_ptr(*array, *index)?;
                let v = self.val(*value);
                self.void_inst(Op::Store, Self::ids(&[p, v]))?;
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => self.if_(*cond, then_body, else_body)?,
            Stmt::For {
                induction,
                start,
                end,
                step,
                unroll,
                body,
            } => self.for_(*induction, *start, *end, *step, *unroll, body)?,
            Stmt::Barrier => {
                let wg = self.konst(Type::U32, Scope::Workgroup as u32);
                let sem = MemorySemantics::ACQUIRE_RELEASE | MemorySemantics::WORKGROUP_MEMORY;
                let sem = self.konst(Type::U32, sem.bits());
                self.void_inst(Op::ControlBarrier, Self::ids(&[wg, wg, sem]))?;
            }
            Stmt::DeviceMemoryBarrier => {
                let device = self.konst(Type::U32, Scope::Device as u32);
                let sem = self.konst(Type::U32, device_acq_rel().bits());
                self.void_inst(Op::MemoryBarrier, Self::ids(&[device, sem]))?;
            }
            Stmt::PollAtLeast {
                var,
                buffer,
                index,
                target,
                max_polls,
            } => self.poll_at_least(*var, *buffer, *index, *target, *max_polls)?,
        }
        Ok(())
    }

    /// header: i = phi(0, next); body: seen = atomic load (device scope, acquire); var = seen;
    /// next = i + 1; leave the loop when seen >= target or next == max_polls, else continue
    /// → header. A loop that may stop early: the only way out of a wait that is satisfied.
    fn poll_at_least(
        &mut self,
        var: u32,
        buffer: u32,
        index: Value,
        target: Value,
        max_polls: u32,
    ) -> Result<(), CodegenError> {
        let (header, body_label, cont, merge) =
            (self.b.id(), self.b.id(), self.b.id(), self.b.id());
        let pre = self.current;
        let u32_ty = self.ty(Type::U32);
        let bool_ty = self.ty(Type::BOOL);
        let zero = self.konst(Type::U32, 0);
        let one = self.konst(Type::U32, 1);
        let max = self.konst(Type::U32, max_polls);
        let device = self.konst(Type::U32, Scope::Device as u32);
        let acquire = MemorySemantics::ACQUIRE | MemorySemantics::UNIFORM_MEMORY;
        let acquire = self.konst(Type::U32, acquire.bits());
        self.b.branch(header).map_err(berr)?;

        self.current = self.b.begin_block(Some(header)).map_err(berr)?;
        let i = self.b.id();
        let next = self.b.id();
        self.b
            .phi(u32_ty, Some(i), [(zero, pre), (next, cont)])
            .map_err(berr)?;
        self.b
            .loop_merge(merge, cont, LoopControl::DONT_UNROLL, [])
            .map_err(berr)?;
        self.b.branch(body_label).map_err(berr)?;

        self.current = self.b.begin_block(Some(body_label)).map_err(berr)?;
        let p = self.buffer_elem_ptr(buffer, index)?;
        let seen = self.inst(Op::AtomicLoad, u32_ty, Self::ids(&[p, device, acquire]))?;
        let var_ptr = self.vars[var as usize];
        self.void_inst(Op::Store, Self::ids(&[var_ptr, seen]))?;
        let target_w = self.val(target);
        let reached = self.inst(Op::UGreaterThanEqual, bool_ty, Self::ids(&[seen, target_w]))?;
        self.inst_with_id(Op::IAdd, u32_ty, next, Self::ids(&[i, one]))?;
        let more = self.inst(Op::ULessThan, bool_ty, Self::ids(&[next, max]))?;
        let waiting = self.inst(Op::LogicalNot, bool_ty, Self::ids(&[reached]))?;
        let again = self.inst(Op::LogicalAnd, bool_ty, Self::ids(&[waiting, more]))?;
        self.b
            .branch_conditional(again, cont, merge, [])
            .map_err(berr)?;

        self.current = self.b.begin_block(Some(cont)).map_err(berr)?;
        self.b.branch(header).map_err(berr)?;

        self.current = self.b.begin_block(Some(merge)).map_err(berr)?;
        Ok(())
    }

    fn if_(
        &mut self,
        cond: Value,
        then_body: &Block,
        else_body: &Block,
    ) -> Result<(), CodegenError> {
        let merge = self.b.id();
        let then_label = self.b.id();
        let else_label = if else_body.0.is_empty() {
            merge
        } else {
            self.b.id()
        };
        self.b
            .selection_merge(merge, SelectionControl::NONE)
            .map_err(berr)?;
        self.b
            .branch_conditional(self.val(cond), then_label, else_label, [])
            .map_err(berr)?;

        self.current = self.b.begin_block(Some(then_label)).map_err(berr)?;
        self.block(then_body)?;
        self.b.branch(merge).map_err(berr)?;
        if else_label != merge {
            self.current = self.b.begin_block(Some(else_label)).map_err(berr)?;
            self.block(else_body)?;
            self.b.branch(merge).map_err(berr)?;
        }
        self.current = self.b.begin_block(Some(merge)).map_err(berr)?;
        Ok(())
    }

    /// header: i = phi(start, next); if i < end goto body else merge
    /// body ... → continue: next = i + step → header
    fn for_(
        &mut self,
        induction: Value,
        start: Value,
        end: Value,
        step: u32,
        unroll: Unroll,
        body: &Block,
    ) -> Result<(), CodegenError> {
        let (header, body_label, cont, merge) =
            (self.b.id(), self.b.id(), self.b.id(), self.b.id());
        let pre = self.current;
        self.b.branch(header).map_err(berr)?;

        self.current = self.b.begin_block(Some(header)).map_err(berr)?;
        let ty = self.ty(induction.ty);
        let i = self.b.id();
        let next = self.b.id();
        self.values[induction.id as usize] = i;
        let start_w = self.val(start);
        self.b
            .phi(ty, Some(i), [(start_w, pre), (next, cont)])
            .map_err(berr)?;
        let bool_ty = self.ty(Type::BOOL);
        let lt = if induction.ty.scalar.is_signed() {
            Op::SLessThan
        } else {
            Op::ULessThan
        };
        let end_w = self.val(end);
        let cond = self.inst(lt, bool_ty, Self::ids(&[i, end_w]))?;
        let control = match unroll {
            Unroll::Auto => LoopControl::NONE,
            Unroll::Hint => LoopControl::UNROLL,
            Unroll::Never => LoopControl::DONT_UNROLL,
        };
        self.b.loop_merge(merge, cont, control, []).map_err(berr)?;
        self.b
            .branch_conditional(cond, body_label, merge, [])
            .map_err(berr)?;

        self.current = self.b.begin_block(Some(body_label)).map_err(berr)?;
        self.block(body)?;
        self.b.branch(cont).map_err(berr)?;

        self.current = self.b.begin_block(Some(cont)).map_err(berr)?;
        let step_w = self.konst(induction.ty, step);
        self.inst_with_id(Op::IAdd, ty, next, Self::ids(&[i, step_w]))?;
        self.b.branch(header).map_err(berr)?;

        self.current = self.b.begin_block(Some(merge)).map_err(berr)?;
        Ok(())
    }

    // ---- expressions ------------------------------------------------------------------------

    fn expr(&mut self, result: Value, expr: &Expr) -> Result<Word, CodegenError> {
        let rty = result.ty;
        let t = self.ty(rty);
        match expr {
            Expr::Const { bits } => Ok(self.konst(rty, *bits)),
            Expr::Builtin(which) => self.builtin(*which),
            Expr::Push(i) => {
                let ptr = self.t.pointer(&mut self.b, StorageClass::PushConstant, t);
                let idx = self.konst(Type::U32, *i);
                let base = self.push.expect("push field without push block");
                let p = self.inst(Op::AccessChain, ptr, Self::ids(&[base, idx]))?;
                self.inst(Op::Load, t, Self::ids(&[p]))
            }
            Expr::LoadVar(v) => {
                let p = self.vars[*v as usize];
                self.inst(Op::Load, t, Self::ids(&[p]))
            }
            Expr::LoadBuffer { buffer, index } => {
                let p = self.buffer_elem_ptr(*buffer, *index)?;
                self.inst(Op::Load, t, Self::ids(&[p]))
            }
            Expr::LoadShared { array, index } => {
                let p = self.shared_elem_ptr(*array, *index)?;
                self.inst(Op::Load, t, Self::ids(&[p]))
            }
            Expr::AtomicAdd {
                buffer,
                index,
                value,
            } => {
                let p = self.buffer_elem_ptr(*buffer, *index)?;
                let device = self.konst(Type::U32, Scope::Device as u32);
                let sem = self.konst(Type::U32, device_acq_rel().bits());
                let v = self.val(*value);
                self.inst(Op::AtomicIAdd, t, Self::ids(&[p, device, sem, v]))
            }
            Expr::ArrayLength { buffer } => {
                let base = self.buffers[*buffer as usize];
                self.inst(
                    Op::ArrayLength,
                    t,
                    vec![Operand::IdRef(base), Operand::LiteralBit32(0)],
                )
            }
            Expr::Unary(op, a) => self.unary(*op, *a, t),
            Expr::Binary(op, a, b) => self.binary(*op, *a, *b, t),
            Expr::Fma(a, b, c) => {
                let args = [self.val(*a), self.val(*b), self.val(*c)];
                self.ext(t, Gl::Fma, &args)
            }
            Expr::Select {
                cond,
                if_true,
                if_false,
            } => {
                let args = [self.val(*cond), self.val(*if_true), self.val(*if_false)];
                self.inst(Op::Select, t, Self::ids(&args))
            }
            Expr::Convert(v) => self.convert(*v, rty),
            Expr::Bitcast(v) => {
                let a = self.val(*v);
                self.inst(Op::Bitcast, t, Self::ids(&[a]))
            }
            Expr::Splat(v) => {
                let a = self.val(*v);
                self.inst(
                    Op::CompositeConstruct,
                    t,
                    Self::ids(&vec![a; rty.lanes() as usize]),
                )
            }
            Expr::Extract { vector, lane } => {
                let a = self.val(*vector);
                self.inst(
                    Op::CompositeExtract,
                    t,
                    vec![Operand::IdRef(a), Operand::LiteralBit32(*lane)],
                )
            }
            Expr::Construct(parts) => {
                let ws: Vec<Word> = parts.iter().map(|p| self.val(*p)).collect();
                self.inst(Op::CompositeConstruct, t, Self::ids(&ws))
            }
            Expr::BitFieldExtract {
                base,
                offset,
                count,
            } => {
                let op = if base.ty.scalar.is_signed() {
                    Op::BitFieldSExtract
                } else {
                    Op::BitFieldUExtract
                };
                let args = [self.val(*base), self.val(*offset), self.val(*count)];
                self.inst(op, t, Self::ids(&args))
            }
            Expr::UnpackHalf2x16(v) => {
                let a = self.val(*v);
                self.ext(t, Gl::UnpackHalf2x16, &[a])
            }
            Expr::PackHalf2x16(v) => {
                let a = self.val(*v);
                self.ext(t, Gl::PackHalf2x16, &[a])
            }
            Expr::Dot(a, b) => {
                let args = [self.val(*a), self.val(*b)];
                self.inst(Op::Dot, t, Self::ids(&args))
            }
            Expr::Dot4x8Packed { a, b, sign } => {
                let op = match sign {
                    DotSign::Signed => Op::SDot,
                    DotSign::Unsigned => Op::UDot,
                    DotSign::SignedUnsigned => Op::SUDot,
                };
                let (a, b) = (self.val(*a), self.val(*b));
                self.inst(
                    op,
                    t,
                    vec![
                        Operand::IdRef(a),
                        Operand::IdRef(b),
                        Operand::PackedVectorFormat(
                            spirv::PackedVectorFormat::PackedVectorFormat4x8Bit,
                        ),
                    ],
                )
            }
            Expr::Subgroup { op, value, operand } => self.subgroup(*op, *value, *operand, t),
        }
    }

    fn builtin(&mut self, which: Builtin) -> Result<Word, CodegenError> {
        let bv = BuiltinVar::of(which);
        let var = self
            .builtins
            .iter()
            .find(|(b, _)| *b == bv)
            .map(|(_, w)| *w)
            .expect("builtin declared");
        let u32_ty = self.ty(Type::U32);
        match which {
            Builtin::GlobalInvocationId(c)
            | Builtin::LocalInvocationId(c)
            | Builtin::WorkgroupId(c)
            | Builtin::NumWorkgroups(c) => {
                let v3 = self.ty(Type::vec(Scalar::U32, 3));
                let v = self.inst(Op::Load, v3, Self::ids(&[var]))?;
                self.inst(
                    Op::CompositeExtract,
                    u32_ty,
                    vec![Operand::IdRef(v), Operand::LiteralBit32(u32::from(c))],
                )
            }
            _ => self.inst(Op::Load, u32_ty, Self::ids(&[var])),
        }
    }

    fn unary(&mut self, op: UnaryOp, a: Value, t: Word) -> Result<Word, CodegenError> {
        let x = self.val(a);
        let float = a.ty.scalar.is_float();
        match op {
            UnaryOp::Neg => self.inst(
                if float { Op::FNegate } else { Op::SNegate },
                t,
                Self::ids(&[x]),
            ),
            UnaryOp::BitNot => self.inst(Op::Not, t, Self::ids(&[x])),
            UnaryOp::LogicalNot => self.inst(Op::LogicalNot, t, Self::ids(&[x])),
            UnaryOp::Abs => self.ext(t, if float { Gl::FAbs } else { Gl::SAbs }, &[x]),
            UnaryOp::Floor => self.ext(t, Gl::Floor, &[x]),
            UnaryOp::Trunc => self.ext(t, Gl::Trunc, &[x]),
            UnaryOp::RoundEven => self.ext(t, Gl::RoundEven, &[x]),
            UnaryOp::Sqrt => self.ext(t, Gl::Sqrt, &[x]),
            UnaryOp::InverseSqrt => self.ext(t, Gl::InverseSqrt, &[x]),
            UnaryOp::Exp => self.ext(t, Gl::Exp, &[x]),
            UnaryOp::Log => self.ext(t, Gl::Log, &[x]),
            UnaryOp::Tanh => self.ext(t, Gl::Tanh, &[x]),
        }
    }

    fn binary(&mut self, op: BinaryOp, a: Value, b: Value, t: Word) -> Result<Word, CodegenError> {
        let s = a.ty.scalar;
        let (x, y) = (self.val(a), self.val(b));
        let (float, signed, boolean) = (s.is_float(), s.is_signed(), s == Scalar::Bool);
        let pick = |f: Op, si: Op, u: Op| {
            if float {
                f
            } else if signed {
                si
            } else {
                u
            }
        };
        let opc = match op {
            BinaryOp::Add => pick(Op::FAdd, Op::IAdd, Op::IAdd),
            BinaryOp::Sub => pick(Op::FSub, Op::ISub, Op::ISub),
            BinaryOp::Mul => pick(Op::FMul, Op::IMul, Op::IMul),
            BinaryOp::Div => pick(Op::FDiv, Op::SDiv, Op::UDiv),
            BinaryOp::Rem => pick(Op::FRem, Op::SRem, Op::UMod),
            BinaryOp::Min => {
                let g = if float {
                    Gl::FMin
                } else if signed {
                    Gl::SMin
                } else {
                    Gl::UMin
                };
                return self.ext(t, g, &[x, y]);
            }
            BinaryOp::Max => {
                let g = if float {
                    Gl::FMax
                } else if signed {
                    Gl::SMax
                } else {
                    Gl::UMax
                };
                return self.ext(t, g, &[x, y]);
            }
            BinaryOp::BitAnd => Op::BitwiseAnd,
            BinaryOp::BitOr => Op::BitwiseOr,
            BinaryOp::BitXor => Op::BitwiseXor,
            BinaryOp::Shl => Op::ShiftLeftLogical,
            BinaryOp::Shr => {
                if signed {
                    Op::ShiftRightArithmetic
                } else {
                    Op::ShiftRightLogical
                }
            }
            BinaryOp::Eq if boolean => Op::LogicalEqual,
            BinaryOp::Ne if boolean => Op::LogicalNotEqual,
            BinaryOp::Eq => pick(Op::FOrdEqual, Op::IEqual, Op::IEqual),
            BinaryOp::Ne => pick(Op::FUnordNotEqual, Op::INotEqual, Op::INotEqual),
            BinaryOp::Lt => pick(Op::FOrdLessThan, Op::SLessThan, Op::ULessThan),
            BinaryOp::Le => pick(
                Op::FOrdLessThanEqual,
                Op::SLessThanEqual,
                Op::ULessThanEqual,
            ),
            BinaryOp::Gt => pick(Op::FOrdGreaterThan, Op::SGreaterThan, Op::UGreaterThan),
            BinaryOp::Ge => pick(
                Op::FOrdGreaterThanEqual,
                Op::SGreaterThanEqual,
                Op::UGreaterThanEqual,
            ),
            BinaryOp::LogicalAnd => Op::LogicalAnd,
            BinaryOp::LogicalOr => Op::LogicalOr,
        };
        self.inst(opc, t, Self::ids(&[x, y]))
    }

    fn convert(&mut self, v: Value, to: Type) -> Result<Word, CodegenError> {
        let from = v.ty;
        let x = self.val(v);
        let t = self.ty(to);
        let (fs, ts) = (from.scalar, to.scalar);
        if fs.is_float() && ts.is_float() {
            return self.inst(Op::FConvert, t, Self::ids(&[x]));
        }
        if fs.is_int() && ts.is_float() {
            let op = if fs.is_signed() {
                Op::ConvertSToF
            } else {
                Op::ConvertUToF
            };
            return self.inst(op, t, Self::ids(&[x]));
        }
        if fs.is_float() && ts.is_int() {
            let op = if ts.is_signed() {
                Op::ConvertFToS
            } else {
                Op::ConvertFToU
            };
            return self.inst(op, t, Self::ids(&[x]));
        }
        if fs.is_int() && ts.is_int() {
            if fs.bits() == ts.bits() {
                return self.inst(Op::Bitcast, t, Self::ids(&[x]));
            }
            // Extend by the source's signedness; OpUConvert must produce an unsigned type, so
            // convert to the unsigned type of the target width and reinterpret if needed.
            if fs.is_signed() {
                return self.inst(Op::SConvert, t, Self::ids(&[x]));
            }
            let unsigned = match ts.bits() {
                8 => Scalar::U8,
                16 => Scalar::U16,
                _ => Scalar::U32,
            };
            let ut = self.ty(to.with_scalar(unsigned));
            let y = self.inst(Op::UConvert, ut, Self::ids(&[x]))?;
            if unsigned == ts {
                return Ok(y);
            }
            return self.inst(Op::Bitcast, t, Self::ids(&[y]));
        }
        Err(self.unsupported(format!("conversion from {from} to {to}")))
    }

    fn subgroup(
        &mut self,
        op: SubgroupOp,
        value: Value,
        operand: Option<Value>,
        t: Word,
    ) -> Result<Word, CodegenError> {
        let scope = self.konst(Type::U32, Scope::Subgroup as u32);
        let x = self.val(value);
        let s = value.ty.scalar;
        let (float, signed) = (s.is_float(), s.is_signed());
        let reduce = |o: Op| (o, true);
        let (opc, is_reduce) = match op {
            SubgroupOp::Add => reduce(if float {
                Op::GroupNonUniformFAdd
            } else {
                Op::GroupNonUniformIAdd
            }),
            SubgroupOp::Min => reduce(if float {
                Op::GroupNonUniformFMin
            } else if signed {
                Op::GroupNonUniformSMin
            } else {
                Op::GroupNonUniformUMin
            }),
            SubgroupOp::Max => reduce(if float {
                Op::GroupNonUniformFMax
            } else if signed {
                Op::GroupNonUniformSMax
            } else {
                Op::GroupNonUniformUMax
            }),
            SubgroupOp::Shuffle => (Op::GroupNonUniformShuffle, false),
            SubgroupOp::ShuffleXor => (Op::GroupNonUniformShuffleXor, false),
            SubgroupOp::Broadcast => (Op::GroupNonUniformBroadcast, false),
        };
        let mut operands = vec![Operand::IdRef(scope)];
        if is_reduce {
            operands.push(Operand::GroupOperation(GroupOperation::Reduce));
        }
        operands.push(Operand::IdRef(x));
        if let Some(o) = operand {
            operands.push(Operand::IdRef(self.val(o)));
        }
        self.inst(opc, t, operands)
    }
}

/// Device-scope ordering of storage-buffer accesses (what GLSL's `memoryBarrierBuffer()` and
/// a buffer `atomicAdd` use under the GLSL450 memory model).
fn device_acq_rel() -> MemorySemantics {
    MemorySemantics::ACQUIRE_RELEASE | MemorySemantics::UNIFORM_MEMORY
}
