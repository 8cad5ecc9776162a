//! A small structured kernel IR, in the spirit of naga's IR and tinygrad's UOps.
//!
//! A [`Module`] is one compute entry point: declared resources (storage buffers, push-constant
//! fields, workgroup arrays, function-local variables) and a body of structured statements.
//! Values are SSA ([`Value`], defined once by a `Let`, visible in the defining block and the
//! blocks nested in it after the definition); state carried across loop iterations or out of an
//! `if` lives in mutable [`Var`]s. Control flow is structured only (counted loops and ifs), which
//! maps one-to-one onto SPIR-V's structured control flow.
//!
//! Templates build modules with [`builder::KernelBuilder`]; [`verify::verify`] checks scoping and
//! typing; [`analysis::features`] derives what the module needs from the device.

pub mod analysis;
pub mod args_buffer;
pub mod builder;
pub mod chain;
pub mod interp;
pub mod types;
pub mod verify;

pub use builder::KernelBuilder;
pub use types::{Scalar, Type};

/// An SSA value: the result of one `Let`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Value {
    pub(crate) id: u32,
    pub ty: Type,
}

impl Value {
    pub fn id(self) -> u32 {
        self.id
    }
}

/// A mutable function-local variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    pub(crate) id: u32,
    pub ty: Type,
}

/// A storage buffer: a runtime array of `elem` at some binding of descriptor set 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub(crate) id: u32,
    pub elem: Type,
}

/// A workgroup (shared) array of `len` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedArray {
    pub(crate) id: u32,
    pub elem: Type,
    pub len: u32,
}

