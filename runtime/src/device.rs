//! The logical device: a compute queue and every optional feature rocky can use, enabled only
//! where the device has it.

use crate::error::{Result, RuntimeError};
use crate::info::{probe_all, spirv_version_for, DeviceInfo, Probed};
use crate::instance::Instance;
use crate::promoted;
use crate::select::{select_device, DeviceSelector};
use ash::vk;
use rocky_compiler::kernel::RequiredFeatures;
use serde::{Deserialize, Serialize};
use std::ffi::CStr;
use std::sync::{Arc, Mutex};

/// What the created device has *enabled*, flattened for the compiler and tuner (the lead maps
/// this onto the compiler's device capabilities).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeCaps {
    pub float16: bool,
    pub int8: bool,
    pub int16: bool,
    pub int64: bool,
    pub storage_16bit: bool,
    pub storage_8bit: bool,
    pub integer_dot_product: bool,
    pub integer_dot_product_4x8_packed_accelerated: bool,
    pub subgroup_size: u32,
    pub subgroup_basic: bool,
    pub subgroup_arithmetic: bool,
    pub subgroup_shuffle: bool,
    /// Subgroup operations on f16 and small integer types.
    pub subgroup_extended_types: bool,
    pub subgroup_size_control: bool,
    pub compute_full_subgroups: bool,
    /// `[min, max]` subgroup size a pipeline may require (equal to `subgroup_size` without
    /// size control).
    pub subgroup_size_range: [u32; 2],
    pub vulkan_memory_model: bool,
    pub push_descriptor: bool,
    pub max_workgroup_size: [u32; 3],
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_shared_bytes: u32,
    pub max_push_constant_bytes: u32,
    pub max_storage_buffer_range: u32,
    pub min_storage_buffer_offset_alignment: u64,
    pub max_storage_buffers_per_kernel: u32,
    pub uma: bool,
    pub timestamps: bool,
    /// Highest SPIR-V version the device accepts, as (major, minor): 1.3 for Vulkan 1.1, 1.5
    /// for 1.2, 1.6 for 1.3.
    pub max_spirv_version: (u8, u8),
}

impl RuntimeCaps {
    /// Names of the `required` features this device lacks (empty = all present).
    pub fn missing(&self, required: &RequiredFeatures) -> Vec<&'static str> {
        // Exhaustive on purpose: a feature added to the compiler's contract must be checked
        // here too, or this stops compiling.
        let RequiredFeatures {
            float16,
            storage_16bit,
            storage_8bit,
            int8,
            int16,
            integer_dot_product,
            subgroup_arithmetic,
            subgroup_shuffle,
        } = *required;
        let checks = [
            (float16, self.float16, "shaderFloat16"),
            (
                storage_16bit,
                self.storage_16bit,
                "storageBuffer16BitAccess",
            ),
            (storage_8bit, self.storage_8bit, "storageBuffer8BitAccess"),
            (int8, self.int8, "shaderInt8"),
            (int16, self.int16, "shaderInt16"),
            (
                integer_dot_product,
                self.integer_dot_product,
                "shaderIntegerDotProduct",
            ),
            (
                subgroup_arithmetic,
                self.subgroup_arithmetic,
                "subgroup arithmetic",
            ),
            (subgroup_shuffle, self.subgroup_shuffle, "subgroup shuffle"),
        ];
        checks
            .iter()
            .filter(|(need, have, _)| *need && !*have)
            .map(|(_, _, n)| *n)
            .collect()
    }
}

/// State shared by every object made from one device; destroyed when the last one drops.
pub(crate) struct Shared {
    pub(crate) device: ash::Device,
    /// `vkQueueSubmit` needs external synchronisation of the queue.
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    pub(crate) memory_properties: vk::PhysicalDeviceMemoryProperties,
    pub(crate) pipeline_cache_uuid: [u8; vk::UUID_SIZE],
    pub(crate) info: DeviceInfo,
    pub(crate) caps: RuntimeCaps,
    /// `VK_KHR_pipeline_executable_properties`, enabled wherever the device offers it (it
    /// costs nothing until a pipeline asks for its statistics).
    pub(crate) pipeline_stats: Option<crate::pipeline_stats::Loader>,
    // Declared last: dropped after `Drop::drop` has destroyed the device.
    _instance: Instance,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: every object made from this device holds an Arc<Shared>, so none is left.
        // Waiting first keeps destruction legal even after a timed-out submission.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
    }
}

