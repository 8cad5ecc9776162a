//! Attention on Mali's real compiler (Mesa 25.0.7 panvk over the drm-shim, x86): the default
//! schedule of each model shape (the key-split kernel) compiles without spilling, costs fewer
//! load/store cycles per (row, key) than its row-wise twin, and the fact behind avoiding
//! shuffles holds: the driver compiles each subgroup shuffle into a loop of its own, and the
//! shuffle-reduced row-wise twin spills.
//!
//! Both numbers come from the driver's compiler itself (`BIFROST_MESA_DEBUG=shaders,shaderdb`
//! on stderr: the statistics line and the scheduled listing, whose load/store messages are
//! counted per key block with the inner loops' trip counts), nothing is run. Skips with a notice when the shim is absent (a failure in CI and
//! in `tools/test.sh --mali`).

mod common;

use common::mali25::{assert_listing_matches_shaderdb, compile};
use common::valhall_listing::messages_per_outer_iteration;
use serde_json::Value;
use std::path::PathBuf;

fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 attention statistics")
}

#[test]
fn default_attention_does_not_spill_on_panvk_and_shuffles_are_loops_there() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-attn-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("cache")).unwrap();
    // Qwen2.5-0.5B, Qwen2.5-3B and Gemma 3 270M shapes (head_dim 64, 128, 256).
    for workload in [
        r#"{"attention":{"m":512,"n_heads":14,"n_kv_heads":2,"head_dim":64,"max_kv":512}}"#,
        r#"{"attention":{"m":512,"n_heads":16,"n_kv_heads":2,"head_dim":128,"max_kv":512}}"#,
        r#"{"attention":{"m":512,"n_heads":4,"n_kv_heads":1,"head_dim":256,"max_kv":512}}"#,
    ] {
        let (schedule, default, listing) = compile(&prefix, &scratch, workload, None);
        assert_listing_matches_shaderdb(workload, &listing, &default);
        println!("{workload}: default {schedule} -> {default:?}");
        assert_eq!(
            (default["spills"], default["fills"]),
            (0.0, 0.0),
            "{workload}: the default {schedule} spills on panvk"
        );
        let a = &schedule["attention"];
        assert!(
            a["lane_rows"].as_u64().unwrap_or(0) > 0,
            "{schedule}: panvk's default is the key-split kernel"
        );
        let lanes = a["threads_per_row"].as_u64().unwrap() as u32;
        let kv_block = a["kv_block"].as_u64().unwrap() as u32;
        let lane_rows = a["lane_rows"].as_u64().unwrap() as u32;
        let w: Value = serde_json::from_str(workload).unwrap();
        let chunks = w["attention"]["head_dim"].as_u64().unwrap() as u32 / 8;
        // The key-split kernel's inner loops: the score loop over head_dim's 8-element chunks
        // (unrolled whole for one row of at most two keys up to 8 chunks) and the P·V loop in
        // steps of the exchanged vector (min(keys per lane, 4) keys).
        let keys_per_lane = kv_block / lanes;
        let mut trips = Vec::new();
        if !(chunks <= 8 && lane_rows * keys_per_lane <= 2) {
            trips.push(chunks);
        }
        trips.push(kv_block / keys_per_lane.min(4));
        let per_block = messages_per_outer_iteration(&listing, &trips)
            .unwrap_or_else(|e| panic!("{workload}: {e}"));
        let per_row_key =
            |messages: u32, kv: u32, rows: u32| f64::from(messages * lanes) / f64::from(kv * rows);
        let key_split = per_row_key(per_block, kv_block, lane_rows);
        // Its row-wise twin (the lanes split head_dim, 8-key blocks, partial sums through
        // shared memory, no inner loop) issues more load/store messages per (row, key).
        let mut rowwise = schedule.clone();
        rowwise["attention"]
            .as_object_mut()
            .unwrap()
            .remove("lane_rows");
        rowwise["attention"]["kv_block"] = 8.into();
        let (_, row, row_listing) =
            compile(&prefix, &scratch, workload, Some(&rowwise.to_string()));
        println!("{workload}: row-wise {rowwise} -> {row:?}");
        assert_listing_matches_shaderdb(workload, &row_listing, &row);
        let row_block = messages_per_outer_iteration(&row_listing, &[])
            .unwrap_or_else(|e| panic!("{workload}: row-wise twin: {e}"));
        let row_wise = per_row_key(row_block, 8, 1);
        println!(
            "{workload}: load/store per (row, key): key-split {key_split}, row-wise {row_wise}"
        );
        assert!(
            key_split < row_wise,
            "{workload}: key-split {key_split} ({per_block} per block of {kv_block}) against \
             row-wise {row_wise} ({row_block} per block of 8) per (row, key)"
        );
        // The row-wise twin reducing its lanes by subgroup shuffles: each shuffle is a loop
        // of its own (8 keys × log2(lanes) shuffles, beside the key-block loop), and the
        // registers they hold spill: why panvk's defaults never shuffle.
        let mut shuffled = rowwise.clone();
        shuffled["attention"]["lane_reduce"] = "shuffle".into();
        let (_, twin, _) = compile(&prefix, &scratch, workload, Some(&shuffled.to_string()));
        println!("{workload}: shuffled {shuffled} -> {twin:?}");
        let shuffles = 8 * lanes.trailing_zeros();
        assert!(
            twin["loops"] >= row["loops"] + shuffles as f64,
            "{workload}: {} loops with shuffles against {} without ({shuffles} shuffles)",
            twin["loops"],
            row["loops"]
        );
        assert!(
            twin["spills"] > 0.0,
            "{workload}: the shuffle reduction no longer spills: {twin:?}"
        );
    }
    std::fs::remove_dir_all(&scratch).ok();
}
