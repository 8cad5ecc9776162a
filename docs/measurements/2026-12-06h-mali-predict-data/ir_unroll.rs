// Scratch (not kept in tuner/examples; a copy is in the 2026-12-06h data folder): the IR's
// counts of the Mali default GEMMs every loop once (`count(None)`), with the constant-trip
// loops at their trips and the run-time-bounded K loop once (`count(Some(1))`, what a driver
// that unrolls the constant loops would count), and dynamic; the loop factors of each.
use rocky_compiler::templates::gemm::{self, GemmWorkload};
use rocky_compiler::DeviceCaps;
use rocky_tuner::static_cost::{count, ir_estimate, CostModel};
fn main() {
    let caps = DeviceCaps::mali_g610();
    let model = CostModel::for_device(&caps);
    for w in std::env::args().skip(1) {
        let w: GemmWorkload = serde_json::from_str(&w).expect("workload");
        let s = gemm::default_schedule(&w, &caps);
        let e = ir_estimate(&w, &s, model);
        let m = gemm::kernel_ir(&w, &s);
        let once = count(&m, None, &model);
        let unrolled = count(&m, Some(1.0), &model);
        let f = e.loop_factors();
        println!(
            "{} m{} n{} k{}: once arith {:.0} ls {:.0}; constant loops unrolled arith {:.0} ls {:.0}; dynamic arith {:.0} ls {:.0}; factors vs once: bound {:.2} arith {:.2} ls {:.2}; vs unrolled: arith {:.2} ls {:.2}",
            s.name(&w), w.m, w.n, w.k,
            once.arith, once.ls, unrolled.arith, unrolled.ls, e.dynamic.arith, e.dynamic.ls,
            f.bound, f.arith, f.ls,
            e.dynamic.arith / unrolled.arith, e.dynamic.ls / unrolled.ls
        );
    }
}
