//! Which GPU and driver a record was measured on.

use serde::{Deserialize, Serialize};

/// Identity of a device and its driver, as the runtime reads it from Vulkan.
///
/// Field names are part of the stored and exported format: never rename them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceFingerprint {
    /// `VkPhysicalDeviceProperties::vendorID`.
    pub vendor_id: u32,
    /// `VkPhysicalDeviceProperties::deviceID`.
    pub device_id: u32,
    /// `VkDriverId` name, e.g. `MESA_PANVK`; empty when the driver does not report one.
    pub driver_id: String,
    /// `VkPhysicalDeviceDriverProperties::driverName`, e.g. `panvk`.
    pub driver_name: String,
    /// Driver version as decoded by the runtime (and driverInfo where useful), e.g. `24.2.1`.
    pub driver_version: String,
    /// `VkPhysicalDeviceProperties::deviceName`.
    pub device_name: String,
}

impl DeviceFingerprint {
    /// Same hardware and same driver family, any driver version: its records may seed a
    /// search here, but a new driver can change which schedule is fastest.
    pub fn same_gpu(&self, other: &DeviceFingerprint) -> bool {
        self.vendor_id == other.vendor_id
            && self.device_id == other.device_id
            && self.driver_id == other.driver_id
            && self.driver_name == other.driver_name
            && self.device_name == other.device_name
    }

    /// Short human-readable form for listings and messages.
    pub fn describe(&self) -> String {
        format!(
            "{} [{:04x}:{:04x}] {} {}",
            self.device_name, self.vendor_id, self.device_id, self.driver_name, self.driver_version
        )
    }
}