/// An open Vulkan device with one compute queue. Cheap to clone (shared handle); the device
/// is destroyed when the last clone and the last object made from it are dropped.
///
/// Prefer one context per process, dropped on the thread that runs the program: NVIDIA's 580
/// driver was seen to deadlock in `vkDestroyDevice` while another thread that had used Vulkan
/// was exiting (many short-lived test threads each opening and closing a device).
#[derive(Clone)]
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.shared.info.name)
            .finish()
    }
}

impl Context {
    /// Opens the device `selector` picks (`DeviceSelector::Best` when the user named none).
    pub fn new(selector: &DeviceSelector) -> Result<Context> {
        let instance = Instance::new()?;
        let mut probed = probe_all(&instance)?;
        let infos: Vec<DeviceInfo> = probed.iter().map(|p| p.info.clone()).collect();
        let chosen = probed.swap_remove(select_device(&infos, selector)?);
        create(instance, chosen)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    pub fn caps(&self) -> &RuntimeCaps {
        &self.shared.caps
    }

    /// Refuses a kernel whose `required` features this device lacks, naming them.
    pub fn check_required(&self, kernel: &str, required: &RequiredFeatures) -> Result<()> {
        let missing = self.caps().missing(required);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(RuntimeError::MissingFeatures {
                kernel: kernel.to_string(),
                missing,
            })
        }
    }

    /// Whether pipelines made on this device can report the driver's statistics
    /// ([`crate::ComputePipeline::with_statistics`]).
    pub fn has_pipeline_statistics(&self) -> bool {
        self.shared.pipeline_stats.is_some()
    }

    /// Waits until the queue has finished all work.
    pub fn wait_idle(&self) -> Result<()> {
        let queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the queue is externally synchronised by the lock.
        unsafe { self.shared.device.queue_wait_idle(*queue) }
            .map_err(|r| RuntimeError::vk("vkQueueWaitIdle", r))
    }
}

/// Every physical device, described, without creating a logical device.
pub fn probe_devices() -> Result<Vec<DeviceInfo>> {
    let instance = Instance::new()?;
    Ok(probe_all(&instance)?.into_iter().map(|p| p.info).collect())
}

