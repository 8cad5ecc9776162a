//! Storage buffers: allocation, host upload/download (in place on UMA, through staging copies
//! elsewhere), and binding by sub-range for tensors larger than `maxStorageBufferRange`.

use crate::device::{Context, Shared};
use crate::error::{format_bytes, Result, RuntimeError};
use crate::memory::{allocate, MemoryUse};
use crate::transfer::{copy_buffer, copy_regions, STAGING_CHUNK};
use ash::vk;
use std::ptr::NonNull;
use std::sync::Arc;

/// Element types that can be copied to and from buffers as raw bytes: every bit pattern is a
/// valid value and there is no padding.
pub trait Plain: Copy + Default + 'static + private::Sealed {}

mod private {
    pub trait Sealed {}
}

macro_rules! plain {
    ($($t:ty),*) => { $( impl private::Sealed for $t {} impl Plain for $t {} )* };
}
plain!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

fn as_bytes<T: Plain>(data: &[T]) -> &[u8] {
    // SAFETY: `Plain` types have no padding and no invalid bit patterns.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
}

fn as_bytes_mut<T: Plain>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as above; any bytes written are a valid `T`.
    unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().cast(), std::mem::size_of_val(data)) }
}

/// A storage buffer with its own memory. Usable as a storage buffer and as a copy source and
/// destination.
pub struct Buffer {
    pub(crate) shared: Arc<Shared>,
    pub(crate) raw: vk::Buffer,
    memory: vk::DeviceMemory,
    size: u64,
    allocation_size: u64,
    /// Persistently mapped pointer when the memory is host-visible.
    mapped: Option<NonNull<u8>>,
    coherent: bool,
    label: String,
}

// SAFETY: the mapped pointer is only written through `&mut self` and read through `&self`;
// Vulkan handles are plain identifiers usable from any thread.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("label", &self.label)
            .field("size", &self.size)
            .field("host_mapped", &self.mapped.is_some())
            .finish()
    }
}

impl Buffer {
    /// A tensor buffer of `size` bytes (contents undefined). `label` names it in errors.
    pub fn new(ctx: &Context, size: u64, label: &str) -> Result<Buffer> {
        Buffer::with_use(&ctx.shared, size, label, MemoryUse::Tensor)
    }

    /// A small buffer the host writes and the GPU reads in place (host-visible memory): inputs
    /// that change every call, such as a prompt's token ids, reach the GPU without a staging
    /// copy and the wait for it.
    pub fn host_input(ctx: &Context, size: u64, label: &str) -> Result<Buffer> {
        Buffer::with_use(&ctx.shared, size, label, MemoryUse::StagingUpload)
    }

    /// A small buffer the GPU writes and the host reads in place (host-cached memory where the
    /// device has it): results such as the logits, read without a staging copy.
    pub fn host_output(ctx: &Context, size: u64, label: &str) -> Result<Buffer> {
        Buffer::with_use(&ctx.shared, size, label, MemoryUse::StagingDownload)
    }

    /// A tensor buffer holding `data`.
    pub fn from_slice<T: Plain>(ctx: &Context, data: &[T], label: &str) -> Result<Buffer> {
        let mut buffer = Buffer::new(ctx, std::mem::size_of_val(data) as u64, label)?;
        buffer.upload(0, data)?;
        Ok(buffer)
    }

