//! The spirv-val stage of a trial: every compiled kernel is validated by the SPIRV-Tools
//! validator before its pipeline is created, so an invalid module is a recorded `spirv_val`
//! failure rather than undefined behaviour in the driver (some drivers crash on bad SPIR-V).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The `spirv-val` executable on `PATH`, looked up once per process.
pub fn spirv_val_path() -> Option<&'static Path> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("spirv-val"))
            .find(|p| p.is_file())
    })
    .as_deref()
}

/// The `--target-env` for a module of SPIR-V `version`: the Vulkan version that introduced
/// it (SPIR-V 1.4 is allowed on Vulkan 1.1 with VK_KHR_spirv_1_4).
pub fn target_env(version: (u8, u8)) -> Result<&'static str, String> {
    match version {
        (1, 0) => Ok("vulkan1.0"),
        (1, 1..=3) => Ok("vulkan1.1"),
        (1, 4) => Ok("vulkan1.1spv1.4"),
        (1, 5) => Ok("vulkan1.2"),
        (1, 6) => Ok("vulkan1.3"),
        (major, minor) => Err(format!(
            "no Vulkan target environment for SPIR-V {major}.{minor}"
        )),
    }
}

/// Why a module did not pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// spirv-val ran and rejected the module: the kernel is invalid.
    #[error("spirv-val --target-env {env} rejected the module: {message}")]
    Rejected { env: &'static str, message: String },
    /// The validation could not be done (not the kernel's fault).
    #[error("{0}")]
    CannotRun(String),
}

/// Validates `words` (SPIR-V `version`) with the validator at `exe`, fed through stdin.
pub fn validate(exe: &Path, words: &[u32], version: (u8, u8)) -> Result<(), ValidationError> {
    let env = target_env(version).map_err(ValidationError::CannotRun)?;
    let cannot_run = |e: std::io::Error| {
        ValidationError::CannotRun(format!("cannot run {}: {e}", exe.display()))
    };
    let mut child = Command::new(exe)
        .args(["--target-env", env, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot_run)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    // A write error means spirv-val exited early; its status and output say why.
    let _ = child.stdin.take().map(|mut stdin| stdin.write_all(&bytes));
    let out = child.wait_with_output().map_err(cannot_run)?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Err(ValidationError::Rejected {
        env,
        message: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_spirv_version_gets_its_vulkan_environment() {
        assert_eq!(target_env((1, 3)), Ok("vulkan1.1"));
        assert_eq!(target_env((1, 4)), Ok("vulkan1.1spv1.4"));
        assert_eq!(target_env((1, 5)), Ok("vulkan1.2"));
        assert_eq!(target_env((1, 6)), Ok("vulkan1.3"));
        assert!(target_env((2, 0)).unwrap_err().contains("SPIR-V 2.0"));
    }

    #[test]
    fn a_missing_validator_is_an_error_naming_it() {
        let e = validate(Path::new("/nonexistent/spirv-val"), &[0x0723_0203], (1, 5)).unwrap_err();
        assert!(matches!(e, ValidationError::CannotRun(_)), "{e:?}");
        assert!(
            e.to_string().contains("cannot run /nonexistent/spirv-val"),
            "{e}"
        );
    }
}
