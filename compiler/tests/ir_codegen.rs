//! IR builder, verifier and codegen: de-duplication, derived capabilities, structured control
//! flow, and spirv-val on hand-written kernels that exercise every IR feature.

mod common;

use common::{require_spirv_val, spirv_val};
use rocky_compiler::codegen::{emit, CodegenError};
use rocky_compiler::ir::analysis::features;
use rocky_compiler::ir::verify::{verify, IrError};
use rocky_compiler::ir::{
    Access, Block, Builtin, DotSign, Expr, KernelBuilder, Module, Scalar, Stmt, Type, Unroll,
};
use rspirv::dr::{load_words, Operand};
use rspirv::spirv::{Capability, Decoration, Op};

fn parse(words: &[u32]) -> rspirv::dr::Module {
    load_words(words).expect("rspirv can parse what we emit")
}

fn capabilities(m: &rspirv::dr::Module) -> Vec<Capability> {
    m.capabilities
        .iter()
        .map(|i| match i.operands[0] {
            Operand::Capability(c) => c,
            ref o => panic!("odd capability operand {o:?}"),
        })
        .collect()
}

fn extensions(m: &rspirv::dr::Module) -> Vec<String> {
    m.extensions
        .iter()
        .map(|i| match &i.operands[0] {
            Operand::LiteralString(s) => s.clone(),
            o => panic!("odd extension operand {o:?}"),
        })
        .collect()
}

fn count_ops(m: &rspirv::dr::Module, op: Op) -> usize {
    m.all_inst_iter().filter(|i| i.class.opcode == op).count()
}

/// A kernel touching every IR feature except 8/16-bit integer types.
fn kitchen_sink() -> Module {
    let b = KernelBuilder::new("kitchen_sink", [64, 1, 1]);
    let x = b.buffer(0, "x", Type::vec(Scalar::F32, 4), Access::ReadOnly);
    let h = b.buffer(1, "h", Type::vec(Scalar::F16, 2), Access::ReadOnly);
    let y = b.buffer(2, "y", Type::F32, Access::WriteOnly);
    let q = b.buffer(3, "q", Type::U32, Access::ReadWrite);
    let n = b.push_field("n", Type::U32);
    let scale = b.push_field("scale", Type::F32);
    let tile = b.shared_array("tile", Type::F32, 64);
    let acc = b.var_init("acc", b.c_f32(0.0));
    let hacc = b.var_init("hacc", b.lit(Type::vec(Scalar::F16, 2), 0.0));
    let gid = b.builtin(Builtin::GlobalInvocationId(0));
    let lid = b.builtin(Builtin::LocalInvocationIndex);
    let n = b.push(n);
    b.store_shared(tile, lid, b.convert(gid, Type::F32));
    b.barrier();
    b.for_range(b.c_u32(0), n, 4, Unroll::Hint, |i| {
        let v = b.load(x, b.add(b.shri(i, 2), gid));
        let hv = b.load(h, i);
        b.store_var(hacc, b.fma(hv, hv, b.load_var(hacc)));
        let s = b.dot(v, b.splat(b.push(scale), 4));
        b.if_else(
            b.lt(s, b.c_f32(0.0)),
            || b.store_var(acc, b.sub(b.load_var(acc), b.abs(s))),
            || b.store_var(acc, b.add(b.load_var(acc), b.sqrt(s))),
        );
        b.for_range(b.c_i32(-2), b.c_i32(2), 1, Unroll::Never, |j| {
            let f = b.convert(j, Type::F32);
            b.store_var(acc, b.max(b.load_var(acc), f));
        });
    });
    let word = b.load(q, gid);
    let dot = b.dot4x8(word, b.c_u32(0x0101_0101), DotSign::Signed);
    let sext = b.bitfield_extract(b.bitcast(word, Type::I32), 8, 8);
    let halves = b.unpack_half2x16(word);
    let packed = b.pack_half2x16(halves);
    b.store(
        q,
        gid,
        b.xor(packed, b.bitcast(b.add(dot, sext), Type::U32)),
    );
    let total = b.add(b.load_var(acc), b.load_shared(tile, lid));
    let total = b.add(
        total,
        b.extract(b.convert(b.load_var(hacc), Type::vec(Scalar::F32, 2)), 1),
    );
    let reduced = b.subgroup_add(total);
    let lane = b.builtin(Builtin::SubgroupInvocationId);
    let shuffled = b.subgroup_shuffle_xor(reduced, b.c_u32(1));
    let picked = b.subgroup_shuffle(shuffled, lane);
    let r = b.select(b.eq(lane, b.c_u32(0)), picked, b.exp(b.neg(picked)));
    b.store(y, gid, b.round_even(r));
    b.finish()
}