    pub(crate) fn with_use(
        shared: &Arc<Shared>,
        size: u64,
        label: &str,
        usage: MemoryUse,
    ) -> Result<Buffer> {
        if size == 0 {
            return Err(RuntimeError::InvalidBuffer {
                buffer: label.to_string(),
                reason: "a buffer cannot be empty (size 0)".to_string(),
            });
        }
        let device = &shared.device;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let what = format!("buffer `{label}`");
        // SAFETY: valid device and create info.
        let raw = unsafe { device.create_buffer(&info, None) }.map_err(|r| match r {
            r if crate::error::OomKind::of(r).is_some() => RuntimeError::OutOfMemory {
                what: format!("creating {what}"),
                bytes: Some(size),
                kind: crate::error::OomKind::of(r).expect("checked"),
                hint: String::new(),
            },
            r => RuntimeError::vk("vkCreateBuffer", r),
        })?;
        // SAFETY: `raw` was just created from this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(raw) };
        let allocation = match allocate(shared, requirements, usage, &what) {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: unused buffer without memory.
                unsafe { device.destroy_buffer(raw, None) };
                return Err(e);
            }
        };
        let host_visible = allocation
            .flags
            .contains(vk::MemoryPropertyFlags::HOST_VISIBLE);
        let result = (|| -> Result<Option<NonNull<u8>>> {
            // SAFETY: memory was allocated for these requirements; offset 0 is aligned.
            unsafe { device.bind_buffer_memory(raw, allocation.memory, 0) }
                .map_err(|r| RuntimeError::vk("vkBindBufferMemory", r))?;
            if !host_visible {
                return Ok(None);
            }
            // SAFETY: host-visible memory, mapped once for the buffer's lifetime.
            let ptr = unsafe {
                device.map_memory(
                    allocation.memory,
                    0,
                    vk::WHOLE_SIZE,
                    vk::MemoryMapFlags::empty(),
                )
            }
            .map_err(|r| RuntimeError::vk("vkMapMemory", r))?;
            Ok(NonNull::new(ptr.cast()))
        })();
        let mapped = match result {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: nothing else refers to these yet.
                unsafe {
                    device.destroy_buffer(raw, None);
                    device.free_memory(allocation.memory, None);
                }
                return Err(e);
            }
        };
        Ok(Buffer {
            shared: shared.clone(),
            raw,
            memory: allocation.memory,
            size,
            allocation_size: allocation.size,
            mapped,
            coherent: allocation
                .flags
                .contains(vk::MemoryPropertyFlags::HOST_COHERENT),
            label: label.to_string(),
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether the host reads and writes this buffer in place (no staging copy).
    pub fn is_host_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Copies byte spans between buffers on the device, in one submission that is waited for:
    /// each `(src, src_offset, dst, dst_offset, size)`. Every span is checked first; nothing is
    /// copied when one is out of range.
    pub fn copy_spans(spans: &[(&Buffer, u64, &Buffer, u64, u64)]) -> Result<()> {
        let Some((first, ..)) = spans.first() else {
            return Ok(());
        };
        let mut copies = Vec::with_capacity(spans.len());
        for &(src, src_offset, dst, dst_offset, size) in spans {
            src.check_span(src_offset, size)?;
            dst.check_span(dst_offset, size)?;
            if size > 0 {
                let region = vk::BufferCopy {
                    src_offset,
                    dst_offset,
                    size,
                };
                copies.push((src.raw, dst.raw, region));
            }
        }
        copy_regions(&first.shared, &copies)
    }

    /// The whole buffer as a binding.
    pub fn whole(&self) -> BufferRange<'_> {
        BufferRange {
            buffer: self,
            offset: 0,
            size: self.size,
        }
    }

    /// `size` bytes at `offset` as a binding; checked against the buffer here and against the
    /// device's alignment and range limits when dispatched.
    pub fn range(&self, offset: u64, size: u64) -> Result<BufferRange<'_>> {
        self.check_span(offset, size)?;
        Ok(BufferRange {
            buffer: self,
            offset,
            size,
        })
    }

    /// Copies `data` into the buffer at byte `offset`.
    pub fn upload<T: Plain>(&mut self, offset: u64, data: &[T]) -> Result<()> {
        self.upload_bytes(offset, as_bytes(data))
    }

    /// Reads `count` elements starting at byte `offset`.
    pub fn download<T: Plain>(&self, offset: u64, count: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); count];
        self.download_bytes(offset, as_bytes_mut(&mut out))?;
        Ok(out)
    }

    pub fn upload_f32(&mut self, offset: u64, data: &[f32]) -> Result<()> {
        self.upload(offset, data)
    }
    pub fn upload_u32(&mut self, offset: u64, data: &[u32]) -> Result<()> {
        self.upload(offset, data)
    }
    pub fn download_f32(&self, offset: u64, count: usize) -> Result<Vec<f32>> {
        self.download(offset, count)
    }
    pub fn download_u32(&self, offset: u64, count: usize) -> Result<Vec<u32>> {
        self.download(offset, count)
    }
    pub fn download_u8(&self, offset: u64, count: usize) -> Result<Vec<u8>> {
        self.download(offset, count)
    }

    pub fn upload_bytes(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_span(offset, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        if let Some(ptr) = self.mapped {
            // SAFETY: the span is inside the mapped buffer (checked above); `&mut self` means
            // no other host access. The caller must not upload while the GPU uses the buffer,
            // which the submit-and-wait API guarantees.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    ptr.as_ptr().add(offset as usize),
                    data.len(),
                );
            }
            return self.flush(offset, data.len() as u64);
        }
        let chunk = STAGING_CHUNK.min(data.len() as u64);
        let mut staging = Buffer::with_use(
            &self.shared,
            chunk,
            "upload staging",
            MemoryUse::StagingUpload,
        )?;
        for (i, piece) in data.chunks(chunk as usize).enumerate() {
            staging.upload_bytes(0, piece)?;
            let dst = offset + i as u64 * chunk;
            copy_buffer(
                &self.shared,
                staging.raw,
                0,
                self.raw,
                dst,
                piece.len() as u64,
            )?;
        }
        Ok(())
    }

    pub fn download_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check_span(offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        if let Some(ptr) = self.mapped {
            self.invalidate(offset, out.len() as u64)?;
            // SAFETY: the span is inside the mapped buffer (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.as_ptr().add(offset as usize),
                    out.as_mut_ptr(),
                    out.len(),
                );
            }
            return Ok(());
        }
        let chunk = STAGING_CHUNK.min(out.len() as u64);
        let staging = Buffer::with_use(
            &self.shared,
            chunk,
            "download staging",
            MemoryUse::StagingDownload,
        )?;
        for (i, piece) in out.chunks_mut(chunk as usize).enumerate() {
            let src = offset + i as u64 * chunk;
            copy_buffer(
                &self.shared,
                self.raw,
                src,
                staging.raw,
                0,
                piece.len() as u64,
            )?;
            staging.download_bytes(0, piece)?;
        }
        Ok(())
    }

    fn check_span(&self, offset: u64, size: u64) -> Result<()> {
        // (`map_or` rather than `is_none_or`: the workspace supports Rust 1.80.)
        if offset.checked_add(size).map_or(true, |end| end > self.size) {
            return Err(RuntimeError::InvalidBuffer {
                buffer: self.label.clone(),
                reason: format!(
                    "bytes {offset}..{} are outside the buffer of {}",
                    offset.saturating_add(size),
                    format_bytes(self.size)
                ),
            });
        }
        Ok(())
    }

    /// The `nonCoherentAtomSize`-aligned memory range covering `[offset, offset + size)`.
    fn atom_range(&self, offset: u64, size: u64) -> vk::MappedMemoryRange<'static> {
        let atom = self.shared.info.limits.non_coherent_atom_size.max(1);
        let start = offset / atom * atom;
        let end = (offset + size).div_ceil(atom) * atom;
        let end = end.min(self.allocation_size);
        vk::MappedMemoryRange::default()
            .memory(self.memory)
            .offset(start)
            .size(end - start)
    }

    fn flush(&self, offset: u64, size: u64) -> Result<()> {
        if self.coherent {
            return Ok(());
        }
        let range = self.atom_range(offset, size);
        // SAFETY: the range lies in mapped memory of this buffer.
        unsafe { self.shared.device.flush_mapped_memory_ranges(&[range]) }
            .map_err(|r| RuntimeError::vk("vkFlushMappedMemoryRanges", r))
    }

    fn invalidate(&self, offset: u64, size: u64) -> Result<()> {
        if self.coherent {
            return Ok(());
        }
        let range = self.atom_range(offset, size);
        // SAFETY: the range lies in mapped memory of this buffer.
        unsafe { self.shared.device.invalidate_mapped_memory_ranges(&[range]) }
            .map_err(|r| RuntimeError::vk("vkInvalidateMappedMemoryRanges", r))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: Recorders borrow the buffers they use and wait for their work before they
        // are dropped, so the GPU no longer uses this buffer.
        unsafe {
            if self.mapped.is_some() {
                self.shared.device.unmap_memory(self.memory);
            }
            self.shared.device.destroy_buffer(self.raw, None);
            self.shared.device.free_memory(self.memory, None);
        }
    }
}

