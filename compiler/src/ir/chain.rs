//! Dispatches ordered by counters instead of pipeline barriers: a kernel that waits for the
//! dispatches before it to finish, and says when it has.
//!
//! A decode step is one chain of ~250 dependent dispatches, and a pipeline barrier between
//! two of them drains the GPU: the next kernel is launched only once the last workgroup of
//! the one before has retired. Measured on an H200 (docs/measurements/2026-12-06h-decode-chain.md):
//! the same replayed step with its barriers left out (wrong results, timing only) ran the 3B
//! in 1.6 ms instead of 2.8, the 0.5B in 0.48 instead of 1.2: the barriers cost ~4.7 µs each.
//!
//! The rewritten kernel gets one more binding, [`CHAIN_BINDING_NAME`] (coherent u32 counters:
//! word 0 counts waits that gave up, the others one counter per level of the recording), and
//! three more push-constant words: the counter to wait for, the value to wait for (0: no
//! wait) and the counter to add to. Its body becomes:
//!
//! 1. invocation 0 polls the wait counter until it reaches the value (every workgroup of the
//!    level before has finished), at most [`MAX_POLLS`] times; a wait that gives up adds 1 to
//!    word 0, which the host checks after the run (and then runs the step with barriers);
//! 2. a workgroup barrier, then the original body; every buffer another dispatch may write
//!    is `Coherent`, so a read sees what another dispatch wrote (no stale L1 line) and a
//!    write reaches the device's coherence point before the signal. The model's own data
//!    (`BufferDecl::model_constant`: weights, norm weights, ...) is written by no dispatch
//!    and keeps the cached path ([`ModelData::Cached`]), unless asked otherwise;
//! 3. each invocation orders its writes (device-scope memory barrier), a workgroup barrier,
//!    and invocation 0 adds 1 to the signal counter.
//!
//! With no barrier between them the driver may start the next dispatch's workgroups while the
//! last ones of the previous dispatch still run; they wait on the GPU instead of the GPU
//! draining. This is only free of deadlock where a dispatch's workgroups are all started
//! before any of the next dispatch's (in-order dispatch, as NVIDIA's hardware does): the wait
//! is bounded for that reason, and the runtime uses this form only where it was enabled.
//! A CPU implementation (lavapipe) runs dispatches one after another: every wait is satisfied
//! at its first read.

use super::{Access, BinaryOp, Builtin, Expr, Module, PushDecl, Stmt, Type, Value};
use super::{Block, VarDecl};

/// The name of the counters binding a chained kernel adds.
pub const CHAIN_BINDING_NAME: &str = "chain";

/// Push-constant words a chained kernel appends to its block: wait counter, wait value,
/// signal counter.
pub const CHAIN_PUSH_WORDS: u32 = 3;

/// The counter word that counts waits which gave up.
pub const GAVE_UP_WORD: u32 = 0;

/// Reads of a wait counter before the wait gives up: at ~1 µs an atomic read on a desktop
/// GPU, about a second, far longer than any dispatch of a decode step.
pub const MAX_POLLS: u32 = 1 << 20;

/// How a chained kernel reads the model's own data (`BufferDecl::model_constant`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelData {
    /// Through the device's ordinary cached loads: no dispatch writes it, so no line of it
    /// can be stale (the default).
    Cached,
    /// `Coherent` like every other buffer (for A/B measurements of what coherence costs
    /// the weight stream).
    Coherent,
}