#[test]
fn kitchen_sink_validates_for_every_spirv_version() {
    require_spirv_val();
    let m = kitchen_sink();
    for (version, env) in [
        ((1, 3), "vulkan1.1"),
        ((1, 4), "vulkan1.1spv1.4"),
        ((1, 5), "vulkan1.2"),
        ((1, 6), "vulkan1.3"),
    ] {
        let words = emit(&m, version).unwrap();
        spirv_val(&words, env).unwrap_or_else(|e| panic!("SPIR-V {version:?} for {env}: {e}"));
        assert_eq!(words[1] >> 16 & 0xFF, u32::from(version.0));
        assert_eq!(words[1] >> 8 & 0xFF, u32::from(version.1));
    }
}

#[test]
fn types_and_constants_are_deduplicated() {
    let b = KernelBuilder::new("dedup", [1, 1, 1]);
    let y = b.buffer(0, "y", Type::F32, Access::WriteOnly);
    let z = b.buffer(1, "z", Type::F32, Access::WriteOnly);
    let mut v = b.c_f32(0.0);
    for _ in 0..10 {
        v = b.add(v, b.c_f32(1.5));
        b.store(y, b.c_u32(3), v);
        b.store(z, b.c_u32(3), b.c_f32(1.5));
    }
    let words = emit(&b.finish(), (1, 5)).unwrap();
    let m = parse(&words);
    let floats = m
        .types_global_values
        .iter()
        .filter(|i| i.class.opcode == Op::TypeFloat)
        .count();
    assert_eq!(floats, 1, "one OpTypeFloat 32");
    let ints = m
        .types_global_values
        .iter()
        .filter(|i| i.class.opcode == Op::TypeInt)
        .count();
    assert_eq!(ints, 1, "one OpTypeInt (u32)");
    let c15 = m
        .types_global_values
        .iter()
        .filter(|i| {
            i.class.opcode == Op::Constant
                && i.operands == [Operand::LiteralBit32(1.5f32.to_bits())]
        })
        .count();
    assert_eq!(c15, 1, "the constant 1.5 is declared once");
    // Both buffers share one decorated block type: ArrayStride appears once.
    let strides = m
        .annotations
        .iter()
        .filter(|i| i.operands.get(1) == Some(&Operand::Decoration(Decoration::ArrayStride)))
        .count();
    assert_eq!(strides, 1);
    spirv_val(&words, "vulkan1.2").unwrap();
}

fn caps_of(
    build: impl FnOnce(&KernelBuilder),
    version: (u8, u8),
) -> (Vec<Capability>, Vec<String>) {
    let b = KernelBuilder::new("caps", [1, 1, 1]);
    build(&b);
    let words = emit(&b.finish(), version).unwrap();
    let env = match version {
        (1, 6) => "vulkan1.3",
        (1, 3) => "vulkan1.1",
        _ => "vulkan1.2",
    };
    spirv_val(&words, env).unwrap();
    let m = parse(&words);
    (capabilities(&m), extensions(&m))
}

