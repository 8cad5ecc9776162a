//! The on-disk pipeline cache: round trip, and corrupt or foreign files discarded.

mod common;

use common::*;
use rocky_runtime::{
    default_pipeline_cache_path, Buffer, CacheLoad, ComputePipeline, Context, PipelineCache,
    Recorder,
};
use std::path::Path;
use std::time::Duration;

/// Builds and runs the test kernel through `cache`: a cache must never change results.
fn build_and_run(ctx: &Context, cache: &PipelineCache) {
    let pipeline = ComputePipeline::new(ctx, Some(cache), &affine_spirv(), &affine_meta()).unwrap();
    let x = test_data(100, 9);
    let xb = Buffer::from_slice(ctx, &x, "x").unwrap();
    let yb = Buffer::new(ctx, 400, "y").unwrap();
    let mut rec = Recorder::new(ctx).unwrap();
    rec.dispatch(
        &pipeline,
        &[xb.whole(), yb.whole()],
        &affine_push(2.0, 3.0, 100),
        groups_for(100),
    )
    .unwrap();
    rec.submit_and_wait(Duration::from_secs(60)).unwrap();
    let want = affine_cpu(&x, 2.0, 3.0);
    let got = yb.download_f32(0, 100).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0));
    }
}

/// Rewrites the rocky header's checksum after a deliberate payload change, so only the
/// Vulkan-header check can catch it.
fn rewrite_checksum(file: &mut [u8]) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &file[28..] {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    file[20..28].copy_from_slice(&h.to_le_bytes());
}

fn discarded(cache: &PipelineCache) -> String {
    match cache.load_status() {
        CacheLoad::Discarded { reason } => reason.clone(),
        other => panic!("expected the file to be discarded, got {other:?}"),
    }
}

fn saved_cache(ctx: &Context, path: &Path) -> Vec<u8> {
    let cache = PipelineCache::open(ctx, path).unwrap();
    build_and_run(ctx, &cache);
    cache.save().unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn cache_round_trips_through_the_file() {
    let ctx = context();
    let dir = temp_dir("cache-roundtrip");
    let path = dir.join("nested").join("cache.bin");

    let cache = PipelineCache::open(&ctx, &path).unwrap();
    assert_eq!(cache.load_status(), &CacheLoad::Empty);
    build_and_run(&ctx, &cache);
    let saved = cache.save().unwrap();
    assert!(
        saved >= 32,
        "at least the Vulkan cache header is saved ({saved} bytes)"
    );
    let file = std::fs::read(&path).unwrap();
    assert_eq!(&file[..8], b"ROCKYPC\0");
    assert_eq!(file.len(), 28 + saved);
    // The Vulkan header inside names this device.
    let vendor = u32::from_le_bytes(file[28 + 8..28 + 12].try_into().unwrap());
    assert_eq!(vendor, ctx.info().vendor_id);
    drop(cache);

    let reopened = PipelineCache::open(&ctx, &path).unwrap();
    assert_eq!(reopened.load_status(), &CacheLoad::Loaded { bytes: saved });
    build_and_run(&ctx, &reopened);
    reopened.save().unwrap();
    let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(leftovers, 1, "only the cache file, no temporary files");
}

#[test]
fn corrupt_truncated_and_foreign_files_are_discarded() {
    let ctx = context();
    let dir = temp_dir("cache-bad");
    let path = dir.join("cache.bin");
    let good = saved_cache(&ctx, &path);

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"this is not a pipeline cache at all".to_vec(),
            "not a rocky",
        ),
        ("truncated", good[..good.len() - 1].to_vec(), "truncated"),
        (
            "flipped bit",
            {
                let mut f = good.clone();
                let last = f.len() - 1;
                f[last] ^= 0x40;
                f
            },
            "checksum",
        ),
        (
            "other vendor",
            {
                let mut f = good.clone();
                f[28 + 8] ^= 0xff;
                rewrite_checksum(&mut f);
                f
            },
            "made for device",
        ),
        (
            "other driver build",
            {
                let mut f = good.clone();
                f[28 + 16] ^= 0xff;
                rewrite_checksum(&mut f);
                f
            },
            "pipelineCacheUUID",
        ),
        (
            "future format",
            {
                let mut f = good.clone();
                f[8] = 99;
                f
            },
            "format version",
        ),
    ];
    for (what, bytes, reason) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let cache = PipelineCache::open(&ctx, &path).unwrap();
        let got = discarded(&cache);
        assert!(
            got.contains(reason),
            "{what}: reason `{got}` lacks `{reason}`"
        );
        // Still a working cache, and saving replaces the bad file with a good one.
        build_and_run(&ctx, &cache);
        cache.save().unwrap();
        let again = PipelineCache::open(&ctx, &path).unwrap();
        assert!(
            matches!(again.load_status(), CacheLoad::Loaded { .. }),
            "{what}"
        );
    }
}

#[test]
fn default_path_follows_xdg_cache_home() {
    let ctx = context();
    let dir = temp_dir("cache-xdg");
    // The only test in this binary that reads XDG_CACHE_HOME.
    std::env::set_var("XDG_CACHE_HOME", &dir);
    let path = default_pipeline_cache_path(ctx.info()).unwrap();
    assert!(path.starts_with(dir.join("rocky")), "{}", path.display());
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let info = ctx.info();
    assert_eq!(
        name,
        format!(
            "pipeline-cache-{:04x}-{:04x}-{}.bin",
            info.vendor_id, info.device_id, info.driver.version_raw
        )
    );
    let cache = PipelineCache::open_default(&ctx).unwrap();
    assert_eq!(cache.path(), Some(path.as_path()));
    build_and_run(&ctx, &cache);
    cache.save().unwrap();
    assert!(path.exists());
}
