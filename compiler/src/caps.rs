//! What the compiler needs to know about a device. The runtime fills a [`DeviceCaps`] from
//! Vulkan properties and features; tests and tools use the presets.

use serde::{Deserialize, Serialize};

use crate::kernel::RequiredFeatures;

/// Limits and features of a device, as far as kernel generation is concerned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCaps {
    /// `maxComputeWorkGroupSize`.
    pub max_workgroup_size: [u32; 3],
    /// `maxComputeWorkGroupInvocations`.
    pub max_workgroup_invocations: u32,
    /// `maxComputeSharedMemorySize` in bytes.
    pub max_shared_memory_bytes: u32,
    /// `subgroupSize` (Mali-G610: 16).
    pub subgroup_size: u32,
    pub subgroup_arithmetic: bool,
    pub subgroup_shuffle: bool,
    /// `shaderFloat16`.
    pub float16: bool,
    /// `shaderInt8`.
    pub int8: bool,
    /// `shaderInt16`.
    pub int16: bool,
    /// `shaderIntegerDotProduct` (VK_KHR_shader_integer_dot_product or Vulkan 1.3).
    pub integer_dot_product: bool,
    /// `storageBuffer16BitAccess`.
    pub storage_16bit: bool,
    /// `storageBuffer8BitAccess`.
    pub storage_8bit: bool,
    /// Highest SPIR-V version the device accepts: (1,3) for Vulkan 1.1, (1,5) for 1.2,
    /// (1,6) for 1.3.
    pub spirv_version: (u8, u8),
    /// Workgroup memory is ordinary memory behind the cache, not on-chip (Mali/panvk): staging
    /// through it rarely pays, so default schedules avoid it.
    pub shared_memory_is_slow: bool,
    /// Registers per thread a kernel may use before occupancy suffers badly: the bound for the
    /// register estimate of a schedule (Mali: 64, where >32 already halves occupancy).
    pub register_budget: u32,
    /// `maxStorageBufferRange` in bytes (tensors above it are processed in slices).
    pub max_storage_buffer_range: u64,
    /// `minStorageBufferOffsetAlignment` in bytes.
    pub min_storage_buffer_offset_alignment: u32,
    /// f16 arithmetic is emulated (CPU implementations such as lavapipe): packed-f16 math is
    /// slower than f32 there, so default schedules keep f32 math.
    #[serde(default)]
    pub emulated_f16: bool,
    /// Memory accesses that differ between the lanes of a subgroup run lane by lane, while
    /// arithmetic runs on all lanes at once (CPU implementations: llvmpipe vectorizes a
    /// subgroup across SIMD lanes but turns every storage- or workgroup-memory load whose
    /// address varies by lane into a loop over the lanes with a bounds check each). A kernel
    /// there is fast when each loaded value feeds many FMAs: default schedules take wide
    /// per-thread tiles and share X rows through subgroup broadcasts.
    #[serde(default)]
    pub lane_serial_memory: bool,
    /// Subgroup shuffles exist but compile to a loop each (Mesa's panvk on Valhall: the
    /// driver's statistics count one hardware loop per shuffle of a kernel, and attention
    /// reducing its lanes' partial dot products by shuffles spills 40-100 registers where the
    /// same schedule reducing through workgroup memory spills none; Mesa 25.0.7 and 26.1.6,
    /// docs/measurements/2026-12-04-mali-attention.md). Default schedules reduce across lanes
    /// through workgroup memory instead.
    #[serde(default)]
    pub slow_subgroup_shuffle: bool,
}

impl DeviceCaps {
    /// A desktop-class GPU with every feature (what an NVIDIA GPU reports, roughly).
    pub fn desktop_all_features() -> DeviceCaps {
        DeviceCaps {
            max_workgroup_size: [1024, 1024, 64],
            max_workgroup_invocations: 1024,
            max_shared_memory_bytes: 48 * 1024,
            subgroup_size: 32,
            subgroup_arithmetic: true,
            subgroup_shuffle: true,
            float16: true,
            int8: true,
            int16: true,
            integer_dot_product: true,
            storage_16bit: true,
            storage_8bit: true,
            spirv_version: (1, 6),
            shared_memory_is_slow: false,
            register_budget: 224,
            max_storage_buffer_range: u64::from(u32::MAX),
            min_storage_buffer_offset_alignment: 16,
            emulated_f16: false,
            lane_serial_memory: false,
            slow_subgroup_shuffle: false,
        }
    }

