//! What is stored: record keys (device × compiler version × workload), trials and their
//! provenance, graph-level choices; plus the checks every stored or imported value passes.

use rocky_compiler::{Schedule, Workload};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::fingerprint::DeviceFingerprint;

/// The unit of tuning: one workload on one device with one compiler version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordKey {
    pub device: DeviceFingerprint,
    pub compiler_version: String,
    pub workload: Workload,
}

/// Why a trial failed; the tuner records the failure and goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    SpirvVal,
    PipelineCreation,
    OutOfMemory,
    DeviceLost,
    Timeout,
    /// Output differed from the CPU reference: never a winner.
    Mismatch,
    /// The template refused the (workload, schedule) pair.
    Refused,
    /// The driver's compiler spills registers for it (its pipeline statistics say so): the
    /// tuner skips such candidates without timing them.
    Spills,
    Other,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::SpirvVal => "spirv_val",
            FailureKind::PipelineCreation => "pipeline_creation",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::DeviceLost => "device_lost",
            FailureKind::Timeout => "timeout",
            FailureKind::Mismatch => "mismatch",
            FailureKind::Refused => "refused",
            FailureKind::Spills => "spills",
            FailureKind::Other => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialStatus {
    Ok,
    Failed { kind: FailureKind, message: String },
}

/// One measured (or failed) candidate schedule.
///
/// Times are seconds per run of the kernel; a failed trial carries zeros (or whatever was
/// measured before it failed). Field names are part of the export format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub schedule: Schedule,
    pub status: TrialStatus,
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    pub gflops: f64,
    /// Unix time in seconds when the trial finished.
    pub date: u64,
    pub host: String,
    /// The driver's statistics of the compiled pipeline (`VK_KHR_pipeline_executable_properties`:
    /// name → value, e.g. "Spills" → 0), where the device reports them. Absent in records
    /// written before they were kept, and on devices without the extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_stats: Option<BTreeMap<String, f64>>,
}

impl Trial {
    pub fn is_ok(&self) -> bool {
        matches!(self.status, TrialStatus::Ok)
    }

    /// Seconds since the Unix epoch, for [`Trial::date`].
    pub fn now_unix_s() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    /// A failed trial (no timing).
    pub fn failed(schedule: Schedule, kind: FailureKind, message: String, host: String) -> Trial {
        Trial {
            schedule,
            status: TrialStatus::Failed { kind, message },
            median_s: 0.0,
            min_s: 0.0,
            max_s: 0.0,
            gflops: 0.0,
            date: Trial::now_unix_s(),
            host,
            driver_stats: None,
        }
    }
}

/// Where a stored trial came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Host that measured it.
    pub host: String,
    /// Source name given to `import_jsonl` (a file name, a URL), `None` if measured here.
    pub imported_from: Option<String>,
    /// Unix seconds of the import, `None` if measured here.
    pub imported_at: Option<u64>,
}

/// A trial as stored: the trial and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredTrial {
    pub trial: Trial,
    pub provenance: Provenance,
}

/// Graph-level settings chosen for a model shape on a device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphChoice {
    pub ubatch: u32,
    pub max_dispatches_per_cb: u32,
    pub budget_bytes: u64,
    /// Prefill throughput measured with these settings.
    pub tok_s: f64,
    /// Whether gate and up run as one GEMM with SwiGLU in its epilogue (`rocky_models::fuse`).
    /// Absent in choices stored before fusion was tuned: those ran unfused.
    #[serde(default)]
    pub fuse_swiglu: bool,
    /// Whether ubatches are recorded two at a time (`ExecutorOptions::overlap`). Absent in
    /// choices stored before it was tuned: those ran one at a time.
    #[serde(default)]
    pub overlap: bool,
    /// Throughput of the default settings at the same ubatch (the device's dispatches per
    /// command buffer, the default fusion and overlap), timed in the same graph step: the
    /// tuner's own comparison of the choice with the default. Absent in choices stored before
    /// it was kept (a per-ubatch choice then may never have met the default at its ubatch:
    /// on an H100 one ran at 0.77x the default) and where the step did not time the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_tok_s: Option<f64>,
}

