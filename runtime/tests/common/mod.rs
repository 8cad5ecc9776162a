//! Shared helpers of the runtime's integration tests: environment, context, and a test kernel
//! assembled by hand with rspirv (independent of rocky-compiler's codegen).
//!
//! These tests need a Vulkan device (lavapipe is enough) and FAIL without one: a missing
//! driver must never turn into a silently skipped test.

#![allow(dead_code)]

use rocky_runtime::{BufferBinding, Context, DeviceSelector, KernelMeta, RequiredFeatures};
use rspirv::dr::{Builder, Operand};
use rspirv::spirv;
use std::path::PathBuf;
use std::sync::{Once, OnceLock};

/// Mesa drivers need XDG_RUNTIME_DIR; give them a private one when the environment has none.
pub fn ensure_runtime_dir() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir =
                std::env::temp_dir().join(format!("rocky-runtime-tests-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create a runtime dir");
            // Set once, before any test thread reads the environment through Vulkan.
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
    });
}

/// The device the tests run on: `ROCKY_TEST_DEVICE` (index or name) or the best one.
///
/// One context per test binary, shared by its tests and never destroyed. Besides saving a
/// device creation per test, this avoids a deadlock seen in NVIDIA's 580 driver: a
/// `vkDestroyDevice` on one thread can hang forever while another thread that used Vulkan is
/// exiting (the libtest harness ends a thread per test).
pub fn context() -> Context {
    static CONTEXT: OnceLock<Context> = OnceLock::new();
    CONTEXT
        .get_or_init(|| {
            ensure_runtime_dir();
            Context::new(&test_selector()).unwrap_or_else(|e| {
                panic!("these tests need a Vulkan device (lavapipe is enough): {e}")
            })
        })
        .clone()
}

