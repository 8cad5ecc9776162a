//! What a physical device is and can do, read without creating a logical device.
//!
//! `DeviceInfo` is plain serde data (`rocky devices --json`, device fingerprints); the raw
//! handles and extension list needed to create a device stay in the crate-private `Probed`.

use crate::error::Result;
use crate::instance::{version_string, vk_minor_version, Instance};
use crate::promoted;
use ash::vk;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ffi::{c_char, CStr};

/// The kind of device, in rocky's order of preference (a real GPU before a CPU implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    Discrete,
    Integrated,
    Virtual,
    Cpu,
    Other,
}

impl DeviceType {
    fn from_vk(t: vk::PhysicalDeviceType) -> DeviceType {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
            _ => DeviceType::Other,
        }
    }

    /// Lower is preferred when no device is named.
    pub fn preference_rank(self) -> u32 {
        match self {
            DeviceType::Discrete => 0,
            DeviceType::Integrated => 1,
            DeviceType::Virtual => 2,
            DeviceType::Other => 3,
            DeviceType::Cpu => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Discrete => "discrete GPU",
            DeviceType::Integrated => "integrated GPU",
            DeviceType::Virtual => "virtual GPU",
            DeviceType::Cpu => "CPU",
            DeviceType::Other => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverInfo {
    /// `VkDriverId` name, e.g. `MESA_LLVMPIPE`, `NVIDIA_PROPRIETARY`, `MESA_PANVK` (Vulkan 1.2, or
    /// VK_KHR_driver_properties on 1.1; `None` where neither is there).
    pub id: Option<String>,
    pub name: String,
    pub info: String,
    /// `driverVersion` as reported (vendor-specific packing).
    pub version_raw: u32,
    /// `driverVersion` decoded with the vendor's packing (NVIDIA differs from everyone else).
    pub version: String,
}

/// The limits rocky's compiler, tuner and executor respect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceLimits {
    pub max_compute_work_group_size: [u32; 3],
    pub max_compute_work_group_invocations: u32,
    pub max_compute_work_group_count: [u32; 3],
    pub max_compute_shared_memory_size: u32,
    pub max_storage_buffer_range: u32,
    pub max_push_constants_size: u32,
    pub min_storage_buffer_offset_alignment: u64,
    pub max_per_stage_descriptor_storage_buffers: u32,
    /// Largest single allocation (`maxMemoryAllocationSize`, Vulkan 1.1); `None` if unknown.
    pub max_memory_allocation_size: Option<u64>,
    pub non_coherent_atom_size: u64,
    /// Nanoseconds per timestamp tick (1.0 on lavapipe, ≈ 41.7 on Mali's 24 MHz timer).
    pub timestamp_period_ns: f32,
    pub timestamp_compute_and_graphics: bool,
    /// Shader cores (SMs) the driver reports: `shaderCoreCount` of VK_ARM_shader_core_builtins
    /// (panvk 26.x offers it; 4 on a Mali-G610 MC4) or `shaderSMCount` of
    /// VK_NV_shader_sm_builtins; `None` where neither is offered (and in older reports).
    #[serde(default)]
    pub shader_cores: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubgroupSizeControl {
    pub min_size: u32,
    pub max_size: u32,
    pub max_compute_workgroup_subgroups: u32,
    /// Whether a compute pipeline may require a subgroup size in that range.
    pub required_size_in_compute: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubgroupInfo {
    /// Default subgroup size (16 on Mali-G610, 32 on NVIDIA, 4–16 on lavapipe).
    pub size: u32,
    /// Whether subgroup operations are available in compute shaders at all.
    pub in_compute: bool,
    /// Supported operation classes: basic, vote, arithmetic, ballot, shuffle, shuffle_relative,
    /// clustered, quad.
    pub operations: Vec<String>,
    /// The `[min, max]` subgroup sizes a pipeline may request, when the device supports
    /// subgroup size control (Vulkan 1.3 or VK_EXT_subgroup_size_control).
    pub size_control: Option<SubgroupSizeControl>,
}

impl SubgroupInfo {
    pub fn supports(&self, operation: &str) -> bool {
        self.in_compute && self.operations.iter().any(|o| o == operation)
    }
}

/// Optional features, as *supported* by the device (what is enabled is `RuntimeCaps`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFeatures {
    pub shader_float16: bool,
    pub shader_int8: bool,
    pub shader_int16: bool,
    pub shader_int64: bool,
    pub storage_buffer_16bit_access: bool,
    pub storage_buffer_8bit_access: bool,
    pub shader_integer_dot_product: bool,
    /// `integerDotProduct4x8BitPackedSignedAccelerated`: packed int8 dot runs in hardware.
    pub integer_dot_product_4x8_packed_signed_accelerated: bool,
    /// Subgroup operations on f16/i8/i16/i64 values.
    pub shader_subgroup_extended_types: bool,
    pub subgroup_size_control: bool,
    pub compute_full_subgroups: bool,
    pub vulkan_memory_model: bool,
    pub push_descriptor: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryHeap {
    pub index: u32,
    pub size: u64,
    pub device_local: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryType {
    pub index: u32,
    pub heap_index: u32,
    pub device_local: bool,
    pub host_visible: bool,
    pub host_coherent: bool,
    pub host_cached: bool,
    pub lazily_allocated: bool,
    pub protected: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryInfo {
    pub heaps: Vec<MemoryHeap>,
    pub types: Vec<MemoryType>,
    /// The largest device-local heap (the GPU's memory; the only heap on UMA devices).
    pub main_heap: Option<u32>,
    /// Some memory type is both DEVICE_LOCAL and HOST_VISIBLE on the main heap. Also true on
    /// discrete GPUs with resizable BAR.
    pub host_visible_device_local: bool,
    /// Unified memory: `host_visible_device_local` on a device that is not a discrete GPU, so
    /// the host can write *and read* tensors in place at memory speed (Mali, integrated GPUs,
    /// lavapipe). Discrete GPUs are excluded because host reads over PCIe BAR are uncached and
    /// very slow; they use staging copies.
    pub uma: bool,
}

/// The compute queue family rocky uses on this device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub family_index: u32,
    pub queue_count: u32,
    /// Bits of a timestamp that are meaningful (0 = no timestamps on this queue).
    pub timestamp_valid_bits: u32,
}

/// Everything rocky reads about one physical device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Position in the loader's enumeration: what `--device 0` selects.
    pub index: usize,
    pub name: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: DeviceType,
    /// A CPU implementation (lavapipe/llvmpipe, SwiftShader): fine for tests, not for timings.
    pub is_cpu: bool,
    pub driver: DriverInfo,
    /// The device's own `apiVersion`, e.g. `1.3.230`.
    pub api_version: String,
    pub api_version_raw: u32,
    /// The version rocky can use: the lower of the device's and the instance's (major.minor).
    pub usable_api_version: String,
    /// Hex `pipelineCacheUUID`: pipeline caches are only valid for the same UUID.
    pub pipeline_cache_uuid: String,
    pub limits: DeviceLimits,
    pub subgroup: SubgroupInfo,
    pub features: DeviceFeatures,
    pub memory: MemoryInfo,
    /// `None` if the device has no compute queue (then rocky cannot use it).
    pub compute_queue: Option<QueueInfo>,
}

impl DeviceInfo {
    /// Why rocky cannot run on this device, or `None` if it can.
    pub fn unusable_reason(&self) -> Option<String> {
        // Features, not a version: every optional feature has a fallback (f32 math without
        // fp16/int8, u32 loads without 8/16-bit storage); what cannot be done without is the
        // Vulkan 1.1 core rocky probes and records with (features2 queries, subgroup
        // properties, 16-bit storage structures) and a compute queue.
        if vk_minor_version(self.api_version_raw) < (1, 1) {
            return Some(format!(
                "it supports Vulkan {} but rocky needs Vulkan 1.1 (core vkGetPhysicalDeviceFeatures2 \
                 and subgroup properties); install a newer driver (on RK3588: Mesa's panvk, \
                 Debian 13's 25.0.7 or newer)",
                self.api_version
            ));
        }
        if self.compute_queue.is_none() {
            return Some("it has no compute queue".to_string());
        }
        None
    }

    /// The Vulkan version rocky uses on this device, as (major, minor).
    pub fn usable_version(&self) -> (u32, u32) {
        // `usable_api_version` is written by the probe as "major.minor"; a hand-made
        // description without it falls back to the device's own version.
        let parsed = self
            .usable_api_version
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
        parsed.unwrap_or_else(|| vk_minor_version(self.api_version_raw))
    }

    /// The highest SPIR-V version this device accepts, which rocky's kernels are emitted as.
    pub fn max_spirv_version(&self) -> (u8, u8) {
        spirv_version_for(self.usable_version())
    }

    /// Whether the compute queue has timestamps: GPU timing (`rocky tune`, `rocky kernel`,
    /// `prefill --profile`) needs them; Mesa 25.0.7's panvk has none.
    pub fn has_timestamps(&self) -> bool {
        self.compute_queue
            .as_ref()
            .is_some_and(|q| q.timestamp_valid_bits > 0)
            && self.limits.timestamp_period_ns > 0.0
    }

    /// One line for lists in errors and logs: `0: llvmpipe (…) [CPU, Vulkan 1.3.230, llvmpipe]`.
    pub fn summary_line(&self) -> String {
        format!(
            "{}: {} [{}, Vulkan {}, {}]",
            self.index,
            self.name,
            self.device_type.as_str(),
            self.api_version,
            self.driver.name
        )
    }
}

/// The highest SPIR-V version a Vulkan version must accept (Vulkan spec, "SPIR-V
/// Environment"): 1.0 for 1.0, 1.3 for 1.1, 1.5 for 1.2, 1.6 from 1.3 on.
pub fn spirv_version_for(vulkan: (u32, u32)) -> (u8, u8) {
    match vulkan {
        (1, 0) => (1, 0),
        (1, 1) => (1, 3),
        (1, 2) => (1, 5),
        _ => (1, 6),
    }
}

/// A probed device: the serializable description plus what device creation needs.
pub(crate) struct Probed {
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) info: DeviceInfo,
    /// (major, minor) usable by rocky: min(instance, device).
    pub(crate) usable_version: (u32, u32),
    pub(crate) extensions: BTreeSet<String>,
    pub(crate) pipeline_cache_uuid: [u8; vk::UUID_SIZE],
}

impl Probed {
    pub(crate) fn has_extension(&self, name: &CStr) -> bool {
        self.extensions.contains(name.to_string_lossy().as_ref())
    }
}

/// Reads every physical device of the instance.
pub(crate) fn probe_all(instance: &Instance) -> Result<Vec<Probed>> {
    instance
        .physical_devices()?
        .into_iter()
        .enumerate()
        .map(|(index, pd)| probe_one(instance, index, pd))
        .collect()
}

fn probe_one(instance: &Instance, index: usize, pd: vk::PhysicalDevice) -> Result<Probed> {
    let raw = &instance.raw;
    // SAFETY (whole function): `pd` comes from this instance; every structure chained below is
    // valid for the version it is gated on, and outlives the call that fills it.
    let props = unsafe { raw.get_physical_device_properties(pd) };
    let extensions: BTreeSet<String> = unsafe { raw.enumerate_device_extension_properties(pd) }
        .map_err(|r| crate::RuntimeError::vk("vkEnumerateDeviceExtensionProperties", r))?
        .iter()
        .map(|e| c_chars_to_string(&e.extension_name))
        .collect();
    let has_ext = |name: &CStr| extensions.contains(name.to_string_lossy().as_ref());

    let (inst_major, inst_minor) = vk_minor_version(instance.api_version);
    let usable_version = vk_minor_version(props.api_version).min((inst_major, inst_minor));
    // The 1.1 structures (features2 chains, subgroup properties) need 1.1; a 1.0 device is
    // only described, and `unusable_reason` refuses it.
    let v11 = usable_version >= (1, 1);
    let v12 = usable_version >= (1, 2);
    let v13 = usable_version >= (1, 3);
    // On 1.1, what 1.2 made core comes through the extensions it promoted (promoted.rs).
    let promoted_ext = if v11 && !v12 {
        promoted::Extensions::offered(has_ext)
    } else {
        promoted::Extensions::default()
    };
    let dot_ext = !v13 && has_ext(vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME);
    let size_control_ext = !v13 && has_ext(vk::EXT_SUBGROUP_SIZE_CONTROL_NAME);
    // Core counts come only through vendor extensions (both need properties2: 1.1).
    let arm_cores_ext = v11 && has_ext(vk::ARM_SHADER_CORE_BUILTINS_NAME);
    let nv_sms_ext = v11 && has_ext(vk::NV_SHADER_SM_BUILTINS_NAME);

    // Properties.
    let mut p_promoted = promoted::Properties::default();
    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut p13 = vk::PhysicalDeviceVulkan13Properties::default();
    let mut size_control_props = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    let mut dot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
    let mut arm_cores = vk::PhysicalDeviceShaderCoreBuiltinsPropertiesARM::default();
    let mut nv_sms = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
    {
        let mut props2 = vk::PhysicalDeviceProperties2::default();
        if v12 {
            props2 = props2.push_next(&mut p11).push_next(&mut p12);
        } else if v11 {
            props2 = p_promoted.chain_query(promoted_ext, props2);
        }
        if v13 {
            props2 = props2.push_next(&mut p13);
        }
        if size_control_ext {
            props2 = props2.push_next(&mut size_control_props);
        }
        if dot_ext {
            props2 = props2.push_next(&mut dot_props);
        }
        if arm_cores_ext {
            props2 = props2.push_next(&mut arm_cores);
        }
        if nv_sms_ext {
            props2 = props2.push_next(&mut nv_sms);
        }
        unsafe { raw.get_physical_device_properties2(pd, &mut props2) };
    }

    // Features.
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut f_promoted = promoted::Features::default();
    let mut size_control_feat = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
    let mut dot_feat = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let core_features;
    {
        let mut features2 = vk::PhysicalDeviceFeatures2::default();
        if v12 {
            features2 = features2.push_next(&mut f11).push_next(&mut f12);
        } else if v11 {
            features2 = f_promoted.chain_query(promoted_ext, features2);
        }
        if v13 {
            features2 = features2.push_next(&mut f13);
        }
        if size_control_ext {
            features2 = features2.push_next(&mut size_control_feat);
        }
        if dot_ext {
            features2 = features2.push_next(&mut dot_feat);
        }
        unsafe { raw.get_physical_device_features2(pd, &mut features2) };
        core_features = features2.features;
    }

    let memory_props = unsafe { raw.get_physical_device_memory_properties(pd) };
    let queue_families = unsafe { raw.get_physical_device_queue_family_properties(pd) };

    let device_type = DeviceType::from_vk(props.device_type);
    let name = c_chars_to_string(&props.device_name);
    let l = &props.limits;

    let (subgroup_size, subgroup_stages, subgroup_ops) = if v12 {
        (
            p11.subgroup_size,
            p11.subgroup_supported_stages,
            p11.subgroup_supported_operations,
        )
    } else {
        let sg = &p_promoted.subgroup;
        (
            sg.subgroup_size,
            sg.supported_stages,
            sg.supported_operations,
        )
    };
    // The features 1.2 made core, from the 1.2 structure or the 1.1 extension structures
    // (all false on a 1.0 device, which nothing above queried).
    let promoted_features = if v12 {
        promoted::Supported {
            shader_float16: f12.shader_float16 == vk::TRUE,
            shader_int8: f12.shader_int8 == vk::TRUE,
            storage_buffer_16bit_access: f11.storage_buffer16_bit_access == vk::TRUE,
            storage_buffer_8bit_access: f12.storage_buffer8_bit_access == vk::TRUE,
            shader_subgroup_extended_types: f12.shader_subgroup_extended_types == vk::TRUE,
            vulkan_memory_model: f12.vulkan_memory_model == vk::TRUE,
        }
    } else if v11 {
        f_promoted.supported()
    } else {
        promoted::Supported::default()
    };
    let size_control_supported = if v13 {
        f13.subgroup_size_control == vk::TRUE
    } else {
        size_control_feat.subgroup_size_control == vk::TRUE
    };
    let size_control = size_control_supported.then(|| {
        let (min, max, wg, stages) = if v13 {
            (
                p13.min_subgroup_size,
                p13.max_subgroup_size,
                p13.max_compute_workgroup_subgroups,
                p13.required_subgroup_size_stages,
            )
        } else {
            (
                size_control_props.min_subgroup_size,
                size_control_props.max_subgroup_size,
                size_control_props.max_compute_workgroup_subgroups,
                size_control_props.required_subgroup_size_stages,
            )
        };
        SubgroupSizeControl {
            min_size: min,
            max_size: max,
            max_compute_workgroup_subgroups: wg,
            required_size_in_compute: stages.contains(vk::ShaderStageFlags::COMPUTE),
        }
    });

    let features = DeviceFeatures {
        shader_float16: promoted_features.shader_float16,
        shader_int8: promoted_features.shader_int8,
        shader_int16: core_features.shader_int16 == vk::TRUE,
        shader_int64: core_features.shader_int64 == vk::TRUE,
        storage_buffer_16bit_access: promoted_features.storage_buffer_16bit_access,
        storage_buffer_8bit_access: promoted_features.storage_buffer_8bit_access,
        shader_integer_dot_product: if v13 {
            f13.shader_integer_dot_product == vk::TRUE
        } else {
            dot_feat.shader_integer_dot_product == vk::TRUE
        },
        integer_dot_product_4x8_packed_signed_accelerated: if v13 {
            p13.integer_dot_product4x8_bit_packed_signed_accelerated == vk::TRUE
        } else {
            dot_props.integer_dot_product4x8_bit_packed_signed_accelerated == vk::TRUE
        },
        shader_subgroup_extended_types: promoted_features.shader_subgroup_extended_types,
        subgroup_size_control: size_control_supported,
        compute_full_subgroups: if v13 {
            f13.compute_full_subgroups == vk::TRUE
        } else {
            size_control_feat.compute_full_subgroups == vk::TRUE
        },
        vulkan_memory_model: promoted_features.vulkan_memory_model,
        push_descriptor: has_ext(vk::KHR_PUSH_DESCRIPTOR_NAME),
    };

    // Vulkan 1.2 core, or VK_KHR_driver_properties on 1.1 (panvk 25.0.7 has it).
    let driver_props = if v12 {
        Some((p12.driver_id, p12.driver_name, p12.driver_info))
    } else {
        let d = &p_promoted.driver;
        promoted_ext
            .driver_properties
            .then_some((d.driver_id, d.driver_name, d.driver_info))
    };
    let driver = DriverInfo {
        id: driver_props.map(|(id, _, _)| format!("{id:?}")),
        name: driver_props.map_or_else(String::new, |(_, n, _)| c_chars_to_string(&n)),
        info: driver_props.map_or_else(String::new, |(_, _, i)| c_chars_to_string(&i)),
        version_raw: props.driver_version,
        version: decode_driver_version(props.vendor_id, props.driver_version),
    };

    let compute_queue = pick_compute_queue(&queue_families);
    let memory = describe_memory(&memory_props, device_type);

    let info = DeviceInfo {
        index,
        name,
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        device_type,
        is_cpu: device_type == DeviceType::Cpu,
        driver,
        api_version: version_string(props.api_version),
        api_version_raw: props.api_version,
        usable_api_version: format!("{}.{}", usable_version.0, usable_version.1),
        pipeline_cache_uuid: hex(&props.pipeline_cache_uuid),
        limits: DeviceLimits {
            max_compute_work_group_size: l.max_compute_work_group_size,
            max_compute_work_group_invocations: l.max_compute_work_group_invocations,
            max_compute_work_group_count: l.max_compute_work_group_count,
            max_compute_shared_memory_size: l.max_compute_shared_memory_size,
            max_storage_buffer_range: l.max_storage_buffer_range,
            max_push_constants_size: l.max_push_constants_size,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            max_per_stage_descriptor_storage_buffers: l.max_per_stage_descriptor_storage_buffers,
            max_memory_allocation_size: if v12 {
                Some(p11.max_memory_allocation_size)
            } else {
                v11.then_some(p_promoted.maintenance3.max_memory_allocation_size)
            },
            non_coherent_atom_size: l.non_coherent_atom_size,
            timestamp_period_ns: l.timestamp_period,
            timestamp_compute_and_graphics: l.timestamp_compute_and_graphics == vk::TRUE,
            shader_cores: if arm_cores_ext && arm_cores.shader_core_count > 0 {
                Some(arm_cores.shader_core_count)
            } else if nv_sms_ext && nv_sms.shader_sm_count > 0 {
                Some(nv_sms.shader_sm_count)
            } else {
                None
            },
        },
        subgroup: SubgroupInfo {
            size: subgroup_size,
            in_compute: subgroup_stages.contains(vk::ShaderStageFlags::COMPUTE),
            operations: subgroup_operation_names(subgroup_ops),
            size_control,
        },
        features,
        memory,
        compute_queue,
    };
    Ok(Probed {
        physical: pd,
        info,
        usable_version,
        extensions,
        pipeline_cache_uuid: props.pipeline_cache_uuid,
    })
}

/// The queue family for compute work: one with timestamps if any (timing needs them), and
/// among those the first, which is the universal queue on every driver we know.
pub(crate) fn pick_compute_queue(families: &[vk::QueueFamilyProperties]) -> Option<QueueInfo> {
    let compute = |f: &&(usize, &vk::QueueFamilyProperties)| {
        f.1.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.1.queue_count > 0
    };
    let indexed: Vec<(usize, &vk::QueueFamilyProperties)> = families.iter().enumerate().collect();
    let chosen = indexed
        .iter()
        .filter(compute)
        .find(|f| f.1.timestamp_valid_bits > 0)
        .or_else(|| indexed.iter().find(compute))?;
    Some(QueueInfo {
        family_index: chosen.0 as u32,
        queue_count: chosen.1.queue_count,
        timestamp_valid_bits: chosen.1.timestamp_valid_bits,
    })
}

pub(crate) fn describe_memory(
    props: &vk::PhysicalDeviceMemoryProperties,
    device_type: DeviceType,
) -> MemoryInfo {
    let heaps: Vec<MemoryHeap> = props.memory_heaps[..props.memory_heap_count as usize]
        .iter()
        .enumerate()
        .map(|(i, h)| MemoryHeap {
            index: i as u32,
            size: h.size,
            device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
        })
        .collect();
    let types: Vec<MemoryType> = props.memory_types[..props.memory_type_count as usize]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.property_flags;
            MemoryType {
                index: i as u32,
                heap_index: t.heap_index,
                device_local: f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL),
                host_visible: f.contains(vk::MemoryPropertyFlags::HOST_VISIBLE),
                host_coherent: f.contains(vk::MemoryPropertyFlags::HOST_COHERENT),
                host_cached: f.contains(vk::MemoryPropertyFlags::HOST_CACHED),
                lazily_allocated: f.contains(vk::MemoryPropertyFlags::LAZILY_ALLOCATED),
                protected: f.contains(vk::MemoryPropertyFlags::PROTECTED),
            }
        })
        .collect();
    // Largest device-local heap; a device without one (unusual) falls back to the largest heap.
    let main_heap = heaps
        .iter()
        .filter(|h| h.device_local)
        .max_by_key(|h| h.size)
        .or_else(|| heaps.iter().max_by_key(|h| h.size))
        .map(|h| h.index);
    let host_visible_device_local = main_heap.is_some_and(|main| {
        types
            .iter()
            .any(|t| t.heap_index == main && t.device_local && t.host_visible)
    });
    MemoryInfo {
        heaps,
        types,
        main_heap,
        host_visible_device_local,
        uma: host_visible_device_local && device_type != DeviceType::Discrete,
    }
}

