//! `rocky devices`: the Vulkan devices, with the limits and features rocky's kernels depend on.

use crate::error::{CliError, CmdResult};
use rocky_runtime::{
    format_bytes, probe_devices, select_device, DeviceInfo, DeviceSelector, DeviceType,
};
use std::fmt::Write as _;
use std::io::Write as _;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  rocky devices\n  rocky devices --json | jq '.[0].limits'")]
pub struct Args {
    /// Print every device's full description as a JSON array.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let devices = probe_devices().map_err(|e| CliError::device(e.to_string()))?;
    let text = if args.json {
        serde_json::to_string_pretty(&devices)
            .map_err(|e| CliError::internal(format!("cannot serialize the devices: {e}")))?
            + "\n"
    } else {
        let default = select_device(&devices, &DeviceSelector::Best).ok();
        let mut text = String::new();
        for (i, d) in devices.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            describe(&mut text, d, default == Some(i));
        }
        text
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // `rocky devices | head` closing the pipe early is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::output(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// One device as an aligned block of `label  value` lines.
fn describe(out: &mut String, d: &DeviceInfo, is_default: bool) {
    // A CPU implementation is only the default Vulkan device: where it is the best there is,
    // prefill, generate and serve take rocky's own CPU path unless --device names it
    // (`gpu::cpu_instead`); bench, tune and the kernel commands still use it.
    let mark = match (is_default, d.device_type) {
        (true, DeviceType::Cpu) => {
            "   (default Vulkan device; prefill, generate and serve run rocky's CPU path unless \
             --device or a GPU-only option asks for it)"
        }
        (true, _) => "   (default: used when --device is not given)",
        _ => "",
    };
    let _ = writeln!(out, "device {}: {}{mark}", d.index, d.name);
    let mut line = |label: &str, value: String| {
        let _ = writeln!(out, "  {label:<20}{value}");
    };

    let kind = match d.device_type {
        DeviceType::Cpu => "CPU implementation (right results, not GPU timings)".to_string(),
        t => t.as_str().to_string(),
    };
    line("type", kind);
    line(
        "vendor / device",
        format!("0x{:04x} / 0x{:04x}", d.vendor_id, d.device_id),
    );
    let driver_id = d.driver.id.as_deref().unwrap_or("unknown id");
    line(
        "driver",
        format!(
            "{} ({driver_id}) {}, version {}",
            d.driver.name, d.driver.info, d.driver.version
        ),
    );
    let usable = match d.unusable_reason() {
        Some(reason) => format!("NOT USABLE: {reason}"),
        None => {
            let (major, minor) = d.max_spirv_version();
            format!(
                "rocky uses {}, kernels as SPIR-V {major}.{minor}",
                d.usable_api_version
            )
        }
    };
    line("Vulkan", format!("{} ({usable})", d.api_version));

    let sg = &d.subgroup;
    let range = match &sg.size_control {
        Some(c) => format!(", size control {}..{}", c.min_size, c.max_size),
        None => String::new(),
    };
    let ops = if sg.in_compute {
        sg.operations.join(" ")
    } else {
        "none in compute".into()
    };
    line("subgroup", format!("size {}{range}; {ops}", sg.size));

    let f = &d.features;
    line(
        "fp16 / int8",
        format!(
            "{} / {} (int16 {}, int64 {})",
            yes_no(f.shader_float16),
            yes_no(f.shader_int8),
            yes_no(f.shader_int16),
            yes_no(f.shader_int64)
        ),
    );
    let accel = if f.integer_dot_product_4x8_packed_signed_accelerated {
        " (4x8 packed accelerated)"
    } else {
        ""
    };
    line(
        "int8 dot product",
        format!("{}{accel}", yes_no(f.shader_integer_dot_product)),
    );
    line(
        "16 / 8-bit storage",
        format!(
            "{} / {}",
            yes_no(f.storage_buffer_16bit_access),
            yes_no(f.storage_buffer_8bit_access)
        ),
    );

    let l = &d.limits;
    line(
        "shared memory",
        format!(
            "{} per workgroup",
            format_bytes(l.max_compute_shared_memory_size as u64)
        ),
    );
    line(
        "workgroup",
        format!(
            "{} invocations, size {:?}, count {:?}",
            l.max_compute_work_group_invocations,
            l.max_compute_work_group_size,
            l.max_compute_work_group_count
        ),
    );
    line(
        "storage binding",
        format!(
            "{} max range, offsets aligned to {}",
            format_bytes(l.max_storage_buffer_range as u64),
            l.min_storage_buffer_offset_alignment
        ),
    );
    line(
        "push constants",
        format!("{} bytes", l.max_push_constants_size),
    );
    line(
        "shader cores",
        match l.shader_cores {
            Some(n) => format!("{n} (split-KV decode fills them)"),
            None => "not reported by the driver".to_string(),
        },
    );
    let timestamps = match &d.compute_queue {
        Some(q) if d.has_timestamps() => {
            format!(
                "{} ns per tick, {} valid bits",
                l.timestamp_period_ns, q.timestamp_valid_bits
            )
        }
        Some(_) => "none on the compute queue (no GPU timing: tune, kernel and \
                     prefill --profile cannot time here)"
            .to_string(),
        None => "no compute queue".to_string(),
    };
    line("timestamps", timestamps);

    let m = &d.memory;
    let uma = if m.uma {
        "yes (tensors are used in place, no staging copies)"
    } else if m.host_visible_device_local {
        "no (host-visible VRAM through resizable BAR; staging copies used)"
    } else {
        "no (staging copies used)"
    };
    line("unified memory", uma.to_string());
    for h in &m.heaps {
        let types: Vec<String> = m
            .types
            .iter()
            .filter(|t| t.heap_index == h.index)
            .map(|t| {
                let mut flags = Vec::new();
                for (on, name) in [
                    (t.device_local, "device"),
                    (t.host_visible, "host"),
                    (t.host_coherent, "coherent"),
                    (t.host_cached, "cached"),
                    (t.lazily_allocated, "lazy"),
                    (t.protected, "protected"),
                ] {
                    if on {
                        flags.push(name);
                    }
                }
                if flags.is_empty() {
                    flags.push("plain");
                }
                flags.join("+")
            })
            .collect();
        let main = if m.main_heap == Some(h.index) {
            ", main"
        } else {
            ""
        };
        let local = if h.device_local {
            "device-local"
        } else {
            "host"
        };
        line(
            &format!("heap {}", h.index),
            format!(
                "{} {local}{main}; types: {}",
                format_bytes(h.size),
                types.join(", ")
            ),
        );
    }
}
