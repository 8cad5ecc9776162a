//! Decode GEMVs on Mali's real compiler (Mesa 25.0.7 panvk over the drm-shim, x86): the
//! default sums its lanes through workgroup memory, because a subgroup add there is a loop per
//! butterfly step (each runs once per distinct source lane). The shuffle-reduced twin of the
//! same schedule shows those loops and more instructions even with every loop counted once;
//! the default compiles without spills. The widest outputs (vocabulary projections) keep the
//! shuffle reduction, which declares no workgroup memory (panvk allocates it for every
//! workgroup instance of a dispatch). Nothing is run; skips with a notice without the shim.

mod common;

use common::mali25::{assert_listing_matches_shaderdb, compile};
use std::path::PathBuf;

fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 GEMV statistics")
}

#[test]
fn decode_gemvs_reduce_through_workgroup_memory_on_panvk_and_shuffles_are_loops() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-gemv-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("cache")).unwrap();
    // Qwen2.5-0.5B's down projection and attention output, a 3B-sized Q4_K square, the
    // 0.5B's K projection (bias).
    for workload in [
        r#"{"gemv":{"m":1,"n":896,"k":4864,"act":"f32","weight":"q6_k","bias":false}}"#,
        r#"{"gemv":{"m":1,"n":896,"k":896,"act":"f32","weight":"q5_0","bias":false}}"#,
        r#"{"gemv":{"m":1,"n":2048,"k":2048,"act":"f32","weight":"q4_k","bias":false}}"#,
        r#"{"gemv":{"m":1,"n":128,"k":896,"act":"f32","weight":"q8_0","bias":true}}"#,
    ] {
        let (schedule, default, listing) = compile(&prefix, &scratch, workload, None);
        assert_listing_matches_shaderdb(workload, &listing, &default);
        println!("{workload}: default {schedule} -> {default:?}");
        assert_eq!(
            schedule["gemv"]["reduce"], "shared",
            "{workload}: panvk's decode GEMV sums through workgroup memory"
        );
        assert_eq!(
            (default["spills"], default["fills"]),
            (0.0, 0.0),
            "{workload}: the default {schedule} spills on panvk"
        );
        let mut twin = schedule.clone();
        twin["gemv"]["reduce"] = "one_subgroup".into();
        let (_, shuffled, _) = compile(&prefix, &scratch, workload, Some(&twin.to_string()));
        println!("{workload}: shuffled {twin} -> {shuffled:?}");
        // Two columns, 16 lanes: log2(16) butterfly steps per column sum, each shuffle a
        // loop of its own.
        assert!(
            shuffled["loops"] >= default["loops"] + 8.0,
            "{workload}: {} loops with the shuffle reduction, {} without",
            shuffled["loops"],
            default["loops"]
        );
        assert!(
            default["inst"] < shuffled["inst"],
            "{workload}: {} instructions through workgroup memory, {} with shuffles (each \
             loop counted once)",
            default["inst"],
            shuffled["inst"]
        );
    }
    // A vocabulary projection keeps the shuffle reduction and declares no workgroup memory.
    let vocab = r#"{"gemv":{"m":1,"n":151936,"k":896,"act":"f32","weight":"q8_0","bias":false}}"#;
    let (schedule, numbers, _) = compile(&prefix, &scratch, vocab, None);
    assert_eq!(schedule["gemv"]["reduce"], "one_subgroup", "{vocab}");
    assert_eq!((numbers["spills"], numbers["fills"]), (0.0, 0.0), "{vocab}");
    std::fs::remove_dir_all(&scratch).ok();
}
