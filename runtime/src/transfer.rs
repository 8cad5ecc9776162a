//! Buffer-to-buffer copies submitted and waited for at once: the staging path of uploads and
//! downloads on devices without unified memory.

use crate::device::Shared;
use crate::error::{OomKind, Result, RuntimeError};
use crate::submit::CommandBuffer;
use ash::vk;
use std::sync::Arc;
use std::time::Duration;

/// Largest staging buffer: big uploads go through it in pieces instead of doubling their
/// memory footprint.
pub(crate) const STAGING_CHUNK: u64 = 64 << 20;

/// Generous: a 64 MiB copy takes milliseconds; only a hung device gets near this.
const COPY_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn copy_buffer(
    shared: &Arc<Shared>,
    src: vk::Buffer,
    src_offset: u64,
    dst: vk::Buffer,
    dst_offset: u64,
    size: u64,
) -> Result<()> {
    let region = vk::BufferCopy {
        src_offset,
        dst_offset,
        size,
    };
    copy_regions(shared, &[(src, dst, region)])
}

/// Several buffer-to-buffer copies in one command buffer, submitted and waited for once (a
/// KV-cache snapshot copies two regions per layer).
pub(crate) fn copy_regions(
    shared: &Arc<Shared>,
    copies: &[(vk::Buffer, vk::Buffer, vk::BufferCopy)],
) -> Result<()> {
    let size: u64 = copies.iter().map(|(_, _, r)| r.size).sum();
    if copies.is_empty() {
        return Ok(());
    }
    let mut cb = CommandBuffer::new(shared)?;
    cb.begin()?;
    let device = &shared.device;
    // Earlier submissions may have written `src` or still read `dst` (a fence wait alone does
    // not make device writes visible to later device reads), so order everything before the
    // copy; afterwards make the result visible to the host and to later GPU work.
    let before = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
    let after = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::HOST_READ
                | vk::AccessFlags::MEMORY_READ
                | vk::AccessFlags::MEMORY_WRITE,
        );
    // SAFETY: recording into a fresh command buffer; all buffers are alive for the call
    // (callers hold them) and the copy is waited for below.
    unsafe {
        device.cmd_pipeline_barrier(
            cb.raw,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::TRANSFER,
            vk::DependencyFlags::empty(),
            &[before],
            &[],
            &[],
        );
        for (src, dst, region) in copies {
            device.cmd_copy_buffer(cb.raw, *src, *dst, std::slice::from_ref(region));
        }
        device.cmd_pipeline_barrier(
            cb.raw,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST | vk::PipelineStageFlags::ALL_COMMANDS,
            vk::DependencyFlags::empty(),
            &[after],
            &[],
            &[],
        );
    }
    let oom = |kind| RuntimeError::OutOfMemory {
        what: "submitting a staging copy".to_string(),
        bytes: Some(size),
        kind,
        hint: String::new(),
    };
    let map = |call: &'static str, r: vk::Result| match OomKind::of(r) {
        Some(kind) => oom(kind),
        None => RuntimeError::vk(call, r),
    };
    cb.end().map_err(|r| map("vkEndCommandBuffer", r))?;
    cb.submit().map_err(|r| map("vkQueueSubmit", r))?;
    cb.wait(COPY_TIMEOUT, "a staging copy")
}
