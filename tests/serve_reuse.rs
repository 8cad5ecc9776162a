//! Prefix reuse at the level of logits: rewinding the cache to a shared prefix and prefilling
//! only the rest gives what a prefill of the whole prompt from position 0 gives, on the GPU
//! executor (lavapipe in CI) and on the CPU reference. This is what `rocky serve` relies on
//! when it reports `cached_tokens`.

mod common;

use common::shared;
use rocky_generate::{
    generate, generate_reusing, CpuEvaluator, EndOfGeneration, EvalError, Evaluator,
    GenerateOptions, KvSnapshot, SamplerParams, Vocabulary,
};
use rocky_models::arch;
use rocky_models::fuse::FuseOptions;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{compare_logits, ReferenceOptions};
use rocky_runtime::executor::{DefaultSchedules, Executor, ExecutorOptions, GpuWeights};
use rocky_runtime::{CommandBudget, Context, DeviceSelector};
use std::time::Duration;

/// A fixed pseudo-random prompt of ordinary ids, `seed` making different ones.
fn ids(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7919 + 13 * seed) % 1000 + 10)
        .collect()
}

struct Gpu<'m>(Executor<'m>);

impl Evaluator for Gpu<'_> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
        self.0
            .prefill(tokens, &DefaultSchedules)
            .map_err(|e| EvalError(e.to_string()))
    }
    fn decode(&mut self, token: u32) -> Result<Vec<f32>, EvalError> {
        self.0
            .decode(token, &DefaultSchedules)
            .map_err(|e| EvalError(e.to_string()))
    }
    fn n_past(&self) -> usize {
        self.0.n_past()
    }
    fn n_ctx(&self) -> usize {
        self.0.n_ctx()
    }
    fn reset(&mut self) {
        self.0.reset()
    }
    fn truncate(&mut self, n_past: usize) -> bool {
        self.0.truncate(n_past);
        true
    }
    fn snapshot(&mut self) -> Result<Option<KvSnapshot>, EvalError> {
        let s = self.0.snapshot_kv().map_err(|e| EvalError(e.to_string()))?;
        Ok(s.map(|s| KvSnapshot {
            n_past: s.n_past(),
            bytes: s.bytes(),
            state: Box::new(s),
        }))
    }
    fn restore(&mut self, snapshot: KvSnapshot, n: usize) -> Result<(), EvalError> {
        let s = snapshot
            .state
            .downcast::<rocky_runtime::executor::KvSnapshot>()
            .unwrap();
        self.0
            .restore_kv(&s, n)
            .map_err(|e| EvalError(e.to_string()))
    }
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
    let file = GgufFile::open(&path).unwrap();
    let model = arch::load(&file).unwrap();
    let n_ctx = 128;

    let mut cpu = CpuEvaluator::new(&file, &model, ReferenceOptions::llama_cpp(), n_ctx);
    // The CPU reference computes each row alone: reuse is exact.
    reuse_equals_fresh(&mut cpu, 0.0, "cpu");
    snapshots_equal_fresh(&mut cpu, 0.0, "cpu");

    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let ctx = Context::new(&DeviceSelector::Best).expect("a Vulkan device (lavapipe in CI)");
    let weights = GpuWeights::upload(&ctx, &file, &model).unwrap();
    let options = ExecutorOptions {
        ubatch: 16,
        budget: CommandBudget::for_device(ctx.info()),
        timeout: Duration::from_secs(600),
        profile: false,
        fuse: FuseOptions::DEFAULT,
        overlap: false,
    };
    let mut gpu = Gpu(Executor::new(&ctx, &model, weights, options, n_ctx).unwrap());
    // Different ubatch boundaries (rows 30.. start mid-ubatch) may sum in another order.
    reuse_equals_fresh(&mut gpu, 2e-3, "gpu");
    snapshots_equal_fresh(&mut gpu, 2e-3, "gpu");
}
