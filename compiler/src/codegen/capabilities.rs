//! SPIR-V capabilities and extensions from the features a module uses.

use rspirv::spirv::Capability;

use crate::ir::analysis::Features;

/// Capabilities (beyond `Shader`) and the extensions that make them available in `version`.
pub fn capabilities_and_extensions(
    f: &Features,
    version: (u8, u8),
) -> (Vec<Capability>, Vec<&'static str>) {
    let mut caps = vec![Capability::Shader];
    let mut exts = Vec::new();
    if f.float16 {
        caps.push(Capability::Float16);
    }
    if f.int16 {
        caps.push(Capability::Int16);
    }
    if f.int8 {
        caps.push(Capability::Int8);
    }
    if f.storage_16bit {
        // Core since SPIR-V 1.3, which is our minimum.
        caps.push(Capability::StorageBuffer16BitAccess);
    }
    if f.storage_8bit {
        caps.push(Capability::StorageBuffer8BitAccess);
        if version < (1, 5) {
            exts.push("SPV_KHR_8bit_storage");
        }
    }
    if f.dot_product_4x8 {
        caps.push(Capability::DotProduct);
        caps.push(Capability::DotProductInput4x8BitPacked);
        if version < (1, 6) {
            exts.push("SPV_KHR_integer_dot_product");
        }
    }
    if f.subgroup_basic {
        caps.push(Capability::GroupNonUniform);
    }
    if f.subgroup_arithmetic {
        caps.push(Capability::GroupNonUniformArithmetic);
    }
    if f.subgroup_shuffle {
        caps.push(Capability::GroupNonUniformShuffle);
    }
    if f.subgroup_ballot {
        caps.push(Capability::GroupNonUniformBallot);
    }
    (caps, exts)
}
