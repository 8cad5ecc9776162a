//! The RK3588 board checks: which kernel driver holds the Mali GPU, the CSF firmware, and a
//! panvk ICD manifest. They only read files under the root, so fixture trees can stand in for a
//! board.

use super::{CheckResult, Status};
use std::fs;
use std::path::{Path, PathBuf};

/// Where the kernel lists platform devices; the Mali is e.g. `fb000000.gpu` on RK3588.
const PLATFORM_DEVICES: &str = "sys/bus/platform/devices";
/// The Mali-G610 (Valhall arch 10.10) CSF firmware panthor loads at probe.
pub const CSF_FIRMWARE: &str = "lib/firmware/arm/mali/arch10.10/mali_csffw.bin";
/// Where the Vulkan loader looks for ICD manifests (system-wide); `/usr/local` is where a Mesa
/// built from source installs.
const ICD_DIRS: [&str; 3] = [
    "usr/share/vulkan/icd.d",
    "etc/vulkan/icd.d",
    "usr/local/share/vulkan/icd.d",
];
const NOT_RK3588: &str = "skip (not an RK3588 board)";

/// What the board checks need to know about the machine.
pub struct Board {
    root: PathBuf,
    /// `/proc/device-tree/compatible` strings (empty off device-tree machines).
    compatible: Vec<String>,
    pub is_rk3588: bool,
}