/// A byte range of a buffer bound to one kernel binding.
#[derive(Clone, Copy, Debug)]
pub struct BufferRange<'a> {
    pub buffer: &'a Buffer,
    pub offset: u64,
    pub size: u64,
}

/// One bindable piece of a large buffer: `[offset, offset + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub size: u64,
}

/// Splits `total` bytes into consecutive pieces that can each be bound as one storage buffer:
/// every piece is at most `max_range` bytes (`maxStorageBufferRange`), every offset is a
/// multiple of `offset_alignment` (`minStorageBufferOffsetAlignment`) and of `granule` (a row
/// or quantization block, so no element is cut in two). All pieces but the last have the same
/// size; together they cover `[0, total)` exactly.
pub fn bindable_spans(
    total: u64,
    max_range: u64,
    offset_alignment: u64,
    granule: u64,
) -> Result<Vec<Span>> {
    let invalid = |reason: String| RuntimeError::InvalidBuffer {
        buffer: "bindable spans".to_string(),
        reason,
    };
    if offset_alignment == 0 || granule == 0 {
        return Err(invalid(
            "alignment and granule must be at least 1 byte".to_string(),
        ));
    }
    let step_unit = lcm(offset_alignment, granule)
        .ok_or_else(|| invalid("alignment × granule overflows".to_string()))?;
    let step = max_range / step_unit * step_unit;
    if step == 0 {
        return Err(invalid(format!(
            "a piece must be a multiple of {step_unit} bytes (lcm of the offset alignment \
             {offset_alignment} and the granule {granule}) but the device binds at most {max_range} \
             bytes at once"
        )));
    }
    let mut spans = Vec::with_capacity(total.div_ceil(step) as usize);
    let mut offset = 0;
    while offset < total {
        let size = step.min(total - offset);
        spans.push(Span { offset, size });
        offset += size;
    }
    Ok(spans)
}

