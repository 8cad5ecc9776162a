//! A reference interpreter of the IR: runs a [`Module`] on the CPU, one workgroup at a time,
//! all invocations in lockstep (SIMT with an active mask), so kernels can be checked against
//! the CPU references without a GPU. It checks what the GPU would silently get wrong:
//! out-of-bounds buffer and shared accesses, shifts by the type width or more, division by
//! zero, float-to-int conversions out of range, barriers in non-uniform control flow and
//! reads of undefined variables.
//!
//! Arithmetic follows SPIR-V: f32 results are correctly rounded (FMA fused), f16 results are
//! computed exactly and rounded to f16 once, integers wrap at their width.

use half::f16;
use thiserror::Error;

use super::{
    BinaryOp, Block, Builtin, DotSign, Expr, Module, Scalar, Stmt, SubgroupOp, Type, UnaryOp, Value,
};

#[derive(Debug, Error, PartialEq)]
pub enum InterpError {
    #[error("kernel {kernel}: {what} index {index} is out of bounds ({len} elements)")]
    OutOfBounds {
        kernel: String,
        what: String,
        index: u64,
        len: u64,
    },
    #[error("kernel {kernel}: undefined behaviour: {detail}")]
    Undefined { kernel: String, detail: String },
    #[error("kernel {kernel}: {detail}")]
    Setup { kernel: String, detail: String },
}

/// One storage buffer's contents, by binding number.
pub struct BufferData<'a> {
    pub binding: u32,
    pub bytes: &'a mut [u8],
}

type Lanes = [u32; 4];

struct Exec<'m, 'b> {
    m: &'m Module,
    n: usize,
    sg: usize,
    vals: Vec<Lanes>,
    vars: Vec<Option<Lanes>>,
    shared: Vec<Vec<u8>>,
    buffers: Vec<&'b mut [u8]>,
    push: &'m [u8],
    local: Vec<[u32; 3]>,
    wg: [u32; 3],
    grid: [u32; 3],
}

/// Runs `module` over `grid` workgroups. `buffers` must cover every declared binding; `push`
/// holds the push-constant block. `subgroup_size` groups consecutive invocation indices.
pub fn execute(
    module: &Module,
    buffers: &mut [BufferData<'_>],
    push: &[u8],
    grid: [u32; 3],
    subgroup_size: u32,
) -> Result<(), InterpError> {
    super::verify::verify(module).map_err(|e| InterpError::Setup {
        kernel: module.name.clone(),
        detail: e.to_string(),
    })?;
    let setup = |detail: String| InterpError::Setup {
        kernel: module.name.clone(),
        detail,
    };
    if push.len() < module.push_constant_bytes() as usize {
        return Err(setup(format!(
            "push constants: {} bytes given, {} needed",
            push.len(),
            module.push_constant_bytes()
        )));
    }
    let mut bound: Vec<Option<&mut [u8]>> = module.buffers.iter().map(|_| None).collect();
    for data in buffers.iter_mut() {
        let i = module
            .buffers
            .iter()
            .position(|b| b.binding == data.binding);
        let Some(i) = i else {
            return Err(setup(format!("binding {} is not declared", data.binding)));
        };
        bound[i] = Some(&mut *data.bytes);
    }
    let mut bufs = Vec::new();
    for (decl, b) in module.buffers.iter().zip(bound) {
        bufs.push(b.ok_or_else(|| {
            setup(format!(
                "buffer {} (binding {}) is not bound",
                decl.name, decl.binding
            ))
        })?);
    }
    let [sx, sy, sz] = module.workgroup_size;
    let n = (sx * sy * sz) as usize;
    let local = (0..n as u32)
        .map(|i| [i % sx, i / sx % sy, i / (sx * sy)])
        .collect();
    let mut ex = Exec {
        m: module,
        n,
        sg: subgroup_size.max(1) as usize,
        vals: vec![[0; 4]; module.value_count as usize * n],
        vars: vec![None; module.vars.len() * n],
        shared: module
            .shared
            .iter()
            .map(|s| vec![0u8; (s.elem.size_bytes() * s.len) as usize])
            .collect(),
        buffers: bufs,
        push,
        local,
        wg: [0; 3],
        grid,
    };
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                ex.wg = [x, y, z];
                ex.vars.iter_mut().for_each(|v| *v = None);
                ex.shared.iter_mut().for_each(|s| s.fill(0));
                let mask = vec![true; n];
                ex.block(&module.body, &mask)?;
            }
        }
    }
    Ok(())
}

