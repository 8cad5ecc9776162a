//! Command-buffer budgeting: how much driver memory a command buffer's dispatches claim, and
//! when to close one and start the next.
//!
//! Why: panvk (Mesa's Vulkan driver for Mali) allocates a fresh workgroup-local-storage (WLS)
//! region for *every* dispatch that declares shared memory, from the command buffer's pool,
//! and frees it only when the command buffer is reset. A long command buffer of shared-memory
//! GEMMs therefore runs the pool dry, and the failure surfaces at `vkEndCommandBuffer` as
//! `VK_ERROR_OUT_OF_DEVICE_MEMORY` (llama.cpp's ubatch > 64 blocker, docs/design.md §1). The
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
            .saturating_mul(instances.min(u64::from(self.max_instances_per_core)))
            .saturating_mul(u64::from(self.core_id_range))
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

/// `ROCKY_CB_BUDGET=off` turns the driver-memory budget off: no WLS model (so no byte budget
/// and no refusal of oversized schedules) and no re-recording after an out-of-memory at
/// vkEndCommandBuffer, i.e. rocky as it was before the budget existed. For tests that must
/// see the driver fail without it (tests/mali_shim_recording.rs); never needed otherwise.
/// `ROCKY_CB_BUDGET=trace` keeps the budget and prints the estimate of every shared-memory
/// dispatch to stderr just before it is recorded ("rocky: dispatch XxYxZ shared S B estimate
/// E B"), beside the driver's own line (panvk's PANVK_OOM_TRACE=1 under the mali-shim).
pub const BUDGET_ENV: &str = "ROCKY_CB_BUDGET";

fn budget_env() -> &'static str {
    static MODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MODE.get_or_init(|| {
        std::env::var(BUDGET_ENV)
            .unwrap_or_default()
            .to_ascii_lowercase()
    })
}

/// Whether [`BUDGET_ENV`] turns the budget off.
pub fn budget_disabled() -> bool {
    budget_env() == "off"
}

/// Whether [`BUDGET_ENV`] asks for the per-dispatch trace.
pub fn budget_trace() -> bool {
    budget_env() == "trace"
}

/// The budget of a driver that does not allocate per dispatch: only a dispatch cap.
const UNMODELLED: CommandBudget = CommandBudget {
    wls: None,
    max_driver_bytes: u64::MAX,
    max_dispatches: 512,
};

impl CommandBudget {
    /// Defaults derived from the device: the WLS model applies to panvk (the driver documents
    /// its shared memory as "backed by global memory anyway" and allocates it per dispatch),
    /// sized by [`panvk_wls_model`]. With [`BUDGET_ENV`]`=off`, no model on any device.
    pub fn for_device(info: &DeviceInfo) -> CommandBudget {
        let panvk = info.driver.id.as_deref() == Some("MESA_PANVK")
            || info.driver.name.to_ascii_lowercase().contains("panvk");
        if budget_disabled() {
            return UNMODELLED;
        }
        if panvk {
            CommandBudget {
                wls: Some(panvk_wls_model(info)),
                max_driver_bytes: 64 << 20,
                max_dispatches: 128,
            }
        } else {
            UNMODELLED
        }
    }

    /// Driver bytes of one dispatch under this budget's model.
    pub fn dispatch_bytes(&self, shared_bytes: u32, grid: [u32; 3]) -> u64 {
        self.wls.map_or(0, |m| m.dispatch_bytes(shared_bytes, grid))
    }
}

/// Instances per core newer panvk sizes WLS for at most: Mesa 26 clamps the instances to
/// what one core runs at once (`pan_calc_wls_instances`: workgroups per task × tasks per
/// core, rounded to a power of two), which no Vulkan query reports; 16 bounds it for the
/// workgroup sizes rocky's kernels use.
const CLAMPED_INSTANCES_PER_CORE: u32 = 16;

/// The shader-core id range of RK3588's Mali-G610 MC4 (its core ids run up to 18).
const G610_CORE_ID_RANGE: u32 = 19;

/// The largest core-id range among the Valhall GPUs panvk drives (MC10-class parts with gaps
/// in their core masks), for GPUs whose range rocky does not know: an over-estimate only
/// submits command buffers earlier.
const MAX_PLAUSIBLE_CORE_ID_RANGE: u32 = 32;

/// panvk's WLS allocation for `info`'s driver. Mesa 25.x sizes it for every workgroup of the
/// grid (rounded to powers of two per dimension), uncapped: one 16 KiB dispatch at ubatch 512
/// took 1.2 GiB under the 25.0.7 shim. Newer Mesa clamps the instances per core. The core-id
/// range is not reported by Vulkan either: 19 on the G610 (RK3588), else the largest
/// plausible.
pub fn panvk_wls_model(info: &DeviceInfo) -> WlsModel {
    let mesa_major = info
        .driver
        .version
        .split('.')
        .next()
        .and_then(|m| m.trim().parse::<u32>().ok());
    let max_instances_per_core = match mesa_major {
        Some(major) if major >= 26 => CLAMPED_INSTANCES_PER_CORE,
        // 25.x, and any version rocky cannot read: assume no clamp (the larger estimate).
        _ => u32::MAX,
    };
    let core_id_range = if info.name.contains("G610") {
        G610_CORE_ID_RANGE
    } else {
        MAX_PLAUSIBLE_CORE_ID_RANGE
    };
    WlsModel {
        core_id_range,
        max_instances_per_core,
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

    fn shim_panvk(version: &str) -> DeviceInfo {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mali-g610-panvk-25.0.7.json");
        let json = std::fs::read_to_string(path).expect("the panvk 25.0.7 fixture");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let device = value
            .get("devices")
            .and_then(|d| d.get(0))
            .unwrap_or(&value)
            .clone();
        let mut info: DeviceInfo = serde_json::from_value(device).expect("a DeviceInfo");
        info.driver.version = version.to_string();
        info
    }

    #[test]
    fn panvk_25_sizes_wls_for_the_whole_grid_and_26_clamps_it() {
        // What the real 25.0.7 driver allocated (mali-shim, PANVK_OOM_TRACE=1) for the
        // 32x64x32 staged Q4_K GEMM of 512x11008x2048 (13824 shared bytes, grid 172x16):
        // "dispatch 172x16x1 wls 16384 B x 4096 instances x 19 core_id_range =
        //  1275068416 B per dispatch".
        let old = CommandBudget::for_device(&shim_panvk("25.0.7"));
        assert_eq!(old.dispatch_bytes(13824, [172, 16, 1]), 1_275_068_416);
        let new = CommandBudget::for_device(&shim_panvk("26.1.6"));
        assert_eq!(
            new.dispatch_bytes(13824, [172, 16, 1]),
            (16u64 << 10) * 16 * 19
        );
        // No shared memory, no WLS, whatever the grid.
        assert_eq!(old.dispatch_bytes(0, [4096, 4096, 1]), 0);
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
