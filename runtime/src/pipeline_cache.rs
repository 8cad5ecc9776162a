//! A `VkPipelineCache` persisted on disk, so pipelines compiled once are not compiled again
//! by the driver on the next run (this matters on 2-core boards).
//!
//! File format: rocky's own header (magic, format version, payload length, FNV-1a checksum)
//! followed by the driver's cache blob. On load, the header and the Vulkan cache header
//! (vendor, device, pipelineCacheUUID) are checked before the blob is handed to the driver: a
//! truncated, corrupt or foreign file is discarded rather than trusted, since not every driver
//! validates what it is given. Saving writes a temporary file and renames it over the old one,
//! so a crash never leaves a half-written cache.

use crate::device::{Context, Shared};
use crate::error::{Result, RuntimeError};
use crate::info::DeviceInfo;
use ash::vk;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"ROCKYPC\0";
const FORMAT_VERSION: u32 = 1;
/// magic + version + payload length + checksum.
const HEADER_BYTES: usize = 8 + 4 + 8 + 8;
/// Vulkan's `VkPipelineCacheHeaderVersionOne`: length, version, vendor, device, UUID.
const VK_HEADER_BYTES: usize = 16 + vk::UUID_SIZE;

/// What happened to the cache file when the cache was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheLoad {
    /// No file (first run) or an in-memory cache.
    Empty,
    /// The file was valid for this device and its contents were given to the driver.
    Loaded { bytes: usize },
    /// The file was unusable and ignored; it is replaced on the next save.
    Discarded { reason: String },
}

pub struct PipelineCache {
    shared: Arc<Shared>,
    pub(crate) raw: vk::PipelineCache,
    path: Option<PathBuf>,
    load: CacheLoad,
}

impl PipelineCache {
    /// A cache that lives only as long as this object.
    pub fn in_memory(ctx: &Context) -> Result<PipelineCache> {
        PipelineCache::create(ctx, None, &[], CacheLoad::Empty)
    }

    /// The cache stored at `path`, or an empty one if the file is missing or unusable (see
    /// `load_status`). Only an unreadable existing file is an error.
    pub fn open(ctx: &Context, path: impl Into<PathBuf>) -> Result<PipelineCache> {
        let path = path.into();
        let (data, load) = match std::fs::read(&path) {
            Ok(bytes) => match validate(&bytes, &ctx.shared) {
                Ok(payload) => {
                    let load = CacheLoad::Loaded {
                        bytes: payload.len(),
                    };
                    (payload.to_vec(), load)
                }
                Err(reason) => (Vec::new(), CacheLoad::Discarded { reason }),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), CacheLoad::Empty),
            Err(source) => return Err(RuntimeError::CacheIo { path, source }),
        };
        match PipelineCache::create(ctx, Some(path.clone()), &data, load) {
            // A driver may still refuse data that passed our checks: start empty instead.
            Err(RuntimeError::Vulkan { result, .. }) if !data.is_empty() => PipelineCache::create(
                ctx,
                Some(path),
                &[],
                CacheLoad::Discarded {
                    reason: format!("the driver rejected it ({result})"),
                },
            ),
            other => other,
        }
    }

    /// The cache at `default_path` for this device, or in memory when there is no cache
    /// directory (no `XDG_CACHE_HOME` and no `HOME`).
    pub fn open_default(ctx: &Context) -> Result<PipelineCache> {
        match default_path(ctx.info()) {
            Some(path) => PipelineCache::open(ctx, path),
            None => PipelineCache::in_memory(ctx),
        }
    }

    fn create(
        ctx: &Context,
        path: Option<PathBuf>,
        data: &[u8],
        load: CacheLoad,
    ) -> Result<PipelineCache> {
        let info = vk::PipelineCacheCreateInfo::default().initial_data(data);
        // SAFETY: valid device; `data` passed the header checks (or is empty).
        let raw = unsafe { ctx.shared.device.create_pipeline_cache(&info, None) }
            .map_err(|r| RuntimeError::vk("vkCreatePipelineCache", r))?;
        Ok(PipelineCache {
            shared: ctx.shared.clone(),
            raw,
            path,
            load,
        })
    }

    pub fn load_status(&self) -> &CacheLoad {
        &self.load
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes the cache to its file (atomically) and returns the bytes of driver data saved;
    /// an in-memory cache saves nothing and returns 0.
    pub fn save(&self) -> Result<usize> {
        let Some(path) = &self.path else { return Ok(0) };
        // SAFETY: valid cache of this device.
        let payload = unsafe { self.shared.device.get_pipeline_cache_data(self.raw) }
            .map_err(|r| RuntimeError::vk("vkGetPipelineCacheData", r))?;
        let mut file = Vec::with_capacity(HEADER_BYTES + payload.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        file.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        file.extend_from_slice(&fnv1a64(&payload).to_le_bytes());
        file.extend_from_slice(&payload);
        write_atomically(path, &file).map_err(|source| RuntimeError::CacheIo {
            path: path.clone(),
            source,
        })?;
        Ok(payload.len())
    }
}

impl Drop for PipelineCache {
    fn drop(&mut self) {
        // SAFETY: pipelines created with this cache do not need it to stay alive.
        unsafe { self.shared.device.destroy_pipeline_cache(self.raw, None) };
    }
}

/// `$XDG_CACHE_HOME/rocky/` or `~/.cache/rocky/`, with a file per (vendor, device, driver
/// version): a driver update starts a new cache instead of fighting the old one.
pub fn default_path(info: &DeviceInfo) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("rocky").join(format!(
        "pipeline-cache-{:04x}-{:04x}-{}.bin",
        info.vendor_id, info.device_id, info.driver.version_raw
    )))
}

