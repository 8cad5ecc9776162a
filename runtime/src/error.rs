//! Every way the runtime can fail, as one error type whose messages say what to do next.
//!
//! Some variants are distinct on purpose because callers act on them: `CommandBufferOutOfMemory`
//! (the executor splits command buffers; the tuner marks the configuration invalid),
//! `DeviceLost` (the tuner re-creates the context) and `Timeout`.

use ash::vk;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Which memory ran out: the driver distinguishes device and host allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomKind {
    Device,
    Host,
}

impl fmt::Display for OomKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OomKind::Device => "device",
            OomKind::Host => "host",
        })
    }
}

impl OomKind {
    /// The OOM kind of a Vulkan result, if it is one of the two out-of-memory codes.
    pub fn of(result: vk::Result) -> Option<OomKind> {
        match result {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Some(OomKind::Device),
            vk::Result::ERROR_OUT_OF_HOST_MEMORY => Some(OomKind::Host),
            _ => None,
        }
    }
}

/// The point of a command buffer's life where the driver reported out-of-memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitStage {
    /// `vkEndCommandBuffer` (panvk reports its per-dispatch shared-memory allocations here).
    End,
    /// `vkQueueSubmit`.
    Submit,
}

impl fmt::Display for SubmitStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubmitStage::End => "vkEndCommandBuffer",
            SubmitStage::Submit => "vkQueueSubmit",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "the Vulkan loader (libvulkan.so.1) could not be loaded: {detail}\n\
         install it with the drivers (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers`), \
         or your GPU vendor's driver; on RK3588 see `rocky doctor`{hint}"
    )]
    LoaderMissing { detail: String, hint: String },

    #[error(
        "no Vulkan device found{detail}: install mesa-vulkan-drivers (lavapipe) or your GPU's \
         driver; on RK3588 see `rocky doctor`{hint}"
    )]
    NoDevice { detail: String, hint: String },

    #[error("Vulkan device `{name}` cannot be used by rocky: {reason}")]
    UnsupportedDevice { name: String, reason: String },

    #[error(
        "no Vulkan device matches `{selector}`; available devices:\n{available}\
         choose one by index (e.g. `0`) or by part of its name (e.g. `llvmpipe`)"
    )]
    NoMatchingDevice { selector: String, available: String },

    #[error("out of {kind} memory while {what}{}{hint}", size_suffix(*.bytes))]
    OutOfMemory {
        what: String,
        bytes: Option<u64>,
        kind: OomKind,
        hint: String,
    },

    #[error(
        "the command buffer ran out of {kind} memory at {stage} after {dispatches} dispatches \
         declaring {declared_shared_bytes} bytes of shared memory in total: the driver cannot hold \
         this much work in one command buffer; record fewer dispatches per command buffer or use a \
         smaller ubatch / schedule with less shared memory"
    )]
    CommandBufferOutOfMemory {
        stage: SubmitStage,
        kind: OomKind,
        dispatches: u32,
        declared_shared_bytes: u64,
    },

    #[error(
        "the Vulkan device was lost during {during} (the driver reset the GPU, often after a \
         kernel that faulted or ran too long); create a new context to continue"
    )]
    DeviceLost { during: String },

    #[error(
        "timed out after {waited:?} waiting for {what}; the GPU may be hung or the work too large"
    )]
    Timeout { what: String, waited: Duration },

    #[error(
        "kernel `{kernel}` needs device features this device lacks: {}; this device's default \
         schedules never need them (a schedule tuned on another device may): drop the tuned \
         schedule, or install a driver that offers them (`rocky devices` lists what this one has)",
        crate::promoted::describe_features(missing)
    )]
    MissingFeatures {
        kernel: String,
        missing: Vec<&'static str>,
    },

    #[error("kernel `{kernel}` does not fit this device: {reason}")]
    KernelExceedsLimits { kernel: String, reason: String },

    #[error("invalid dispatch of kernel `{kernel}`: {reason}")]
    InvalidDispatch { kernel: String, reason: String },

    #[error("invalid buffer access on `{buffer}`: {reason}")]
    InvalidBuffer { buffer: String, reason: String },

    #[error("creating the pipeline of kernel `{kernel}` failed: {result}")]
    PipelineCreation { kernel: String, result: vk::Result },

    #[error(
        "the compute queue of `{device}` has no timestamp support (timestampValidBits = 0): \
         GPU timing is not available on this device"
    )]
    TimestampsUnsupported { device: String },

    #[error("`{device}`: {}", crate::pipeline_stats::NOT_OFFERED)]
    StatisticsUnsupported { device: String },

    #[error("pipeline cache file {}: {source}", path.display())]
    CacheIo {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{call} failed: {result}")]
    Vulkan {
        call: &'static str,
        result: vk::Result,
    },
}

fn size_suffix(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!(" ({})", format_bytes(b)),
        None => String::new(),
    }
}

/// `1234567` → `"1234567 bytes (1.18 MiB)"`: exact for scripts, readable for people.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        value /= 1024.0;
        unit = u;
        if value < 1024.0 {
            break;
        }
    }
    format!("{bytes} bytes ({value:.2} {unit})")
}

impl RuntimeError {
    /// Wraps a failed Vulkan call; device loss and out-of-memory get their own variants.
    pub(crate) fn vk(call: &'static str, result: vk::Result) -> RuntimeError {
        if result == vk::Result::ERROR_DEVICE_LOST {
            return RuntimeError::DeviceLost {
                during: call.to_string(),
            };
        }
        if let Some(kind) = OomKind::of(result) {
            return RuntimeError::OutOfMemory {
                what: format!("calling {call}"),
                bytes: None,
                kind,
                hint: String::new(),
            };
        }
        RuntimeError::Vulkan { call, result }
    }

    pub fn is_device_lost(&self) -> bool {
        matches!(self, RuntimeError::DeviceLost { .. })
    }

    /// True for both a failed allocation and a command buffer the driver could not hold.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            RuntimeError::OutOfMemory { .. } | RuntimeError::CommandBufferOutOfMemory { .. }
        )
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_are_exact_and_readable() {
        assert_eq!(format_bytes(0), "0 bytes");
        assert_eq!(format_bytes(1023), "1023 bytes");
        assert_eq!(format_bytes(1024), "1024 bytes (1.00 KiB)");
        assert_eq!(format_bytes(3 << 20), "3145728 bytes (3.00 MiB)");
        assert_eq!(format_bytes(5 << 30), "5368709120 bytes (5.00 GiB)");
    }

    #[test]
    fn device_loss_and_oom_get_their_own_variants() {
        assert!(
            RuntimeError::vk("vkQueueWaitIdle", vk::Result::ERROR_DEVICE_LOST).is_device_lost()
        );
        let oom = RuntimeError::vk("vkCreateBuffer", vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        assert!(matches!(
            oom,
            RuntimeError::OutOfMemory {
                kind: OomKind::Host,
                ..
            }
        ));
        let other = RuntimeError::vk("vkCreateBuffer", vk::Result::ERROR_INITIALIZATION_FAILED);
        assert!(matches!(other, RuntimeError::Vulkan { .. }));
    }
}
