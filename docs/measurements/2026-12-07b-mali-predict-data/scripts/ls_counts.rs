// Scratch (not committed): merged IR load/store counts of the Mali default kernels.
use rocky_compiler::templates::attention::{self, AttentionWorkload};
use rocky_compiler::templates::gemm::{self, GemmWorkload};
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_tuner::static_cost::{count, count_compiled, ir_estimate, CostModel, Unrolled};
fn main() {
    let caps = DeviceCaps::mali_g610();
    let model = CostModel::for_device(&caps);
    for w in std::env::args().skip(1) {
        let mut w: GemmWorkload = serde_json::from_str(&w).expect("workload");
        w.layout = gemm::default_layout(w.weight, &caps);
        let s = gemm::default_schedule(&w, &caps);
        let m = gemm::kernel_ir(&w, &s);
        let e = ir_estimate(&w, &s, model);
        println!("== {} layout {:?}", s.name(&w), w.layout);
        for u in [Unrolled::Nothing, Unrolled::Requested, Unrolled::Constant] {
            let (c, loops) = count_compiled(&m, u, &model);
            println!("  static {u:?}: ls {} barriers {} arith {} loops {loops}", c.ls, c.barriers, c.arith);
        }
        for t in [1.0, 2.0] {
            let c = count(&m, Some(t), &model);
            println!("  trips {t}: ls {} barriers {}", c.ls, c.barriers);
        }
        println!("  dynamic: ls {} barriers {}", e.dynamic.ls, e.dynamic.barriers);
    }
    let aw = AttentionWorkload { m: 1, n_heads: 16, n_kv_heads: 2, head_dim: 128, max_kv: 1024, window: 0, kv: Default::default() };
    let s = rocky_compiler::templates::default_schedule(&Workload::Attention(aw), &caps);
    let Schedule::Attention(a) = s else { panic!() };
    let m = attention::kernel_ir(&aw, &a);
    println!("== attention");
    for u in [Unrolled::Nothing, Unrolled::Requested, Unrolled::Constant] {
        let (c, loops) = count_compiled(&m, u, &model);
        println!("  static {u:?}: ls {} barriers {} loops {loops}", c.ls, c.barriers);
    }
    for t in [0.0, 1.0, 3.0] {
        let c = count(&m, Some(t), &model);
        println!("  trips {t}: ls {} barriers {}", c.ls, c.barriers);
    }
}
