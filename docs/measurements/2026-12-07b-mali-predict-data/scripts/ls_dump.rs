// Scratch (not committed): the load/store statements of a GEMM's IR with their indices.
use rocky_compiler::ir::{BinaryOp, Block, Expr, Module, Stmt};
use rocky_compiler::templates::gemm::{self, GemmWorkload};
use rocky_compiler::DeviceCaps;
use std::collections::HashMap;

fn sym(id: u32, defs: &HashMap<u32, Expr>, depth: u32) -> String {
    if depth > 6 {
        return format!("v{id}");
    }
    match defs.get(&id) {
        Some(Expr::Const { bits }) => format!("{bits}"),
        Some(Expr::Binary(op, a, b)) if matches!(op, BinaryOp::Add | BinaryOp::Mul | BinaryOp::Shl | BinaryOp::Sub | BinaryOp::Shr | BinaryOp::BitAnd | BinaryOp::Div) => {
            let o = match op { BinaryOp::Add => "+", BinaryOp::Mul => "*", BinaryOp::Shl => "<<", BinaryOp::Sub => "-", BinaryOp::Shr => ">>", BinaryOp::BitAnd => "&", _ => "/" };
            format!("({} {o} {})", sym(a.id(), defs, depth + 1), sym(b.id(), defs, depth + 1))
        }
        Some(Expr::Builtin(b)) => format!("{b:?}"),
        Some(Expr::Push(i)) => format!("push{i}"),
        Some(Expr::LoadVar(v)) => format!("var{v}"),
        _ => format!("v{id}"),
    }
}

fn walk(b: &Block, defs: &mut HashMap<u32, Expr>, d: usize, m: &Module) {
    let pad = "  ".repeat(d);
    for s in &b.0 {
        match s {
            Stmt::Let { result, expr, .. } => {
                defs.insert(result.id(), expr.clone());
                match expr {
                    Expr::LoadBuffer { buffer, index } => println!("{pad}LOADB b{buffer}({}) {:?} [{}]", m.buffers[*buffer as usize].name, result.ty, sym(index.id(), defs, 0)),
                    Expr::LoadShared { array, index } => println!("{pad}LOADS s{array} {:?} [{}]", result.ty, sym(index.id(), defs, 0)),
                    Expr::ArrayLength { buffer } => println!("{pad}ARRAYLEN b{buffer}"),
                    _ => {}
                }
            }
            Stmt::StoreBuffer { buffer, index, value } => println!("{pad}STOREB b{buffer} {:?} [{}]", value.ty, sym(index.id(), defs, 0)),
            Stmt::StoreShared { array, index, value } => println!("{pad}STORES s{array} {:?} [{}]", value.ty, sym(index.id(), defs, 0)),
            Stmt::If { then_body, else_body, .. } => { println!("{pad}IF"); walk(then_body, defs, d + 1, m); println!("{pad}ELSE"); walk(else_body, defs, d + 1, m); }
            Stmt::For { start, end, step, unroll, body, induction } => { println!("{pad}FOR v{} {}..{} step {step} {unroll:?}", induction.id(), sym(start.id(), defs, 0), sym(end.id(), defs, 0)); walk(body, defs, d + 1, m); println!("{pad}END"); }
            Stmt::Barrier => println!("{pad}BARRIER"),
            _ => {}
        }
    }
}

fn main() {
    let caps = DeviceCaps::mali_g610();
    for w in std::env::args().skip(1) {
        let mut w: GemmWorkload = serde_json::from_str(&w).expect("workload"); w.layout = gemm::default_layout(w.weight, &caps);
        let s = gemm::default_schedule(&w, &caps);
        let m = gemm::kernel_ir(&w, &s);
        println!("== {}", s.name(&w));
        for (i, b) in m.buffers.iter().enumerate() { println!("buffer {i}: {} {:?}", b.name, b.elem); }
        walk(&m.body, &mut HashMap::new(), 0, &m);
    }
}
