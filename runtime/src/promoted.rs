//! Vulkan 1.1 devices: what rocky reads from Vulkan 1.2's core structures
//! (`VkPhysicalDeviceVulkan11/12Features` and `…Properties`) comes, on a 1.1 device, from the
//! structures of the extensions that 1.2 promoted to core, and must be enabled through them.
//!
//! Why: Mesa 25.0.7's panvk (Debian 13, what RK3588 boards run) reports Vulkan 1.1 yet offers
//! int8, 8/16-bit storage and the driver id through VK_KHR_shader_float16_int8,
//! VK_KHR_8bit_storage, the core-1.1 16-bit storage structure and VK_KHR_driver_properties.
//! Reading only the 1.2 structures would report "no" for all of them and lose the panvk driver
//! id that the command budget and the device-class rules key on.
//!
//! The probe chains [`Features`] and [`Properties`] for the query; device creation chains the
//! same feature structures, with the values to enable, and enables their extensions.

use crate::info::DeviceFeatures;
use ash::vk;
use std::ffi::CStr;

/// The device extensions that carry rocky's features on a Vulkan 1.1 device: as offered by the
/// device (probe), or as chosen to be enabled (device creation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extensions {
    /// VK_KHR_shader_float16_int8: `shaderFloat16`, `shaderInt8`.
    pub(crate) float16_int8: bool,
    /// VK_KHR_8bit_storage: `storageBuffer8BitAccess`.
    pub(crate) storage_8bit: bool,
    /// VK_KHR_shader_subgroup_extended_types: subgroup operations on f16/i8/i16/i64.
    pub(crate) subgroup_extended_types: bool,
    /// VK_KHR_vulkan_memory_model.
    pub(crate) vulkan_memory_model: bool,
    /// VK_KHR_driver_properties: the driver id, name and info (a query only, never enabled).
    pub(crate) driver_properties: bool,
}

impl Extensions {
    /// The extensions of this set that the device offers.
    pub(crate) fn offered(has_ext: impl Fn(&CStr) -> bool) -> Extensions {
        Extensions {
            float16_int8: has_ext(vk::KHR_SHADER_FLOAT16_INT8_NAME),
            storage_8bit: has_ext(vk::KHR_8BIT_STORAGE_NAME),
            subgroup_extended_types: has_ext(vk::KHR_SHADER_SUBGROUP_EXTENDED_TYPES_NAME),
            vulkan_memory_model: has_ext(vk::KHR_VULKAN_MEMORY_MODEL_NAME),
            driver_properties: has_ext(vk::KHR_DRIVER_PROPERTIES_NAME),
        }
    }

    /// The offered extensions worth enabling for the supported features `f`: only those that
    /// turn on something the device has (an extension enabled for nothing costs a driver
    /// nothing, but a narrower set keeps `vkCreateDevice` failures easier to read).
    pub(crate) fn to_enable(self, f: &DeviceFeatures) -> Extensions {
        Extensions {
            float16_int8: self.float16_int8 && (f.shader_float16 || f.shader_int8),
            storage_8bit: self.storage_8bit && f.storage_buffer_8bit_access,
            subgroup_extended_types: self.subgroup_extended_types
                && f.shader_subgroup_extended_types,
            vulkan_memory_model: self.vulkan_memory_model && f.vulkan_memory_model,
            driver_properties: false,
        }
    }

    /// Names for `VkDeviceCreateInfo::ppEnabledExtensionNames`.
    pub(crate) fn names(self) -> Vec<&'static CStr> {
        [
            (self.float16_int8, vk::KHR_SHADER_FLOAT16_INT8_NAME),
            (self.storage_8bit, vk::KHR_8BIT_STORAGE_NAME),
            (
                self.subgroup_extended_types,
                vk::KHR_SHADER_SUBGROUP_EXTENDED_TYPES_NAME,
            ),
            (self.vulkan_memory_model, vk::KHR_VULKAN_MEMORY_MODEL_NAME),
            (self.driver_properties, vk::KHR_DRIVER_PROPERTIES_NAME),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name)
        .collect()
    }
}

