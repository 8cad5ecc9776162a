//! The builder templates use to write IR.
//!
//! All methods take `&self` (the state sits in a `RefCell`) so that expressions nest naturally:
//! `b.add(x, b.c_u32(4))`. Type errors are bugs in a template, not user errors, so they panic
//! with a message naming the operation and the types.

use std::cell::RefCell;

use super::{
    Access, BinaryOp, Block, Buffer, BufferDecl, Builtin, DotSign, Expr, Module, PushDecl,
    PushField, Scalar, SharedArray, SharedDecl, Stmt, SubgroupOp, Type, UnaryOp, Unroll, Value,
    Var, VarDecl,
};

struct State {
    module: Module,
    /// Statement lists of the blocks being built, innermost last.
    blocks: Vec<Vec<Stmt>>,
    precise: u32,
}

pub struct KernelBuilder {
    state: RefCell<State>,
}

impl KernelBuilder {
    pub fn new(name: impl Into<String>, workgroup_size: [u32; 3]) -> Self {
        KernelBuilder {
            state: RefCell::new(State {
                module: Module {
                    name: name.into(),
                    workgroup_size,
                    buffers: Vec::new(),
                    push: Vec::new(),
                    shared: Vec::new(),
                    vars: Vec::new(),
                    value_count: 0,
                    body: Block::default(),
                },
                blocks: vec![Vec::new()],
                precise: 0,
            }),
        }
    }

    /// Finishes the module. Panics if called inside an unfinished nested block.
    pub fn finish(self) -> Module {
        let mut st = self.state.into_inner();
        assert_eq!(st.blocks.len(), 1, "finish() called inside a nested block");
        st.module.body = Block(st.blocks.pop().unwrap());
        st.module
    }

    // ---- resources -------------------------------------------------------------------------

    /// Declares a storage buffer (descriptor set 0) whose elements are `elem`.
    pub fn buffer(&self, binding: u32, name: &str, elem: Type, access: Access) -> Buffer {
        self.declare_buffer(binding, name, elem, access, false)
    }

    /// Declares a read-only storage buffer of the model's own data (weights, biases, norm
    /// weights, RoPE frequencies, embedding tables), which no kernel writes (see
    /// `BufferDecl::model_constant`).
    pub fn model_buffer(&self, binding: u32, name: &str, elem: Type) -> Buffer {
        let buffer = self.declare_buffer(binding, name, elem, Access::ReadOnly, false);
        self.state.borrow_mut().module.buffers[buffer.id as usize].model_constant = true;
        buffer
    }

    /// Declares a read-write storage buffer that workgroups of one dispatch hand data
    /// through (see `BufferDecl::coherent`).
    pub fn coherent_buffer(&self, binding: u32, name: &str, elem: Type) -> Buffer {
        self.declare_buffer(binding, name, elem, Access::ReadWrite, true)
    }

    fn declare_buffer(
        &self,
        binding: u32,
        name: &str,
        elem: Type,
        access: Access,
        coherent: bool,
    ) -> Buffer {
        assert!(
            elem.scalar != Scalar::Bool,
            "buffer {name}: bool has no storage layout"
        );
        assert!(
            elem.lanes != 3,
            "buffer {name}: vec3 elements are not supported"
        );
        let mut st = self.state.borrow_mut();
        assert!(
            st.module.buffers.iter().all(|b| b.binding != binding),
            "buffer {name}: binding {binding} declared twice"
        );
        let id = st.module.buffers.len() as u32;
        st.module.buffers.push(BufferDecl {
            binding,
            name: name.into(),
            elem,
            access,
            coherent,
            model_constant: false,
        });
        Buffer { id, elem }
    }

    /// Declares the next 32-bit field of the push-constant block.
    pub fn push_field(&self, name: &str, ty: Type) -> PushField {
        assert!(
            !ty.is_vector() && ty.scalar.bits() == 32 && ty.scalar != Scalar::Bool,
            "push constant {name}: only 32-bit scalars are supported, got {ty}"
        );
        let mut st = self.state.borrow_mut();
        let index = st.module.push.len() as u32;
        st.module.push.push(PushDecl {
            name: name.into(),
            ty,
        });
        PushField { index, ty }
    }

