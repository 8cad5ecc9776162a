use rocky_compiler::templates::attention::{self, AttentionWorkload};
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_tuner::static_cost::{count, count_compiled, CostModel, Unrolled};
#[test]
fn probe() {
    let caps = DeviceCaps::mali_g610();
    let aw = AttentionWorkload { m: 1, n_heads: 16, n_kv_heads: 2, head_dim: 128, max_kv: 1024, window: 0, kv: Default::default() };
    let w = Workload::Attention(aw);
    let s = rocky_compiler::templates::default_schedule(&w, &caps);
    let Schedule::Attention(a) = s else { panic!() };
    let m = attention::kernel_ir(&aw, &a);
    let model = CostModel::for_device(&caps);
    for u in [Unrolled::Nothing, Unrolled::Requested, Unrolled::Constant] {
        let (c, loops) = count_compiled(&m, u, &model);
        println!("once {u:?}: arith {} ls {} loops {loops}", c.arith, c.ls);
    }
    for t in [0.0, 1.0, 3.0, 9.0 / 32.0] {
        let c = count(&m, Some(t), &model);
        println!("trips {t}: arith {} ls {}", c.arith, c.ls);
    }
}
