//! Calibrations of the Mali cost model (`rocky predict`, the `rocky-predict` crate): a figure
//! MEASURED on a device (`rocky bench`'s prefill tok/s), the model's PREDICTION of the same run
//! on the same device before the fit, and the constant(s) fitted so the model reproduces the
//! figure. The first board that runs `rocky report` makes one; `rocky db export` carries it as a
//! `"rocky-calibration"` line, and `rocky predict` on the same device and driver then uses it
//! instead of the built-in fit (saying which one and where it came from).
//!
//! Stored in the `calibrations` tree (added without a format bump, as the seed rankings were:
//! an older rocky simply does not open the tree), keyed by the device, then the moment and host
//! of the measurement and what was measured: calibrations are measurements, so they are never
//! merged or replaced, only added; importing the same one twice is a no-op.
//!
//! The constants are this crate's own copy of the model's ([`CalibrationConstants`]), so the
//! exported format is fixed here (unknown fields are refused) and does not depend on the model
//! crate's types.

use serde::{Deserialize, Serialize};

use crate::error::DbError;
use crate::fingerprint::DeviceFingerprint;
use crate::record::{canonical_json, device_prefix};
use crate::store::{TuningDb, MAX_UBATCH};

/// The model's free constants as a calibration stores them (`rocky_predict::Constants` without
/// its note).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationConstants {
    /// Achieved fraction of the statistics' issue rate.
    pub efficiency: f64,
    /// Load/store thread-operations per core-cycle (Mesa's statistics assume 1).
    pub ls_rate: f64,
    /// Seconds every dispatch costs besides its work.
    pub dispatch_s: f64,
    /// Seconds every submit costs.
    pub submit_s: f64,
    /// Multiplies `efficiency` at half occupancy.
    pub half_occupancy_efficiency: f64,
}

/// The hardware figures the constants were fitted with: a constant fitted at one clock or
/// bandwidth means something else at another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationTarget {
    pub cores: u32,
    pub clock_hz: f64,
    /// Bytes per second.
    pub bandwidth: f64,
}

/// The constants a fit may set ([`Calibration::fitted`]).
pub const FITTED_CONSTANTS: [&str; 3] = ["efficiency", "ls_rate", "dispatch_s"];

/// One calibration: a measured figure, the prediction before the fit, the fitted constants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// The device (and driver version) the figure was measured on and the statistics read from.
    pub device: DeviceFingerprint,
    /// rocky's compiler version (the kernels whose statistics were costed).
    pub compiler_version: String,
    /// The model run (its file name).
    pub model: String,
    /// Prompt tokens of the measured prefill.
    pub n_prompt: u32,
    /// Tokens per ubatch of the measured prefill.
    pub ubatch: u32,
    /// The measured prefill throughput (tok/s): a MEASUREMENT on `device`.
    pub measured_tok_s: f64,
    /// How it was measured, in words (the command, backend, repetitions).
    pub measured_by: String,
    /// The model's prediction of the same run with the constants the fit started from
    /// (`base`): its error on a figure it was not fitted to.
    pub predicted_tok_s: f64,
    /// The constants the fit started from, in words.
    pub base: String,
    /// Which constant was fitted: one of [`FITTED_CONSTANTS`].
    pub fitted: String,
    /// The constants after the fit (they reproduce `measured_tok_s` on this run).
    pub constants: CalibrationConstants,
    pub target: CalibrationTarget,
    /// Where the per-kernel cycles came from (the driver's statistics, or rocky's IR model).
    pub statistics: String,
    /// Host that measured and fitted it.
    pub host: String,
    /// Unix seconds when it was made.
    pub date: u64,
}

impl Calibration {
    /// The prediction's relative error before the fit: (predicted − measured) / measured.
    pub fn error(&self) -> f64 {
        (self.predicted_tok_s - self.measured_tok_s) / self.measured_tok_s
    }

    /// One line for listings: what was measured where, and what was fitted.
    pub fn describe(&self) -> String {
        format!(
            "{} pp{} ub {} measured {:.2} tok/s ({}) on {}; predicted before the fit {:.2} \
             ({:+.0}%); {} fitted: efficiency {:.4}, ls_rate {:.3}, dispatch {:.1} µs; by {} at {}",
            self.model,
            self.n_prompt,
            self.ubatch,
            self.measured_tok_s,
            self.measured_by,
            self.device.describe(),
            self.predicted_tok_s,
            100.0 * self.error(),
            self.fitted,
            self.constants.efficiency,
            self.constants.ls_rate,
            self.constants.dispatch_s * 1e6,
            self.host,
            self.date
        )
    }