    /// Declares a workgroup (shared) array.
    pub fn shared_array(&self, name: &str, elem: Type, len: u32) -> SharedArray {
        assert!(len > 0, "shared array {name} has no elements");
        let mut st = self.state.borrow_mut();
        let id = st.module.shared.len() as u32;
        st.module.shared.push(SharedDecl {
            name: name.into(),
            elem,
            len,
        });
        SharedArray { id, elem, len }
    }

    /// Declares a function-local mutable variable (uninitialized).
    pub fn var(&self, name: &str, ty: Type) -> Var {
        let mut st = self.state.borrow_mut();
        let id = st.module.vars.len() as u32;
        st.module.vars.push(VarDecl {
            name: name.into(),
            ty,
        });
        Var { id, ty }
    }

    /// Declares a variable and stores `init` into it here.
    pub fn var_init(&self, name: &str, init: Value) -> Var {
        let v = self.var(name, init.ty);
        self.store_var(v, init);
        v
    }

    // ---- plumbing ---------------------------------------------------------------------------

    fn push_stmt(&self, stmt: Stmt) {
        self.state
            .borrow_mut()
            .blocks
            .last_mut()
            .unwrap()
            .push(stmt);
    }

    fn new_value(&self, ty: Type) -> Value {
        let mut st = self.state.borrow_mut();
        let id = st.module.value_count;
        st.module.value_count += 1;
        Value { id, ty }
    }

    fn emit(&self, ty: Type, expr: Expr) -> Value {
        let result = self.new_value(ty);
        let precise = self.state.borrow().precise > 0;
        self.push_stmt(Stmt::Let {
            result,
            expr,
            precise,
        });
        result
    }

    fn nested(&self, f: impl FnOnce()) -> Block {
        self.state.borrow_mut().blocks.push(Vec::new());
        f();
        Block(self.state.borrow_mut().blocks.pop().unwrap())
    }

    /// Everything built inside `f` is marked precise (no contraction into FMAs by the driver).
    pub fn precise<R>(&self, f: impl FnOnce() -> R) -> R {
        self.state.borrow_mut().precise += 1;
        let r = f();
        self.state.borrow_mut().precise -= 1;
        r
    }

    // ---- constants --------------------------------------------------------------------------

    /// A constant of type `ty` (splatted for vectors) from a raw scalar bit pattern.
    pub fn const_bits(&self, ty: Type, bits: u32) -> Value {
        let width = ty.scalar.bits();
        let bits = if width < 32 {
            bits & ((1u32 << width) - 1)
        } else {
            bits
        };
        self.emit(ty, Expr::Const { bits })
    }

    /// A constant of type `ty` with numeric value `v` (rounded/truncated to the type).
    pub fn lit(&self, ty: Type, v: f64) -> Value {
        let bits = match ty.scalar {
            Scalar::Bool => (v != 0.0) as u32,
            Scalar::F32 => (v as f32).to_bits(),
            Scalar::F16 => u32::from(half::f16::from_f64(v).to_bits()),
            Scalar::I8 | Scalar::I16 | Scalar::I32 => (v as i64) as u32,
            Scalar::U8 | Scalar::U16 | Scalar::U32 => v as u64 as u32,
        };
        self.const_bits(ty, bits)
    }

    pub fn c_u32(&self, v: u32) -> Value {
        self.const_bits(Type::U32, v)
    }
    pub fn c_i32(&self, v: i32) -> Value {
        self.const_bits(Type::I32, v as u32)
    }
    pub fn c_f32(&self, v: f32) -> Value {
        self.const_bits(Type::F32, v.to_bits())
    }
    pub fn c_bool(&self, v: bool) -> Value {
        self.const_bits(Type::BOOL, v as u32)
    }

    // ---- inputs and memory ------------------------------------------------------------------

