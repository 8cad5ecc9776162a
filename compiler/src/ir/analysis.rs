//! What a module needs from the device, derived from what it actually uses. Codegen turns this
//! into SPIR-V capabilities and extensions; templates turn it into [`RequiredFeatures`].
//!
//! 16- and 8-bit types are classified as *storage only* when every such value is produced by a
//! buffer load or a same-kind conversion and consumed only by a same-kind conversion or a buffer
//! store: that needs the 16/8-bit storage features but not f16/int8 arithmetic.

use std::collections::BTreeSet;

use super::{Builtin, Expr, Module, Scalar, Stmt, Type, Value};
use crate::kernel::RequiredFeatures;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// f16 arithmetic (or f16 outside storage buffers): `Float16`.
    pub float16: bool,
    /// 16-bit int arithmetic: `Int16`.
    pub int16: bool,
    /// 8-bit int arithmetic: `Int8`.
    pub int8: bool,
    /// 16-bit elements in storage buffers: `StorageBuffer16BitAccess`.
    pub storage_16bit: bool,
    /// 8-bit elements in storage buffers: `StorageBuffer8BitAccess`.
    pub storage_8bit: bool,
    /// Packed 4×8-bit dot products: `DotProduct`, `DotProductInput4x8BitPacked`.
    pub dot_product_4x8: bool,
    /// Any subgroup builtin or operation: `GroupNonUniform`.
    pub subgroup_basic: bool,
    pub subgroup_arithmetic: bool,
    pub subgroup_shuffle: bool,
    /// `GroupNonUniformBallot` (broadcast); devices with shuffles have it (Vulkan's ballot
    /// feature is checked together with shuffle by the templates that use it).
    pub subgroup_ballot: bool,
    /// Built-in inputs read (by variable, components merged).
    pub builtins: BTreeSet<BuiltinVar>,
}

/// One built-in input variable (the vector ones are read by component).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BuiltinVar {
    GlobalInvocationId,
    LocalInvocationId,
    WorkgroupId,
    NumWorkgroups,
    LocalInvocationIndex,
    SubgroupSize,
    SubgroupInvocationId,
    SubgroupId,
    NumSubgroups,
}

impl BuiltinVar {
    pub fn of(b: Builtin) -> BuiltinVar {
        match b {
            Builtin::GlobalInvocationId(_) => BuiltinVar::GlobalInvocationId,
            Builtin::LocalInvocationId(_) => BuiltinVar::LocalInvocationId,
            Builtin::WorkgroupId(_) => BuiltinVar::WorkgroupId,
            Builtin::NumWorkgroups(_) => BuiltinVar::NumWorkgroups,
            Builtin::LocalInvocationIndex => BuiltinVar::LocalInvocationIndex,
            Builtin::SubgroupSize => BuiltinVar::SubgroupSize,
            Builtin::SubgroupInvocationId => BuiltinVar::SubgroupInvocationId,
            Builtin::SubgroupId => BuiltinVar::SubgroupId,
            Builtin::NumSubgroups => BuiltinVar::NumSubgroups,
        }
    }

    pub fn is_vector(self) -> bool {
        matches!(
            self,
            BuiltinVar::GlobalInvocationId
                | BuiltinVar::LocalInvocationId
                | BuiltinVar::WorkgroupId
                | BuiltinVar::NumWorkgroups
        )
    }
}

