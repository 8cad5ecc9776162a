// usage: mali_dump WORKLOAD_JSON SCHEDULE_JSON|default OUT.spv
// Dumps a GEMM kernel's SPIR-V for the Mali-G610 preset with the register budget lifted, so
// schedules the register estimate refuses can be compiled by the driver and measured.
use rocky_compiler::templates::gemm::{self, GemmSchedule, GemmWorkload};
use rocky_compiler::DeviceCaps;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let w: GemmWorkload = serde_json::from_str(&a[1]).expect("workload");
    let mali = DeviceCaps::mali_g610();
    let s: GemmSchedule = if a[2] == "default" {
        gemm::default_schedule(&w, &mali)
    } else if a[2] == "default+packed" {
        GemmSchedule {
            packed_w: std::env::var("PAIRS").map_or(2, |v| v.parse().unwrap()),
            ..gemm::default_schedule(&w, &mali)
        }
    } else if a[2] == "default-packed" {
        GemmSchedule {
            packed_w: 0,
            ..gemm::default_schedule(&w, &mali)
        }
    } else {
        serde_json::from_str(&a[2]).expect("schedule")
    };
    let caps = DeviceCaps {
        register_budget: 1024,
        max_shared_memory_bytes: 1 << 20,
        ..mali
    };
    println!(
        "name {} regs~{} shared {}",
        s.name(&w),
        s.register_estimate(),
        s.shared_bytes(&w)
    );
    eprintln!("{}", serde_json::to_string(&s).unwrap());
    let k = gemm::instantiate(&w, &s, &caps).expect("instantiate");
    let bytes: Vec<u8> = k.spirv.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(&a[3], bytes).unwrap();
}
