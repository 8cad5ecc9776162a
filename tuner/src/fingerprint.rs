//! The tuning-database identity of the device a [`Context`](rocky_runtime::Context) opened.

use rocky_runtime::DeviceInfo;
use rocky_tuning_db::DeviceFingerprint;

/// Vendor/device ids, driver id, name and version, and device name, as Vulkan reports them.
pub fn fingerprint(info: &DeviceInfo) -> DeviceFingerprint {
    DeviceFingerprint {
        vendor_id: info.vendor_id,
        device_id: info.device_id,
        driver_id: info.driver.id.clone().unwrap_or_default(),
        driver_name: info.driver.name.clone(),
        driver_version: info.driver.version.clone(),
        device_name: info.name.clone(),
    }
}