fn mask_bits(s: Scalar) -> u32 {
    match s.bits() {
        32 => u32::MAX,
        b => (1 << b) - 1,
    }
}

fn sext(s: Scalar, bits: u32) -> i64 {
    let w = s.bits();
    i64::from(((bits << (32 - w)) as i32) >> (32 - w))
}

fn int_of(s: Scalar, bits: u32) -> i64 {
    if s.is_signed() {
        sext(s, bits)
    } else {
        i64::from(bits & mask_bits(s))
    }
}

fn float_of(s: Scalar, bits: u32) -> f64 {
    match s {
        Scalar::F32 => f64::from(f32::from_bits(bits)),
        Scalar::F16 => f16::from_bits(bits as u16).to_f64(),
        _ => unreachable!("float_of {s:?}"),
    }
}

fn float_to(s: Scalar, v: f64) -> u32 {
    match s {
        Scalar::F32 => (v as f32).to_bits(),
        Scalar::F16 => u32::from(f16::from_f64(v).to_bits()),
        _ => unreachable!("float_to {s:?}"),
    }
}

impl Exec<'_, '_> {
    fn ub(&self, detail: String) -> InterpError {
        InterpError::Undefined {
            kernel: self.m.name.clone(),
            detail,
        }
    }

    fn get(&self, v: Value, lane: usize) -> Lanes {
        self.vals[v.id as usize * self.n + lane]
    }

    fn set(&mut self, v: Value, lane: usize, x: Lanes) {
        self.vals[v.id as usize * self.n + lane] = x;
    }

