//! Device memory: which memory type a buffer gets, and allocating it with errors that name
//! the size and the purpose.

use crate::device::Shared;
use crate::error::{format_bytes, OomKind, Result, RuntimeError};
use ash::vk;

/// What a buffer's memory is for; decides the memory type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryUse {
    /// A tensor: the GPU reads/writes it, the host uploads/downloads it. On UMA devices it is
    /// host-visible device-local memory written and read in place; elsewhere device-local
    /// memory reached through staging copies.
    Tensor,
    /// Host-side staging for uploads (write-combined is fine).
    StagingUpload,
    /// Host-side staging for downloads (host-cached preferred: the CPU reads it).
    StagingDownload,
}

/// Memory property sets to try, best first, for `usage` on a device that is (not) UMA.
pub(crate) fn preferences(usage: MemoryUse, uma: bool) -> Vec<vk::MemoryPropertyFlags> {
    use vk::MemoryPropertyFlags as M;
    match usage {
        MemoryUse::Tensor if uma => vec![
            M::DEVICE_LOCAL | M::HOST_VISIBLE | M::HOST_COHERENT,
            M::DEVICE_LOCAL | M::HOST_VISIBLE,
            M::DEVICE_LOCAL,
            M::empty(),
        ],
        MemoryUse::Tensor => vec![M::DEVICE_LOCAL, M::empty()],
        MemoryUse::StagingUpload => {
            vec![M::HOST_VISIBLE | M::HOST_COHERENT, M::HOST_VISIBLE]
        }
        MemoryUse::StagingDownload => vec![
            M::HOST_VISIBLE | M::HOST_COHERENT | M::HOST_CACHED,
            M::HOST_VISIBLE | M::HOST_CACHED,
            M::HOST_VISIBLE | M::HOST_COHERENT,
            M::HOST_VISIBLE,
        ],
    }
}

/// Memory type indices allowed by `type_bits`, in order of `preferences` (each preference's
/// matches in index order, no duplicates). Lazily allocated and protected types are never
/// used: buffers cannot live in them.
pub(crate) fn candidate_types(
    props: &vk::PhysicalDeviceMemoryProperties,
    type_bits: u32,
    preferences: &[vk::MemoryPropertyFlags],
) -> Vec<u32> {
    let unusable = vk::MemoryPropertyFlags::LAZILY_ALLOCATED | vk::MemoryPropertyFlags::PROTECTED;
    let mut out = Vec::new();
    for want in preferences {
        for (i, t) in props.memory_types[..props.memory_type_count as usize]
            .iter()
            .enumerate()
        {
            let i = i as u32;
            if type_bits & (1 << i) != 0
                && t.property_flags.contains(*want)
                && !t.property_flags.intersects(unusable)
                && !out.contains(&i)
            {
                out.push(i);
            }
        }
    }
    out
}

/// One allocation and what kind of memory it is.
pub(crate) struct Allocation {
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) size: u64,
    pub(crate) flags: vk::MemoryPropertyFlags,
}

/// Allocates memory for `requirements`, trying memory types in order of preference and moving
/// to the next one when a heap is full. `what` names the purpose in errors ("tensor `x`").
pub(crate) fn allocate(
    shared: &Shared,
    requirements: vk::MemoryRequirements,
    usage: MemoryUse,
    what: &str,
) -> Result<Allocation> {
    let props = &shared.memory_properties;
    let size = requirements.size;
    let oom = |kind, hint: String| RuntimeError::OutOfMemory {
        what: format!("allocating {what}"),
        bytes: Some(size),
        kind,
        hint,
    };
    if let Some(max) = shared.info.limits.max_memory_allocation_size {
        if size > max {
            return Err(oom(
                OomKind::Device,
                format!(
                    ": larger than this device's maxMemoryAllocationSize of {}; split the tensor",
                    format_bytes(max)
                ),
            ));
        }
    }
    let candidates = candidate_types(
        props,
        requirements.memory_type_bits,
        &preferences(usage, shared.caps.uma),
    );
    if candidates.is_empty() {
        return Err(RuntimeError::InvalidBuffer {
            buffer: what.to_string(),
            reason: format!("no memory type of this device suits {usage:?} memory"),
        });
    }
    let largest_heap = candidates
        .iter()
        .map(|&t| props.memory_heaps[props.memory_types[t as usize].heap_index as usize].size)
        .max()
        .unwrap_or(0);
    if size > largest_heap {
        return Err(oom(
            OomKind::Device,
            format!(
                ": the largest usable memory heap holds only {}",
                format_bytes(largest_heap)
            ),
        ));
    }

    let mut last_oom = OomKind::Device;
    for type_index in candidates {
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index);
        // SAFETY: valid device and allocation info.
        match unsafe { shared.device.allocate_memory(&info, None) } {
            Ok(memory) => {
                return Ok(Allocation {
                    memory,
                    size,
                    flags: props.memory_types[type_index as usize].property_flags,
                })
            }
            Err(r) => match OomKind::of(r) {
                // A full heap: the next memory type may live in another one.
                Some(kind) => last_oom = kind,
                None => return Err(RuntimeError::vk("vkAllocateMemory", r)),
            },
        }
    }
    Err(oom(
        last_oom,
        ": free other buffers or use a smaller model / ubatch".to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vk::MemoryPropertyFlags as M;

    fn props(types: &[M]) -> vk::PhysicalDeviceMemoryProperties {
        let mut p = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: types.len() as u32,
            memory_heap_count: 1,
            ..Default::default()
        };
        for (i, &f) in types.iter().enumerate() {
            p.memory_types[i] = vk::MemoryType {
                property_flags: f,
                heap_index: 0,
            };
        }
        p
    }

    #[test]
    fn uma_tensors_prefer_coherent_host_visible_device_local() {
        let p = props(&[
            M::DEVICE_LOCAL,
            M::DEVICE_LOCAL | M::HOST_VISIBLE,
            M::DEVICE_LOCAL | M::HOST_VISIBLE | M::HOST_COHERENT,
        ]);
        let c = candidate_types(&p, 0b111, &preferences(MemoryUse::Tensor, true));
        assert_eq!(c, vec![2, 1, 0]);
        // The same types on a non-UMA device: device-local first.
        let c = candidate_types(&p, 0b111, &preferences(MemoryUse::Tensor, false));
        assert_eq!(c[0], 0);
    }

    #[test]
    fn type_bits_and_unusable_types_are_respected() {
        let p = props(&[
            M::DEVICE_LOCAL | M::LAZILY_ALLOCATED,
            M::HOST_VISIBLE | M::HOST_COHERENT,
            M::HOST_VISIBLE | M::HOST_COHERENT | M::HOST_CACHED,
        ]);
        let down = preferences(MemoryUse::StagingDownload, false);
        assert_eq!(candidate_types(&p, 0b111, &down), vec![2, 1]);
        assert_eq!(candidate_types(&p, 0b011, &down), vec![1]);
        assert!(candidate_types(&p, 0b001, &down).is_empty());
        // Tensors on a non-UMA device fall back to any type when no device-local one is left.
        assert_eq!(
            candidate_types(&p, 0b011, &preferences(MemoryUse::Tensor, false)),
            vec![1]
        );
    }
}
