//! One command buffer with its pool and fence: begin, end, submit, wait. Knows nothing about
//! what is recorded; `commands::Recorder` and `transfer` build on it.

use crate::device::Shared;
use crate::error::{Result, RuntimeError};
use ash::vk;
use std::sync::Arc;
use std::time::Duration;

/// How long `Drop` waits for a still-running submission before giving up and leaking the
/// command buffer (destroying objects the GPU still uses would be undefined behaviour).
const DROP_WAIT: Duration = Duration::from_secs(10);

pub(crate) struct CommandBuffer {
    pub(crate) shared: Arc<Shared>,
    pool: vk::CommandPool,
    pub(crate) raw: vk::CommandBuffer,
    fence: vk::Fence,
    /// Submitted and not yet known to be finished.
    pending: bool,
}

impl CommandBuffer {
    pub(crate) fn new(shared: &Arc<Shared>) -> Result<CommandBuffer> {
        let device = &shared.device;
        let pool_info =
            vk::CommandPoolCreateInfo::default().queue_family_index(shared.queue_family);
        // SAFETY: valid device; the objects are destroyed in Drop (or on the error paths).
        unsafe {
            let pool = device
                .create_command_pool(&pool_info, None)
                .map_err(|r| RuntimeError::vk("vkCreateCommandPool", r))?;
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let raw = match device.allocate_command_buffers(&alloc) {
                Ok(v) => v[0],
                Err(r) => {
                    device.destroy_command_pool(pool, None);
                    return Err(RuntimeError::vk("vkAllocateCommandBuffers", r));
                }
            };
            let fence = match device.create_fence(&vk::FenceCreateInfo::default(), None) {
                Ok(f) => f,
                Err(r) => {
                    device.destroy_command_pool(pool, None);
                    return Err(RuntimeError::vk("vkCreateFence", r));
                }
            };
            Ok(CommandBuffer {
                shared: shared.clone(),
                pool,
                raw,
                fence,
                pending: false,
            })
        }
    }

    /// Resets the pool (freeing what the driver allocated for earlier recordings, e.g. panvk's
    /// shared-memory regions) and starts recording.
    pub(crate) fn begin(&mut self) -> Result<()> {
        self.require_idle("begin recording")?;
        let device = &self.shared.device;
        // SAFETY: not pending (checked), so the pool's buffer is not in use.
        unsafe {
            device
                .reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
                .map_err(|r| RuntimeError::vk("vkResetCommandPool", r))?;
            device
                .begin_command_buffer(self.raw, &vk::CommandBufferBeginInfo::default())
                .map_err(|r| RuntimeError::vk("vkBeginCommandBuffer", r))
        }
    }

    /// `vkEndCommandBuffer`; the raw result lets the caller report OOM with its context.
    pub(crate) fn end(&mut self) -> std::result::Result<(), vk::Result> {
        // SAFETY: the buffer is recording (callers track their state).
        unsafe { self.shared.device.end_command_buffer(self.raw) }
    }

    /// `vkQueueSubmit` with the fence; the raw result lets the caller report OOM.
    pub(crate) fn submit(&mut self) -> std::result::Result<(), vk::Result> {
        if self.pending {
            // Callers wait before resubmitting; reaching this is a bug in rocky.
            return Err(vk::Result::NOT_READY);
        }
        let device = &self.shared.device;
        let buffers = [self.raw];
        let submit = vk::SubmitInfo::default().command_buffers(&buffers);
        let queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the buffer is executable, the fence unsignaled and unused, the queue locked.
        unsafe {
            device.reset_fences(&[self.fence])?;
            device.queue_submit(*queue, &[submit], self.fence)?;
        }
        self.pending = true;
        Ok(())
    }

    /// Waits for the last submission. A timeout leaves it pending (a later wait or Drop
    /// handles it); device loss is its own error.
    pub(crate) fn wait(&mut self, timeout: Duration, what: &str) -> Result<()> {
        if !self.pending {
            return Ok(());
        }
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the fence belongs to this device.
        match unsafe {
            self.shared
                .device
                .wait_for_fences(&[self.fence], true, nanos)
        } {
            Ok(()) => {
                self.pending = false;
                Ok(())
            }
            Err(vk::Result::TIMEOUT) => Err(RuntimeError::Timeout {
                what: what.to_string(),
                waited: timeout,
            }),
            Err(vk::Result::ERROR_DEVICE_LOST) => Err(RuntimeError::DeviceLost {
                during: what.to_string(),
            }),
            Err(r) => Err(RuntimeError::vk("vkWaitForFences", r)),
        }
    }

    pub(crate) fn is_pending(&self) -> bool {
        self.pending
    }

    fn require_idle(&mut self, action: &str) -> Result<()> {
        if self.pending {
            self.wait(Duration::ZERO, action)
                .map_err(|_| RuntimeError::InvalidDispatch {
                    kernel: "(command buffer)".to_string(),
                    reason: format!(
                        "cannot {action} while the previous submission is still running"
                    ),
                })?;
        }
        Ok(())
    }
}

impl Drop for CommandBuffer {
    fn drop(&mut self) {
        if self.pending && self.wait(DROP_WAIT, "dropping a command buffer").is_err() {
            // Still running (or the device is lost): leaking is safe, destroying is not.
            return;
        }
        // SAFETY: nothing of this buffer is pending any more.
        unsafe {
            self.shared.device.destroy_fence(self.fence, None);
            self.shared.device.destroy_command_pool(self.pool, None);
        }
    }
}