impl Features {
    /// The device features a kernel with these needs requires.
    pub fn required(&self) -> RequiredFeatures {
        RequiredFeatures {
            float16: self.float16,
            storage_16bit: self.storage_16bit,
            storage_8bit: self.storage_8bit,
            int8: self.int8,
            int16: self.int16,
            integer_dot_product: self.dot_product_4x8,
            subgroup_arithmetic: self.subgroup_arithmetic,
            // Broadcast needs the ballot subgroup feature, which every device with shuffles
            // that rocky targets has (Mali/panvk, lavapipe, NVIDIA): required as a shuffle.
            subgroup_shuffle: self.subgroup_shuffle || self.subgroup_ballot,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Narrow {
    F16,
    I16,
    I8,
}

fn narrow(ty: Type) -> Option<Narrow> {
    match ty.scalar {
        Scalar::F16 => Some(Narrow::F16),
        Scalar::I16 | Scalar::U16 => Some(Narrow::I16),
        Scalar::I8 | Scalar::U8 => Some(Narrow::I8),
        _ => None,
    }
}

/// Same-kind conversion: float↔float or int↔int (the only conversions 16/8-bit storage allows).
fn same_kind(a: Type, b: Type) -> bool {
    a.scalar.is_float() == b.scalar.is_float() && a.scalar.is_int() == b.scalar.is_int()
}

pub fn features(module: &Module) -> Features {
    let mut f = Features::default();
    let arithmetic = |f: &mut Features, k: Narrow| match k {
        Narrow::F16 => f.float16 = true,
        Narrow::I16 => f.int16 = true,
        Narrow::I8 => f.int8 = true,
    };

    for b in &module.buffers {
        match narrow(b.elem) {
            Some(Narrow::F16) | Some(Narrow::I16) => f.storage_16bit = true,
            Some(Narrow::I8) => f.storage_8bit = true,
            None => {}
        }
    }
    for ty in module
        .vars
        .iter()
        .map(|v| v.ty)
        .chain(module.shared.iter().map(|s| s.elem))
    {
        if let Some(k) = narrow(ty) {
            arithmetic(&mut f, k);
        }
    }

    // Types of all values, to judge the operands of conversions.
    let mut types = vec![Type::U32; module.value_count as usize];
    module.walk(&mut |s| {
        if let Stmt::Let { result, .. } = s {
            types[result.id as usize] = result.ty;
        }
        if let Stmt::For { induction, .. } = s {
            types[induction.id as usize] = induction.ty;
        }
    });

    let check_use = |f: &mut Features, v: Value, ok: bool| {
        if let Some(k) = narrow(v.ty) {
            if !ok {
                arithmetic(f, k);
            }
        }
    };

    module.walk(&mut |s| match s {
        Stmt::Let { result, expr, .. } => {
            // Definition side.
            if let Some(k) = narrow(result.ty) {
                let storage_def = match expr {
                    Expr::LoadBuffer { .. } => true,
                    Expr::Convert(src) => same_kind(types[src.id as usize], result.ty),
                    _ => false,
                };
                if !storage_def {
                    arithmetic(&mut f, k);
                }
            }
            // Use side.
            match expr {
                Expr::Convert(src) => check_use(&mut f, *src, same_kind(src.ty, result.ty)),
                other => {
                    for v in other.operands() {
                        check_use(&mut f, v, false);
                    }
                }
            }
            match expr {
                Expr::Builtin(b) => {
                    if b.is_subgroup() {
                        f.subgroup_basic = true;
                    }
                    f.builtins.insert(BuiltinVar::of(*b));
                }
                Expr::Dot4x8Packed { .. } => f.dot_product_4x8 = true,
                Expr::Subgroup { op, .. } => {
                    f.subgroup_basic = true;
                    if op.is_arithmetic() {
                        f.subgroup_arithmetic = true;
                    }
                    if op.is_shuffle() {
                        f.subgroup_shuffle = true;
                    }
                    if op.is_ballot() {
                        f.subgroup_ballot = true;
                    }
                }
                _ => {}
            }
        }
        Stmt::StoreVar { value, .. } => check_use(&mut f, *value, false),
        Stmt::StoreShared { index, value, .. } => {
            check_use(&mut f, *index, false);
            check_use(&mut f, *value, false);
        }
        Stmt::StoreBuffer { index, value, .. } => {
            check_use(&mut f, *index, false);
            check_use(&mut f, *value, true);
        }
        Stmt::If { cond, .. } => check_use(&mut f, *cond, false),
        Stmt::For {
            induction,
            start,
            end,
            ..
        } => {
            check_use(&mut f, *induction, false);
            check_use(&mut f, *start, false);
            check_use(&mut f, *end, false);
        }
        Stmt::Barrier | Stmt::DeviceMemoryBarrier | Stmt::PollAtLeast { .. } => {}
    });
    f
}