/// `module` rewritten to wait for its wait counter and signal its signal counter (see the
/// module documentation). The kernel's name gains `.chain`.
pub fn ordered_by_counters(module: &Module, model_data: ModelData) -> Module {
    let mut out = module.clone();
    out.name = format!("{}.chain", module.name);
    for b in &mut out.buffers {
        b.coherent |= !b.model_constant || model_data == ModelData::Coherent;
    }
    let chain = out.add_u32_buffer_last(CHAIN_BINDING_NAME, Access::ReadWrite, true);
    let first_push = out.push.len() as u32;
    for name in [
        "chain_wait_counter",
        "chain_wait_value",
        "chain_signal_counter",
    ] {
        out.push.push(PushDecl {
            name: name.into(),
            ty: Type::U32,
        });
    }
    let seen_var = out.vars.len() as u32;
    out.vars.push(VarDecl {
        name: "chain_seen".into(),
        ty: Type::U32,
    });

    let mut next_value = module.value_count;
    let mut fresh = |ty: Type| {
        let v = Value { id: next_value, ty };
        next_value += 1;
        v
    };
    let mut prologue = Vec::new();
    let mut let_ = |stmts: &mut Vec<Stmt>, ty: Type, expr: Expr| {
        let result = fresh(ty);
        stmts.push(Stmt::Let {
            result,
            expr,
            precise: false,
        });
        result
    };
    let lid = let_(
        &mut prologue,
        Type::U32,
        Expr::Builtin(Builtin::LocalInvocationIndex),
    );
    let zero = let_(&mut prologue, Type::U32, Expr::Const { bits: 0 });
    let one = let_(&mut prologue, Type::U32, Expr::Const { bits: 1 });
    let gave_up_word = let_(&mut prologue, Type::U32, Expr::Const { bits: GAVE_UP_WORD });
    let first = let_(
        &mut prologue,
        Type::BOOL,
        Expr::Binary(BinaryOp::Eq, lid, zero),
    );
    let wait_counter = let_(&mut prologue, Type::U32, Expr::Push(first_push));
    let wait_value = let_(&mut prologue, Type::U32, Expr::Push(first_push + 1));
    let signal_counter = let_(&mut prologue, Type::U32, Expr::Push(first_push + 2));
    let waits = let_(
        &mut prologue,
        Type::BOOL,
        Expr::Binary(BinaryOp::Gt, wait_value, zero),
    );
    let first_waits = let_(
        &mut prologue,
        Type::BOOL,
        Expr::Binary(BinaryOp::LogicalAnd, first, waits),
    );

    // Invocation 0 waits; a wait that gave up is counted in word 0.
    let mut wait = vec![Stmt::PollAtLeast {
        var: seen_var,
        buffer: chain,
        index: wait_counter,
        target: wait_value,
        max_polls: MAX_POLLS,
    }];
    let seen = let_(&mut wait, Type::U32, Expr::LoadVar(seen_var));
    let short = let_(
        &mut wait,
        Type::BOOL,
        Expr::Binary(BinaryOp::Lt, seen, wait_value),
    );
    let mut give_up = Vec::new();
    let_(
        &mut give_up,
        Type::U32,
        Expr::AtomicAdd {
            buffer: chain,
            index: gave_up_word,
            value: one,
        },
    );
    wait.push(Stmt::If {
        cond: short,
        then_body: Block(give_up),
        else_body: Block::default(),
    });
    prologue.push(Stmt::If {
        cond: first_waits,
        then_body: Block(wait),
        else_body: Block::default(),
    });
    prologue.push(Stmt::Barrier);
    prologue.push(Stmt::DeviceMemoryBarrier);

    // Every invocation's writes ordered before the workgroup's signal.
    let mut epilogue = vec![Stmt::DeviceMemoryBarrier, Stmt::Barrier];
    let mut signal = Vec::new();
    let_(
        &mut signal,
        Type::U32,
        Expr::AtomicAdd {
            buffer: chain,
            index: signal_counter,
            value: one,
        },
    );
    epilogue.push(Stmt::If {
        cond: first,
        then_body: Block(signal),
        else_body: Block::default(),
    });

    let body = std::mem::take(&mut out.body.0);
    out.body.0 = prologue.into_iter().chain(body).chain(epilogue).collect();
    out.value_count = next_value;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::interp::{execute, BufferData};
    use crate::ir::{verify::verify, KernelBuilder};

    fn words(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Runs `m` (plain or chained) over 8 workgroups with x = 0..32, scale 2 and, when
    /// chained, the counters `chain` and the chain words `[wait counter, value, signal]`.
    fn run_doubling(m: &Module, chain: Option<(&mut Vec<u32>, [u32; 3])>) -> Vec<f32> {
        let mut x: Vec<u8> = (0..32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let mut y = vec![0u8; 32 * 4];
        let mut push = 2f32.to_le_bytes().to_vec();
        let mut counters = Vec::new();
        if let Some((c, w)) = &chain {
            counters = words(c);
            push.extend(words(w));
        }
        {
            let mut bufs = vec![
                BufferData {
                    binding: 0,
                    bytes: &mut x,
                },
                BufferData {
                    binding: 1,
                    bytes: &mut y,
                },
            ];
            if chain.is_some() {
                bufs.push(BufferData {
                    binding: 2,
                    bytes: &mut counters,
                });
            }
            execute(m, &mut bufs, &push, [8, 1, 1], 4).expect("runs");
        }
        if let Some((c, _)) = chain {
            *c = counters
                .chunks(4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                .collect();
        }
        floats(&y)
    }

    #[test]
    fn a_satisfied_wait_computes_what_the_plain_kernel_does_and_each_workgroup_signals_once() {
        let plain = doubling();
        let expected: Vec<f32> = (0..32).map(|i| 2.0 * i as f32).collect();
        assert_eq!(run_doubling(&plain, None), expected);
        // Counter 1 already at 5 (the level before had five workgroups); signal counter 2.
        let mut counters = vec![0, 5, 0];
        let got = run_doubling(
            &ordered_by_counters(&plain, ModelData::Cached),
            Some((&mut counters, [1, 5, 2])),
        );
        assert_eq!(got, expected);
        assert_eq!(
            counters,
            vec![0, 5, 8],
            "no give-up, one signal per workgroup"
        );
        // No wait at all (value 0): the same.
        let mut counters = vec![0, 0, 0];
        let got = run_doubling(
            &ordered_by_counters(&plain, ModelData::Cached),
            Some((&mut counters, [1, 0, 2])),
        );
        assert_eq!(got, expected);
        assert_eq!(counters, vec![0, 0, 8]);
    }

    #[test]
    fn a_wait_that_is_never_satisfied_is_counted_as_given_up_by_every_workgroup() {
        // Counter 1 stays at 4 of the 5 the wait needs: each of the 8 workgroups gives up.
        let mut counters = vec![0, 4, 0];
        run_doubling(
            &ordered_by_counters(&doubling(), ModelData::Cached),
            Some((&mut counters, [1, 5, 2])),
        );
        assert_eq!(counters, vec![8, 4, 8]);
    }

    /// y[i] = 2 · x[i] over 8 workgroups of 4 invocations, with one push constant.
    fn doubling() -> Module {
        let b = KernelBuilder::new("double", [4, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let y = b.buffer(1, "y", Type::F32, Access::WriteOnly);
        let p_scale = b.push_field("scale", Type::F32);
        let i = b.builtin(Builtin::GlobalInvocationId(0));
        b.store(y, i, b.mul(b.load(x, i), b.push(p_scale)));
        b.finish()
    }

    #[test]
    fn the_chained_module_verifies_with_its_binding_and_push_words_last() {
        let m = ordered_by_counters(&doubling(), ModelData::Cached);
        verify(&m).expect("chained module verifies");
        assert_eq!(m.name, "double.chain");
        let chain = m.buffers.last().unwrap();
        assert_eq!(
            (chain.binding, chain.name.as_str()),
            (2, CHAIN_BINDING_NAME)
        );
        assert!(m.buffers.iter().all(|b| b.coherent));
        assert_eq!(m.push.len(), 1 + CHAIN_PUSH_WORDS as usize);
        assert_eq!(m.push_constant_bytes(), 4 * (1 + CHAIN_PUSH_WORDS));
    }

    #[test]
    fn the_models_own_data_stays_cached_unless_asked_coherent() {
        let b = KernelBuilder::new("scale_by_weight", [4, 1, 1]);
        let x = b.buffer(0, "x", Type::F32, Access::ReadOnly);
        let w = b.model_buffer(1, "weight", Type::F32);
        let y = b.buffer(2, "y", Type::F32, Access::WriteOnly);
        let i = b.builtin(Builtin::GlobalInvocationId(0));
        b.store(y, i, b.mul(b.load(x, i), b.load(w, i)));
        let plain = b.finish();
        let coherent = |m: &Module| -> Vec<(String, bool)> {
            m.buffers
                .iter()
                .map(|b| (b.name.clone(), b.coherent))
                .collect()
        };
        let cached = ordered_by_counters(&plain, ModelData::Cached);
        verify(&cached).expect("chained module verifies");
        assert_eq!(
            coherent(&cached),
            [
                ("x", true),
                ("weight", false),
                ("y", true),
                (CHAIN_BINDING_NAME, true)
            ]
            .map(|(n, c)| (n.to_string(), c))
        );
        let all = ordered_by_counters(&plain, ModelData::Coherent);
        assert!(all.buffers.iter().all(|b| b.coherent));
    }
}
