// Scratch: the IR's static and dynamic counts of the Mali default GEMMs, and the loop factor
// taken from the arithmetic (busiest IR pipe, what `rocky predict` uses) or from load/store.
use rocky_compiler::templates::gemm::{self, GemmWorkload};
use rocky_compiler::DeviceCaps;
use rocky_tuner::static_cost::{ir_estimate, CostModel};
fn main() {
    let caps = DeviceCaps::mali_g610();
    for w in std::env::args().skip(1) {
        let w: GemmWorkload = serde_json::from_str(&w).expect("workload");
        let s = gemm::default_schedule(&w, &caps);
        let e = ir_estimate(&w, &s, CostModel::for_device(&caps));
        println!(
            "{} m{} n{} k{}: static arith {:.1} ls {:.1}, dynamic arith {:.1} ls {:.1}; factor (busiest) {:.2}, by arith {:.2}, by ls {:.2}",
            s.name(&w), w.m, w.n, w.k,
            e.static_once.arith, e.static_once.ls, e.dynamic.arith, e.dynamic.ls,
            e.loop_factor(), e.dynamic.arith / e.static_once.arith, e.dynamic.ls / e.static_once.ls
        );
    }
}
