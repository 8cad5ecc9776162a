//! Shared fixtures: scratch directories, fingerprints, keys and trials.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rocky_compiler::{RmsNormSchedule, RmsNormWorkload, RowReduce, Schedule, Workload};
use rocky_tuning_db::{DeviceFingerprint, FailureKind, RecordKey, Trial, TrialStatus};

/// A fresh directory under the system temp dir, removed on drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "rocky-tuning-db-{}-{nanos}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn gpu(driver_version: &str) -> DeviceFingerprint {
    DeviceFingerprint {
        vendor_id: 0x13b5,
        device_id: 0xa8670000,
        driver_id: "MESA_PANVK".into(),
        driver_name: "panvk".into(),
        driver_version: driver_version.into(),
        device_name: "Mali-G610 (Panfrost)".into(),
    }
}

pub fn lavapipe() -> DeviceFingerprint {
    DeviceFingerprint {
        vendor_id: 0x10005,
        device_id: 0,
        driver_id: "MESA_LLVMPIPE".into(),
        driver_name: "llvmpipe".into(),
        driver_version: "24.0.5".into(),
        device_name: "llvmpipe (LLVM 17.0.6, 256 bits)".into(),
    }
}

pub fn workload(m: u32, width: u32) -> Workload {
    Workload::RmsNorm(RmsNormWorkload::new(m, width, 1e-6))
}

pub fn key(device: DeviceFingerprint, w: Workload) -> RecordKey {
    RecordKey {
        device,
        compiler_version: "0.1.0+gemm1+glue1+attn1".into(),
        workload: w,
    }
}

/// The `i`-th of a family of distinct RMSNorm schedules.
pub fn schedule(i: u32) -> Schedule {
    Schedule::RmsNorm(RmsNormSchedule {
        threads: 32 << (i % 4),
        vector_width: if i % 8 < 4 { 1 } else { 4 },
        reduce: if i % 16 < 8 {
            RowReduce::SharedTree
        } else {
            RowReduce::Subgroup
        },
        rolled: false,
    })
}

pub fn ok_trial(i: u32, median_s: f64) -> Trial {
    Trial {
        schedule: schedule(i),
        status: TrialStatus::Ok,
        median_s,
        min_s: median_s * 0.9,
        max_s: median_s * 1.2,
        gflops: 1e-9 / median_s,
        date: 1_790_000_000 + u64::from(i),
        host: "board-1".into(),
        driver_stats: None,
    }
}

pub fn failed_trial(i: u32, kind: FailureKind) -> Trial {
    Trial::failed(
        schedule(i),
        kind,
        format!("trial {i} failed"),
        "board-1".into(),
    )
}