impl Buffer {
    /// This buffer split into pieces this device can bind (see [`bindable_spans`]).
    pub fn bindable_spans(&self, granule: u64) -> Result<Vec<Span>> {
        let caps = &self.shared.caps;
        bindable_spans(
            self.size,
            caps.max_storage_buffer_range as u64,
            caps.min_storage_buffer_offset_alignment,
            granule,
        )
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> Option<u64> {
    (a / gcd(a, b)).checked_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every property the doc of `bindable_spans` promises.
    fn check(total: u64, max: u64, align: u64, granule: u64) {
        let spans = bindable_spans(total, max, align, granule).unwrap();
        let mut expected_offset = 0;
        for (i, s) in spans.iter().enumerate() {
            assert_eq!(s.offset, expected_offset, "contiguous");
            assert!(s.size > 0 && s.size <= max, "size within range");
            assert_eq!(s.offset % align, 0, "offset aligned");
            assert_eq!(s.offset % granule, 0, "offset on a granule");
            if i + 1 < spans.len() {
                assert_eq!(s.size, spans[0].size, "equal pieces before the last");
            }
            expected_offset += s.size;
        }
        assert_eq!(expected_offset, total, "covers everything");
    }

    #[test]
    fn spans_cover_respect_limits_and_alignment() {
        // A 151936 × 2048 f16 embedding on lavapipe's 128 MiB limit.
        check(151936 * 2048 * 2, 128 << 20, 16, 2048 * 2);
        // Q4_K blocks of 144 bytes with a 64-byte alignment: pieces are multiples of 576.
        check(10_000_000, 1 << 20, 64, 144);
        check(1000, 4096, 16, 4);
        check(4096, 4096, 256, 1);
        check(0, 4096, 256, 1);
        let spans = bindable_spans(10, 4, 1, 1).unwrap();
        assert_eq!(
            spans.iter().map(|s| s.size).collect::<Vec<_>>(),
            vec![4, 4, 2]
        );
        let spans = bindable_spans(1_000_000, 1000, 64, 144).unwrap();
        assert_eq!(spans[0].size, 576);
    }

    #[test]
    fn impossible_splits_are_errors() {
        assert!(bindable_spans(100, 10, 16, 1).is_err());
        assert!(bindable_spans(100, 10, 0, 1).is_err());
        let err = bindable_spans(100, 100, 64, 144).unwrap_err().to_string();
        assert!(err.contains("576"), "{err}");
    }
}
