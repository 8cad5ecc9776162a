//! What one workload's search takes from the model's other workloads: their winners, nearest
//! shapes first, tried before the search's own picks. A model's GEMMs share much of their
//! best tiling, so a search that starts from a neighbour's winner mutates from a good place
//! instead of from a random population. Used by the live tuner and by the replay that judges
//! it, so both follow one rule.

use rocky_compiler::{Schedule, Workload};

/// Most schedules seeded into one workload's search from elsewhere.
pub const MAX_SEEDS: usize = 6;

/// How many carried-over schedules a search with `trials` trials takes: at most a quarter of
/// its budget, so its own exploration keeps most of it.
pub fn seed_budget(trials: usize) -> usize {
    (trials / 4).min(MAX_SEEDS)
}

/// The winners of `others` (workload, its best schedule) ordered by how near their shape is
/// to `workload`, duplicates and `workload` itself left out, at most `max`.
pub fn nearest_winners(
    workload: &Workload,
    others: &[(Workload, Schedule)],
    max: usize,
) -> Vec<Schedule> {
    let mut ranked: Vec<(f64, &Schedule)> = others
        .iter()
        .filter(|(w, _)| w != workload && w.kind() == workload.kind())
        .map(|(w, s)| (shape_distance(w, workload), s))
        .collect();
    // Stable: equal distances keep the order the winners were found in.
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut seeds: Vec<Schedule> = Vec::new();
    for (_, s) in ranked {
        if seeds.len() == max {
            break;
        }
        if !seeds.contains(s) {
            seeds.push(*s);
        }
    }
    seeds
}

/// How far apart two workloads' shapes are: the log-ratios of m, n and k, plus one for a
/// different weight format or bias (other templates: equal kinds are 0 apart).
pub fn shape_distance(a: &Workload, b: &Workload) -> f64 {
    let (Workload::Gemm(a), Workload::Gemm(b)) = (a, b) else {
        return 0.0;
    };
    let log_ratio = |x: u32, y: u32| (f64::from(x.max(1)) / f64::from(y.max(1))).log2().abs();
    log_ratio(a.m, b.m)
        + log_ratio(a.n, b.n)
        + log_ratio(a.k, b.k)
        + f64::from(u8::from(a.weight != b.weight))
        + f64::from(u8::from(a.bias != b.bias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::dequant::WeightFormat;
    use rocky_compiler::templates::gemm::{ActType, GemmWorkload};

    fn gemm(n: u32, k: u32, weight: WeightFormat) -> Workload {
        Workload::Gemm(GemmWorkload {
            m: 8,
            n,
            k,
            act: ActType::F32,
            weight,
            layout: rocky_compiler::WeightLayout::Gguf,
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        })
    }

    fn schedule(bn: u32) -> Schedule {
        crate::replay::tests::tile(8, bn)
    }

    #[test]
    fn winners_come_nearest_shape_first_without_duplicates_or_self() {
        let target = gemm(896, 896, WeightFormat::Q8_0);
        let others = [
            (gemm(151_936, 896, WeightFormat::Q8_0), schedule(1)),
            (target, schedule(2)),
            (gemm(896, 4864, WeightFormat::Q8_0), schedule(3)),
            (gemm(1024, 896, WeightFormat::Q8_0), schedule(4)),
            (gemm(896, 896, WeightFormat::Q4K), schedule(4)),
        ];
        // log2(1024/896) ≈ 0.19 < 1 (another format) < log2(4864/896) ≈ 2.4 < log2(151936/896).
        assert_eq!(
            nearest_winners(&target, &others, 10),
            vec![schedule(4), schedule(3), schedule(1)]
        );
        assert_eq!(nearest_winners(&target, &others, 1), vec![schedule(4)]);
        assert!(nearest_winners(&target, &[], 3).is_empty());
    }

    #[test]
    fn seeds_take_at_most_a_quarter_of_the_budget() {
        assert_eq!(seed_budget(3), 0);
        assert_eq!(seed_budget(11), 2);
        assert_eq!(seed_budget(1000), MAX_SEEDS);
    }
}