#[test]
fn capabilities_follow_what_the_ir_uses() {
    // Plain f32 code: Shader only.
    let (c, e) = caps_of(
        |b| {
            let y = b.buffer(0, "y", Type::F32, Access::WriteOnly);
            b.store(y, b.c_u32(0), b.c_f32(1.0));
        },
        (1, 5),
    );
    assert_eq!(c, vec![Capability::Shader]);
    assert!(e.is_empty());

    // f16 only loaded, converted and stored: 16-bit storage, no Float16.
    let (c, _) = caps_of(
        |b| {
            let x = b.buffer(0, "x", Type::F16, Access::ReadOnly);
            let y = b.buffer(1, "y", Type::F16, Access::WriteOnly);
            let v = b.convert(b.load(x, b.c_u32(0)), Type::F32);
            b.store(y, b.c_u32(0), b.convert(b.add(v, v), Type::F16));
        },
        (1, 5),
    );
    assert!(c.contains(&Capability::StorageBuffer16BitAccess));
    assert!(!c.contains(&Capability::Float16));

    // f16 arithmetic: Float16.
    let (c, _) = caps_of(
        |b| {
            let x = b.buffer(0, "x", Type::F16, Access::ReadWrite);
            let v = b.load(x, b.c_u32(0));
            b.store(x, b.c_u32(0), b.mul(v, v));
        },
        (1, 5),
    );
    assert!(c.contains(&Capability::Float16) && c.contains(&Capability::StorageBuffer16BitAccess));

    // 8-bit storage needs its extension before SPIR-V 1.5; Int8 only for arithmetic.
    let byte_copy = |b: &KernelBuilder| {
        let x = b.buffer(0, "x", Type::U8, Access::ReadOnly);
        let y = b.buffer(1, "y", Type::U32, Access::WriteOnly);
        b.store(y, b.c_u32(0), b.convert(b.load(x, b.c_u32(0)), Type::U32));
    };
    let (c, e) = caps_of(byte_copy, (1, 3));
    assert!(c.contains(&Capability::StorageBuffer8BitAccess) && !c.contains(&Capability::Int8));
    assert_eq!(e, vec!["SPV_KHR_8bit_storage".to_string()]);
    let (_, e) = caps_of(byte_copy, (1, 5));
    assert!(e.is_empty());

    // Packed dot products: DotProduct capabilities, extension below SPIR-V 1.6.
    let dot = |b: &KernelBuilder| {
        let y = b.buffer(0, "y", Type::I32, Access::ReadWrite);
        let w = b.bitcast(b.load(y, b.c_u32(0)), Type::U32);
        b.store(y, b.c_u32(0), b.dot4x8(w, w, DotSign::Signed));
    };
    let (c, e) = caps_of(dot, (1, 5));
    assert!(
        c.contains(&Capability::DotProduct) && c.contains(&Capability::DotProductInput4x8BitPacked)
    );
    assert_eq!(e, vec!["SPV_KHR_integer_dot_product".to_string()]);
    let (_, e) = caps_of(dot, (1, 6));
    assert!(e.is_empty());

    // Subgroups.
    let (c, _) = caps_of(
        |b| {
            let y = b.buffer(0, "y", Type::F32, Access::WriteOnly);
            let s = b.subgroup_add(b.c_f32(1.0));
            b.store(y, b.builtin(Builtin::SubgroupInvocationId), s);
        },
        (1, 5),
    );
    assert!(
        c.contains(&Capability::GroupNonUniform)
            && c.contains(&Capability::GroupNonUniformArithmetic)
    );
    assert!(!c.contains(&Capability::GroupNonUniformShuffle));
}

#[test]
fn required_features_match_capabilities() {
    let f = features(&kitchen_sink()).required();
    assert!(
        f.float16
            && f.storage_16bit
            && f.integer_dot_product
            && f.subgroup_arithmetic
            && f.subgroup_shuffle
    );
    assert!(!f.int8 && !f.storage_8bit && !f.int16);
}

#[test]
fn control_flow_is_structured() {
    let m = kitchen_sink();
    let (mut loops, mut ifs) = (0, 0);
    m.walk(&mut |s| match s {
        Stmt::For { .. } => loops += 1,
        Stmt::If { .. } => ifs += 1,
        _ => {}
    });
    let spv = parse(&emit(&m, (1, 5)).unwrap());
    assert_eq!(count_ops(&spv, Op::LoopMerge), loops);
    assert_eq!(count_ops(&spv, Op::SelectionMerge), ifs);
    assert_eq!(count_ops(&spv, Op::ControlBarrier), 1);
}

