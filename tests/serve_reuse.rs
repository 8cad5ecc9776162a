//! Prefix reuse at the level of logits: rewinding the cache to a shared prefix and prefilling
//! only the rest gives what a prefill of the whole prompt from position 0 gives, on the GPU
//! session of rocky-engine (lavapipe in CI; the evaluator `rocky serve` runs) and on the CPU
//! reference. This is what `rocky serve` relies on when it reports `cached_tokens`.

mod common;

use common::shared;
use rocky_engine::{Database, EngineOptions, Model, Session};
use rocky_generate::{
    generate, generate_reusing, EndOfGeneration, Evaluator, GenerateOptions, SamplerParams,
    Vocabulary,
};
use rocky_models::reference::compare_logits;

/// A fixed pseudo-random prompt of ordinary ids, `seed` making different ones.
fn ids(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7919 + 13 * seed) % 1000 + 10)
        .collect()
}

struct NoText;
impl Vocabulary for NoText {
    fn piece_bytes(&self, _: u32) -> Vec<u8> {
        Vec::new()
    }
}

/// Prefills a first conversation (prompt and decode steps, as a served turn leaves the
/// cache), rewinds to the part a second prompt shares with it, prefills the rest, and compares
/// the logits and 8 greedy tokens with a fresh run of the second prompt.
fn reuse_equals_fresh(ev: &mut dyn Evaluator, tolerance: f32, what: &str) {
    let first = ids(40, 1);
    let mut second = first[..30].to_vec();
    second.extend(ids(25, 2));
    ev.reset();
    ev.eval(&first).unwrap();
    for t in [11, 12, 13] {
        ev.decode(t).unwrap();
    }
    assert!(ev.truncate(30));
    let reused = ev.eval(&second[30..]).unwrap();
    ev.reset();
    let fresh = ev.eval(&second).unwrap();
    let cmp = compare_logits(&reused, &fresh);
    println!(
        "{what}: max |Δlogit| reuse vs fresh {:.2e}",
        cmp.max_abs_diff
    );
    assert!(
        cmp.max_abs_diff <= tolerance,
        "{what}: logits differ by {}",
        cmp.max_abs_diff
    );

    // The same through the generation loop, with a decoded first turn left in the cache.
    let options = GenerateOptions {
        max_new_tokens: 8,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    let end = EndOfGeneration::default();
    let turn1 = generate(ev, &NoText, &end, &first, &options, &mut |_| {}).unwrap();
    let mut turn2 = first.clone();
    turn2.extend(&turn1.tokens);
    turn2.extend(ids(12, 3));
    let reused = generate_reusing(ev, &NoText, &end, &turn2, 47, &options, &mut |_| true).unwrap();
    assert_eq!(reused.reused_tokens, 47);
    let fresh = generate(ev, &NoText, &end, &turn2, &options, &mut |_| {}).unwrap();
    assert_eq!(
        reused.tokens, fresh.tokens,
        "{what}: greedy tokens with reuse vs fresh"
    );
}

/// Two conversations through one cache: A is saved, B overwrites the cache, A's snapshot is
/// restored to a shared start and its next turn prefilled on top; the logits equal a fresh
/// prefill of A's next turn. Then B's snapshot (saved after A's) is restored whole and
/// extended, against a fresh prefill of B's extension. This is what `rocky serve` does when
/// clients alternate between conversations.
fn snapshots_equal_fresh(ev: &mut dyn Evaluator, tolerance: f32, what: &str) {
    let a = ids(40, 1);
    let mut a2 = a[..30].to_vec();
    a2.extend(ids(20, 4));
    let b = ids(50, 2);
    let mut b2 = b.clone();
    b2.extend(ids(10, 5));
    ev.reset();
    ev.eval(&a).unwrap();
    let snap_a = ev.snapshot().unwrap().expect("a snapshot of 40 positions");
    assert_eq!(snap_a.n_past, 40);
    // After a snapshot the cache holds the same positions or none.
    assert!(
        [0, 40].contains(&ev.n_past()),
        "{what}: n_past {}",
        ev.n_past()
    );
    ev.reset();
    ev.eval(&b).unwrap();
    let snap_b = ev.snapshot().unwrap().expect("a snapshot of 50 positions");
    ev.reset();
    ev.eval(&ids(60, 6)).unwrap(); // something else in the cache meanwhile
    ev.restore(snap_a, 30).unwrap();
    assert_eq!(ev.n_past(), 30);
    let restored = ev.eval(&a2[30..]).unwrap();
    ev.restore(snap_b, 50).unwrap();
    assert_eq!(ev.n_past(), 50);
    let restored_b = ev.eval(&b2[50..]).unwrap();
    ev.reset();
    let fresh = ev.eval(&a2).unwrap();
    ev.reset();
    let fresh_b = ev.eval(&b2).unwrap();
    for (got, want, which) in [(&restored, &fresh, "A"), (&restored_b, &fresh_b, "B")] {
        let cmp = compare_logits(got, want);
        println!(
            "{what}: conversation {which}, max |Δlogit| restored vs fresh {:.2e}",
            cmp.max_abs_diff
        );
        assert!(
            cmp.max_abs_diff <= tolerance,
            "{what}: conversation {which}'s logits differ by {}",
            cmp.max_abs_diff
        );
    }
}

#[test]
fn rewinding_or_restoring_a_shared_prefix_gives_a_fresh_prefill_s_logits() {
    let path = shared().join("models/qwen2-tiny-q8_0.gguf");
    let model = Model::open(&path).unwrap();
    let n_ctx = 128;

    let mut cpu = model.cpu_evaluator(n_ctx);
    // The CPU reference computes each row alone: reuse is exact.
    reuse_equals_fresh(&mut cpu, 0.0, "cpu");
    snapshots_equal_fresh(&mut cpu, 0.0, "cpu");

    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    // The session `rocky serve` runs, with the default schedules (no tuning database).
    let options = EngineOptions {
        database: Database::None,
        ubatch: Some(16),
        ..EngineOptions::default()
    };
    let mut gpu = Session::open(&model, &options, n_ctx).unwrap();
    // Different ubatch boundaries (rows 30.. start mid-ubatch) may sum in another order.
    reuse_equals_fresh(&mut gpu, 2e-3, "gpu");
    snapshots_equal_fresh(&mut gpu, 2e-3, "gpu");
}