    fn block(&mut self, block: &Block, mask: &[bool]) -> Result<(), InterpError> {
        for stmt in &block.0 {
            if !mask.iter().any(|&a| a) {
                break;
            }
            self.stmt(stmt, mask)?;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt, mask: &[bool]) -> Result<(), InterpError> {
        match stmt {
            Stmt::Let { result, expr, .. } => {
                if let Expr::Subgroup { op, value, operand } = expr {
                    return self.subgroup(*result, *op, *value, *operand, mask);
                }
                for lane in (0..self.n).filter(|&l| mask[l]) {
                    let x = self.eval(*result, expr, lane)?;
                    self.set(*result, lane, x);
                }
            }
            Stmt::StoreVar { var, value } => {
                for lane in (0..self.n).filter(|&l| mask[l]) {
                    self.vars[*var as usize * self.n + lane] = Some(self.get(*value, lane));
                }
            }
            Stmt::StoreBuffer {
                buffer,
                index,
                value,
            } => {
                let elem = self.m.buffers[*buffer as usize].elem;
                for lane in (0..self.n).filter(|&l| mask[l]) {
                    let i = self.index(*index, lane);
                    let x = self.get(*value, lane);
                    let what = format!("buffer {}", self.m.buffers[*buffer as usize].name);
                    write_elem(
                        &self.m.name,
                        &what,
                        self.buffers[*buffer as usize],
                        elem,
                        i,
                        x,
                    )?;
                }
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                let elem = self.m.shared[*array as usize].elem;
                for lane in (0..self.n).filter(|&l| mask[l]) {
                    let i = self.index(*index, lane);
                    let x = self.get(*value, lane);
                    let what = format!("shared array {}", self.m.shared[*array as usize].name);
                    write_elem(
                        &self.m.name,
                        &what,
                        &mut self.shared[*array as usize],
                        elem,
                        i,
                        x,
                    )?;
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c: Vec<bool> = (0..self.n)
                    .map(|l| mask[l] && self.get(*cond, l)[0] != 0)
                    .collect();
                let e: Vec<bool> = (0..self.n)
                    .map(|l| mask[l] && self.get(*cond, l)[0] == 0)
                    .collect();
                self.block(then_body, &c)?;
                self.block(else_body, &e)?;
            }
            Stmt::For {
                induction,
                start,
                end,
                step,
                body,
                ..
            } => {
                let s = induction.ty.scalar;
                let mut i: Vec<i64> = (0..self.n)
                    .map(|l| int_of(s, self.get(*start, l)[0]))
                    .collect();
                let ends: Vec<i64> = (0..self.n)
                    .map(|l| int_of(s, self.get(*end, l)[0]))
                    .collect();
                loop {
                    let active: Vec<bool> =
                        (0..self.n).map(|l| mask[l] && i[l] < ends[l]).collect();
                    if !active.iter().any(|&a| a) {
                        break;
                    }
                    for l in (0..self.n).filter(|&l| active[l]) {
                        self.set(*induction, l, [i[l] as u32, 0, 0, 0]);
                    }
                    self.block(body, &active)?;
                    for l in (0..self.n).filter(|&l| active[l]) {
                        i[l] += i64::from(*step);
                    }
                }
            }
            // Workgroups run one after another here: every earlier one's writes are visible.
            Stmt::DeviceMemoryBarrier => {}
            // Nothing runs beside a workgroup here, so polling again could not change the
            // value: one read stands for all of them.
            Stmt::PollAtLeast {
                var, buffer, index, ..
            } => {
                let decl = &self.m.buffers[*buffer as usize];
                let what = format!("buffer {}", decl.name);
                for lane in (0..self.n).filter(|&l| mask[l]) {
                    let i = self.index(*index, lane);
                    let seen = read_elem(
                        &self.m.name,
                        &what,
                        self.buffers[*buffer as usize],
                        decl.elem,
                        i,
                    )?;
                    self.vars[*var as usize * self.n + lane] = Some(seen);
                }
            }
            Stmt::Barrier => {
                if mask.iter().any(|&a| !a) {
                    return Err(self.ub("barrier reached in non-uniform control flow".into()));
                }
            }
        }
        Ok(())
    }

    fn index(&self, v: Value, lane: usize) -> u64 {
        int_of(v.ty.scalar, self.get(v, lane)[0]) as u64
    }

    fn builtin(&self, b: Builtin, lane: usize) -> u32 {
        let [sx, sy, _] = self.m.workgroup_size;
        let l = self.local[lane];
        match b {
            Builtin::LocalInvocationId(c) => l[c as usize],
            Builtin::WorkgroupId(c) => self.wg[c as usize],
            Builtin::NumWorkgroups(c) => self.grid[c as usize],
            Builtin::GlobalInvocationId(c) => {
                self.wg[c as usize] * self.m.workgroup_size[c as usize] + l[c as usize]
            }
            Builtin::LocalInvocationIndex => l[0] + l[1] * sx + l[2] * sx * sy,
            Builtin::SubgroupSize => self.sg as u32,
            Builtin::SubgroupInvocationId => (lane % self.sg) as u32,
            Builtin::SubgroupId => (lane / self.sg) as u32,
            Builtin::NumSubgroups => self.n.div_ceil(self.sg) as u32,
        }
    }

    fn eval(&mut self, result: Value, expr: &Expr, lane: usize) -> Result<Lanes, InterpError> {
        let rt = result.ty;
        let lanes = rt.lanes() as usize;
        let per_lane =
            |f: &mut dyn FnMut(usize) -> Result<u32, InterpError>| -> Result<Lanes, InterpError> {
                let mut out = [0u32; 4];
                for (c, o) in out.iter_mut().enumerate().take(lanes) {
                    *o = f(c)?;
                }
                Ok(out)
            };
        Ok(match expr {
            Expr::Const { bits } => [*bits & mask_bits(rt.scalar); 4],
            Expr::Builtin(b) => [self.builtin(*b, lane), 0, 0, 0],
            Expr::Push(i) => {
                let o = 4 * *i as usize;
                [
                    u32::from_le_bytes(self.push[o..o + 4].try_into().unwrap()),
                    0,
                    0,
                    0,
                ]
            }
            Expr::LoadVar(v) => self.vars[*v as usize * self.n + lane].ok_or_else(|| {
                self.ub(format!(
                    "variable {} read before any write",
                    self.m.vars[*v as usize].name
                ))
            })?,
            Expr::LoadBuffer { buffer, index } => {
                let decl = &self.m.buffers[*buffer as usize];
                read_elem(
                    &self.m.name,
                    &format!("buffer {}", decl.name),
                    self.buffers[*buffer as usize],
                    decl.elem,
                    self.index(*index, lane),
                )?
            }
            Expr::AtomicAdd {
                buffer,
                index,
                value,
            } => {
                let decl = &self.m.buffers[*buffer as usize];
                let what = format!("buffer {}", decl.name);
                let i = self.index(*index, lane);
                let old = read_elem(
                    &self.m.name,
                    &what,
                    self.buffers[*buffer as usize],
                    decl.elem,
                    i,
                )?;
                let add = self.get(*value, lane)[0];
                write_elem(
                    &self.m.name,
                    &what,
                    self.buffers[*buffer as usize],
                    decl.elem,
                    i,
                    [old[0].wrapping_add(add), 0, 0, 0],
                )?;
                old
            }
            Expr::LoadShared { array, index } => {
                let decl = &self.m.shared[*array as usize];
                read_elem(
                    &self.m.name,
                    &format!("shared array {}", decl.name),
                    &self.shared[*array as usize],
                    decl.elem,
                    self.index(*index, lane),
                )?
            }
            Expr::ArrayLength { buffer } => {
                let decl = &self.m.buffers[*buffer as usize];
                [
                    (self.buffers[*buffer as usize].len() / decl.elem.size_bytes() as usize) as u32,
                    0,
                    0,
                    0,
                ]
            }
            Expr::Unary(op, a) => {
                let x = self.get(*a, lane);
                let s = a.ty.scalar;
                per_lane(&mut |c| Ok(unary(*op, s, x[c])))?
            }
            Expr::Binary(op, a, b) => {
                let (x, y) = (self.get(*a, lane), self.get(*b, lane));
                let s = a.ty.scalar;
                let name = self.m.name.clone();
                per_lane(&mut |c| {
                    binary(*op, s, x[c], y[c]).map_err(|d| InterpError::Undefined {
                        kernel: name.clone(),
                        detail: d,
                    })
                })?
            }
            Expr::Fma(a, b, c) => {
                let (x, y, z) = (self.get(*a, lane), self.get(*b, lane), self.get(*c, lane));
                let s = rt.scalar;
                per_lane(&mut |i| {
                    Ok(match s {
                        Scalar::F32 => f32::from_bits(x[i])
                            .mul_add(f32::from_bits(y[i]), f32::from_bits(z[i]))
                            .to_bits(),
                        _ => float_to(
                            s,
                            float_of(s, x[i]).mul_add(float_of(s, y[i]), float_of(s, z[i])),
                        ),
                    })
                })?
            }
            Expr::Select {
                cond,
                if_true,
                if_false,
            } => {
                let (c, t, f) = (
                    self.get(*cond, lane),
                    self.get(*if_true, lane),
                    self.get(*if_false, lane),
                );
                let scalar_cond = !cond.ty.is_vector();
                per_lane(&mut |i| {
                    Ok(if c[if scalar_cond { 0 } else { i }] != 0 {
                        t[i]
                    } else {
                        f[i]
                    })
                })?
            }
            Expr::Convert(v) => {
                let x = self.get(*v, lane);
                let (fs, ts) = (v.ty.scalar, rt.scalar);
                let name = self.m.name.clone();
                per_lane(&mut |i| {
                    convert(fs, ts, x[i]).map_err(|d| InterpError::Undefined {
                        kernel: name.clone(),
                        detail: d,
                    })
                })?
            }
            Expr::Bitcast(v) => bitcast(v.ty, rt, self.get(*v, lane)),
            Expr::Splat(v) => [self.get(*v, lane)[0]; 4],
            Expr::Extract { vector, lane: l } => [self.get(*vector, lane)[*l as usize], 0, 0, 0],
            Expr::Construct(parts) => {
                let mut out = [0u32; 4];
                let mut k = 0;
                for p in parts {
                    let x = self.get(*p, lane);
                    for item in x.iter().take(p.ty.lanes() as usize) {
                        out[k] = *item;
                        k += 1;
                    }
                }
                out
            }
            Expr::BitFieldExtract {
                base,
                offset,
                count,
            } => {
                let (x, o, n) = (
                    self.get(*base, lane)[0],
                    self.get(*offset, lane)[0],
                    self.get(*count, lane)[0],
                );
                if o + n > 32 {
                    return Err(self.ub(format!("bitfield extract of bits {o}..{} of 32", o + n)));
                }
                let field = if n == 0 {
                    0
                } else {
                    (x >> o) & (u32::MAX >> (32 - n))
                };
                let v =
                    if base.ty.scalar.is_signed() && n > 0 && n < 32 && field >> (n - 1) & 1 == 1 {
                        field | (u32::MAX << n)
                    } else {
                        field
                    };
                [v, 0, 0, 0]
            }
            Expr::UnpackHalf2x16(v) => {
                let x = self.get(*v, lane)[0];
                let h = |b: u32| f16::from_bits(b as u16).to_f32().to_bits();
                [h(x & 0xFFFF), h(x >> 16), 0, 0]
            }
            Expr::PackHalf2x16(v) => {
                let x = self.get(*v, lane);
                let h = |b: u32| u32::from(f16::from_f32(f32::from_bits(b)).to_bits());
                [h(x[0]) | (h(x[1]) << 16), 0, 0, 0]
            }
            Expr::Dot(a, b) => {
                let (x, y) = (self.get(*a, lane), self.get(*b, lane));
                let s = a.ty.scalar;
                let sum: f64 = (0..a.ty.lanes() as usize)
                    .map(|i| float_of(s, x[i]) * float_of(s, y[i]))
                    .sum();
                [float_to(s, sum), 0, 0, 0]
            }
            Expr::Dot4x8Packed { a, b, sign } => {
                let (x, y) = (self.get(*a, lane)[0], self.get(*b, lane)[0]);
                let byte = |w: u32, i: u32, signed: bool| {
                    let v = (w >> (8 * i)) & 0xFF;
                    if signed {
                        i64::from(v as u8 as i8)
                    } else {
                        i64::from(v)
                    }
                };
                let (sa, sb) = match sign {
                    DotSign::Signed => (true, true),
                    DotSign::Unsigned => (false, false),
                    DotSign::SignedUnsigned => (true, false),
                };
                let sum: i64 = (0..4).map(|i| byte(x, i, sa) * byte(y, i, sb)).sum();
                [sum as u32, 0, 0, 0]
            }
            Expr::Subgroup { .. } => unreachable!("handled per subgroup"),
        })
    }

    fn subgroup(
        &mut self,
        result: Value,
        op: SubgroupOp,
        value: Value,
        operand: Option<Value>,
        mask: &[bool],
    ) -> Result<(), InterpError> {
        let s = value.ty.scalar;
        for group in (0..self.n).collect::<Vec<_>>().chunks(self.sg) {
            let active: Vec<usize> = group.iter().copied().filter(|&l| mask[l]).collect();
            for &lane in &active {
                let out = match op {
                    SubgroupOp::Add | SubgroupOp::Min | SubgroupOp::Max => {
                        let mut acc = self.get(value, active[0]);
                        for &other in &active[1..] {
                            let x = self.get(value, other);
                            for c in 0..value.ty.lanes() as usize {
                                acc[c] = match op {
                                    SubgroupOp::Add => binary(BinaryOp::Add, s, acc[c], x[c]),
                                    SubgroupOp::Min => binary(BinaryOp::Min, s, acc[c], x[c]),
                                    _ => binary(BinaryOp::Max, s, acc[c], x[c]),
                                }
                                .map_err(|d| self.ub(d))?;
                            }
                        }
                        acc
                    }
                    SubgroupOp::Shuffle | SubgroupOp::ShuffleXor | SubgroupOp::Broadcast => {
                        let o = self.get(operand.expect("shuffle operand"), lane)[0] as usize;
                        let id = if op != SubgroupOp::ShuffleXor {
                            o
                        } else {
                            (lane % self.sg) ^ o
                        };
                        let src = group.first().copied().unwrap_or(0) + id;
                        if id >= self.sg || src >= self.n || !mask[src] {
                            return Err(self
                                .ub(format!("shuffle from inactive or missing invocation {id}")));
                        }
                        self.get(value, src)
                    }
                };
                self.set(result, lane, out);
            }
        }
        Ok(())
    }
}

fn unary(op: UnaryOp, s: Scalar, x: u32) -> u32 {
    if s.is_float() {
        let v = float_of(s, x);
        let r = match op {
            UnaryOp::Neg => -v,
            UnaryOp::Abs => v.abs(),
            UnaryOp::Floor => v.floor(),
            UnaryOp::Trunc => v.trunc(),
            UnaryOp::RoundEven => v.round_ties_even(),
            UnaryOp::Sqrt => v.sqrt(),
            UnaryOp::InverseSqrt => 1.0 / v.sqrt(),
            UnaryOp::Exp => v.exp(),
            UnaryOp::Log => v.ln(),
            UnaryOp::Tanh => v.tanh(),
            UnaryOp::BitNot | UnaryOp::LogicalNot => unreachable!("{op:?} on float"),
        };
        return float_to(s, r);
    }
    let m = mask_bits(s);
    match op {
        UnaryOp::Neg => (int_of(s, x).wrapping_neg() as u32) & m,
        UnaryOp::Abs => (int_of(s, x).unsigned_abs() as u32) & m,
        UnaryOp::BitNot => !x & m,
        UnaryOp::LogicalNot => (x == 0) as u32,
        _ => unreachable!("{op:?} on integer"),
    }
}

fn binary(op: BinaryOp, s: Scalar, x: u32, y: u32) -> Result<u32, String> {
    if s == Scalar::Bool {
        let (a, b) = (x != 0, y != 0);
        return Ok(match op {
            BinaryOp::LogicalAnd => a && b,
            BinaryOp::LogicalOr => a || b,
            BinaryOp::Eq => a == b,
            BinaryOp::Ne => a != b,
            _ => unreachable!("{op:?} on bool"),
        } as u32);
    }
    if s.is_float() {
        let (a, b) = (float_of(s, x), float_of(s, y));
        let r = match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Rem => a % b,
            BinaryOp::Min => a.min(b),
            BinaryOp::Max => a.max(b),
            BinaryOp::Eq => return Ok((a == b) as u32),
            BinaryOp::Ne => return Ok((a != b) as u32),
            BinaryOp::Lt => return Ok((a < b) as u32),
            BinaryOp::Le => return Ok((a <= b) as u32),
            BinaryOp::Gt => return Ok((a > b) as u32),
            BinaryOp::Ge => return Ok((a >= b) as u32),
            _ => unreachable!("{op:?} on float"),
        };
        // f64 holds every f32/f16 sum, difference and product exactly enough that one final
        // rounding gives the correctly rounded result.
        return Ok(float_to(s, r));
    }
    let m = mask_bits(s);
    let w = s.bits();
    let (a, b) = (int_of(s, x), int_of(s, y));
    Ok(match op {
        BinaryOp::Add => (a.wrapping_add(b) as u32) & m,
        BinaryOp::Sub => (a.wrapping_sub(b) as u32) & m,
        BinaryOp::Mul => (a.wrapping_mul(b) as u32) & m,
        BinaryOp::Div | BinaryOp::Rem => {
            if b == 0 {
                return Err(format!("integer {op:?} by zero"));
            }
            let r = if op == BinaryOp::Div { a / b } else { a % b };
            (r as u32) & m
        }
        BinaryOp::Min => (a.min(b) as u32) & m,
        BinaryOp::Max => (a.max(b) as u32) & m,
        BinaryOp::BitAnd => x & y & m,
        BinaryOp::BitOr => (x | y) & m,
        BinaryOp::BitXor => (x ^ y) & m,
        BinaryOp::Shl | BinaryOp::Shr => {
            let sh = y & m;
            if sh >= w {
                return Err(format!("shift by {sh} of a {w}-bit value"));
            }
            if op == BinaryOp::Shl {
                (x << sh) & m
            } else {
                ((a >> sh) as u32) & m
            }
        }
        BinaryOp::Eq => (a == b) as u32,
        BinaryOp::Ne => (a != b) as u32,
        BinaryOp::Lt => (a < b) as u32,
        BinaryOp::Le => (a <= b) as u32,
        BinaryOp::Gt => (a > b) as u32,
        BinaryOp::Ge => (a >= b) as u32,
        BinaryOp::LogicalAnd | BinaryOp::LogicalOr => unreachable!("{op:?} on integer"),
    })
}

fn convert(fs: Scalar, ts: Scalar, x: u32) -> Result<u32, String> {
    Ok(if fs.is_float() && ts.is_float() {
        float_to(ts, float_of(fs, x))
    } else if fs.is_int() && ts.is_float() {
        float_to(ts, int_of(fs, x) as f64)
    } else if fs.is_float() && ts.is_int() {
        let v = float_of(fs, x).trunc();
        let (lo, hi) = if ts.is_signed() {
            (
                -(2f64.powi(ts.bits() as i32 - 1)),
                2f64.powi(ts.bits() as i32 - 1) - 1.0,
            )
        } else {
            (0.0, 2f64.powi(ts.bits() as i32) - 1.0)
        };
        if !(lo..=hi).contains(&v) {
            return Err(format!("conversion of {v} to {ts:?} is out of range"));
        }
        (v as i64 as u32) & mask_bits(ts)
    } else {
        (int_of(fs, x) as u32) & mask_bits(ts)
    })
}

fn bitcast(from: Type, to: Type, x: Lanes) -> Lanes {
    let mut bits: u128 = 0;
    let fw = from.scalar.bits();
    for (i, item) in x.iter().enumerate().take(from.lanes() as usize) {
        bits |= u128::from(item & mask_bits(from.scalar)) << (fw as usize * i);
    }
    let tw = to.scalar.bits();
    let mut out = [0u32; 4];
    for (i, o) in out.iter_mut().enumerate().take(to.lanes() as usize) {
        *o = ((bits >> (tw as usize * i)) as u32) & mask_bits(to.scalar);
    }
    out
}

fn read_elem(
    kernel: &str,
    what: &str,
    bytes: &[u8],
    elem: Type,
    index: u64,
) -> Result<Lanes, InterpError> {
    let size = elem.size_bytes() as u64;
    let len = bytes.len() as u64 / size;
    if index >= len {
        return Err(InterpError::OutOfBounds {
            kernel: kernel.into(),
            what: what.into(),
            index,
            len,
        });
    }
    let lane_bytes = (elem.scalar.bits() / 8) as usize;
    let base = (index * size) as usize;
    let mut out = [0u32; 4];
    for (i, o) in out.iter_mut().enumerate().take(elem.lanes() as usize) {
        let mut b = [0u8; 4];
        b[..lane_bytes].copy_from_slice(&bytes[base + i * lane_bytes..base + (i + 1) * lane_bytes]);
        *o = u32::from_le_bytes(b);
    }
    Ok(out)
}

fn write_elem(
    kernel: &str,
    what: &str,
    bytes: &mut [u8],
    elem: Type,
    index: u64,
    x: Lanes,
) -> Result<(), InterpError> {
    let size = elem.size_bytes() as u64;
    let len = bytes.len() as u64 / size;
    if index >= len {
        return Err(InterpError::OutOfBounds {
            kernel: kernel.into(),
            what: what.into(),
            index,
            len,
        });
    }
    let lane_bytes = (elem.scalar.bits() / 8) as usize;
    let base = (index * size) as usize;
    for (i, item) in x.iter().enumerate().take(elem.lanes() as usize) {
        bytes[base + i * lane_bytes..base + (i + 1) * lane_bytes]
            .copy_from_slice(&item.to_le_bytes()[..lane_bytes]);
    }
    Ok(())
}