    /// The sled key: `canonical(device) \n date (u64 big-endian) canonical(what was measured)`.
    /// Each calibration has its own; the same one imported twice has the same key.
    pub(crate) fn key(&self) -> Vec<u8> {
        let mut k = device_prefix(&self.device);
        k.extend_from_slice(&self.date.to_be_bytes());
        k.extend_from_slice(
            canonical_json(&(
                &self.host,
                &self.compiler_version,
                &self.model,
                self.n_prompt,
                self.ubatch,
                self.measured_tok_s,
                &self.fitted,
            ))
            .as_bytes(),
        );
        k
    }
}

/// Checks what every stored or imported calibration must satisfy; the error names the field.
pub fn validate_calibration(c: &Calibration) -> Result<(), String> {
    let named = [
        ("device.device_name", &c.device.device_name),
        ("compiler_version", &c.compiler_version),
        ("model", &c.model),
        ("measured_by", &c.measured_by),
        ("base", &c.base),
        ("statistics", &c.statistics),
    ];
    for (name, v) in named {
        if v.trim().is_empty() {
            return Err(format!("{name} is empty"));
        }
    }
    if c.n_prompt == 0 {
        return Err("n_prompt = 0: a prefill has at least 1 token".into());
    }
    if !(1..=MAX_UBATCH).contains(&c.ubatch) {
        return Err(format!(
            "ubatch = {} is out of range 1..={MAX_UBATCH}",
            c.ubatch
        ));
    }
    let positive = [
        ("measured_tok_s", c.measured_tok_s),
        ("predicted_tok_s", c.predicted_tok_s),
        ("constants.efficiency", c.constants.efficiency),
        ("constants.ls_rate", c.constants.ls_rate),
        (
            "constants.half_occupancy_efficiency",
            c.constants.half_occupancy_efficiency,
        ),
        ("target.clock_hz", c.target.clock_hz),
        ("target.bandwidth", c.target.bandwidth),
    ];
    for (name, v) in positive {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{name} = {v} is not a finite positive number"));
        }
    }
    for (name, v) in [
        ("constants.dispatch_s", c.constants.dispatch_s),
        ("constants.submit_s", c.constants.submit_s),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{name} = {v} is not a finite non-negative number"));
        }
    }
    if c.target.cores == 0 {
        return Err("target.cores = 0".into());
    }
    if !FITTED_CONSTANTS.contains(&c.fitted.as_str()) {
        return Err(format!(
            "fitted = {:?}: expected one of {}",
            c.fitted,
            FITTED_CONSTANTS.join(", ")
        ));
    }
    Ok(())
}

impl TuningDb {
    /// Stores a calibration and flushes. Calibrations are only ever added: one with the same
    /// key (the same measurement) is replaced by itself.
    pub fn add_calibration(&self, c: &Calibration) -> Result<(), DbError> {
        validate_calibration(c).map_err(|detail| DbError::Invalid {
            what: "calibration",
            detail,
        })?;
        self.calibrations.insert(c.key(), encode(c))?;
        self.calibrations.flush()?;
        Ok(())
    }

    /// Every stored calibration of exactly `device` (driver version included), or of every
    /// device when `None`; each device's oldest first.
    pub fn calibrations(
        &self,
        device: Option<&DeviceFingerprint>,
    ) -> Result<Vec<Calibration>, DbError> {
        let prefix = device.map(device_prefix).unwrap_or_default();
        self.calibrations
            .scan_prefix(prefix)
            .map(|kv| decode(&kv?.1))
            .collect()
    }

    /// The calibration `rocky predict` uses on `device`: the newest of exactly this device and
    /// driver version.
    pub fn calibration_for_device(
        &self,
        device: &DeviceFingerprint,
    ) -> Result<Option<Calibration>, DbError> {
        Ok(self
            .calibrations(Some(device))?
            .into_iter()
            .max_by_key(|c| c.date))
    }

    /// The newest calibration of the same GPU under any driver version (`rocky predict
    /// --calibration gpu`: a board's calibration for the shim, whose driver differs).
    pub fn calibration_for_gpu(
        &self,
        device: &DeviceFingerprint,
    ) -> Result<Option<Calibration>, DbError> {
        Ok(self
            .calibrations(None)?
            .into_iter()
            .filter(|c| c.device.same_gpu(device))
            .max_by_key(|c| c.date))
    }

    /// Whether exactly this calibration (same key and contents) is stored; `Some(false)` when
    /// another one is stored under its key.
    pub(crate) fn has_calibration(&self, c: &Calibration) -> Result<Option<bool>, DbError> {
        match self.calibrations.get(c.key())? {
            None => Ok(None),
            Some(v) => Ok(Some(decode(&v)? == *c)),
        }
    }
}

pub(crate) fn encode(c: &Calibration) -> Vec<u8> {
    serde_json::to_vec(c).expect("calibrations serialize")
}

fn decode(bytes: &[u8]) -> Result<Calibration, DbError> {
    serde_json::from_slice(bytes).map_err(|e| DbError::BadStoredValue {
        what: "calibration",
        detail: e.to_string(),
    })
}
