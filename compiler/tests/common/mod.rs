//! Shared helpers of the integration tests: running spirv-val on generated modules.

#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use rocky_compiler::DeviceCaps;

pub const SPIRV_VAL: &str = "/usr/bin/spirv-val";

/// Fails the test (never skips it) when spirv-val is not installed.
pub fn require_spirv_val() {
    assert!(
        Path::new(SPIRV_VAL).exists(),
        "{SPIRV_VAL} is missing: install the `spirv-tools` package (apt-get install spirv-tools)"
    );
}

fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Runs spirv-val for `target_env` on one module (fed through stdin); Err carries the
/// validator's message.
pub fn spirv_val(words: &[u32], target_env: &str) -> Result<(), String> {
    require_spirv_val();
    let mut child = Command::new(SPIRV_VAL)
        .args(["--target-env", target_env, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting spirv-val");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&to_bytes(words))
        .expect("feeding spirv-val");
    let out = child.wait_with_output().expect("running spirv-val");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Disassembly, for error messages.
pub fn spirv_dis(words: &[u32]) -> String {
    let child = Command::new("/usr/bin/spirv-dis")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return "(spirv-dis unavailable)".into();
    };
    let _ = child.stdin.take().unwrap().write_all(&to_bytes(words));
    child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(spirv-dis failed: {e})"))
}

/// Desktop profile with every feature, as a Vulkan 1.2 device (SPIR-V 1.5).
pub fn desktop_vk12() -> DeviceCaps {
    DeviceCaps {
        spirv_version: (1, 5),
        ..DeviceCaps::desktop_all_features()
    }
}

/// Mali-like profile (subgroup 16, 32 KiB shared memory that is not on-chip, small register
/// budget), as a Vulkan 1.2 device.
pub fn mali_vk12() -> DeviceCaps {
    DeviceCaps {
        spirv_version: (1, 5),
        ..DeviceCaps::mali_g610()
    }
}

/// Mali-G610 as Mesa 25.0.7's panvk (Debian 13) reports it: Vulkan 1.1, so SPIR-V 1.3 at most,
/// no fp16 and no int8 dot product; int8 arithmetic and 8/16-bit storage come through the
/// extensions VK_KHR_shader_float16_int8, VK_KHR_8bit_storage and VK_KHR_16bit_storage (read
/// from the mali-shim's vulkaninfo).
pub fn mali_panvk25() -> DeviceCaps {
    DeviceCaps {
        spirv_version: (1, 3),
        float16: false,
        integer_dot_product: false,
        ..DeviceCaps::mali_g610()
    }
}

/// Runs `check` on every item on all cores; returns the failures.
pub fn parallel<T: Sync>(
    items: &[T],
    check: impl Fn(&T) -> Result<(), String> + Sync,
) -> Vec<String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if let Err(e) = check(item) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    failures.into_inner().unwrap()
}