impl GraphChoice {
    /// Whether the choice was at least as fast as the default settings at its ubatch in the
    /// tuner's own comparison (`None`: no comparison stored).
    pub fn beat_default(&self) -> Option<bool> {
        self.default_tok_s.map(|d| self.tok_s >= d)
    }
}

/// Serializes `value` as compact JSON with every object's keys sorted, so the bytes depend
/// only on the value, not on field declaration order or serde_json features.
pub(crate) fn canonical_json<T: Serialize>(value: &T) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    // Serializing these plain data types to a Value cannot fail (no non-string map keys).
    let value = serde_json::to_value(value).expect("record types serialize to JSON");
    let mut out = String::new();
    write(&value, &mut out);
    out
}

/// Separates the parts of an encoded key. Compact JSON never contains a raw newline, and each
/// JSON part is self-delimiting, so `device ++ SEP` is a prefix of exactly that device's keys.
pub(crate) const SEP: u8 = b'\n';

/// `canonical(device) \n`: prefix of all of a device's keys.
pub(crate) fn device_prefix(device: &DeviceFingerprint) -> Vec<u8> {
    let mut out = canonical_json(device).into_bytes();
    out.push(SEP);
    out
}

impl RecordKey {
    /// Canonical sled key: `canonical(device) \n canonical(compiler_version) \n canonical(workload)`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = device_prefix(&self.device);
        out.extend_from_slice(canonical_json(&self.compiler_version).as_bytes());
        out.push(SEP);
        out.extend_from_slice(canonical_json(&self.workload).as_bytes());
        out
    }

    /// Inverse of [`RecordKey::encode`].
    pub fn decode(bytes: &[u8]) -> Result<RecordKey, String> {
        let mut parts = bytes.splitn(3, |b| *b == SEP);
        let mut next = |name: &str| {
            parts
                .next()
                .ok_or_else(|| format!("key has no {name} part"))
        };
        let device = next("device")?;
        let compiler = next("compiler version")?;
        let workload = next("workload")?;
        Ok(RecordKey {
            device: serde_json::from_slice(device).map_err(|e| format!("device: {e}"))?,
            compiler_version: serde_json::from_slice(compiler)
                .map_err(|e| format!("compiler version: {e}"))?,
            workload: serde_json::from_slice(workload).map_err(|e| format!("workload: {e}"))?,
        })
    }

    /// Checks what serde cannot: non-empty identity strings.
    pub fn validate(&self) -> Result<(), String> {
        if self.compiler_version.trim().is_empty() {
            return Err("compiler_version is empty".into());
        }
        if self.device.device_name.trim().is_empty() {
            return Err("device.device_name is empty".into());
        }
        Ok(())
    }
}

/// Checks a trial's values: the schedule fits the workload's template; an Ok trial has finite
/// positive times with min ≤ median ≤ max and a finite non-negative GFLOP/s; a failed trial
/// has finite non-negative numbers.
pub fn validate_trial(workload: &Workload, trial: &Trial) -> Result<(), String> {
    if trial.schedule.kind() != workload.kind() {
        return Err(format!(
            "schedule is for template `{}` but the workload is `{}`",
            trial.schedule.kind(),
            workload.kind()
        ));
    }
    let numbers = [
        ("median_s", trial.median_s),
        ("min_s", trial.min_s),
        ("max_s", trial.max_s),
        ("gflops", trial.gflops),
    ];
    for (name, v) in numbers {
        if !v.is_finite() || v < 0.0 {
            return Err(format!("{name} = {v} is not a finite non-negative number"));
        }
    }
    if trial.is_ok() {
        for (name, v) in &numbers[..3] {
            if *v <= 0.0 {
                return Err(format!("{name} = {v}: an Ok trial needs a positive time"));
            }
        }
        if !(trial.min_s <= trial.median_s && trial.median_s <= trial.max_s) {
            return Err(format!(
                "times out of order: min_s {} ≤ median_s {} ≤ max_s {} does not hold",
                trial.min_s, trial.median_s, trial.max_s
            ));
        }
    }
    Ok(())
}