#[test]
fn precise_operations_are_not_contractible() {
    let b = KernelBuilder::new("precise", [1, 1, 1]);
    let y = b.buffer(0, "y", Type::F32, Access::ReadWrite);
    let v = b.load(y, b.c_u32(0));
    let exact = b.precise(|| b.sub(b.mul(v, v), v));
    b.store(y, b.c_u32(0), b.add(exact, b.mul(v, v)));
    let words = emit(&b.finish(), (1, 5)).unwrap();
    let m = parse(&words);
    let n = m
        .annotations
        .iter()
        .filter(|i| i.operands.get(1) == Some(&Operand::Decoration(Decoration::NoContraction)))
        .count();
    assert_eq!(
        n, 2,
        "the mul and sub inside precise(), not the ones outside"
    );
    spirv_val(&words, "vulkan1.2").unwrap();
}

#[test]
fn verifier_rejects_out_of_scope_values_and_bad_writes() {
    // A value defined inside an `if` and used after it.
    let b = KernelBuilder::new("scope", [1, 1, 1]);
    let y = b.buffer(0, "y", Type::U32, Access::WriteOnly);
    let mut inner = None;
    b.if_(b.c_bool(true), || inner = Some(b.c_u32(7)));
    b.store(y, b.c_u32(0), inner.unwrap());
    let m = b.finish();
    assert!(matches!(verify(&m), Err(IrError::OutOfScope { .. })));
    assert!(matches!(emit(&m, (1, 5)), Err(CodegenError::Ir(_))));

    // A loop induction value used after the loop.
    let b = KernelBuilder::new("induction", [1, 1, 1]);
    let y = b.buffer(0, "y", Type::U32, Access::WriteOnly);
    let mut i_out = None;
    b.for_range(b.c_u32(0), b.c_u32(4), 1, Unroll::Auto, |i| i_out = Some(i));
    b.store(y, b.c_u32(0), i_out.unwrap());
    assert!(matches!(
        verify(&b.finish()),
        Err(IrError::OutOfScope { .. })
    ));

    // A store into a read-only buffer (modules can be written by hand, not only by the builder).
    let b = KernelBuilder::new("ro", [1, 1, 1]);
    let x = b.buffer(0, "x", Type::U32, Access::ReadOnly);
    let v = b.load(x, b.c_u32(0));
    let mut m = b.finish();
    m.body.0.push(Stmt::StoreBuffer {
        buffer: 0,
        index: v,
        value: v,
    });
    assert!(matches!(verify(&m), Err(IrError::AccessViolation { .. })));

    // A dangling resource reference.
    let mut m = KernelBuilder::new("dangling", [1, 1, 1]).finish();
    let b2 = KernelBuilder::new("donor", [1, 1, 1]);
    let v = b2.c_u32(0);
    m.value_count = 2;
    m.body = Block(vec![
        Stmt::Let {
            result: v,
            expr: Expr::Const { bits: 0 },
            precise: false,
        },
        Stmt::StoreBuffer {
            buffer: 5,
            index: v,
            value: v,
        },
    ]);
    assert!(matches!(verify(&m), Err(IrError::MissingResource { .. })));
}

#[test]
fn unsupported_spirv_versions_are_refused() {
    let m = kitchen_sink();
    assert!(matches!(emit(&m, (1, 2)), Err(CodegenError::Version(_))));
    assert!(matches!(emit(&m, (1, 7)), Err(CodegenError::Version(_))));
}

#[test]
fn narrow_integer_types_validate() {
    require_spirv_val();
    let b = KernelBuilder::new("narrow", [8, 1, 1]);
    let x = b.buffer(0, "x", Type::I8, Access::ReadOnly);
    let y = b.buffer(1, "y", Type::I16, Access::WriteOnly);
    let gid = b.builtin(Builtin::GlobalInvocationId(0));
    let v = b.load(x, gid);
    let doubled = b.add(v, v); // i8 arithmetic: Int8
    b.store(y, gid, b.convert(doubled, Type::I16));
    let m = b.finish();
    let f = features(&m);
    assert!(f.int8 && f.storage_8bit && f.storage_16bit && !f.int16);
    for (v, env) in [((1, 3), "vulkan1.1"), ((1, 5), "vulkan1.2")] {
        spirv_val(&emit(&m, v).unwrap(), env).unwrap();
    }
}
