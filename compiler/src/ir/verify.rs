//! Structural checks of a [`Module`] before codegen: every value is defined once and used only
//! where its definition dominates the use (same block after the definition, or a nested block),
//! every resource reference exists, and read-only buffers are never written.

use thiserror::Error;

use super::{Access, Block, Expr, Module, Stmt, Type, Value};

#[derive(Debug, Error, PartialEq)]
pub enum IrError {
    #[error("kernel {kernel}: value %{value} is used where it is not defined (out of scope or before its definition)")]
    OutOfScope { kernel: String, value: u32 },
    #[error("kernel {kernel}: value %{value} is defined twice")]
    Redefined { kernel: String, value: u32 },
    #[error("kernel {kernel}: {what} #{index} does not exist")]
    MissingResource {
        kernel: String,
        what: &'static str,
        index: u32,
    },
    #[error("kernel {kernel}: buffer `{buffer}` is {access:?} but is {action}")]
    AccessViolation {
        kernel: String,
        buffer: String,
        access: Access,
        action: &'static str,
    },
    #[error("kernel {kernel}: {detail}")]
    Malformed { kernel: String, detail: String },
}

struct Checker<'m> {
    module: &'m Module,
    defined: Vec<bool>,
    ever_defined: Vec<bool>,
}

impl Checker<'_> {
    fn kernel(&self) -> String {
        self.module.name.clone()
    }

    fn use_value(&self, v: Value) -> Result<(), IrError> {
        match self.defined.get(v.id as usize) {
            Some(true) => Ok(()),
            _ => Err(IrError::OutOfScope {
                kernel: self.kernel(),
                value: v.id,
            }),
        }
    }

    fn define(&mut self, v: Value, scope: &mut Vec<u32>) -> Result<(), IrError> {
        let i = v.id as usize;
        if i >= self.defined.len() {
            return Err(IrError::Malformed {
                kernel: self.kernel(),
                detail: format!(
                    "value %{} is beyond value_count {}",
                    v.id, self.module.value_count
                ),
            });
        }
        if self.ever_defined[i] {
            return Err(IrError::Redefined {
                kernel: self.kernel(),
                value: v.id,
            });
        }
        self.ever_defined[i] = true;
        self.defined[i] = true;
        scope.push(v.id);
        Ok(())
    }

    fn buffer(&self, id: u32) -> Result<&super::BufferDecl, IrError> {
        self.module
            .buffers
            .get(id as usize)
            .ok_or(IrError::MissingResource {
                kernel: self.kernel(),
                what: "buffer",
                index: id,
            })
    }

    fn check_exists(&self, what: &'static str, id: u32, len: usize) -> Result<(), IrError> {
        if (id as usize) < len {
            Ok(())
        } else {
            Err(IrError::MissingResource {
                kernel: self.kernel(),
                what,
                index: id,
            })
        }
    }

    fn expr(&self, expr: &Expr) -> Result<(), IrError> {
        match expr {
            Expr::Const { .. } | Expr::Builtin(_) => Ok(()),
            Expr::Push(i) => self.check_exists("push-constant field", *i, self.module.push.len()),
            Expr::LoadVar(i) => self.check_exists("variable", *i, self.module.vars.len()),
            Expr::LoadBuffer { buffer, index } => {
                let b = self.buffer(*buffer)?;
                if b.access == Access::WriteOnly {
                    return Err(IrError::AccessViolation {
                        kernel: self.kernel(),
                        buffer: b.name.clone(),
                        access: b.access,
                        action: "read",
                    });
                }
                self.use_value(*index)
            }
            Expr::LoadShared { array, index } => {
                self.check_exists("shared array", *array, self.module.shared.len())?;
                self.use_value(*index)
            }
            Expr::AtomicAdd {
                buffer,
                index,
                value,
            } => {
                let b = self.buffer(*buffer)?;
                if b.access != Access::ReadWrite {
                    return Err(IrError::AccessViolation {
                        kernel: self.kernel(),
                        buffer: b.name.clone(),
                        access: b.access,
                        action: "updated atomically",
                    });
                }
                self.use_value(*index)?;
                self.use_value(*value)
            }
            Expr::ArrayLength { buffer } => self.buffer(*buffer).map(|_| ()),
            Expr::Unary(_, a)
            | Expr::Convert(a)
            | Expr::Bitcast(a)
            | Expr::Splat(a)
            | Expr::UnpackHalf2x16(a)
            | Expr::PackHalf2x16(a) => self.use_value(*a),
            Expr::Extract { vector, .. } => self.use_value(*vector),
            Expr::Binary(_, a, b) | Expr::Dot(a, b) | Expr::Dot4x8Packed { a, b, .. } => {
                self.use_value(*a)?;
                self.use_value(*b)
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
            } => {
                self.use_value(*a)?;
                self.use_value(*b)?;
                self.use_value(*c)
            }
            Expr::Construct(parts) => parts.iter().try_for_each(|p| self.use_value(*p)),
            Expr::Subgroup { value, operand, .. } => {
                self.use_value(*value)?;
                operand.map_or(Ok(()), |o| self.use_value(o))
            }
        }
    }

    fn block(&mut self, block: &Block) -> Result<(), IrError> {
        let mut scope = Vec::new();
        for stmt in &block.0 {
            self.stmt(stmt, &mut scope)?;
        }
        for id in scope {
            self.defined[id as usize] = false;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt, scope: &mut Vec<u32>) -> Result<(), IrError> {
        match stmt {
            Stmt::Let { result, expr, .. } => {
                self.expr(expr)?;
                self.define(*result, scope)
            }
            Stmt::StoreVar { var, value } => {
                self.check_exists("variable", *var, self.module.vars.len())?;
                self.use_value(*value)
            }
            Stmt::StoreBuffer {
                buffer,
                index,
                value,
            } => {
                let b = self.buffer(*buffer)?;
                if b.access == Access::ReadOnly {
                    return Err(IrError::AccessViolation {
                        kernel: self.kernel(),
                        buffer: b.name.clone(),
                        access: b.access,
                        action: "written",
                    });
                }
                self.use_value(*index)?;
                self.use_value(*value)
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                self.check_exists("shared array", *array, self.module.shared.len())?;
                self.use_value(*index)?;
                self.use_value(*value)
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.use_value(*cond)?;
                self.block(then_body)?;
                self.block(else_body)
            }
            Stmt::For {
                induction,
                start,
                end,
                body,
                step,
                ..
            } => {
                self.use_value(*start)?;
                self.use_value(*end)?;
                if *step == 0 {
                    return Err(IrError::Malformed {
                        kernel: self.kernel(),
                        detail: "loop step 0".into(),
                    });
                }
                let mut inner = Vec::new();
                self.define(*induction, &mut inner)?;
                self.block(body)?;
                self.defined[induction.id as usize] = false;
                Ok(())
            }
            Stmt::Barrier | Stmt::DeviceMemoryBarrier => Ok(()),
            Stmt::PollAtLeast {
                var,
                buffer,
                index,
                target,
                max_polls,
            } => {
                self.check_exists("variable", *var, self.module.vars.len())?;
                let b = self.buffer(*buffer)?;
                let malformed = |detail: String| IrError::Malformed {
                    kernel: self.kernel(),
                    detail,
                };
                if b.elem != Type::U32 || !b.coherent || b.access != Access::ReadWrite {
                    return Err(malformed(format!(
                        "polled buffer {} must be a coherent read-write u32 buffer",
                        b.name
                    )));
                }
                if self.module.vars[*var as usize].ty != Type::U32
                    || index.ty != Type::U32
                    || target.ty != Type::U32
                {
                    return Err(malformed(
                        "a poll's variable, index and target are u32".into(),
                    ));
                }
                if *max_polls == 0 {
                    return Err(malformed("a poll reads at least once".into()));
                }
                self.use_value(*index)?;
                self.use_value(*target)
            }
        }
    }
}

/// Checks scoping and resource references of `module`.
pub fn verify(module: &Module) -> Result<(), IrError> {
    let n = module.value_count as usize;
    let mut checker = Checker {
        module,
        defined: vec![false; n],
        ever_defined: vec![false; n],
    };
    if module.workgroup_size.contains(&0) {
        return Err(IrError::Malformed {
            kernel: module.name.clone(),
            detail: format!(
                "workgroup size {:?} has a zero dimension",
                module.workgroup_size
            ),
        });
    }
    checker.block(&module.body)
}
