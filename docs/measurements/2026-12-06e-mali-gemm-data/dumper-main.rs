// usage: dumper WORKLOAD_JSON SCHEDULE_JSON|default OUT.spv
use rocky_compiler::templates::gemm::{self, GemmSchedule, GemmWorkload};
use rocky_compiler::DeviceCaps;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let w: GemmWorkload = serde_json::from_str(&a[1]).expect("workload");
    let caps = DeviceCaps::mali_g610();
    let s: GemmSchedule = if a[2] == "default" { gemm::default_schedule(&w, &caps) } else { serde_json::from_str(&a[2]).expect("schedule") };
    eprintln!("schedule {}", serde_json::to_string(&s).unwrap());
    eprintln!("name {} regs~{} shared {}", s.name(&w), s.register_estimate(), s.shared_bytes(&w));
    let k = gemm::instantiate(&w, &s, &caps).expect("instantiate");
    let bytes: Vec<u8> = k.spirv.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(&a[3], bytes).unwrap();
}
