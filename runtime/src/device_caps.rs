//! The compiler's view of an open device: `rocky_compiler::DeviceCaps` filled from what the
//! device reports (its limits and the features the runtime enabled), plus two device-class
//! rules for what Vulkan does not report.

use crate::device::RuntimeCaps;
use crate::info::{DeviceInfo, DeviceType};
use ash::vk;
use rocky_compiler::DeviceCaps;

/// Registers per thread a schedule may plan for on discrete GPUs. Their register files are
/// large (NVIDIA allows 255 per thread, AMD 256 VGPRs) and a big GEMM runs well at low
/// occupancy when each thread reuses its operands enough: on the H200 an 8×8 micro-tile
/// (~164 registers by the estimate) ran the 512×11008×2048 Q4_K GEMM 1.31x faster than the
/// 4×4 default (docs/measurements/2026-12-02-h200.md). 224 admits the 8×8 packed-f16 tile with
/// f32 accumulation (~196 by the estimate, whose f32 accumulators and f16 partial sums are
/// both live) while leaving the estimate's error some room below the hardware's 255.
pub const DISCRETE_REGISTER_BUDGET: u32 = 224;

/// Registers per thread a schedule may plan for on CPU implementations (lavapipe). A "register"
/// there is a SIMD register or a stack slot in L1, so the budget only keeps kernels from
/// growing without bound; what costs on llvmpipe is each lane-varying load (see
/// `DeviceCaps::lane_serial_memory`), and the wide tiles that save them need ~150 by the
/// estimate (4×8 micro-tiles: 3.3-3.8x the 4×1 tile on the 0.5B's GEMMs at m = 32,
/// docs/measurements/2026-12-03d-lavapipe.md).
pub const CPU_REGISTER_BUDGET: u32 = 256;

/// Registers per thread for every other device: mobile and integrated GPUs have small register
/// files (Mali-G610 halves occupancy above 32 registers and spills above 64).
pub const OTHER_REGISTER_BUDGET: u32 = 64;

/// What the compiler may assume about the device of `info`, with the features `caps` says
/// are enabled.
///
/// Everything is read from the device except three device-class rules that Vulkan has no query
/// for; the tuner measures, so it can overrule them by trying the schedules they discourage:
/// - `shared_memory_is_slow`: true for CPU implementations (lavapipe: workgroup memory is
///   ordinary memory, staging through it only adds copies and barriers) and for panvk, whose
///   sources document Mali's workgroup memory as "backed by global memory anyway"; false for
///   every other GPU (on-chip shared memory).
/// - `register_budget`: [`DISCRETE_REGISTER_BUDGET`] for discrete GPUs, [`CPU_REGISTER_BUDGET`]
///   for CPU implementations, [`OTHER_REGISTER_BUDGET`] otherwise.
/// - `slow_subgroup_shuffle`: true for panvk, whose Valhall compiler turns each subgroup
///   shuffle into a loop (its own statistics: one hardware loop per shuffle, and spills).
///
/// CPU implementations also get `emulated_f16` and `lane_serial_memory` (what llvmpipe's code
/// generation does, which no Vulkan property says).
pub fn device_caps(info: &DeviceInfo, caps: &RuntimeCaps) -> DeviceCaps {
    DeviceCaps {
        max_workgroup_size: caps.max_workgroup_size,
        max_workgroup_invocations: caps.max_workgroup_invocations,
        max_shared_memory_bytes: caps.max_shared_bytes,
        subgroup_size: caps.subgroup_size,
        subgroup_arithmetic: caps.subgroup_arithmetic,
        subgroup_shuffle: caps.subgroup_shuffle,
        float16: caps.float16,
        int8: caps.int8,
        int16: caps.int16,
        integer_dot_product: caps.integer_dot_product,
        storage_16bit: caps.storage_16bit,
        storage_8bit: caps.storage_8bit,
        spirv_version: caps.max_spirv_version,
        shared_memory_is_slow: info.is_cpu || is_panvk(info),
        // CPU implementations run f16 arithmetic through conversions: f32 is faster there.
        emulated_f16: info.is_cpu,
        lane_serial_memory: info.is_cpu,
        slow_subgroup_shuffle: is_panvk(info),
        register_budget: if info.device_type == DeviceType::Discrete {
            DISCRETE_REGISTER_BUDGET
        } else if info.is_cpu {
            CPU_REGISTER_BUDGET
        } else {
            OTHER_REGISTER_BUDGET
        },
        max_storage_buffer_range: u64::from(caps.max_storage_buffer_range),
        // The spec bounds the alignment by 256; saturating keeps a broken driver's value an
        // error in `n_slices` (not a power of two) rather than a wrap-around here.
        min_storage_buffer_offset_alignment: u32::try_from(
            caps.min_storage_buffer_offset_alignment,
        )
        .unwrap_or(u32::MAX),
    }
}