fn subgroup_operation_names(ops: vk::SubgroupFeatureFlags) -> Vec<String> {
    use vk::SubgroupFeatureFlags as F;
    [
        (F::BASIC, "basic"),
        (F::VOTE, "vote"),
        (F::ARITHMETIC, "arithmetic"),
        (F::BALLOT, "ballot"),
        (F::SHUFFLE, "shuffle"),
        (F::SHUFFLE_RELATIVE, "shuffle_relative"),
        (F::CLUSTERED, "clustered"),
        (F::QUAD, "quad"),
    ]
    .iter()
    .filter(|(flag, _)| ops.contains(*flag))
    .map(|(_, name)| name.to_string())
    .collect()
}

/// NVIDIA packs driverVersion as 10.8.8.6 bits; everyone else here (Mesa, Arm, AMD) uses the
/// Vulkan version packing.
pub(crate) fn decode_driver_version(vendor_id: u32, v: u32) -> String {
    const NVIDIA: u32 = 0x10de;
    if vendor_id == NVIDIA {
        format!(
            "{}.{}.{}.{}",
            v >> 22,
            (v >> 14) & 0xff,
            (v >> 6) & 0xff,
            v & 0x3f
        )
    } else {
        version_string(v)
    }
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    // The arrays are NUL-terminated by the spec; a driver that forgets gets truncated, not UB.
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory_props(
        heaps: &[(u64, vk::MemoryHeapFlags)],
        types: &[(u32, vk::MemoryPropertyFlags)],
    ) -> vk::PhysicalDeviceMemoryProperties {
        let mut p = vk::PhysicalDeviceMemoryProperties {
            memory_heap_count: heaps.len() as u32,
            memory_type_count: types.len() as u32,
            ..Default::default()
        };
        for (i, &(size, flags)) in heaps.iter().enumerate() {
            p.memory_heaps[i] = vk::MemoryHeap { size, flags };
        }
        for (i, &(heap_index, property_flags)) in types.iter().enumerate() {
            p.memory_types[i] = vk::MemoryType {
                property_flags,
                heap_index,
            };
        }
        p
    }

    use vk::MemoryPropertyFlags as M;
    const DL: vk::MemoryHeapFlags = vk::MemoryHeapFlags::DEVICE_LOCAL;

    #[test]
    fn single_host_visible_heap_is_uma() {
        // Mali/panvk and lavapipe: one device-local heap, every type host visible.
        let p = memory_props(
            &[(8 << 30, DL)],
            &[(
                0,
                M::DEVICE_LOCAL | M::HOST_VISIBLE | M::HOST_COHERENT | M::HOST_CACHED,
            )],
        );
        let m = describe_memory(&p, DeviceType::Integrated);
        assert_eq!(m.main_heap, Some(0));
        assert!(m.host_visible_device_local && m.uma);
    }

    #[test]
    fn discrete_gpu_with_small_bar_is_not_uma() {
        // VRAM heap, system heap, 256 MiB BAR heap: the host-visible device-local type is not on
        // the main heap.
        let p = memory_props(
            &[
                (80 << 30, DL),
                (64 << 30, vk::MemoryHeapFlags::empty()),
                (256 << 20, DL),
            ],
            &[
                (0, M::DEVICE_LOCAL),
                (1, M::HOST_VISIBLE | M::HOST_COHERENT),
                (2, M::DEVICE_LOCAL | M::HOST_VISIBLE | M::HOST_COHERENT),
            ],
        );
        let m = describe_memory(&p, DeviceType::Discrete);
        assert_eq!(m.main_heap, Some(0));
        assert!(!m.host_visible_device_local && !m.uma);
    }

    #[test]
    fn discrete_gpu_with_resizable_bar_is_host_visible_but_not_uma() {
        let p = memory_props(
            &[(80 << 30, DL), (64 << 30, vk::MemoryHeapFlags::empty())],
            &[
                (0, M::DEVICE_LOCAL),
                (0, M::DEVICE_LOCAL | M::HOST_VISIBLE | M::HOST_COHERENT),
            ],
        );
        let m = describe_memory(&p, DeviceType::Discrete);
        assert!(m.host_visible_device_local);
        assert!(!m.uma);
    }

    fn family(flags: vk::QueueFlags, ts_bits: u32) -> vk::QueueFamilyProperties {
        vk::QueueFamilyProperties {
            queue_flags: flags,
            queue_count: 1,
            timestamp_valid_bits: ts_bits,
            ..Default::default()
        }
    }

    #[test]
    fn compute_queue_prefers_timestamps() {
        let fams = [
            family(vk::QueueFlags::TRANSFER, 64),
            family(vk::QueueFlags::COMPUTE, 0),
            family(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS, 36),
        ];
        let q = pick_compute_queue(&fams).unwrap();
        assert_eq!((q.family_index, q.timestamp_valid_bits), (2, 36));
        let no_ts = [
            family(vk::QueueFlags::TRANSFER, 64),
            family(vk::QueueFlags::COMPUTE, 0),
        ];
        assert_eq!(pick_compute_queue(&no_ts).unwrap().family_index, 1);
        assert!(pick_compute_queue(&[family(vk::QueueFlags::TRANSFER, 64)]).is_none());
    }

    #[test]
    fn nvidia_driver_versions_use_their_own_packing() {
        // 550.54.14 as NVIDIA packs it.
        let v = (550 << 22) | (54 << 14) | (14 << 6);
        assert_eq!(decode_driver_version(0x10de, v), "550.54.14.0");
        assert_eq!(
            decode_driver_version(0x10005, vk::make_api_version(0, 22, 3, 6)),
            "22.3.6"
        );
    }
}
