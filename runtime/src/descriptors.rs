//! Descriptor sets for dispatches, from pools that grow on demand and are reset together with
//! the command buffer that uses them.

use crate::device::Shared;
use crate::error::{OomKind, Result, RuntimeError};
use ash::vk;
use std::sync::Arc;

const SETS_PER_POOL: u32 = 256;
/// Storage-buffer descriptors per set a pool is sized for (GEMM with bias uses 4).
const BUFFERS_PER_SET: u32 = 8;

pub(crate) struct DescriptorPools {
    shared: Arc<Shared>,
    pools: Vec<vk::DescriptorPool>,
    /// The pool allocations come from; earlier ones are full.
    current: usize,
}

impl DescriptorPools {
    pub(crate) fn new(shared: &Arc<Shared>) -> DescriptorPools {
        DescriptorPools {
            shared: shared.clone(),
            pools: Vec::new(),
            current: 0,
        }
    }

    /// One set of `layout`, which holds `buffers` storage-buffer descriptors.
    pub(crate) fn allocate(
        &mut self,
        layout: vk::DescriptorSetLayout,
        buffers: u32,
    ) -> Result<vk::DescriptorSet> {
        let layouts = [layout];
        loop {
            if self.current == self.pools.len() {
                self.pools.push(self.create_pool(buffers)?);
            }
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(self.pools[self.current])
                .set_layouts(&layouts);
            // SAFETY: valid pool and layout of this device.
            match unsafe { self.shared.device.allocate_descriptor_sets(&info) } {
                Ok(sets) => return Ok(sets[0]),
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {
                    self.current += 1;
                }
                Err(r) => {
                    return Err(match OomKind::of(r) {
                        Some(kind) => RuntimeError::OutOfMemory {
                            what: "allocating a descriptor set".to_string(),
                            bytes: None,
                            kind,
                            hint: String::new(),
                        },
                        None => RuntimeError::vk("vkAllocateDescriptorSets", r),
                    })
                }
            }
        }
    }

    /// Frees every set; only when no submission using them is pending.
    pub(crate) fn reset(&mut self) -> Result<()> {
        for &pool in &self.pools {
            // SAFETY: the caller guarantees no pending work uses these sets.
            unsafe {
                self.shared
                    .device
                    .reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty())
            }
            .map_err(|r| RuntimeError::vk("vkResetDescriptorPool", r))?;
        }
        self.current = 0;
        Ok(())
    }

    fn create_pool(&self, buffers_needed: u32) -> Result<vk::DescriptorPool> {
        let per_set = buffers_needed.max(BUFFERS_PER_SET);
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: per_set * SETS_PER_POOL,
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_POOL)
            .pool_sizes(&sizes);
        // SAFETY: valid device and create info.
        unsafe { self.shared.device.create_descriptor_pool(&info, None) }
            .map_err(|r| RuntimeError::vk("vkCreateDescriptorPool", r))
    }

    /// Leaks the pools instead of destroying them (their sets may still be in use by a
    /// submission that never finished).
    pub(crate) fn leak(&mut self) {
        self.pools.clear();
    }
}

impl Drop for DescriptorPools {
    fn drop(&mut self) {
        for &pool in &self.pools {
            // SAFETY: the owner waited for (or leaked) the work using these sets.
            unsafe { self.shared.device.destroy_descriptor_pool(pool, None) };
        }
    }
}
