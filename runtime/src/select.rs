//! Choosing a device: by index, by name, or the best one (a real GPU before a CPU driver).

use crate::error::{Result, RuntimeError};
use crate::info::DeviceInfo;
use std::fmt;
use std::str::FromStr;

/// How the user picks a device (`--device`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The preferred usable device: discrete > integrated > virtual > other > CPU, then the
    /// lowest index.
    #[default]
    Best,
    /// The device at this position of `rocky devices`.
    Index(usize),
    /// The preferred device whose name contains this text, ignoring case ("mali", "H200").
    Name(String),
}

impl FromStr for DeviceSelector {
    type Err = std::convert::Infallible;

    /// `""`, `"auto"` or `"best"` → `Best`; all digits → `Index`; anything else → `Name`.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("auto") || s.eq_ignore_ascii_case("best") {
            return Ok(DeviceSelector::Best);
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(i) = s.parse() {
                return Ok(DeviceSelector::Index(i));
            }
        }
        Ok(DeviceSelector::Name(s.to_string()))
    }
}

impl fmt::Display for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelector::Best => f.write_str("auto"),
            DeviceSelector::Index(i) => write!(f, "{i}"),
            DeviceSelector::Name(n) => f.write_str(n),
        }
    }
}

/// The position in `devices` of the device `selector` picks. A device that matches but that
/// rocky cannot use (Vulkan 1.0, no compute queue) is an error naming the reason.
pub fn select_device(devices: &[DeviceInfo], selector: &DeviceSelector) -> Result<usize> {
    let no_match = || RuntimeError::NoMatchingDevice {
        selector: selector.to_string(),
        available: list_devices(devices),
    };
    let candidates: Vec<&DeviceInfo> = match selector {
        DeviceSelector::Best => devices.iter().collect(),
        DeviceSelector::Index(i) => devices.iter().filter(|d| d.index == *i).collect(),
        DeviceSelector::Name(name) => {
            let needle = name.to_lowercase();
            devices
                .iter()
                .filter(|d| d.name.to_lowercase().contains(&needle))
                .collect()
        }
    };
    if candidates.is_empty() {
        return Err(no_match());
    }
    let usable = candidates
        .iter()
        .filter(|d| d.unusable_reason().is_none())
        .min_by_key(|d| (d.device_type.preference_rank(), d.index));
    match usable {
        Some(d) => Ok(devices
            .iter()
            .position(|x| x.index == d.index)
            .expect("from the list")),
        None => {
            let d = candidates[0];
            Err(RuntimeError::UnsupportedDevice {
                name: d.name.clone(),
                reason: d.unusable_reason().unwrap_or_default(),
            })
        }
    }
}

/// The devices, one `summary_line` per line (each ending in a newline), for error messages.
pub fn list_devices(devices: &[DeviceInfo]) -> String {
    if devices.is_empty() {
        return "  (none)\n".to_string();
    }
    devices
        .iter()
        .map(|d| format!("  {}\n", d.summary_line()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::*;

    fn device(index: usize, name: &str, device_type: DeviceType, api: (u32, u32)) -> DeviceInfo {
        let api_raw = ash::vk::make_api_version(0, api.0, api.1, 0);
        DeviceInfo {
            index,
            name: name.to_string(),
            vendor_id: 0,
            device_id: 0,
            device_type,
            is_cpu: device_type == DeviceType::Cpu,
            driver: DriverInfo {
                id: None,
                name: "drv".into(),
                info: String::new(),
                version_raw: 0,
                version: "0.0.0".into(),
            },
            api_version: format!("{}.{}.0", api.0, api.1),
            api_version_raw: api_raw,
            usable_api_version: format!("{}.{}", api.0, api.1),
            pipeline_cache_uuid: String::new(),
            limits: DeviceLimits {
                max_compute_work_group_size: [1024, 1024, 64],
                max_compute_work_group_invocations: 1024,
                max_compute_work_group_count: [65535; 3],
                max_compute_shared_memory_size: 32768,
                max_storage_buffer_range: 1 << 27,
                max_push_constants_size: 128,
                min_storage_buffer_offset_alignment: 16,
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
                uma: false,
            },
            compute_queue: Some(QueueInfo {
                family_index: 0,
                queue_count: 1,
                timestamp_valid_bits: 64,
            }),
        }
    }

    fn sample() -> Vec<DeviceInfo> {
        vec![
            device(
                0,
                "llvmpipe (LLVM 15.0.6, 256 bits)",
                DeviceType::Cpu,
                (1, 3),
            ),
            // Mesa 25.0.7's panvk (Debian 13) reports Vulkan 1.1.
            device(1, "Mali-G610 (Panfrost)", DeviceType::Integrated, (1, 1)),
            device(2, "NVIDIA H200", DeviceType::Discrete, (1, 3)),
            device(3, "Old GPU", DeviceType::Discrete, (1, 0)),
        ]
    }

    #[test]
    fn parses_selectors() {
        assert_eq!("".parse::<DeviceSelector>().unwrap(), DeviceSelector::Best);
        assert_eq!(
            "Auto".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::Best
        );
        assert_eq!(
            " 2 ".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::Index(2)
        );
        assert_eq!(
            "mali".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::Name("mali".into())
        );
    }

    #[test]
    fn best_prefers_a_usable_discrete_gpu_over_cpu() {
        let d = sample();
        assert_eq!(select_device(&d, &DeviceSelector::Best).unwrap(), 2);
        // Without the discrete GPUs, the integrated one wins over the CPU driver.
        assert_eq!(select_device(&d[..2], &DeviceSelector::Best).unwrap(), 1);
        assert_eq!(select_device(&d[..1], &DeviceSelector::Best).unwrap(), 0);
    }

    #[test]
    fn selects_by_index_and_case_insensitive_name() {
        let d = sample();
        assert_eq!(select_device(&d, &DeviceSelector::Index(0)).unwrap(), 0);
        assert_eq!(select_device(&d, &"MALI".parse().unwrap()).unwrap(), 1);
        assert_eq!(select_device(&d, &"h200".parse().unwrap()).unwrap(), 2);
    }

    #[test]
    fn non_matching_selector_lists_the_devices() {
        let d = sample();
        let err = select_device(&d, &"radeon".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no Vulkan device matches `radeon`"), "{err}");
        for dev in &d {
            assert!(err.contains(&dev.name), "{err}");
        }
        let err = select_device(&d, &DeviceSelector::Index(9))
            .unwrap_err()
            .to_string();
        assert!(err.contains("matches `9`"), "{err}");
    }

    #[test]
    fn too_old_device_is_refused_with_the_reason() {
        let d = sample();
        let err = select_device(&d, &DeviceSelector::Index(3))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Old GPU") && err.contains("needs Vulkan 1.1"),
            "{err}"
        );
    }
}