impl Board {
    pub fn read(root: &Path) -> Board {
        let compatible: Vec<String> = fs::read(root.join("proc/device-tree/compatible"))
            .map(|bytes| {
                bytes
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        // `rockchip,rk3588` or `rockchip,rk3588s` (same GPU).
        let is_rk3588 = compatible.iter().any(|c| c.starts_with("rockchip,rk3588"));
        Board {
            root: root.to_path_buf(),
            compatible,
            is_rk3588,
        }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// `/path` as the user knows it (without the test root).
    fn shown(relative: &str) -> String {
        format!("/{relative}")
    }

    fn kernel_release(&self) -> Option<String> {
        fs::read_to_string(self.path("proc/sys/kernel/osrelease"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    pub fn identity(&self) -> CheckResult {
        let named = if self.compatible.is_empty() {
            "no /proc/device-tree/compatible".to_string()
        } else {
            self.compatible.join(", ")
        };
        let what = if self.is_rk3588 {
            "RK3588 board"
        } else {
            "not an RK3588 board: the RK3588 checks are skipped"
        };
        CheckResult::new("board", Status::Info, format!("{what} ({named})"))
    }

    /// The GPU platform device must be bound to panthor: the vendor `mali` kbase driver has its
    /// own ioctl interface that Mesa's panvk does not speak.
    pub fn gpu_driver(&self) -> CheckResult {
        const ID: &str = "gpu-driver";
        if !self.is_rk3588 {
            return CheckResult::new(ID, Status::Skip, NOT_RK3588);
        }
        let kernel = self
            .kernel_release()
            .map(|k| format!(" (kernel {k})"))
            .unwrap_or_default();
        let gpus = self.gpu_devices();
        if gpus.is_empty() {
            return CheckResult::new(
                ID,
                Status::Fail,
                format!(
                    "no GPU platform device (*.gpu) in /{PLATFORM_DEVICES}{kernel}: the device tree does not enable the Mali"
                ),
            )
            .with_fix("boot a mainline kernel ≥ 6.10 whose device tree enables the GPU node (gpu@fb000000) and its power domain");
        }
        if let Some((name, _)) = gpus.iter().find(|(_, d)| d.as_deref() == Some("panthor")) {
            return CheckResult::new(
                ID,
                Status::Pass,
                format!("{name} is bound to panthor{kernel}"),
            );
        }
        let (name, driver) = &gpus[0];
        match driver.as_deref() {
            Some(d) if d.contains("mali") || d.contains("kbase") => CheckResult::new(
                ID,
                Status::Fail,
                format!(
                    "{name} is bound to `{d}`, the vendor kbase driver{kernel}: panvk cannot enumerate the GPU"
                ),
            )
            .with_fix(
                "boot a mainline kernel ≥ 6.10 with panthor (CONFIG_DRM_PANTHOR); the vendor BSP kernel binds mali and panvk cannot enumerate",
            ),
            Some(d) => CheckResult::new(
                ID,
                Status::Fail,
                format!("{name} is bound to `{d}`, not panthor{kernel}"),
            )
            .with_fix("boot a mainline kernel ≥ 6.10 with panthor (CONFIG_DRM_PANTHOR) and let panthor bind the GPU"),
            None => CheckResult::new(
                ID,
                Status::Fail,
                format!("{name} is not bound to any driver{kernel}"),
            )
            .with_fix(
                "load panthor (`sudo modprobe panthor`, kernel ≥ 6.10 with CONFIG_DRM_PANTHOR); if it fails, `dmesg | grep panthor` says why (often the CSF firmware)",
            ),
        }
    }

    /// `(device name, bound driver)` for every `*.gpu` platform device, sorted by name.
    fn gpu_devices(&self) -> Vec<(String, Option<String>)> {
        let Ok(entries) = fs::read_dir(self.path(PLATFORM_DEVICES)) else {
            return Vec::new();
        };
        let mut gpus: Vec<(String, Option<String>)> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".gpu"))
            .map(|name| {
                // `driver` is a symlink to .../bus/platform/drivers/<name>; only its last
                // component matters, so a dangling link in a fixture tree reads the same.
                let link = self.path(PLATFORM_DEVICES).join(&name).join("driver");
                let driver = fs::read_link(link)
                    .ok()
                    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
                (name, driver)
            })
            .collect();
        gpus.sort();
        gpus
    }

    pub fn csf_firmware(&self) -> CheckResult {
        const ID: &str = "csf-firmware";
        if !self.is_rk3588 {
            return CheckResult::new(ID, Status::Skip, NOT_RK3588);
        }
        // The kernel's firmware loader also takes compressed files when built to.
        for suffix in ["", ".zst", ".xz"] {
            let relative = format!("{CSF_FIRMWARE}{suffix}");
            match fs::metadata(self.path(&relative)) {
                Ok(m) if m.is_file() && m.len() > 0 => {
                    return CheckResult::new(
                        ID,
                        Status::Pass,
                        format!("{} ({} bytes)", Self::shown(&relative), m.len()),
                    )
                }
                Ok(_) => {
                    return CheckResult::new(
                        ID,
                        Status::Fail,
                        format!("{} is empty or not a file", Self::shown(&relative)),
                    )
                    .with_fix(firmware_fix())
                }
                Err(_) => {}
            }
        }
        CheckResult::new(
            ID,
            Status::Fail,
            format!(
                "{} is missing: panthor cannot start the GPU without it",
                Self::shown(CSF_FIRMWARE)
            ),
        )
        .with_fix(firmware_fix())
    }

    pub fn panvk_icd(&self) -> CheckResult {
        const ID: &str = "panvk-icd";
        if !self.is_rk3588 {
            return CheckResult::new(ID, Status::Skip, NOT_RK3588);
        }
        let mut found: Vec<String> = Vec::new();
        for dir in ICD_DIRS {
            let Ok(entries) = fs::read_dir(self.path(dir)) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json"))
                .collect();
            names.sort();
            for name in names {
                let relative = format!("{dir}/{name}");
                let mentions_panvk = fs::read_to_string(self.path(&relative))
                    .is_ok_and(|text| text.contains("libvulkan_panfrost"));
                if mentions_panvk {
                    found.push(Self::shown(&relative));
                }
            }
        }
        if found.is_empty() {
            let searched: Vec<String> = ICD_DIRS.iter().map(|d| Self::shown(d)).collect();
            CheckResult::new(
                ID,
                Status::Warn,
                format!(
                    "no ICD manifest for libvulkan_panfrost in {}: Vulkan will not see the Mali",
                    searched.join(", ")
                ),
            )
            .with_fix("install Mesa's panvk driver (Debian/Ubuntu: `apt-get install mesa-vulkan-drivers`; Debian 13's Mesa 25.0.7 works), or build Mesa with -Dvulkan-drivers=panfrost")
        } else {
            CheckResult::new(ID, Status::Pass, found.join(", "))
        }
    }
}

fn firmware_fix() -> String {
    format!(
        "install linux-firmware (it ships arm/mali/arch10.10/mali_csffw.bin), or copy mali_csffw.bin from linux-firmware.git to {} and reboot",
        Board::shown(CSF_FIRMWARE)
    )
}
