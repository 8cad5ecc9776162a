//! Loading the Vulkan loader and creating the instance, with errors that name the fix.

use crate::error::{OomKind, Result, RuntimeError};
use ash::vk;

/// The highest Vulkan version rocky asks for. ash 0.38 knows the 1.3 structures; asking for more
/// would only matter for features rocky does not use.
const MAX_API_VERSION: u32 = vk::API_VERSION_1_3;

/// The Vulkan loader plus one instance. Destroyed on drop (after every device made from it:
/// `device::Shared` owns its instance and destroys the device first).
pub(crate) struct Instance {
    /// Keeps libvulkan loaded: every function pointer of `raw` points into it.
    _entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    /// The version passed in `VkApplicationInfo::apiVersion`: a device's usable version is the
    /// minimum of this and its own.
    pub(crate) api_version: u32,
}

impl Instance {
    pub(crate) fn new() -> Result<Instance> {
        // SAFETY: loading libvulkan runs its initialisers; this is the documented way to use ash.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| RuntimeError::LoaderMissing {
            detail: e.to_string(),
            hint: environment_hint(),
        })?;

        // SAFETY: plain query on a loaded entry.
        let loader_version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|r| RuntimeError::vk("vkEnumerateInstanceVersion", r))?
            .unwrap_or(vk::API_VERSION_1_0);
        if vk_minor_version(loader_version) < (1, 1) {
            return Err(RuntimeError::NoDevice {
                detail: format!(
                    " (the Vulkan loader only supports Vulkan {}; rocky needs 1.1 or newer)",
                    version_string(loader_version)
                ),
                hint: environment_hint(),
            });
        }
        let api_version = if vk_minor_version(loader_version) >= vk_minor_version(MAX_API_VERSION) {
            MAX_API_VERSION
        } else {
            let (major, minor) = vk_minor_version(loader_version);
            vk::make_api_version(0, major, minor, 0)
        };

        let app_info = vk::ApplicationInfo::default()
            .application_name(c"rocky")
            .application_version(vk::make_api_version(0, 0, 1, 0))
            .engine_name(c"rocky")
            .engine_version(vk::make_api_version(0, 0, 1, 0))
            .api_version(api_version);
        let create_info = vk::InstanceCreateInfo::default().application_info(&app_info);
        // SAFETY: create_info and what it points to live until the call returns.
        let raw = unsafe { entry.create_instance(&create_info, None) }.map_err(|r| match r {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => RuntimeError::NoDevice {
                detail: " (the Vulkan loader found no compatible driver (ICD))".to_string(),
                hint: environment_hint(),
            },
            r => match OomKind::of(r) {
                Some(kind) => RuntimeError::OutOfMemory {
                    what: "creating the Vulkan instance".to_string(),
                    bytes: None,
                    kind,
                    hint: String::new(),
                },
                None => RuntimeError::vk("vkCreateInstance", r),
            },
        })?;
        Ok(Instance {
            _entry: entry,
            raw,
            api_version,
        })
    }

    /// Every physical device, in the loader's order (the order `rocky devices` shows).
    pub(crate) fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        // SAFETY: valid instance.
        let devices = unsafe { self.raw.enumerate_physical_devices() }
            .map_err(|r| RuntimeError::vk("vkEnumeratePhysicalDevices", r))?;
        if devices.is_empty() {
            return Err(RuntimeError::NoDevice {
                detail: " (the Vulkan loader found drivers but they expose no device)".to_string(),
                hint: environment_hint(),
            });
        }
        Ok(devices)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every child object holds the instance alive and is destroyed before it.
        unsafe { self.raw.destroy_instance(None) };
    }
}

/// (major, minor) of a packed Vulkan version.
pub(crate) fn vk_minor_version(v: u32) -> (u32, u32) {
    (vk::api_version_major(v), vk::api_version_minor(v))
}

/// `major.minor.patch` of a packed Vulkan version.
pub(crate) fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// Environment settings that commonly hide a Vulkan device, as a hint appended to errors.
pub(crate) fn environment_hint() -> String {
    let mut hint = String::new();
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        hint.push_str(
            "\nhint: XDG_RUNTIME_DIR is not set; Mesa drivers (panvk, lavapipe) need it: \
             `export XDG_RUNTIME_DIR=$(mktemp -d)`",
        );
    }
    for var in ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"] {
        if let Some(value) = std::env::var_os(var) {
            hint.push_str(&format!(
                "\nhint: {var}={} restricts the Vulkan drivers the loader looks at",
                value.to_string_lossy()
            ));
        }
    }
    hint
}