    /// A built-in input (u32).
    pub fn builtin(&self, which: Builtin) -> Value {
        if let Builtin::GlobalInvocationId(c)
        | Builtin::LocalInvocationId(c)
        | Builtin::WorkgroupId(c)
        | Builtin::NumWorkgroups(c) = which
        {
            assert!(c < 3, "builtin {which:?}: component out of range");
        }
        self.emit(Type::U32, Expr::Builtin(which))
    }

    pub fn push(&self, field: PushField) -> Value {
        self.emit(field.ty, Expr::Push(field.index))
    }

    pub fn load_var(&self, var: Var) -> Value {
        self.emit(var.ty, Expr::LoadVar(var.id))
    }

    pub fn store_var(&self, var: Var, value: Value) {
        assert_eq!(
            var.ty, value.ty,
            "store_var: variable is {}, value is {}",
            var.ty, value.ty
        );
        self.push_stmt(Stmt::StoreVar { var: var.id, value });
    }

    fn check_index(what: &str, index: Value) {
        assert!(
            index.ty == Type::U32 || index.ty == Type::I32,
            "{what}: index must be a u32/i32 scalar, got {}",
            index.ty
        );
    }

    pub fn load(&self, buffer: Buffer, index: Value) -> Value {
        Self::check_index("load", index);
        self.emit(
            buffer.elem,
            Expr::LoadBuffer {
                buffer: buffer.id,
                index,
            },
        )
    }

    pub fn store(&self, buffer: Buffer, index: Value, value: Value) {
        Self::check_index("store", index);
        assert_eq!(
            buffer.elem, value.ty,
            "store: buffer holds {}, value is {}",
            buffer.elem, value.ty
        );
        self.push_stmt(Stmt::StoreBuffer {
            buffer: buffer.id,
            index,
            value,
        });
    }

    pub fn load_shared(&self, array: SharedArray, index: Value) -> Value {
        Self::check_index("load_shared", index);
        self.emit(
            array.elem,
            Expr::LoadShared {
                array: array.id,
                index,
            },
        )
    }

    pub fn store_shared(&self, array: SharedArray, index: Value, value: Value) {
        Self::check_index("store_shared", index);
        assert_eq!(
            array.elem, value.ty,
            "store_shared: array holds {}, value is {}",
            array.elem, value.ty
        );
        self.push_stmt(Stmt::StoreShared {
            array: array.id,
            index,
            value,
        });
    }

    pub fn array_length(&self, buffer: Buffer) -> Value {
        self.emit(Type::U32, Expr::ArrayLength { buffer: buffer.id })
    }

    // ---- arithmetic -------------------------------------------------------------------------

    fn unary(&self, op: UnaryOp, a: Value) -> Value {
        let ok = match op {
            UnaryOp::Neg | UnaryOp::Abs => a.ty.scalar.is_float() || a.ty.scalar.is_signed(),
            UnaryOp::BitNot => a.ty.scalar.is_int(),
            UnaryOp::LogicalNot => a.ty.scalar == Scalar::Bool,
            _ => a.ty.scalar.is_float(),
        };
        assert!(ok, "{op:?} is not defined on {}", a.ty);
        self.emit(a.ty, Expr::Unary(op, a))
    }

    pub fn neg(&self, a: Value) -> Value {
        self.unary(UnaryOp::Neg, a)
    }
    pub fn bit_not(&self, a: Value) -> Value {
        self.unary(UnaryOp::BitNot, a)
    }
    pub fn not(&self, a: Value) -> Value {
        self.unary(UnaryOp::LogicalNot, a)
    }
    pub fn abs(&self, a: Value) -> Value {
        self.unary(UnaryOp::Abs, a)
    }
    pub fn floor(&self, a: Value) -> Value {
        self.unary(UnaryOp::Floor, a)
    }
    pub fn trunc(&self, a: Value) -> Value {
        self.unary(UnaryOp::Trunc, a)
    }
    pub fn round_even(&self, a: Value) -> Value {
        self.unary(UnaryOp::RoundEven, a)
    }
    pub fn sqrt(&self, a: Value) -> Value {
        self.unary(UnaryOp::Sqrt, a)
    }
    pub fn inverse_sqrt(&self, a: Value) -> Value {
        self.unary(UnaryOp::InverseSqrt, a)
    }
    pub fn exp(&self, a: Value) -> Value {
        self.unary(UnaryOp::Exp, a)
    }
    pub fn log(&self, a: Value) -> Value {
        self.unary(UnaryOp::Log, a)
    }
    pub fn tanh(&self, a: Value) -> Value {
        self.unary(UnaryOp::Tanh, a)
    }

