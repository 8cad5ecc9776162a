//! The copy kernel (the memory ceiling of `rocky bench-gemv`): run by the IR interpreter it
//! leaves `dst` equal to `src` for quad counts that do and do not fill the last iteration, and
//! writes nothing past `quads`; its SPIR-V passes spirv-val on both device profiles.

mod common;

use common::{desktop_vk12, mali_vk12, require_spirv_val, spirv_val};
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::templates::copy;

fn words(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .flat_map(|i| (i.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes())
        .collect()
}

#[test]
fn copies_every_quad_below_the_count_and_nothing_past_it() {
    let module = copy::kernel_ir();
    for (quads, groups) in [(1u32, 1u32), (256, 1), (1000, 2), (4096, 3)] {
        let capacity = quads as usize + 300;
        let mut src = words(4 * capacity, 0x9e37);
        let mut dst = vec![0xABu8; 16 * capacity];
        let mut bufs = vec![
            BufferData {
                binding: 0,
                bytes: &mut src,
            },
            BufferData {
                binding: 1,
                bytes: &mut dst,
            },
        ];
        execute(
            &module,
            &mut bufs,
            &copy::push_constants(quads, groups),
            [groups, 1, 1],
            16,
        )
        .unwrap();
        let copied = 16 * quads as usize;
        assert_eq!(
            dst[..copied],
            src[..copied],
            "quads {quads} groups {groups}"
        );
        assert!(
            dst[copied..].iter().all(|&b| b == 0xAB),
            "wrote past {quads} quads"
        );
    }
}

#[test]
fn copy_kernel_passes_spirv_val() {
    require_spirv_val();
    for caps in [desktop_vk12(), mali_vk12()] {
        let k = copy::instantiate(&caps).unwrap();
        spirv_val(&k.spirv, "vulkan1.2").unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
    }
}