/// Where a feature named by `RuntimeCaps::missing` comes from, so an error can say what a
/// driver must offer: `shaderInt8 (VK_KHR_shader_float16_int8 or Vulkan 1.2)`.
pub(crate) fn describe_features(names: &[&str]) -> String {
    names
        .iter()
        .map(|&name| {
            let source = match name {
                "shaderFloat16" | "shaderInt8" => "VK_KHR_shader_float16_int8 or Vulkan 1.2",
                "storageBuffer8BitAccess" => "VK_KHR_8bit_storage or Vulkan 1.2",
                "storageBuffer16BitAccess" => "Vulkan 1.1's 16-bit storage feature",
                "shaderInt16" => "a Vulkan 1.0 core feature",
                "shaderIntegerDotProduct" => "VK_KHR_shader_integer_dot_product or Vulkan 1.3",
                "subgroup arithmetic" | "subgroup shuffle" => {
                    "Vulkan 1.1 subgroupSupportedOperations in compute"
                }
                _ => return name.to_string(),
            };
            format!("{name} ({source})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The feature structures of a Vulkan 1.1 device: filled by the query, or holding the values
/// to enable at device creation.
#[derive(Default)]
pub(crate) struct Features {
    /// Core in 1.1 (VK_KHR_16bit_storage was promoted then): always chained.
    storage_16bit: vk::PhysicalDevice16BitStorageFeatures<'static>,
    float16_int8: vk::PhysicalDeviceShaderFloat16Int8Features<'static>,
    storage_8bit: vk::PhysicalDevice8BitStorageFeatures<'static>,
    subgroup_extended_types: vk::PhysicalDeviceShaderSubgroupExtendedTypesFeatures<'static>,
    vulkan_memory_model: vk::PhysicalDeviceVulkanMemoryModelFeatures<'static>,
}

/// The supported features read from [`Features`] after the query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Supported {
    pub(crate) shader_float16: bool,
    pub(crate) shader_int8: bool,
    pub(crate) storage_buffer_16bit_access: bool,
    pub(crate) storage_buffer_8bit_access: bool,
    pub(crate) shader_subgroup_extended_types: bool,
    pub(crate) vulkan_memory_model: bool,
}

fn on(b: bool) -> vk::Bool32 {
    if b {
        vk::TRUE
    } else {
        vk::FALSE
    }
}

impl Features {
    /// Structures to enable the supported features `f` (the probe gated each flag on its
    /// extension being offered, so an unoffered one is already false).
    pub(crate) fn enabling(f: &DeviceFeatures) -> Features {
        let mut out = Features::default();
        out.storage_16bit.storage_buffer16_bit_access = on(f.storage_buffer_16bit_access);
        out.float16_int8.shader_float16 = on(f.shader_float16);
        out.float16_int8.shader_int8 = on(f.shader_int8);
        out.storage_8bit.storage_buffer8_bit_access = on(f.storage_buffer_8bit_access);
        out.subgroup_extended_types.shader_subgroup_extended_types =
            on(f.shader_subgroup_extended_types);
        out.vulkan_memory_model.vulkan_memory_model = on(f.vulkan_memory_model);
        out
    }

    /// Chains the structures of the extensions in `ext` (and the core 16-bit one) for
    /// `vkGetPhysicalDeviceFeatures2`. Querying needs an extension offered, not enabled.
    pub(crate) fn chain_query<'a>(
        &'a mut self,
        ext: Extensions,
        mut query: vk::PhysicalDeviceFeatures2<'a>,
    ) -> vk::PhysicalDeviceFeatures2<'a> {
        query = query.push_next(&mut self.storage_16bit);
        if ext.float16_int8 {
            query = query.push_next(&mut self.float16_int8);
        }
        if ext.storage_8bit {
            query = query.push_next(&mut self.storage_8bit);
        }
        if ext.subgroup_extended_types {
            query = query.push_next(&mut self.subgroup_extended_types);
        }
        if ext.vulkan_memory_model {
            query = query.push_next(&mut self.vulkan_memory_model);
        }
        query
    }

    /// Chains the same structures into `vkCreateDevice`; `ext` must be the extensions that
    /// are enabled ([`Extensions::to_enable`]): a structure of a disabled extension is invalid.
    pub(crate) fn chain_create<'a>(
        &'a mut self,
        ext: Extensions,
        mut create: vk::DeviceCreateInfo<'a>,
    ) -> vk::DeviceCreateInfo<'a> {
        create = create.push_next(&mut self.storage_16bit);
        if ext.float16_int8 {
            create = create.push_next(&mut self.float16_int8);
        }
        if ext.storage_8bit {
            create = create.push_next(&mut self.storage_8bit);
        }
        if ext.subgroup_extended_types {
            create = create.push_next(&mut self.subgroup_extended_types);
        }
        if ext.vulkan_memory_model {
            create = create.push_next(&mut self.vulkan_memory_model);
        }
        create
    }

    /// What the query reported; a structure that was not chained reads as unsupported.
    pub(crate) fn supported(&self) -> Supported {
        let t = |b: vk::Bool32| b == vk::TRUE;
        Supported {
            shader_float16: t(self.float16_int8.shader_float16),
            shader_int8: t(self.float16_int8.shader_int8),
            storage_buffer_16bit_access: t(self.storage_16bit.storage_buffer16_bit_access),
            storage_buffer_8bit_access: t(self.storage_8bit.storage_buffer8_bit_access),
            shader_subgroup_extended_types: t(self
                .subgroup_extended_types
                .shader_subgroup_extended_types),
            vulkan_memory_model: t(self.vulkan_memory_model.vulkan_memory_model),
        }
    }
}