/// One 32-bit field of the push-constant block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PushField {
    pub(crate) index: u32,
    pub ty: Type,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    ReadOnly,
    WriteOnly,
    ReadWrite,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub binding: u32,
    pub name: String,
    pub elem: Type,
    pub access: Access,
    /// Writes are made visible to other workgroups by a [`Stmt::DeviceMemoryBarrier`] and
    /// reads see theirs (SPIR-V `Coherent`): for buffers that workgroups of one dispatch hand
    /// data through.
    pub coherent: bool,
    /// Holds the model's own data (weights, biases, norm weights, RoPE frequencies, the
    /// embedding table), which no dispatch writes while kernels run: a kernel chained to the
    /// dispatches before it (`ir::chain`) need not make it `Coherent`, so its loads keep the
    /// device's ordinary cached path.
    pub model_constant: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SharedDecl {
    pub name: String,
    pub elem: Type,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PushDecl {
    pub name: String,
    pub ty: Type,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VarDecl {
    pub name: String,
    pub ty: Type,
}

/// Compute built-in inputs. The `*Id` vectors are read one component at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Builtin {
    GlobalInvocationId(u8),
    LocalInvocationId(u8),
    WorkgroupId(u8),
    NumWorkgroups(u8),
    LocalInvocationIndex,
    SubgroupSize,
    SubgroupInvocationId,
    SubgroupId,
    NumSubgroups,
}

impl Builtin {
    pub fn is_subgroup(self) -> bool {
        matches!(
            self,
            Builtin::SubgroupSize
                | Builtin::SubgroupInvocationId
                | Builtin::SubgroupId
                | Builtin::NumSubgroups
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    BitNot,
    LogicalNot,
    Abs,
    Floor,
    Trunc,
    /// Round half to even (deterministic across devices, unlike GLSL `round`).
    RoundEven,
    Sqrt,
    InverseSqrt,
    Exp,
    Log,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    /// Logical for unsigned operands, arithmetic for signed ones.
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// Signedness of the two operands of a packed 4×8-bit dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DotSign {
    /// `OpSDot`: both signed, i32 result.
    Signed,
    /// `OpUDot`: both unsigned, u32 result.
    Unsigned,
    /// `OpSUDot`: first signed, second unsigned, i32 result.
    SignedUnsigned,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupOp {
    /// Sum over the active invocations of the subgroup.
    Add,
    Min,
    Max,
    /// Value of the invocation with the given subgroup invocation id.
    Shuffle,
    /// Value of the invocation whose id is ours XOR the mask.
    ShuffleXor,
    /// Value of the invocation with the given id, a constant (`OpGroupNonUniformBroadcast`,
    /// needs ballot support; drivers emit one cross-lane read where a shuffle may become a
    /// loop over lanes).
    Broadcast,
}

impl SubgroupOp {
    pub fn is_arithmetic(self) -> bool {
        matches!(self, SubgroupOp::Add | SubgroupOp::Min | SubgroupOp::Max)
    }
    pub fn is_shuffle(self) -> bool {
        matches!(self, SubgroupOp::Shuffle | SubgroupOp::ShuffleXor)
    }
    pub fn is_ballot(self) -> bool {
        self == SubgroupOp::Broadcast
    }
}

impl Expr {
    /// The SSA values this expression reads, in operand order.
    pub fn operands(&self) -> Vec<Value> {
        match self {
            Expr::Const { .. }
            | Expr::Builtin(_)
            | Expr::Push(_)
            | Expr::LoadVar(_)
            | Expr::ArrayLength { .. } => vec![],
            Expr::LoadBuffer { index, .. } | Expr::LoadShared { index, .. } => vec![*index],
            Expr::AtomicAdd { index, value, .. } => vec![*index, *value],
            Expr::Unary(_, a)
            | Expr::Convert(a)
            | Expr::Bitcast(a)
            | Expr::Splat(a)
            | Expr::UnpackHalf2x16(a)
            | Expr::PackHalf2x16(a)
            | Expr::Extract { vector: a, .. } => vec![*a],
            Expr::Binary(_, a, b) | Expr::Dot(a, b) | Expr::Dot4x8Packed { a, b, .. } => {
                vec![*a, *b]
            }
            Expr::Fma(a, b, c)
            | Expr::Select {
                cond: a,
                if_true: b,
                if_false: c,
            }
            | Expr::BitFieldExtract {
                base: a,
                offset: b,
                count: c,
            } => vec![*a, *b, *c],
            Expr::Construct(parts) => parts.clone(),
            Expr::Subgroup { value, operand, .. } => {
                let mut v = vec![*value];
                v.extend(operand.iter().copied());
                v
            }
        }
    }
}

/// The right-hand side of a `Let`. The result type is the type of the `Let`'s value.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant: `bits` is the scalar bit pattern (two's complement for ints, IEEE for
    /// floats, 0/1 for bool), splatted over all lanes.
    Const {
        bits: u32,
    },
    Builtin(Builtin),
    Push(u32),
    LoadVar(u32),
    LoadBuffer {
        buffer: u32,
        index: Value,
    },
    LoadShared {
        array: u32,
        index: Value,
    },
    /// Number of elements of a storage buffer's runtime array (u32).
    ArrayLength {
        buffer: u32,
    },
    Unary(UnaryOp, Value),
    Binary(BinaryOp, Value, Value),
    Fma(Value, Value, Value),
    Select {
        cond: Value,
        if_true: Value,
        if_false: Value,
    },
    /// Numeric conversion to the result type (float↔float, int↔int, int↔float).
    Convert(Value),
    /// Reinterpretation of the bits as the result type (same total width).
    Bitcast(Value),
    /// Broadcast of a scalar to all lanes of the result vector.
    Splat(Value),
    Extract {
        vector: Value,
        lane: u32,
    },
    Construct(Vec<Value>),
    /// `count` bits of `base` starting at bit `offset`, sign-extended for signed types.
    BitFieldExtract {
        base: Value,
        offset: Value,
        count: Value,
    },
    /// Two f16 halves of a u32 to a vec2<f32> (GLSL.std.450 UnpackHalf2x16; needs no Float16).
    UnpackHalf2x16(Value),
    /// vec2<f32> to two f16 halves in a u32.
    PackHalf2x16(Value),
    /// Float vector dot product.
    Dot(Value, Value),
    /// Dot product of two u32 words each holding 4 packed 8-bit integers.
    Dot4x8Packed {
        a: Value,
        b: Value,
        sign: DotSign,
    },
    /// Subgroup operation; `operand` is the lane (Shuffle) or mask (ShuffleXor).
    Subgroup {
        op: SubgroupOp,
        value: Value,
        operand: Option<Value>,
    },
    /// Atomically adds `value` to u32 element `index` of a read-write buffer and yields the
    /// element's previous value (device scope, acquire-release on uniform memory). The only
    /// expression with a side effect: it runs where its `Let` stands, once per invocation.
    AtomicAdd {
        buffer: u32,
        index: Value,
        value: Value,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unroll {
    /// Let the driver decide.
    Auto,
    /// Ask the driver to unroll (`LoopControl::Unroll`).
    Hint,
    /// Ask the driver not to unroll.
    Never,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block(pub Vec<Stmt>);

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Defines `result`. `precise` forbids the driver from contracting it with neighbouring
    /// operations (e.g. into an FMA) where exact rounding matters.
    Let {
        result: Value,
        expr: Expr,
        precise: bool,
    },
    StoreVar {
        var: u32,
        value: Value,
    },
    StoreBuffer {
        buffer: u32,
        index: Value,
        value: Value,
    },
    StoreShared {
        array: u32,
        index: Value,
        value: Value,
    },
    If {
        cond: Value,
        then_body: Block,
        else_body: Block,
    },
    /// `for induction in (start..end).step_by(step)`; the induction value is visible in `body`.
    For {
        induction: Value,
        start: Value,
        end: Value,
        step: u32,
        unroll: Unroll,
        body: Block,
    },
    /// Workgroup execution barrier that also orders workgroup-memory accesses.
    Barrier,
    /// Orders this invocation's accesses to storage buffers for every invocation of the
    /// device (SPIR-V `OpMemoryBarrier`, device scope, acquire-release on uniform memory):
    /// with `coherent` buffers, what one workgroup wrote before it is seen by another that
    /// observed it through an atomic.
    DeviceMemoryBarrier,
    /// Reads element `index` of the coherent u32 `buffer` atomically (device scope, acquire)
    /// until it is at least `target` or it has been read `max_polls` times, and stores the
    /// last value read in variable `var` (u32): a wait for work of other workgroups or of an
    /// earlier dispatch that is still running (see `ir::chain`). The caller compares `var`
    /// with `target` to tell a satisfied wait from one that gave up.
    PollAtLeast {
        var: u32,
        buffer: u32,
        index: Value,
        target: Value,
        max_polls: u32,
    },
}

/// One compute kernel (entry point `main`).
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub name: String,
    pub workgroup_size: [u32; 3],
    pub buffers: Vec<BufferDecl>,
    pub push: Vec<PushDecl>,
    pub shared: Vec<SharedDecl>,
    pub vars: Vec<VarDecl>,
    /// Number of SSA values (ids are `0..value_count`).
    pub value_count: u32,
    pub body: Block,
}

impl Module {
    /// Declares one more u32 storage buffer, at the binding after the module's last one (what
    /// rewrites that add a binding use: `args_buffer`, `chain`); returns its index among the
    /// module's buffers.
    pub(crate) fn add_u32_buffer_last(
        &mut self,
        name: &str,
        access: Access,
        coherent: bool,
    ) -> u32 {
        let binding = self
            .buffers
            .iter()
            .map(|b| b.binding + 1)
            .max()
            .unwrap_or(0);
        self.buffers.push(BufferDecl {
            binding,
            name: name.into(),
            elem: Type::U32,
            access,
            coherent,
            model_constant: false,
        });
        self.buffers.len() as u32 - 1
    }

    /// Bytes of workgroup memory the module declares.
    pub fn shared_bytes(&self) -> u32 {
        self.shared
            .iter()
            .map(|s| s.elem.size_bytes() * s.len)
            .sum()
    }

    /// Bytes of the push-constant block (all fields are 32-bit).
    pub fn push_constant_bytes(&self) -> u32 {
        4 * self.push.len() as u32
    }

    /// Calls `f` on every statement, depth first, in program order.
    pub fn walk(&self, f: &mut impl FnMut(&Stmt)) {
        fn go(block: &Block, f: &mut impl FnMut(&Stmt)) {
            for stmt in &block.0 {
                f(stmt);
                match stmt {
                    Stmt::If {
                        then_body,
                        else_body,
                        ..
                    } => {
                        go(then_body, f);
                        go(else_body, f);
                    }
                    Stmt::For { body, .. } => go(body, f),
                    _ => {}
                }
            }
        }
        go(&self.body, f)
    }
}
