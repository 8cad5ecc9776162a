//! Command-buffer budgeting: how much driver memory a command buffer's dispatches claim, and
//! when to close one and start the next.
//!
//! Why: panvk (Mesa's Vulkan driver for Mali) allocates a fresh workgroup-local-storage (WLS)
//! region for *every* dispatch that declares shared memory, from the command buffer's pool,
//! and frees it only when the command buffer is reset. A long command buffer of shared-memory
//! GEMMs therefore runs the pool dry, and the failure surfaces at `vkEndCommandBuffer` as
//! `VK_ERROR_OUT_OF_DEVICE_MEMORY` (llama.cpp's ubatch > 64 blocker, DESIGN.md §1). The
//! executor keeps the estimated sum under a budget by submitting early.
//!
//! The estimate follows panvk's sizing: `next_pow2(max(shared_bytes, 128)) × instances ×
//! core_id_range`, where `instances` is the workgroup count rounded up to powers of two per
//! dimension and capped per core. Drivers that do not allocate per dispatch get no byte budget,
//! only the dispatch cap.

use crate::info::DeviceInfo;
use serde::{Deserialize, Serialize};

/// The per-dispatch driver allocation model of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WlsModel {
    /// Shader-core id range the driver sizes WLS for (one region per possible core id).
    pub core_id_range: u32,
    /// Cap on the workgroup instances the driver sizes WLS for, per core.
    pub max_instances_per_core: u32,
}

impl WlsModel {
    /// Driver bytes one dispatch claims: zero without shared memory.
    pub fn dispatch_bytes(&self, shared_bytes: u32, grid: [u32; 3]) -> u64 {
        if shared_bytes == 0 {
            return 0;
        }
        let per_instance = u64::from(shared_bytes.max(128)).next_power_of_two();
        let instances: u64 = grid
            .iter()
            .map(|&g| u64::from(g.max(1)).next_power_of_two())
            .product();
        per_instance
            * instances.min(u64::from(self.max_instances_per_core))
            * u64::from(self.core_id_range)
    }
}

/// Limits for one command buffer; both are configurable and are graph-level tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandBudget {
    /// `None` when the driver does not allocate per dispatch.
    pub wls: Option<WlsModel>,
    /// Most estimated driver bytes per command buffer.
    pub max_driver_bytes: u64,
    /// Most dispatches per command buffer.
    pub max_dispatches: u32,
}

impl CommandBudget {
    /// Defaults derived from the device: the WLS model applies to panvk (the driver documents
    /// its shared memory as "backed by global memory anyway" and allocates it per dispatch).
    /// The Mali core count is not visible through Vulkan, so the model assumes the largest
    /// core-id range of the Valhall parts panvk drives today (16) and a per-core instance cap
    /// of 16, which over-estimates on a 4-core G610: budgeting errs on the safe side, and the
    /// tuner can raise it on the board.
    pub fn for_device(info: &DeviceInfo) -> CommandBudget {
        let panvk = info.driver.id.as_deref() == Some("MESA_PANVK")
            || info.driver.name.to_ascii_lowercase().contains("panvk");
        if panvk {
            CommandBudget {
                wls: Some(WlsModel {
                    core_id_range: 16,
                    max_instances_per_core: 16,
                }),
                max_driver_bytes: 64 << 20,
                max_dispatches: 128,
            }
        } else {
            CommandBudget {
                wls: None,
                max_driver_bytes: u64::MAX,
                max_dispatches: 512,
            }
        }
    }

    /// Driver bytes of one dispatch under this budget's model.
    pub fn dispatch_bytes(&self, shared_bytes: u32, grid: [u32; 3]) -> u64 {
        self.wls.map_or(0, |m| m.dispatch_bytes(shared_bytes, grid))
    }
}

/// What to do with the next dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Record it into the current command buffer.
    Record,
    /// Submit the current command buffer first, then record it into a fresh one.
    SubmitFirst,
}

/// Running totals of the command buffer being recorded.
#[derive(Clone, Debug)]
pub struct BudgetTracker {
    pub budget: CommandBudget,
    used_bytes: u64,
    dispatches: u32,
}

impl BudgetTracker {
    pub fn new(budget: CommandBudget) -> Self {
        BudgetTracker {
            budget,
            used_bytes: 0,
            dispatches: 0,
        }
    }

    /// Decides where a dispatch of `cost` driver bytes goes and accounts for it. A dispatch
    /// larger than the whole budget still gets a command buffer of its own: whether the driver
    /// copes is then the driver's answer (an OOM at End names this budget).
    pub fn admit(&mut self, cost: u64) -> Admit {
        let over_bytes = self.used_bytes.saturating_add(cost) > self.budget.max_driver_bytes;
        let over_count = self.dispatches + 1 > self.budget.max_dispatches;
        let decision = if self.dispatches > 0 && (over_bytes || over_count) {
            self.used_bytes = 0;
            self.dispatches = 0;
            Admit::SubmitFirst
        } else {
            Admit::Record
        };
        self.used_bytes += cost;
        self.dispatches += 1;
        decision
    }

    /// Estimated driver bytes of the command buffer being recorded.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn dispatches(&self) -> u32 {
        self.dispatches
    }

    /// Forget the current command buffer (it was submitted).
    pub fn reset(&mut self) {
        self.used_bytes = 0;
        self.dispatches = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: WlsModel = WlsModel {
        core_id_range: 4,
        max_instances_per_core: 16,
    };

    #[test]
    fn dispatch_bytes_follow_the_panvk_formula() {
        assert_eq!(MODEL.dispatch_bytes(0, [100, 1, 1]), 0);
        // 100 bytes round up to the 128-byte minimum; 3 workgroups round up to 4.
        assert_eq!(MODEL.dispatch_bytes(100, [3, 1, 1]), 128 * 4 * 4);
        // 12 KiB → 16 KiB per instance; 5×3 → 8×4 = 32 instances, capped at 16.
        assert_eq!(
            MODEL.dispatch_bytes(12 << 10, [5, 3, 1]),
            (16 << 10) * 16 * 4
        );
    }

    #[test]
    fn tracker_splits_on_bytes_and_on_count() {
        let budget = CommandBudget {
            wls: Some(MODEL),
            max_driver_bytes: 1000,
            max_dispatches: 3,
        };
        let mut t = BudgetTracker::new(budget);
        assert_eq!(t.admit(600), Admit::Record);
        assert_eq!(t.admit(600), Admit::SubmitFirst);
        assert_eq!(t.used_bytes(), 600);
        assert_eq!(t.admit(0), Admit::Record);
        assert_eq!(t.admit(0), Admit::Record);
        assert_eq!(
            t.admit(0),
            Admit::SubmitFirst,
            "fourth dispatch over the cap of 3"
        );
        // A dispatch bigger than the whole budget gets a command buffer of its own.
        t.reset();
        assert_eq!(t.admit(5000), Admit::Record);
        assert_eq!(t.admit(1), Admit::SubmitFirst);
    }
}
