//! Push constants moved into a storage buffer, so a recorded command buffer can be replayed
//! with new arguments.
//!
//! Push constants are part of what a command buffer records: a decode step whose kernels
//! read the token's position from push constants must be recorded again for every token
//! (~400 dispatches on the host per token). The same kernel with its push-constant block read
//! from a small storage buffer instead (binding [`ARGS_BINDING_NAME`], one u32 word per
//! field, in field order) reads whatever the host wrote there before the submit, so the
//! decode step is recorded once and replayed: per token the host writes the position and
//! submits.
//!
//! The rewrite is mechanical and keeps every other instruction: each `Push(i)` becomes a
//! load of word `i` of the new binding (through a bitcast for f32 fields). Every invocation
//! reads the same word, so what was uniform stays uniform.

use super::{Access, Expr, Module, Scalar, Stmt, Type, Value};

/// The name of the binding that holds the former push constants.
pub const ARGS_BINDING_NAME: &str = "args";

/// `module` with its push-constant block read from a read-only storage buffer of u32 words
/// named [`ARGS_BINDING_NAME`] at the binding after the module's last one. A module without
/// push constants comes back unchanged. The kernel's name gains `.args`, so a pipeline cache
/// and a profile tell the two forms apart.
pub fn push_constants_from_buffer(module: &Module) -> Module {
    if module.push.is_empty() {
        return module.clone();
    }
    let mut out = module.clone();
    let args = out.add_u32_buffer_last(ARGS_BINDING_NAME, Access::ReadOnly, false);
    let field_types: Vec<Type> = module.push.iter().map(|p| p.ty).collect();
    out.push.clear();
    out.name = format!("{}.args", module.name);
    let mut next_value = module.value_count;
    let mut fresh = |ty: Type| {
        let v = Value { id: next_value, ty };
        next_value += 1;
        v
    };
    rewrite_block(&mut out.body.0, args, &field_types, &mut fresh);
    out.value_count = next_value;
    out
}

fn rewrite_block(
    stmts: &mut Vec<Stmt>,
    args: u32,
    field_types: &[Type],
    fresh: &mut impl FnMut(Type) -> Value,
) {
    let old = std::mem::take(stmts);
    for stmt in old {
        match stmt {
            Stmt::Let {
                result,
                expr: Expr::Push(field),
                precise,
            } => {
                let index = fresh(Type::U32);
                stmts.push(Stmt::Let {
                    result: index,
                    expr: Expr::Const { bits: field },
                    precise: false,
                });
                let ty = field_types[field as usize];
                let load = Expr::LoadBuffer {
                    buffer: args,
                    index,
                };
                if ty.scalar == Scalar::U32 {
                    stmts.push(Stmt::Let {
                        result,
                        expr: load,
                        precise,
                    });
                } else {
                    // f32 / i32 fields: the word's bits reinterpreted, as the push block holds them.
                    let word = fresh(Type::U32);
                    stmts.push(Stmt::Let {
                        result: word,
                        expr: load,
                        precise: false,
                    });
                    stmts.push(Stmt::Let {
                        result,
                        expr: Expr::Bitcast(word),
                        precise,
                    });
                }
            }
            Stmt::If {
                cond,
                mut then_body,
                mut else_body,
            } => {
                rewrite_block(&mut then_body.0, args, field_types, fresh);
                rewrite_block(&mut else_body.0, args, field_types, fresh);
                stmts.push(Stmt::If {
                    cond,
                    then_body,
                    else_body,
                });
            }
            Stmt::For {
                induction,
                start,
                end,
                step,
                unroll,
                mut body,
            } => {
                rewrite_block(&mut body.0, args, field_types, fresh);
                stmts.push(Stmt::For {
                    induction,
                    start,
                    end,
                    step,
                    unroll,
                    body,
                });
            }
            other => stmts.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{verify::verify, Builtin, KernelBuilder};

    /// A kernel that reads a u32 and an f32 field inside a branch and a loop.
    fn sample() -> Module {
        let b = KernelBuilder::new("sample", [4, 1, 1]);
        let y = b.buffer(0, "y", Type::F32, Access::WriteOnly);
        let p_n = b.push_field("n", Type::U32);
        let p_scale = b.push_field("scale", Type::F32);
        let i = b.builtin(Builtin::LocalInvocationIndex);
        b.if_(b.lt(i, b.push(p_n)), || {
            b.store(y, i, b.mul(b.convert(i, Type::F32), b.push(p_scale)));
        });
        b.finish()
    }

    #[test]
    fn the_rewritten_module_verifies_and_declares_the_args_binding_last() {
        let m = sample();
        let r = push_constants_from_buffer(&m);
        verify(&r).expect("rewritten module verifies");
        assert!(r.push.is_empty());
        assert_eq!(r.push_constant_bytes(), 0);
        let args = r.buffers.last().unwrap();
        assert_eq!(args.name, ARGS_BINDING_NAME);
        assert_eq!(args.binding, 1);
        assert_eq!(args.access, Access::ReadOnly);
        assert_eq!(r.name, "sample.args");
    }

    #[test]
    fn a_module_without_push_constants_is_unchanged() {
        let b = KernelBuilder::new("plain", [1, 1, 1]);
        let y = b.buffer(0, "y", Type::U32, Access::WriteOnly);
        b.store(y, b.c_u32(0), b.c_u32(7));
        let m = b.finish();
        assert_eq!(push_constants_from_buffer(&m), m);
    }
}