fn create(instance: Instance, p: Probed) -> Result<Context> {
    let info = &p.info;
    let queue_info = info
        .compute_queue
        .clone()
        .ok_or_else(|| RuntimeError::UnsupportedDevice {
            name: info.name.clone(),
            reason: "it has no compute queue".into(),
        })?;
    let f = &info.features;
    let v12 = p.usable_version >= (1, 2);
    let v13 = p.usable_version >= (1, 3);
    let on = |b: bool| if b { vk::TRUE } else { vk::FALSE };

    // Enable exactly what the device reported as supported (probe already gated each flag on
    // the API version or extension that provides it).
    let core = vk::PhysicalDeviceFeatures::default()
        .shader_int16(f.shader_int16)
        .shader_int64(f.shader_int64);
    let mut f11 = vk::PhysicalDeviceVulkan11Features {
        storage_buffer16_bit_access: on(f.storage_buffer_16bit_access),
        ..Default::default()
    };
    let mut f12 = vk::PhysicalDeviceVulkan12Features {
        storage_buffer8_bit_access: on(f.storage_buffer_8bit_access),
        shader_float16: on(f.shader_float16),
        shader_int8: on(f.shader_int8),
        shader_subgroup_extended_types: on(f.shader_subgroup_extended_types),
        vulkan_memory_model: on(f.vulkan_memory_model),
        ..Default::default()
    };
    let mut f13 = vk::PhysicalDeviceVulkan13Features {
        subgroup_size_control: on(f.subgroup_size_control),
        compute_full_subgroups: on(f.compute_full_subgroups),
        shader_integer_dot_product: on(f.shader_integer_dot_product),
        ..Default::default()
    };
    let mut size_control_ext = vk::PhysicalDeviceSubgroupSizeControlFeatures {
        subgroup_size_control: on(f.subgroup_size_control),
        compute_full_subgroups: on(f.compute_full_subgroups),
        ..Default::default()
    };
    let mut dot_ext = vk::PhysicalDeviceShaderIntegerDotProductFeatures {
        shader_integer_dot_product: on(f.shader_integer_dot_product),
        ..Default::default()
    };

    // On Vulkan 1.1 the 1.2-core features are enabled through their extensions' structures.
    let promoted_ext = if v12 {
        promoted::Extensions::default()
    } else {
        promoted::Extensions::offered(|name| p.has_extension(name)).to_enable(f)
    };
    let mut promoted_features = promoted::Features::enabling(f);

    let mut extensions: Vec<&CStr> = promoted_ext.names();
    let use_dot_ext = !v13 && f.shader_integer_dot_product;
    let use_size_control_ext = !v13 && f.subgroup_size_control;
    if use_dot_ext {
        extensions.push(vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME);
    }
    if use_size_control_ext {
        extensions.push(vk::EXT_SUBGROUP_SIZE_CONTROL_NAME);
    }
    if f.push_descriptor && p.has_extension(vk::KHR_PUSH_DESCRIPTOR_NAME) {
        extensions.push(vk::KHR_PUSH_DESCRIPTOR_NAME);
    }
    let stats_offered = crate::pipeline_stats::offered(
        &instance.raw,
        p.physical,
        p.has_extension(vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME),
    );
    let mut stats_feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    if stats_offered {
        extensions.push(vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME);
    }
    let extension_ptrs: Vec<*const std::ffi::c_char> =
        extensions.iter().map(|e| e.as_ptr()).collect();

    let priorities = [1.0f32];
    let queue_create = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(queue_info.family_index)
        .queue_priorities(&priorities)];
    let mut create_info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_create)
        .enabled_extension_names(&extension_ptrs)
        .enabled_features(&core);
    // `usable_version >= 1.1` is guaranteed by selection (`unusable_reason`).
    if v12 {
        create_info = create_info.push_next(&mut f11).push_next(&mut f12);
    } else {
        create_info = promoted_features.chain_create(promoted_ext, create_info);
    }
    if v13 {
        create_info = create_info.push_next(&mut f13);
    }
    if use_size_control_ext {
        create_info = create_info.push_next(&mut size_control_ext);
    }
    if use_dot_ext {
        create_info = create_info.push_next(&mut dot_ext);
    }
    if stats_offered {
        create_info = create_info.push_next(&mut stats_feature);
    }

    // SAFETY: the physical device belongs to `instance`; every chained structure and array
    // outlives the call.
    let device = unsafe { instance.raw.create_device(p.physical, &create_info, None) }
        .map_err(|r| RuntimeError::vk("vkCreateDevice", r))?;
    // SAFETY: family and index were requested above.
    let queue = unsafe { device.get_device_queue(queue_info.family_index, 0) };
    // SAFETY: plain query.
    let memory_properties = unsafe {
        instance
            .raw
            .get_physical_device_memory_properties(p.physical)
    };

    let caps = caps_of(info, p.usable_version, &extensions);
    let pipeline_stats =
        stats_offered.then(|| crate::pipeline_stats::Loader::new(&instance.raw, &device));
    Ok(Context {
        shared: Arc::new(Shared {
            device,
            queue: Mutex::new(queue),
            queue_family: queue_info.family_index,
            memory_properties,
            pipeline_cache_uuid: p.pipeline_cache_uuid,
            info: p.info.clone(),
            caps,
            pipeline_stats,
            _instance: instance,
        }),
    })
}

