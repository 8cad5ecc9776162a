//! Nothing is stored unchecked, and devices without timestamps are still tuned:
//!
//! - the real graph-level step (`graph::tune_graph`) on the tiny Q8_0 Qwen2 first checks the
//!   device against the CPU reference, then records a candidate whose logits were corrupted
//!   (the `graph_logits` fault) as failed and never chooses it;
//! - kernel trials timed by the host clock (what a device without timestamps gets, forced here
//!   on a device that has them) pass their check, get a positive time and say `host`.
//!
//! Needs a Vulkan device (lavapipe is enough); FAILS without one. `ROCKY_TEST_DEVICE` picks the
//! device, `ROCKY_SHARED` the shared folder with the models (without it, the stand-in that
//! tools/prepare-test-assets.sh makes).

#[path = "../../tests/common/shared_folder.rs"]
mod shared_folder;

use rocky_compiler::{ActType, GemmWorkload, WeightFormat, Workload};
use rocky_models::arch;
use rocky_models::gguf::GgufFile;
use rocky_runtime::executor::DefaultSchedules;
use rocky_runtime::{CommandBudget, Context, DeviceSelector, TimingMethod};
use rocky_tuner::fault::INJECTED;
use rocky_tuner::graph::{self, GraphCandidate, GraphTuneOptions, PrefillRig};
use rocky_tuner::{
    FaultPlan, GraphFault, MeasureOptions, ModelWorkload, Strategy, TuneOptions, Tuner,
};
use rocky_tuning_db::TuningDb;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// One context per test binary (drivers dislike devices destroyed from exiting test threads);
/// Mesa's runtime directory and the pipeline cache go to a private folder.
fn ctx() -> &'static Context {
    static CTX: OnceLock<Context> = OnceLock::new();
    CTX.get_or_init(|| {
        let dir = temp_dir("env");
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
        std::env::set_var("XDG_CACHE_HOME", dir.join("cache"));
        Context::new(&selector())
            .unwrap_or_else(|e| panic!("this test needs a Vulkan device (lavapipe is enough): {e}"))
    })
}

fn selector() -> DeviceSelector {
    let text = std::env::var("ROCKY_TEST_DEVICE").unwrap_or_default();
    text.parse().unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rocky-unchecked-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn model_path() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let assets = std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/test-assets"));
    shared_folder::shared_or_standin(workspace, assets).join("models/qwen2-tiny-q8_0.gguf")
}

#[test]
fn the_graph_step_never_chooses_a_candidate_with_wrong_logits() {
    let ctx = ctx();
    let file = GgufFile::open(model_path()).expect("the tiny Q8_0 model in shared/models");
    let model = arch::load(&file).unwrap();
    let budget = CommandBudget::for_device(ctx.info());
    let n_tokens = 32;
    let mut rig = PrefillRig::new(ctx, &file, &model, n_tokens, &mut |_, _| {}).unwrap();
    // The bigger ubatch first: it is the likelier winner, so a step that ignored the check
    // would probably choose it.
    let candidates = vec![
        GraphCandidate {
            ubatch: 32,
            max_dispatches: budget.max_dispatches,
            fuse_swiglu: false,
            overlap: false,
        },
        GraphCandidate {
            ubatch: 8,
            max_dispatches: budget.max_dispatches,
            fuse_swiglu: false,
            overlap: false,
        },
    ];
    let run = |rig: &mut PrefillRig, faults: FaultPlan| {
        let options = GraphTuneOptions {
            candidates: candidates.clone(),
            n_tokens,
            runs: 1,
            time: Duration::from_secs(3600),
            seed: 3,
            faults,
        };
        graph::tune_graph(rig, &DefaultSchedules, &options, &budget, &mut |_| {})
    };

    let outcome = run(&mut rig, FaultPlan::new().with_graph(1, GraphFault::Logits));
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    // lavapipe computes: the default prefill agrees with the CPU reference.
    let check = outcome.device_check.as_ref().expect("a device check");
    assert!(check.result.is_ok(), "{:?}", check.result);
    assert_eq!(outcome.unverifiable(), None);
    assert_eq!(outcome.trials.len(), 2);
    let (bad, good) = (&outcome.trials[0], &outcome.trials[1]);
    let why = bad
        .failure
        .as_deref()
        .expect("the corrupted candidate failed");
    assert!(why.starts_with(INJECTED) && why.contains("logit"), "{why}");
    assert!(good.is_ok(), "{:?}", good.failure);
    assert!(good.error_ratio < 1.0, "{}", good.error_ratio);
    let choice = graph::best_choice(&outcome.trials, &budget).expect("the clean candidate");
    assert_eq!(choice.ubatch, 8);

    // Every candidate corrupted: there is nothing to choose.
    let all = FaultPlan::new()
        .with_graph(1, GraphFault::Logits)
        .with_graph(2, GraphFault::Logits);
    let outcome = run(&mut rig, all);
    assert_eq!(outcome.trials.len(), 2);
    assert!(outcome.trials.iter().all(|t| !t.is_ok()));
    assert_eq!(graph::best_choice(&outcome.trials, &budget), None);
}

#[test]
fn host_timed_trials_are_checked_positive_and_say_host() {
    let ctx = ctx().clone();
    let dir = temp_dir("db");
    let db = TuningDb::open(dir.join("tuning.sled")).unwrap();
    let workload = Workload::Gemm(GemmWorkload {
        m: 16,
        n: 64,
        k: 256,
        act: ActType::F32,
        weight: WeightFormat::Q8_0,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: false,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    });
    let options = TuneOptions {
        strategy: Strategy::Random,
        trials: 3,
        time: Duration::from_secs(3600),
        seed: 5,
        measure: MeasureOptions {
            runs: 3,
            max_timed: Duration::from_millis(200),
            force_host_timing: true,
            ..MeasureOptions::default()
        },
        calibrate_warmup: false,
    };
    let mut tuner = Tuner::new(ctx, selector(), &db);
    assert_eq!(tuner.timing(&options.measure), TimingMethod::Host);
    let workloads = [ModelWorkload {
        workload,
        labels: vec!["test.gemm".into()],
    }];
    let reports = tuner.tune(&workloads, &options, &mut |_| {}).unwrap();
    let report = &reports[0];
    assert_eq!(report.timing, TimingMethod::Host);
    assert_eq!(report.timing.as_str(), "host");
    assert_eq!(report.failed, 0, "{report:?}");
    let best = report.best.as_ref().expect("a checked, host-timed best");
    assert!(best.is_ok());
    assert!(best.median_s > 0.0 && best.median_s.is_finite(), "{best:?}");
    assert!(best.min_s > 0.0 && best.min_s <= best.max_s, "{best:?}");
}
