//! Device discovery and selection on the machine's real Vulkan devices.

mod common;

use rocky_runtime::{
    probe_devices, select_device, Context, DeviceInfo, DeviceSelector, RuntimeError,
};

fn devices() -> Vec<DeviceInfo> {
    common::ensure_runtime_dir();
    probe_devices().unwrap_or_else(|e| panic!("these tests need a Vulkan device: {e}"))
}

#[test]
fn probed_devices_report_at_least_the_vulkan_minimum_limits() {
    let devices = devices();
    assert!(!devices.is_empty());
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.index, i);
        assert!(!d.name.is_empty());
        let l = &d.limits;
        // Required minimums from the Vulkan spec's limits table.
        assert!(l.max_compute_shared_memory_size >= 16384, "{}", d.name);
        assert!(l.max_compute_work_group_invocations >= 128, "{}", d.name);
        assert!(l.max_compute_work_group_size[0] >= 128, "{}", d.name);
        assert!(l.max_storage_buffer_range >= 1 << 27, "{}", d.name);
        assert!(l.max_push_constants_size >= 128, "{}", d.name);
        assert!(
            l.min_storage_buffer_offset_alignment.is_power_of_two(),
            "{}",
            d.name
        );
        assert!(l.min_storage_buffer_offset_alignment <= 256, "{}", d.name);
        assert!(!d.memory.heaps.is_empty() && !d.memory.types.is_empty());
        assert!(d
            .memory
            .types
            .iter()
            .all(|t| (t.heap_index as usize) < d.memory.heaps.len()));
        if d.unusable_reason().is_none() {
            assert!(d.subgroup.size.is_power_of_two(), "{}", d.name);
            assert!(
                d.driver.id.is_some() && !d.driver.name.is_empty(),
                "{}",
                d.name
            );
            assert!(d.compute_queue.is_some());
        }
        assert_eq!(d.is_cpu, d.device_type == rocky_runtime::DeviceType::Cpu);
    }
}

/// Cross-check against `vulkaninfo --summary` (an independent reader of the same driver),
/// where it is installed.
#[test]
fn device_names_and_versions_match_vulkaninfo() {
    let devices = devices();
    let Ok(out) = std::process::Command::new("vulkaninfo")
        .arg("--summary")
        .output()
    else {
        eprintln!("vulkaninfo not installed: cross-check not run");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(name))
            .filter_map(|rest| rest.trim_start().strip_prefix('='))
            .map(|v| v.trim().to_string())
            .collect()
    };
    let names = field("deviceName");
    let apis = field("apiVersion");
    assert_eq!(names.len(), devices.len(), "vulkaninfo output:\n{text}");
    for (d, (name, api)) in devices.iter().zip(names.iter().zip(&apis)) {
        assert_eq!(&d.name, name);
        // vulkaninfo prints `1.3.230` (some versions add ` (4206822)`).
        assert!(
            api.starts_with(&d.api_version),
            "{api} vs {}",
            d.api_version
        );
    }
}

#[test]
fn device_info_round_trips_through_json() {
    for d in devices() {
        let json = serde_json::to_string(&d).unwrap();
        let back: DeviceInfo = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
    }
}

// Selection is checked on the real device list without opening each device (see
// `common::context` for why tests do not create and destroy devices freely).
#[test]
fn selects_by_index_and_by_case_insensitive_name() {
    let devices = devices();
    for d in &devices {
        assert_eq!(
            select_device(&devices, &DeviceSelector::Index(d.index)).unwrap(),
            d.index
        );
    }
    for d in &devices {
        // The name's first word ("llvmpipe", "NVIDIA"), with its case flipped.
        let part = d.name.split_whitespace().next().unwrap().to_string();
        let flipped: String = part
            .chars()
            .map(|c| {
                if c.is_lowercase() {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect();
        let selector: DeviceSelector = flipped.parse().unwrap();
        if !matches!(selector, DeviceSelector::Name(_)) {
            continue; // a name starting with a number
        }
        let chosen = &devices[select_device(&devices, &selector).unwrap()];
        assert!(
            chosen.name.to_lowercase().contains(&part.to_lowercase()),
            "{}",
            chosen.name
        );
    }
}

#[test]
fn best_device_is_a_gpu_when_there_is_one_and_is_what_the_context_opens() {
    let devices = devices();
    let best = &devices[select_device(&devices, &DeviceSelector::Best).unwrap()];
    let best_rank = devices
        .iter()
        .filter(|d| d.unusable_reason().is_none())
        .map(|d| d.device_type.preference_rank())
        .min()
        .unwrap();
    assert_eq!(best.device_type.preference_rank(), best_rank);
    // Context::new with a selector opens the device select_device names.
    let ctx = common::context();
    let expected = &devices[select_device(&devices, &common::test_selector()).unwrap()];
    assert_eq!(ctx.info(), expected);
}

#[test]
fn a_selector_matching_nothing_lists_the_devices() {
    let devices = devices();
    // Fails before any device is created.
    let err = Context::new(&"no-such-gpu-xyz".parse().unwrap()).unwrap_err();
    assert!(
        matches!(err, RuntimeError::NoMatchingDevice { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("no-such-gpu-xyz"), "{msg}");
    for d in &devices {
        assert!(msg.contains(&d.name), "{msg}");
    }
    let err = Context::new(&DeviceSelector::Index(devices.len())).unwrap_err();
    assert!(
        matches!(err, RuntimeError::NoMatchingDevice { .. }),
        "{err:?}"
    );
}

#[test]
fn enabled_caps_agree_with_the_probed_device() {
    let ctx = common::context();
    let (info, caps) = (ctx.info(), ctx.caps());
    assert_eq!(caps.float16, info.features.shader_float16);
    assert_eq!(caps.int8, info.features.shader_int8);
    assert_eq!(
        caps.storage_16bit,
        info.features.storage_buffer_16bit_access
    );
    assert_eq!(
        caps.integer_dot_product,
        info.features.shader_integer_dot_product
    );
    assert_eq!(caps.subgroup_size, info.subgroup.size);
    assert_eq!(
        caps.max_shared_bytes,
        info.limits.max_compute_shared_memory_size
    );
    assert_eq!(caps.uma, info.memory.uma);
    assert!(caps.subgroup_size_range[0] <= caps.subgroup_size_range[1]);
    // The SPIR-V version each Vulkan version accepts (Vulkan spec, "SPIR-V Environment").
    let spirv = match info.usable_api_version.as_str() {
        "1.1" => (1, 3),
        "1.2" => (1, 5),
        _ => (1, 6),
    };
    assert_eq!(
        caps.max_spirv_version, spirv,
        "Vulkan {}",
        info.usable_api_version
    );
}