/// Compute units of the device where it is known, for work that sizes its grid to fill the
/// device (split-KV decode attention, `rocky_compiler::templates::attention::split_kv`).
/// Vulkan core has no query for it: CPU implementations (lavapipe) run one worker thread per
/// host CPU (the host's available parallelism); GPUs report it through vendor extensions,
/// read at probe time into `limits.shader_cores` (VK_ARM_shader_core_builtins: panvk 26.x;
/// VK_NV_shader_sm_builtins: NVIDIA). Elsewhere `None`, and the caller's rule falls back to
/// the work's own size.
pub fn compute_units(info: &DeviceInfo) -> Option<u32> {
    if let Some(cores) = info.limits.shader_cores {
        return Some(cores.max(1));
    }
    if info.is_cpu {
        // llvmpipe's worker count: LP_NUM_THREADS where set, else one per host CPU.
        if let Some(n) = std::env::var("LP_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
        {
            return Some(n.max(1));
        }
        return std::thread::available_parallelism()
            .ok()
            .map(|n| n.get() as u32);
    }
    None
}

/// Mesa's Vulkan driver for Mali (`VK_DRIVER_ID_MESA_PANVK`), recognised by its driver id.
fn is_panvk(info: &DeviceInfo) -> bool {
    // `DriverInfo::id` is the Debug name of the `VkDriverId`, as the probe writes it.
    info.driver.id.as_deref() == Some(format!("{:?}", vk::DriverId::MESA_PANVK).as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::{DeviceFeatures, DeviceLimits, DriverInfo, MemoryInfo, SubgroupInfo};

    fn info(device_type: DeviceType, driver_id: vk::DriverId) -> DeviceInfo {
        DeviceInfo {
            index: 0,
            name: "test".into(),
            vendor_id: 0,
            device_id: 0,
            device_type,
            is_cpu: device_type == DeviceType::Cpu,
            driver: DriverInfo {
                id: Some(format!("{driver_id:?}")),
                name: String::new(),
                info: String::new(),
                version_raw: 0,
                version: String::new(),
            },
            api_version: "1.3.0".into(),
            api_version_raw: vk::make_api_version(0, 1, 3, 0),
            usable_api_version: "1.3".into(),
            pipeline_cache_uuid: String::new(),
            limits: DeviceLimits {
                max_compute_work_group_size: [512, 512, 512],
                max_compute_work_group_invocations: 512,
                max_compute_work_group_count: [65535; 3],
                max_compute_shared_memory_size: 32768,
                max_storage_buffer_range: 1 << 27,
                max_push_constants_size: 128,
                min_storage_buffer_offset_alignment: 64,
                max_per_stage_descriptor_storage_buffers: 16,
                max_memory_allocation_size: None,
                non_coherent_atom_size: 64,
                timestamp_period_ns: 1.0,
                timestamp_compute_and_graphics: true,
                shader_cores: None,
            },
            subgroup: SubgroupInfo {
                size: 16,
                in_compute: true,
                operations: vec![],
                size_control: None,
            },
            features: DeviceFeatures::default(),
            memory: MemoryInfo {
                heaps: vec![],
                types: vec![],
                main_heap: None,
                host_visible_device_local: false,
                uma: true,
            },
            compute_queue: None,
        }
    }

    /// Distinct values in every field, so a swapped or forgotten mapping shows.
    fn runtime_caps() -> RuntimeCaps {
        RuntimeCaps {
            float16: true,
            int8: false,
            int16: true,
            int64: false,
            storage_16bit: false,
            storage_8bit: true,
            integer_dot_product: true,
            integer_dot_product_4x8_packed_accelerated: false,
            subgroup_size: 16,
            subgroup_basic: true,
            subgroup_arithmetic: false,
            subgroup_shuffle: true,
            subgroup_extended_types: false,
            subgroup_size_control: false,
            compute_full_subgroups: false,
            subgroup_size_range: [16, 16],
            vulkan_memory_model: true,
            push_descriptor: false,
            max_workgroup_size: [512, 256, 64],
            max_workgroup_invocations: 384,
            max_workgroup_count: [65535; 3],
            max_shared_bytes: 32768,
            max_push_constant_bytes: 128,
            max_storage_buffer_range: 134_217_728,
            min_storage_buffer_offset_alignment: 64,
            max_storage_buffers_per_kernel: 16,
            uma: true,
            timestamps: true,
            max_spirv_version: (1, 5),
        }
    }

    #[test]
    fn every_field_comes_from_the_device() {
        let c = device_caps(
            &info(DeviceType::Integrated, vk::DriverId::MESA_TURNIP),
            &runtime_caps(),
        );
        assert_eq!(
            c,
            DeviceCaps {
                max_workgroup_size: [512, 256, 64],
                max_workgroup_invocations: 384,
                max_shared_memory_bytes: 32768,
                subgroup_size: 16,
                subgroup_arithmetic: false,
                subgroup_shuffle: true,
                float16: true,
                int8: false,
                int16: true,
                integer_dot_product: true,
                storage_16bit: false,
                storage_8bit: true,
                spirv_version: (1, 5),
                shared_memory_is_slow: false,
                register_budget: OTHER_REGISTER_BUDGET,
                max_storage_buffer_range: 134_217_728,
                min_storage_buffer_offset_alignment: 64,
                emulated_f16: false,
                lane_serial_memory: false,
                slow_subgroup_shuffle: false,
            }
        );
    }

    #[test]
    fn device_class_rules() {
        let caps = runtime_caps();
        let of = |t, d| device_caps(&info(t, d), &caps);
        let panvk = of(DeviceType::Integrated, vk::DriverId::MESA_PANVK);
        assert!(panvk.shared_memory_is_slow);
        assert!(panvk.slow_subgroup_shuffle);
        assert_eq!(panvk.register_budget, OTHER_REGISTER_BUDGET);
        let lavapipe = of(DeviceType::Cpu, vk::DriverId::MESA_LLVMPIPE);
        assert!(lavapipe.shared_memory_is_slow);
        assert!(lavapipe.emulated_f16 && lavapipe.lane_serial_memory);
        assert_eq!(lavapipe.register_budget, CPU_REGISTER_BUDGET);
        let nvidia = of(DeviceType::Discrete, vk::DriverId::NVIDIA_PROPRIETARY);
        assert!(!nvidia.shared_memory_is_slow);
        assert_eq!(nvidia.register_budget, DISCRETE_REGISTER_BUDGET);
        assert!(!panvk.lane_serial_memory && !nvidia.lane_serial_memory);
        // The rule is the driver, not the device type: a discrete panvk does not exist, but a
        // Mali reported as "other" must still get the slow-shared-memory schedules.
        assert!(of(DeviceType::Other, vk::DriverId::MESA_PANVK).shared_memory_is_slow);
    }

    #[test]
    fn compute_units_come_from_the_driver_where_it_reports_them() {
        let mut mali = info(DeviceType::Integrated, vk::DriverId::MESA_PANVK);
        // Mesa 25.0.7 offers no core-count extension: unknown, no guess.
        assert_eq!(compute_units(&mali), None);
        // Mesa 26.x: VK_ARM_shader_core_builtins reports the G610 MC4's 4 cores.
        mali.limits.shader_cores = Some(4);
        assert_eq!(compute_units(&mali), Some(4));
        // lavapipe: its worker threads (at least one).
        let lavapipe = info(DeviceType::Cpu, vk::DriverId::MESA_LLVMPIPE);
        assert!(compute_units(&lavapipe).is_some_and(|n| n >= 1));
    }
}