    fn binary(&self, op: BinaryOp, a: Value, b: Value) -> Value {
        assert_eq!(
            a.ty, b.ty,
            "{op:?}: operand types differ ({} vs {})",
            a.ty, b.ty
        );
        let s = a.ty.scalar;
        let ok = match op {
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Rem
            | BinaryOp::Min
            | BinaryOp::Max
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => s != Scalar::Bool,
            BinaryOp::BitAnd
            | BinaryOp::BitOr
            | BinaryOp::BitXor
            | BinaryOp::Shl
            | BinaryOp::Shr => s.is_int(),
            BinaryOp::Eq | BinaryOp::Ne => true,
            BinaryOp::LogicalAnd | BinaryOp::LogicalOr => s == Scalar::Bool,
        };
        assert!(ok, "{op:?} is not defined on {}", a.ty);
        let ty = if op.is_comparison() {
            a.ty.with_scalar(Scalar::Bool)
        } else {
            a.ty
        };
        self.emit(ty, Expr::Binary(op, a, b))
    }

    pub fn add(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Div, a, b)
    }
    pub fn rem(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Rem, a, b)
    }
    pub fn min(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Min, a, b)
    }
    pub fn max(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Max, a, b)
    }
    pub fn and(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::BitAnd, a, b)
    }
    pub fn or(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::BitOr, a, b)
    }
    pub fn xor(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::BitXor, a, b)
    }
    pub fn shl(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Shl, a, b)
    }
    pub fn shr(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Shr, a, b)
    }
    pub fn eq(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Eq, a, b)
    }
    pub fn ne(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Ne, a, b)
    }
    pub fn lt(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Lt, a, b)
    }
    pub fn le(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Le, a, b)
    }
    pub fn gt(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Gt, a, b)
    }
    pub fn ge(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Ge, a, b)
    }
    pub fn logical_and(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::LogicalAnd, a, b)
    }
    pub fn logical_or(&self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::LogicalOr, a, b)
    }

    /// `a op k` with `k` a constant of `a`'s type (handy for index arithmetic).
    fn with_imm(&self, op: BinaryOp, a: Value, k: u32) -> Value {
        let c = self.const_bits(a.ty, k);
        self.binary(op, a, c)
    }
    pub fn addi(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::Add, a, k)
    }
    pub fn muli(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::Mul, a, k)
    }
    pub fn andi(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::BitAnd, a, k)
    }
    pub fn ori(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::BitOr, a, k)
    }
    pub fn shri(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::Shr, a, k)
    }
    pub fn shli(&self, a: Value, k: u32) -> Value {
        self.with_imm(BinaryOp::Shl, a, k)
    }

    /// `a * b + c` rounded once (GLSL.std.450 Fma).
    pub fn fma(&self, a: Value, b: Value, c: Value) -> Value {
        assert!(
            a.ty == b.ty && b.ty == c.ty,
            "fma: types differ ({}, {}, {})",
            a.ty,
            b.ty,
            c.ty
        );
        assert!(a.ty.scalar.is_float(), "fma is not defined on {}", a.ty);
        self.emit(a.ty, Expr::Fma(a, b, c))
    }

    pub fn select(&self, cond: Value, if_true: Value, if_false: Value) -> Value {
        assert_eq!(if_true.ty, if_false.ty, "select: branch types differ");
        assert!(
            cond.ty == Type::BOOL || cond.ty == if_true.ty.with_scalar(Scalar::Bool),
            "select: condition {} does not match {}",
            cond.ty,
            if_true.ty
        );
        self.emit(
            if_true.ty,
            Expr::Select {
                cond,
                if_true,
                if_false,
            },
        )
    }

    /// Numeric conversion (value-preserving where possible).
    pub fn convert(&self, v: Value, to: Type) -> Value {
        assert_eq!(
            v.ty.lanes, to.lanes,
            "convert {} to {}: lane counts differ",
            v.ty, to
        );
        assert!(
            v.ty.scalar != Scalar::Bool && to.scalar != Scalar::Bool,
            "convert {} to {}: use select for bools",
            v.ty,
            to
        );
        if v.ty == to {
            return v;
        }
        self.emit(to, Expr::Convert(v))
    }

    /// Bit reinterpretation; total widths must match.
    pub fn bitcast(&self, v: Value, to: Type) -> Value {
        assert_eq!(
            v.ty.scalar.bits() * v.ty.lanes(),
            to.scalar.bits() * to.lanes(),
            "bitcast {} to {}: widths differ",
            v.ty,
            to
        );
        if v.ty == to {
            return v;
        }
        self.emit(to, Expr::Bitcast(v))
    }

    pub fn splat(&self, v: Value, lanes: u32) -> Value {
        assert!(!v.ty.is_vector(), "splat of a vector {}", v.ty);
        if lanes == 1 {
            return v;
        }
        self.emit(Type::vec(v.ty.scalar, lanes), Expr::Splat(v))
    }

    pub fn extract(&self, v: Value, lane: u32) -> Value {
        assert!(lane < v.ty.lanes(), "extract lane {lane} of {}", v.ty);
        if !v.ty.is_vector() {
            return v;
        }
        self.emit(v.ty.element(), Expr::Extract { vector: v, lane })
    }

    /// A vector from scalars (or smaller vectors) of the same scalar type.
    pub fn construct(&self, parts: &[Value]) -> Value {
        assert!(!parts.is_empty(), "construct of nothing");
        let scalar = parts[0].ty.scalar;
        assert!(
            parts.iter().all(|p| p.ty.scalar == scalar),
            "construct: mixed scalar types"
        );
        let lanes: u32 = parts.iter().map(|p| p.ty.lanes()).sum();
        if parts.len() == 1 {
            return parts[0];
        }
        self.emit(Type::vec(scalar, lanes), Expr::Construct(parts.to_vec()))
    }

    pub fn bitfield_extract(&self, base: Value, offset: u32, count: u32) -> Value {
        assert!(
            base.ty.scalar.is_int() && base.ty.scalar.bits() == 32,
            "bitfield_extract on {}",
            base.ty
        );
        assert!(
            offset + count <= 32 && count > 0,
            "bitfield_extract {offset}+{count} out of 32 bits"
        );
        let o = self.c_u32(offset);
        let c = self.c_u32(count);
        self.emit(
            base.ty,
            Expr::BitFieldExtract {
                base,
                offset: o,
                count: c,
            },
        )
    }

    pub fn unpack_half2x16(&self, word: Value) -> Value {
        assert_eq!(word.ty, Type::U32, "unpack_half2x16 takes a u32");
        self.emit(Type::vec(Scalar::F32, 2), Expr::UnpackHalf2x16(word))
    }

    pub fn pack_half2x16(&self, v: Value) -> Value {
        assert_eq!(
            v.ty,
            Type::vec(Scalar::F32, 2),
            "pack_half2x16 takes a vec2<f32>"
        );
        self.emit(Type::U32, Expr::PackHalf2x16(v))
    }

    pub fn dot(&self, a: Value, b: Value) -> Value {
        assert!(
            a.ty == b.ty && a.ty.is_vector() && a.ty.scalar.is_float(),
            "dot on {} and {}",
            a.ty,
            b.ty
        );
        self.emit(a.ty.element(), Expr::Dot(a, b))
    }

    /// Dot product of two u32 words holding 4 packed 8-bit integers each.
    pub fn dot4x8(&self, a: Value, b: Value, sign: DotSign) -> Value {
        assert!(
            a.ty == Type::U32 && b.ty == Type::U32,
            "dot4x8 takes u32 words"
        );
        let ty = if sign == DotSign::Unsigned {
            Type::U32
        } else {
            Type::I32
        };
        self.emit(ty, Expr::Dot4x8Packed { a, b, sign })
    }

    fn subgroup(&self, op: SubgroupOp, value: Value, operand: Option<Value>) -> Value {
        if op.is_arithmetic() {
            assert!(value.ty.scalar != Scalar::Bool, "subgroup {op:?} on bool");
        }
        if let Some(o) = operand {
            assert_eq!(o.ty, Type::U32, "subgroup {op:?}: lane/mask must be u32");
        }
        self.emit(value.ty, Expr::Subgroup { op, value, operand })
    }
    pub fn subgroup_add(&self, v: Value) -> Value {
        self.subgroup(SubgroupOp::Add, v, None)
    }
    pub fn subgroup_min(&self, v: Value) -> Value {
        self.subgroup(SubgroupOp::Min, v, None)
    }
    pub fn subgroup_max(&self, v: Value) -> Value {
        self.subgroup(SubgroupOp::Max, v, None)
    }
    pub fn subgroup_shuffle(&self, v: Value, lane: Value) -> Value {
        self.subgroup(SubgroupOp::Shuffle, v, Some(lane))
    }
    /// The value of subgroup invocation `lane` (a constant) in every invocation.
    pub fn subgroup_broadcast(&self, v: Value, lane: u32) -> Value {
        let lane = self.c_u32(lane);
        self.subgroup(SubgroupOp::Broadcast, v, Some(lane))
    }
    pub fn subgroup_shuffle_xor(&self, v: Value, mask: Value) -> Value {
        self.subgroup(SubgroupOp::ShuffleXor, v, Some(mask))
    }

    // ---- control flow -----------------------------------------------------------------------

    pub fn if_(&self, cond: Value, then: impl FnOnce()) {
        self.if_else(cond, then, || {});
    }

    pub fn if_else(&self, cond: Value, then: impl FnOnce(), otherwise: impl FnOnce()) {
        assert_eq!(
            cond.ty,
            Type::BOOL,
            "if: condition must be bool, got {}",
            cond.ty
        );
        let then_body = self.nested(then);
        let else_body = self.nested(otherwise);
        self.push_stmt(Stmt::If {
            cond,
            then_body,
            else_body,
        });
    }

    /// `for i in (start..end).step_by(step) { body(i) }` as a real loop.
    pub fn for_range(
        &self,
        start: Value,
        end: Value,
        step: u32,
        unroll: Unroll,
        body: impl FnOnce(Value),
    ) {
        assert_eq!(
            start.ty, end.ty,
            "for_range: start is {}, end is {}",
            start.ty, end.ty
        );
        assert!(
            start.ty == Type::U32 || start.ty == Type::I32,
            "for_range over {}",
            start.ty
        );
        assert!(step > 0, "for_range: step must be positive");
        let induction = self.new_value(start.ty);
        let body = self.nested(|| body(induction));
        self.push_stmt(Stmt::For {
            induction,
            start,
            end,
            step,
            unroll,
            body,
        });
    }

    /// Workgroup barrier (execution and workgroup memory). Must be reached by the whole
    /// workgroup: never call it under a non-uniform condition.
    pub fn barrier(&self) {
        self.push_stmt(Stmt::Barrier);
    }

    /// See [`Stmt::DeviceMemoryBarrier`].
    pub fn device_memory_barrier(&self) {
        self.push_stmt(Stmt::DeviceMemoryBarrier);
    }

    /// Atomically adds `value` (u32) to element `index` of a u32 buffer; yields the old
    /// value (see [`Expr::AtomicAdd`]).
    pub fn atomic_add(&self, buffer: Buffer, index: Value, value: Value) -> Value {
        Self::check_index("atomic_add", index);
        assert!(
            buffer.elem == Type::U32 && value.ty == Type::U32,
            "atomic_add: u32 buffers and values only, got {} and {}",
            buffer.elem,
            value.ty
        );
        self.emit(
            Type::U32,
            Expr::AtomicAdd {
                buffer: buffer.id,
                index,
                value,
            },
        )
    }
}