fn caps_of(info: &DeviceInfo, usable_version: (u32, u32), extensions: &[&CStr]) -> RuntimeCaps {
    let f = &info.features;
    let l = &info.limits;
    let sg = &info.subgroup;
    RuntimeCaps {
        float16: f.shader_float16,
        int8: f.shader_int8,
        int16: f.shader_int16,
        int64: f.shader_int64,
        storage_16bit: f.storage_buffer_16bit_access,
        storage_8bit: f.storage_buffer_8bit_access,
        integer_dot_product: f.shader_integer_dot_product,
        integer_dot_product_4x8_packed_accelerated: f
            .integer_dot_product_4x8_packed_signed_accelerated,
        subgroup_size: sg.size,
        subgroup_basic: sg.supports("basic"),
        subgroup_arithmetic: sg.supports("arithmetic"),
        subgroup_shuffle: sg.supports("shuffle"),
        subgroup_extended_types: f.shader_subgroup_extended_types,
        subgroup_size_control: f.subgroup_size_control,
        compute_full_subgroups: f.compute_full_subgroups,
        subgroup_size_range: sg
            .size_control
            .as_ref()
            .filter(|c| c.required_size_in_compute)
            .map_or([sg.size, sg.size], |c| [c.min_size, c.max_size]),
        vulkan_memory_model: f.vulkan_memory_model,
        push_descriptor: extensions.contains(&vk::KHR_PUSH_DESCRIPTOR_NAME),
        max_workgroup_size: l.max_compute_work_group_size,
        max_workgroup_invocations: l.max_compute_work_group_invocations,
        max_workgroup_count: l.max_compute_work_group_count,
        max_shared_bytes: l.max_compute_shared_memory_size,
        max_push_constant_bytes: l.max_push_constants_size,
        max_storage_buffer_range: l.max_storage_buffer_range,
        min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        max_storage_buffers_per_kernel: l.max_per_stage_descriptor_storage_buffers,
        uma: info.memory.uma,
        timestamps: info.has_timestamps(),
        max_spirv_version: spirv_version_for(usable_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::CommandBudget;
    use crate::device_caps::device_caps;
    use crate::select::{select_device, DeviceSelector};

    /// Mali-G610 as Mesa 25.0.7's panvk (Debian 13) describes itself: `rocky devices --json`
    /// recorded under the mali-shim. Vulkan 1.1; int8 and 8/16-bit storage through extensions;
    /// no fp16, no int8 dot, no timestamps.
    fn panvk_25() -> DeviceInfo {
        serde_json::from_str(include_str!(
            "../tests/fixtures/mali-g610-panvk-25.0.7.json"
        ))
        .expect("the fixture matches DeviceInfo")
    }

    #[test]
    fn vulkan_1_1_panvk_is_usable_with_spirv_1_3_and_the_panvk_rules() {
        let info = panvk_25();
        assert_eq!(info.unusable_reason(), None);
        assert_eq!(
            select_device(std::slice::from_ref(&info), &DeviceSelector::Best).unwrap(),
            0
        );
        // The driver id came through VK_KHR_driver_properties: the WLS budget applies.
        assert!(CommandBudget::for_device(&info).wls.is_some());

        let extensions = promoted::Extensions::offered(|n| {
            [vk::KHR_SHADER_FLOAT16_INT8_NAME, vk::KHR_8BIT_STORAGE_NAME].contains(&n)
        })
        .to_enable(&info.features)
        .names();
        let caps = caps_of(&info, (1, 1), &extensions);
        assert_eq!(caps.max_spirv_version, (1, 3));
        assert!(caps.int8 && caps.storage_8bit && caps.storage_16bit);
        assert!(!caps.float16 && !caps.integer_dot_product && !caps.timestamps);
        let compiler = device_caps(&info, &caps);
        assert_eq!(compiler.spirv_version, (1, 3));
        assert!(compiler.shared_memory_is_slow, "panvk's device-class rule");
    }

    #[test]
    fn missing_features_are_named_with_what_provides_them() {
        let mut caps = caps_of(&panvk_25(), (1, 1), &[]);
        (
            caps.float16,
            caps.int8,
            caps.int16,
            caps.storage_16bit,
            caps.storage_8bit,
        ) = (false, false, false, false, false);
        (caps.subgroup_arithmetic, caps.subgroup_shuffle) = (false, false);
        let everything = RequiredFeatures {
            float16: true,
            storage_16bit: true,
            storage_8bit: true,
            int8: true,
            int16: true,
            integer_dot_product: true,
            subgroup_arithmetic: true,
            subgroup_shuffle: true,
        };
        let missing = caps.missing(&everything);
        assert_eq!(missing.len(), 8, "{missing:?}");
        let err = RuntimeError::MissingFeatures {
            kernel: "k".into(),
            missing: missing.clone(),
        }
        .to_string();
        // Each name is followed by its source in parentheses.
        for name in missing {
            assert!(err.contains(&format!("{name} (")), "{name}: {err}");
        }
        assert!(
            err.contains("shaderInt8 (VK_KHR_shader_float16_int8 or Vulkan 1.2)"),
            "{err}"
        );
        assert!(err.contains("install a driver"), "{err}");
    }

    #[test]
    fn a_vulkan_1_0_device_is_refused_naming_the_requirement() {
        let mut info = panvk_25();
        info.api_version = "1.0.0".into();
        info.api_version_raw = vk::make_api_version(0, 1, 0, 0);
        let reason = info.unusable_reason().expect("refused");
        assert!(reason.contains("needs Vulkan 1.1"), "{reason}");
        assert!(reason.contains("install"), "{reason}");
    }
}