/// The property structures of a Vulkan 1.1 device.
#[derive(Default)]
pub(crate) struct Properties {
    /// Core in 1.1: subgroup size, stages and operations.
    pub(crate) subgroup: vk::PhysicalDeviceSubgroupProperties<'static>,
    /// Core in 1.1 (VK_KHR_maintenance3): `maxMemoryAllocationSize`.
    pub(crate) maintenance3: vk::PhysicalDeviceMaintenance3Properties<'static>,
    /// VK_KHR_driver_properties: driver id, name and info.
    pub(crate) driver: vk::PhysicalDeviceDriverProperties<'static>,
}

impl Properties {
    /// Chains the structures for `vkGetPhysicalDeviceProperties2` (the driver one only where
    /// VK_KHR_driver_properties is offered).
    pub(crate) fn chain_query<'a>(
        &'a mut self,
        ext: Extensions,
        mut query: vk::PhysicalDeviceProperties2<'a>,
    ) -> vk::PhysicalDeviceProperties2<'a> {
        query = query
            .push_next(&mut self.subgroup)
            .push_next(&mut self.maintenance3);
        if ext.driver_properties {
            query = query.push_next(&mut self.driver);
        }
        query
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Mesa 25.0.7's panvk offers (its vulkaninfo under the mali-shim): no subgroup
    /// extended types, no Vulkan memory model.
    fn panvk_25() -> Extensions {
        let offered = [
            vk::KHR_SHADER_FLOAT16_INT8_NAME,
            vk::KHR_8BIT_STORAGE_NAME,
            vk::KHR_16BIT_STORAGE_NAME,
            vk::KHR_DRIVER_PROPERTIES_NAME,
            vk::KHR_MAINTENANCE3_NAME,
        ];
        Extensions::offered(|name| offered.contains(&name))
    }

    #[test]
    fn only_extensions_that_turn_on_a_supported_feature_are_enabled() {
        let ext = panvk_25();
        assert!(ext.float16_int8 && ext.storage_8bit && ext.driver_properties);
        assert!(!ext.subgroup_extended_types && !ext.vulkan_memory_model);
        // panvk 25.0.7: int8 yes, fp16 no, 8-bit storage yes.
        let f = DeviceFeatures {
            shader_int8: true,
            storage_buffer_8bit_access: true,
            storage_buffer_16bit_access: true,
            ..Default::default()
        };
        assert_eq!(
            ext.to_enable(&f).names(),
            [vk::KHR_SHADER_FLOAT16_INT8_NAME, vk::KHR_8BIT_STORAGE_NAME]
        );
        // Neither fp16 nor int8: the float16_int8 extension is left off.
        let f = DeviceFeatures {
            storage_buffer_8bit_access: true,
            ..Default::default()
        };
        assert_eq!(ext.to_enable(&f).names(), [vk::KHR_8BIT_STORAGE_NAME]);
    }

    #[test]
    fn enabling_structures_carry_the_features_and_read_back() {
        let f = DeviceFeatures {
            shader_int8: true,
            storage_buffer_16bit_access: true,
            vulkan_memory_model: true,
            ..Default::default()
        };
        let s = Features::enabling(&f).supported();
        assert_eq!(
            s,
            Supported {
                shader_int8: true,
                storage_buffer_16bit_access: true,
                vulkan_memory_model: true,
                ..Default::default()
            }
        );
    }
}
