//! The driver's own statistics of a compiled pipeline, through
//! `VK_KHR_pipeline_executable_properties` (panvk, NVIDIA and RADV offer it; lavapipe 22.3 does
//! not): registers, spills and fills, instruction and cycle counts as the driver's compiler
//! computed them. They need no execution, so they are what a device that cannot time (the
//! mali-shim) can still tell about a kernel; the tuner skips candidates that spill.
//!
//! Why a flag per pipeline: the statistics exist only for pipelines created with
//! `VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR`, and the extension only where the device
//! was created with its feature enabled (device.rs enables it wherever it is offered).

use crate::device::Context;
use crate::error::{Result, RuntimeError};
use ash::vk;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::c_char;

/// One statistic as the driver names it (`"Spills"`, `"Cycles"`, `"Registers"`...).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Statistic {
    pub name: String,
    pub description: String,
    /// Every Vulkan statistic format (bool32, int64, uint64, float64) as a number.
    pub value: f64,
}

/// The statistics of one executable of a pipeline (a compute pipeline has one per compiled
/// shader variant; panvk and NVIDIA report one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutableStatistics {
    pub name: String,
    pub description: String,
    pub subgroup_size: u32,
    pub statistics: Vec<Statistic>,
}

/// Every executable's statistics, in the driver's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineStatistics {
    pub executables: Vec<ExecutableStatistics>,
}

impl PipelineStatistics {
    /// `name → value`, for storing with a tuning record. With more than one executable the
    /// names are prefixed by the executable's index (`"1/Spills"`).
    pub fn flat(&self) -> BTreeMap<String, f64> {
        let many = self.executables.len() > 1;
        let mut out = BTreeMap::new();
        for (i, exe) in self.executables.iter().enumerate() {
            for s in &exe.statistics {
                let key = if many {
                    format!("{i}/{}", s.name)
                } else {
                    s.name.clone()
                };
                out.insert(key, s.value);
            }
        }
        out
    }

    /// The statistics that count spilled registers (a name naming spills or fills) with a
    /// value above zero: `("Spills", 5.0)`. Empty when the kernel does not spill, or the driver
    /// names no such statistic.
    pub fn spilling(&self) -> Vec<(String, f64)> {
        spilling(&self.flat())
    }
}

/// The spill/fill entries above zero of a flattened statistics map (see
/// [`PipelineStatistics::spilling`]); for stored records too.
pub fn spilling(flat: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    flat.iter()
        .filter(|(name, value)| {
            let n = name.to_ascii_lowercase();
            (n.contains("spill") || n.contains("fill")) && **value > 0.0
        })
        .map(|(n, v)| (n.clone(), *v))
        .collect()
}

/// Loaded entry points of the extension, kept in the device's shared state.
pub(crate) type Loader = ash::khr::pipeline_executable_properties::Device;

/// Whether `physical` offers the extension with its `pipelineExecutableInfo` feature.
pub(crate) fn offered(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    has_extension: bool,
) -> bool {
    if !has_extension {
        return false;
    }
    let mut feature = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut feature);
    // SAFETY: the extension is offered, so its feature structure may be chained.
    unsafe { instance.get_physical_device_features2(physical, &mut features2) };
    feature.pipeline_executable_info == vk::TRUE
}

/// Why a device has no statistics to give, for messages.
pub const NOT_OFFERED: &str = "the driver does not offer VK_KHR_pipeline_executable_properties \
                               (panvk, NVIDIA and RADV do; lavapipe does not), so it reports no \
                               statistics of its compiled pipelines";

/// Reads the statistics of `pipeline`, created with the capture flag on `ctx`.
pub(crate) fn read(ctx: &Context, pipeline: vk::Pipeline) -> Result<PipelineStatistics> {
    let loader =
        ctx.shared
            .pipeline_stats
            .as_ref()
            .ok_or_else(|| RuntimeError::StatisticsUnsupported {
                device: ctx.info().name.clone(),
            })?;
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: the extension is enabled on this device and `pipeline` was made from it.
    let props = unsafe { loader.get_pipeline_executable_properties(&info) }
        .map_err(|r| RuntimeError::vk("vkGetPipelineExecutablePropertiesKHR", r))?;
    let mut executables = Vec::with_capacity(props.len());
    for (index, p) in props.iter().enumerate() {
        let exe = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(index as u32);
        // SAFETY: as above; `index` is below the count the driver returned.
        let stats = unsafe { loader.get_pipeline_executable_statistics(&exe) }
            .map_err(|r| RuntimeError::vk("vkGetPipelineExecutableStatisticsKHR", r))?;
        executables.push(ExecutableStatistics {
            name: c_text(&p.name),
            description: c_text(&p.description),
            subgroup_size: p.subgroup_size,
            statistics: stats
                .iter()
                .map(|s| Statistic {
                    name: c_text(&s.name),
                    description: c_text(&s.description),
                    value: value_of(s),
                })
                .collect(),
        });
    }
    Ok(PipelineStatistics { executables })
}

fn value_of(s: &vk::PipelineExecutableStatisticKHR<'_>) -> f64 {
    // SAFETY: the union member read is the one `format` names.
    unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => f64::from(s.value.b32),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64 as f64,
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64 as f64,
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => s.value.f64,
            _ => f64::NAN,
        }
    }
}

fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(name: &str, value: f64) -> Statistic {
        Statistic {
            name: name.into(),
            description: String::new(),
            value,
        }
    }

    #[test]
    fn spilling_names_spill_and_fill_statistics_above_zero() {
        let one = |stats| PipelineStatistics {
            executables: vec![ExecutableStatistics {
                name: "compute".into(),
                description: String::new(),
                subgroup_size: 16,
                statistics: stats,
            }],
        };
        let clean = one(vec![
            stat("Spills", 0.0),
            stat("Fills", 0.0),
            stat("Cycles", 9.5),
        ]);
        assert!(clean.spilling().is_empty());
        let spills = one(vec![
            stat("Spill count", 5.0),
            stat("Fills", 24.0),
            stat("Registers", 64.0),
        ]);
        assert_eq!(
            spills.spilling(),
            vec![
                ("Fills".to_string(), 24.0),
                ("Spill count".to_string(), 5.0)
            ]
        );
        // Two executables: prefixed names, spills still found.
        let mut two = spills.clone();
        two.executables.push(two.executables[0].clone());
        assert_eq!(two.flat().len(), 6);
        assert!(two.flat().contains_key("1/Fills"));
        assert_eq!(two.spilling().len(), 4);
    }
}