    /// Mali-G610 under panvk (limits from Mesa's panvk sources; see docs/design.md §1).
    pub fn mali_g610() -> DeviceCaps {
        DeviceCaps {
            max_workgroup_size: [512, 512, 512],
            max_workgroup_invocations: 512,
            max_shared_memory_bytes: 32 * 1024,
            subgroup_size: 16,
            subgroup_arithmetic: true,
            subgroup_shuffle: true,
            float16: true,
            int8: true,
            int16: true,
            integer_dot_product: true,
            storage_16bit: true,
            storage_8bit: true,
            spirv_version: (1, 6),
            shared_memory_is_slow: true,
            register_budget: 64,
            max_storage_buffer_range: u64::from(u32::MAX),
            min_storage_buffer_offset_alignment: 64,
            emulated_f16: false,
            lane_serial_memory: false,
            slow_subgroup_shuffle: true,
        }
    }

    /// The Vulkan 1.1 baseline: no optional feature at all.
    pub fn baseline() -> DeviceCaps {
        DeviceCaps {
            max_workgroup_size: [128, 128, 64],
            max_workgroup_invocations: 128,
            max_shared_memory_bytes: 16 * 1024,
            subgroup_size: 4,
            subgroup_arithmetic: false,
            subgroup_shuffle: false,
            float16: false,
            int8: false,
            int16: false,
            integer_dot_product: false,
            storage_16bit: false,
            storage_8bit: false,
            spirv_version: (1, 3),
            shared_memory_is_slow: false,
            register_budget: 64,
            max_storage_buffer_range: 128 << 20,
            min_storage_buffer_offset_alignment: 256,
            emulated_f16: false,
            lane_serial_memory: false,
            slow_subgroup_shuffle: false,
        }
    }

    /// lavapipe (Mesa's llvmpipe Vulkan driver, Debian 12's 22.3.6 on an AVX2 machine): what it
    /// reports, with the runtime's CPU-implementation rules applied.
    pub fn lavapipe() -> DeviceCaps {
        DeviceCaps {
            max_workgroup_size: [1024, 1024, 1024],
            max_workgroup_invocations: 1024,
            max_shared_memory_bytes: 32 * 1024,
            subgroup_size: 8,
            subgroup_arithmetic: true,
            subgroup_shuffle: true,
            float16: true,
            int8: true,
            int16: true,
            integer_dot_product: true,
            storage_16bit: true,
            storage_8bit: true,
            spirv_version: (1, 6),
            shared_memory_is_slow: true,
            register_budget: 256,
            max_storage_buffer_range: 128 << 20,
            min_storage_buffer_offset_alignment: 16,
            emulated_f16: true,
            lane_serial_memory: true,
            slow_subgroup_shuffle: false,
        }
    }

    /// The features in `required` this device lacks, by Vulkan name.
    pub fn missing(&self, required: &RequiredFeatures) -> Vec<&'static str> {
        let checks = [
            (required.float16, self.float16, "shaderFloat16"),
            (required.int8, self.int8, "shaderInt8"),
            (required.int16, self.int16, "shaderInt16"),
            (
                required.storage_16bit,
                self.storage_16bit,
                "storageBuffer16BitAccess",
            ),
            (
                required.storage_8bit,
                self.storage_8bit,
                "storageBuffer8BitAccess",
            ),
            (
                required.integer_dot_product,
                self.integer_dot_product,
                "shaderIntegerDotProduct",
            ),
            (
                required.subgroup_arithmetic,
                self.subgroup_arithmetic,
                "subgroup arithmetic",
            ),
            (
                required.subgroup_shuffle,
                self.subgroup_shuffle,
                "subgroup shuffle",
            ),
        ];
        checks
            .iter()
            .filter(|(need, have, _)| *need && !*have)
            .map(|(_, _, n)| *n)
            .collect()
    }
}