/// The driver payload of a cache file, or why it cannot be used on this device.
fn validate<'a>(file: &'a [u8], shared: &Shared) -> std::result::Result<&'a [u8], String> {
    if file.len() < HEADER_BYTES || &file[..8] != MAGIC {
        return Err("not a rocky pipeline cache file".to_string());
    }
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let version = u32_at(file, 8);
    if version != FORMAT_VERSION {
        return Err(format!(
            "cache format version {version}, expected {FORMAT_VERSION}"
        ));
    }
    let payload = &file[HEADER_BYTES..];
    let len = u64_at(file, 12);
    if len != payload.len() as u64 {
        return Err(format!(
            "truncated: header says {len} bytes, file has {}",
            payload.len()
        ));
    }
    if u64_at(file, 20) != fnv1a64(payload) {
        return Err("checksum mismatch (corrupt file)".to_string());
    }
    if payload.len() < VK_HEADER_BYTES {
        return Err("driver data too short for a Vulkan pipeline cache header".to_string());
    }
    let header_len = u32_at(payload, 0) as usize;
    let header_version = u32_at(payload, 4);
    if header_len < VK_HEADER_BYTES || header_len > payload.len() || header_version != 1 {
        return Err("malformed Vulkan pipeline cache header".to_string());
    }
    let (vendor, device) = (u32_at(payload, 8), u32_at(payload, 12));
    let info = &shared.info;
    if vendor != info.vendor_id || device != info.device_id {
        return Err(format!(
            "made for device {vendor:04x}:{device:04x}, this is {:04x}:{:04x}",
            info.vendor_id, info.device_id
        ));
    }
    if payload[16..16 + vk::UUID_SIZE] != shared.pipeline_cache_uuid {
        return Err("made by another driver build (pipelineCacheUUID differs)".to_string());
    }
    Ok(payload)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// 64-bit FNV-1a: detects corruption (not tampering) without a hashing dependency.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_published_vectors() {
        // Test vectors from the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = std::env::temp_dir().join(format!("rocky-cache-unit-{}", std::process::id()));
        let path = dir.join("sub").join("c.bin");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