pub fn test_selector() -> DeviceSelector {
    std::env::var("ROCKY_TEST_DEVICE")
        .unwrap_or_default()
        .parse()
        .unwrap()
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rocky-rt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub const AFFINE_LOCAL_SIZE: u32 = 64;

/// Metadata of [`affine_spirv`]: `y[i] = a * x[i] + b` for `i < n`, with push constants
/// `{ a: f32, b: f32, n: u32 }`, x at binding 0 (read only), y at binding 1.
pub fn affine_meta() -> KernelMeta {
    KernelMeta {
        name: "test_affine".to_string(),
        bindings: vec![
            BufferBinding {
                binding: 0,
                name: "x".to_string(),
                read_only: true,
            },
            BufferBinding {
                binding: 1,
                name: "y".to_string(),
                read_only: false,
            },
        ],
        push_constant_bytes: 12,
        workgroup_size: [AFFINE_LOCAL_SIZE, 1, 1],
        shared_bytes: 0,
        required: RequiredFeatures::default(),
        spirv_version: (1, 3),
    }
}

pub fn affine_push(a: f32, b: f32, n: u32) -> Vec<u8> {
    [a.to_le_bytes(), b.to_le_bytes(), n.to_le_bytes()].concat()
}

/// The CPU reference of the test kernel.
pub fn affine_cpu(x: &[f32], a: f32, b: f32) -> Vec<f32> {
    x.iter().map(|&v| a * v + b).collect()
}

pub fn groups_for(n: u32) -> [u32; 3] {
    [n.div_ceil(AFFINE_LOCAL_SIZE), 1, 1]
}

/// SPIR-V 1.3 compute shader, equivalent to this GLSL:
/// ```glsl
/// layout(local_size_x = 64) in;
/// layout(set = 0, binding = 0) readonly buffer X { float x[]; };
/// layout(set = 0, binding = 1) buffer Y { float y[]; };
/// layout(push_constant) uniform P { float a; float b; uint n; };
/// void main() { uint i = gl_GlobalInvocationID.x; if (i < n) y[i] = a * x[i] + b; }
/// ```
pub fn affine_spirv() -> Vec<u32> {
    use spirv::{Decoration as D, StorageClass as S};
    let lit = Operand::LiteralBit32;
    let mut b = Builder::new();
    b.set_version(1, 3);
    b.capability(spirv::Capability::Shader);
    b.memory_model(spirv::AddressingModel::Logical, spirv::MemoryModel::GLSL450);

    let void = b.type_void();
    let fn_void = b.type_function(void, vec![]);
    let f32t = b.type_float(32, None);
    let u32t = b.type_int(32, 0);
    let boolt = b.type_bool();
    let uvec3 = b.type_vector(u32t, 3);

    let floats = b.type_runtime_array(f32t);
    b.decorate(floats, D::ArrayStride, [lit(4)]);
    let block = b.type_struct([floats]);
    b.decorate(block, D::Block, []);
    b.member_decorate(block, 0, D::Offset, [lit(0)]);
    let block_ptr = b.type_pointer(None, S::StorageBuffer, block);
    let sb_float_ptr = b.type_pointer(None, S::StorageBuffer, f32t);

    let push = b.type_struct([f32t, f32t, u32t]);
    b.decorate(push, D::Block, []);
    for (member, offset) in [(0, 0), (1, 4), (2, 8)] {
        b.member_decorate(push, member, D::Offset, [lit(offset)]);
    }
    let push_ptr = b.type_pointer(None, S::PushConstant, push);
    let pc_float_ptr = b.type_pointer(None, S::PushConstant, f32t);
    let pc_uint_ptr = b.type_pointer(None, S::PushConstant, u32t);
    let in_uvec3_ptr = b.type_pointer(None, S::Input, uvec3);

    let gid = b.variable(in_uvec3_ptr, None, S::Input, None);
    b.decorate(
        gid,
        D::BuiltIn,
        [Operand::BuiltIn(spirv::BuiltIn::GlobalInvocationId)],
    );
    let x = b.variable(block_ptr, None, S::StorageBuffer, None);
    b.decorate(x, D::DescriptorSet, [lit(0)]);
    b.decorate(x, D::Binding, [lit(0)]);
    b.decorate(x, D::NonWritable, []);
    let y = b.variable(block_ptr, None, S::StorageBuffer, None);
    b.decorate(y, D::DescriptorSet, [lit(0)]);
    b.decorate(y, D::Binding, [lit(1)]);
    let pc = b.variable(push_ptr, None, S::PushConstant, None);

    let c0 = b.constant_bit32(u32t, 0);
    let c1 = b.constant_bit32(u32t, 1);
    let c2 = b.constant_bit32(u32t, 2);

    let main = b
        .begin_function(void, None, spirv::FunctionControl::NONE, fn_void)
        .unwrap();
    b.begin_block(None).unwrap();
    let g = b.load(uvec3, None, gid, None, []).unwrap();
    let i = b.composite_extract(u32t, None, g, [0]).unwrap();
    let n_ptr = b.access_chain(pc_uint_ptr, None, pc, [c2]).unwrap();
    let n = b.load(u32t, None, n_ptr, None, []).unwrap();
    let in_bounds = b.u_less_than(boolt, None, i, n).unwrap();
    let then_label = b.id();
    let merge_label = b.id();
    b.selection_merge(merge_label, spirv::SelectionControl::NONE)
        .unwrap();
    b.branch_conditional(in_bounds, then_label, merge_label, [])
        .unwrap();

    b.begin_block(Some(then_label)).unwrap();
    let x_ptr = b.access_chain(sb_float_ptr, None, x, [c0, i]).unwrap();
    let xv = b.load(f32t, None, x_ptr, None, []).unwrap();
    let a_ptr = b.access_chain(pc_float_ptr, None, pc, [c0]).unwrap();
    let a = b.load(f32t, None, a_ptr, None, []).unwrap();
    let b_ptr = b.access_chain(pc_float_ptr, None, pc, [c1]).unwrap();
    let bias = b.load(f32t, None, b_ptr, None, []).unwrap();
    let ax = b.f_mul(f32t, None, a, xv).unwrap();
    let r = b.f_add(f32t, None, ax, bias).unwrap();
    let y_ptr = b.access_chain(sb_float_ptr, None, y, [c0, i]).unwrap();
    b.store(y_ptr, r, None, []).unwrap();
    b.branch(merge_label).unwrap();

    b.begin_block(Some(merge_label)).unwrap();
    b.ret().unwrap();
    b.end_function().unwrap();

    b.entry_point(spirv::ExecutionModel::GLCompute, main, "main", [gid]);
    b.execution_mode(
        main,
        spirv::ExecutionMode::LocalSize,
        [AFFINE_LOCAL_SIZE, 1, 1],
    );
    use rspirv::binary::Assemble;
    b.module().assemble()
}

/// Deterministic test data without a random-number dependency.
pub fn test_data(n: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 20_001) as f32 / 1000.0 - 10.0
        })
        .collect()
}
